#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/TARGET/*): small, valid inputs of
each format, so that the fuzzer starts from the parsers' accepting paths. Run from any
directory; rewrites the seed files (the fuzzer's own finds are kept apart, in
fuzz/corpus-local/, which is not committed)."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def ptr(ident, value, immediate=True):
    return struct.pack(">Q", (int(immediate) << 63) | (ident << 48) | (value & ((1 << 48) - 1)))


def packet(cnt, size, offset, payload, items=(), addressed=()):
    ptrs = [ptr(1, cnt), ptr(2, size), ptr(3, offset), ptr(4, len(payload))]
    ptrs += [ptr(i, v) for i, v in items]
    ptrs += [ptr(i, v, False) for i, v in addressed]
    head = struct.pack(">BBBBHH", 0x53, 4, 2, 6, 0, len(ptrs))
    return head + b"".join(ptrs) + payload


def heap_packets(cnt, payload, items=(), addressed=(), mtu=None):
    mtu = mtu or max(1, len(payload))
    return [packet(cnt, len(payload), o, payload[o:o + mtu], items, addressed)
            for o in range(0, max(1, len(payload)), mtu)]


def frame(pkts):
    return b"".join(struct.pack("<H", len(p)) + p for p in pkts)


def dig(ts, pol, n=80):
    return packet(ts, n, 0, bytes((ts + i) & 0xFF for i in range(n)),
                  [(0x1600, ts), (0x3101, pol), (0x3102, 0)], [(0x3300, 0)])


def feng(ts, ant, n=64, freq=0):
    return packet(ts * 16 + ant, n, 0, bytes((ant * 7 + i) & 0xFF for i in range(n)),
                  [(0x1600, ts), (0x4101, ant), (0x4103, freq)], [(0x4300, 0)])


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def descriptor_heap():
    # A descriptor heap: one descriptor (name, description, shape, format, id) as a sub-heap.
    name, desc = b"timestamp", b"ADC sample count"
    shape = struct.pack(">Q", 0)[2:]  # empty shape
    fmt = b"u\x00\x000"  # unsigned, 48 bits
    body = name + desc + fmt
    sub = packet(1, len(body), 0, body,
                 [(0x14, 0x1600)],
                 [(0x10, 0), (0x11, len(name)), (0x13, len(name) + len(desc)), (0x12, len(body))])
    return sub


def pcap(frames, link=1):
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, link)
    for i, fr in enumerate(frames):
        out += struct.pack("<IIII", 1000 + i, 10 * i, len(fr), len(fr)) + fr
    return out


def udp_frame(payload, dst=(127, 0, 0, 1), port=7148, ethernet=True):
    udp = struct.pack(">HHHH", 40000, port, 8 + len(payload), 0) + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0x4000, 64, 17, 0,
                     bytes((127, 0, 0, 2)), bytes(dst))
    s = sum(struct.unpack(">10H", ip))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    ip = ip[:10] + struct.pack(">H", ~s & 0xFFFF) + ip[12:]
    eth = b"\x01\x00\x5e\x00\x00\x01" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    return (eth if ethernet else b"") + ip + udp


def npy(descr, shape, body):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + body


def main():
    write("spead_packet", "dig", dig(128, 1))
    write("spead_packet", "feng", feng(1024, 2))
    write("spead_packet", "descriptor", descriptor_heap())
    write("spead_packet", "stop", packet(9, 0, 0, b"", [(0x6, 2)]))

    pay = bytes(range(200))
    write("heap_assemble", "three-packet-heap", b"\x01" + frame(heap_packets(5, pay, [(0x1600, 0)], [(0x3300, 0)], mtu=80)))
    write("heap_assemble", "reordered-and-stop",
          b"\x0b" + frame(list(reversed(heap_packets(6, pay, [], [(0x4300, 0)], mtu=64)))
                          + [descriptor_heap(), packet(7, 0, 0, b"", [(0x6, 2)])]))

    # dig_place: mode 0x10: 10-bit, 64 samples (80 bytes) per heap, 2 heaps per chunk.
    stream = [dig(ts, pol) for ts in range(0, 64 * 8, 64) for pol in (0, 1)]
    write("dig_place", "two-pols", b"\x10" + frame(stream))
    faulty = [stream[i] for i in (0, 1, 3, 2, 2, 5, 4, 9, 8, 7, 6)] + [dig(64 * 100000, 0), dig(65, 0), dig(0, 2)]
    write("dig_place", "faults", b"\x90" + frame(faulty))

    # feng_place: mode 0x12: 4 antennas, 4 ch × 4 spectra 8-bit (64 bytes), 2 batches per chunk.
    stream = [feng(b * 1024, a) for b in range(6) for a in range(4)]
    write("feng_place", "four-ants", b"\x12" + frame(stream))
    faulty = [stream[i] for i in (0, 1, 2, 5, 4, 4, 9, 3)] + [feng(2048, 7), feng(2048, 1, freq=4), feng(1000, 0)]
    write("feng_place", "faults", b"\x92" + frame(faulty))

    write("katcp", "fgpu", "\x4f?watchdog\n?gain wb 0\n?gain wb 1 0.5+1j\n?gain-all wb default\n"
          "?delays[3] wb 1e9 1e-9,0:0.5,0 0,0:0,0\n?gain wb 0 1 2 3 4 5 6 7\n!ok\n#log info x\n")
    write("katcp", "xbgpu", "\x2f?capture-start bl\n?capture-stop b0\n?beam-weights b0 1 0.5 0\n"
          "?beam-delays b1 1e-9:0.1 0:0 2e-9:0.3\n?beam-quant-gains b0 0.25\n?sensor-value\\_x a\\0b\r\n")
    write("katcp", "standard", "\x3f?help\n?help gain\n?version-list\n?sensor-list /rx\\..*/\n"
          "?sensor-value[7] /(/\n?sensor-value wb.gain\n?sensor-sampling rx.timestamp event\n"
          "?sensor-sampling[2] rx.timestamp,steady-state-timestamp period 0.5\n?sensor-sampling x differential\n"
          "?client-list\n?log-level\n?watchdog extra\n?halt\n?no-such-request\n")

    for i, s in enumerate([
        "cw(0.5, 1e8) + wgn(0.01);",
        "base = cw(0.5, 1e8); base + wgn(0.01, 7); delay(base, 3);",
        "multicw(4, 0.1, 0.01, 1e8, 1e6) * 0.5 - comb(0.2, 1e7);",
        "nodither(cw(0.3, 2e8));",
    ]):
        write("signal", f"prog{i}", s)

    frames = [udp_frame(dig(ts, 0)) for ts in (0, 64, 128)]
    write("pcap", "ethernet", pcap(frames))
    write("pcap", "raw-ip", pcap([udp_frame(feng(0, 1), ethernet=False)], link=101))
    write("pcap", "cut", pcap(frames)[:-30])

    write("npy", "f4", npy("<f4", "(2, 3)", struct.pack("<6f", *range(6))))
    write("npy", "c8", npy("<c8", "(2,)", struct.pack("<4f", 1, 2, 3, 4)))
    write("npy", "c16", npy("<c16", "(1, 1)", struct.pack("<2d", 1, -1)))
    write("npy", "f8-scalar", npy("<f8", "()", struct.pack("<d", 3.5)))

    for i, s in enumerate([
        "name=wb,channels=4096,dst=239.10.10.10+15:7148,taps=16,jones_per_batch=1048576,dither=uniform",
        "name=nb,channels=32768,centre_frequency=400e6,decimation=8,dst=127.0.0.1:7150,pass_bandwidth=64e6",
        "name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=2",
        "name=b0,dst=127.0.0.1:7170,pol=1,dither=none",
        "name=wb,channels=8,dst=127.0.0.1:1,127.0.0.2:2,w_cutoff=1.0,window_function=rect",
    ]):
        write("output_spec", f"spec{i}", s)
    # A find of 2026-11-28: a decimation near 2^53 overflowed samples_between_spectra.
    write("output_spec", "huge_decimation", "name=nb,channels=32768,centre_frequency=400,"
          "decimation=8666666666666666,dst=127.0.0.1:7150,pass_bandwidth=6")

    for i, s in enumerate(["1e-9,0:0.5,0", "-2.5e-6,1e-12:3.14,-0.01", "1.5-2j", "3j"]):
        write("delay_model", f"value{i}", struct.pack("<Q", 123456789 * (i + 1)) + s.encode())
    # CI's find on 3df55ea: a phase rate near f64::MAX made r·rate infinite and the phase
    # NaN at a distant timestamp; now refused (|phase rate| ≤ π rad/sample, |delay| ≤ 2^53).
    write("delay_model", "huge_rates", struct.pack("<Q", 3689348814741906525) + b"5e302,0.2:0,3.35e303")


if __name__ == "__main__":
    main()
