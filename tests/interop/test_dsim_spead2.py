"""gpucbf dsim output decoded by spead2 (an independent SPEAD implementation): from a pcap
file and over UDP loopback. Checks the ICD digitiser heap format and the signal content."""

import threading

import numpy as np
import spead2
import spead2.recv

from conftest import free_udp_port, read_pcap, run

ADC = 1712e6
PERIOD = 1 << 27
IDS = {"timestamp": 0x1600, "digitiser_id": 0x3101, "digitiser_status": 0x3102, "adc_samples": 0x3300}


def unpack10(raw: bytes) -> np.ndarray:
    """Big-endian MSB-first 10-bit two's complement, written independently of gpucbf."""
    bits = np.unpackbits(np.frombuffer(raw, np.uint8)).reshape(-1, 10).astype(np.int32)
    v = bits @ (1 << np.arange(9, -1, -1))
    return np.where(v >= 512, v - 1024, v)


def heaps_from_stream(stream):
    out = []
    for heap in stream:
        if heap.is_start_of_stream() or heap.is_end_of_stream():
            continue
        assert not isinstance(heap, spead2.recv.IncompleteHeap), "incomplete heap"
        items = {}
        for it in heap.get_items():
            items[it.id] = it.immediate_value if it.is_immediate else bytes(np.frombuffer(it, np.uint8))
        out.append((heap.cnt, items))
    return out


def pcap_stream(path):
    stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=8))
    stream.add_udp_pcap_file_reader(str(path))
    return stream


def check_heaps(heaps, n_heaps, n_streams, first_id=0):
    per = {}
    for cnt, items in heaps:
        assert set(items) == set(IDS.values()), f"items {sorted(map(hex, items))}"
        assert cnt % 2 == 0 and cnt >= 2, "data heap counters are even from 2"
        assert items[0x1600] % 4096 == 0
        assert len(items[0x3300]) == 5120
        per.setdefault(items[0x3101], []).append(items)
    assert sorted(per) == list(range(first_id, first_id + n_streams))
    for did, hs in per.items():
        assert len(hs) == n_heaps, f"digitiser {did}: {len(hs)} heaps"
        ts = [h[0x1600] for h in hs]
        assert ts == list(range(ts[0], ts[0] + 4096 * n_heaps, 4096))
    return per


def test_dsim_pcap_read_by_spead2(gpucbf, tmp_path):
    pcap = tmp_path / "d.pcap"
    n = 64
    run([gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--heaps", str(n), "--pcap", str(pcap),
         "--dither-seed", "7", "--signals", "cw(0.3, 200e6) + wgn(0.02, 11); wgn(0.05, 12);",
         "127.0.0.1:7148", "127.0.0.1:7149"])
    frames = list(read_pcap(pcap))
    assert len(frames) == 2 * n
    for ip_ok, udp_ok, _src, dst, payload in frames:
        assert ip_ok and udp_ok, "bad IPv4 or UDP checksum"
        assert len(payload) == 5192
        assert dst in (("127.0.0.1", 7148), ("127.0.0.1", 7149))
    # Destination i carries digitiser_id i.
    for _, _, _, dst, payload in frames:
        did = int.from_bytes(payload[8 + 8 * 5 + 2 : 8 + 8 * 6], "big")
        assert did == dst[1] - 7148

    per = check_heaps(heaps_from_stream(pcap_stream(pcap)), n, 2)
    # Stream 0: tone at the snapped frequency with the requested amplitude, plus noise.
    x = np.concatenate([unpack10(h[0x3300]) for h in per[0]]).astype(float)
    f_snap = round(200e6 * PERIOD / ADC) * ADC / PERIOD
    t = per[0][0][0x1600] + np.arange(x.size)
    ref = np.exp(-2j * np.pi * f_snap / ADC * t)
    amp = abs(np.dot(x, ref)) * 2 / x.size
    assert abs(amp - 0.3 * 511) < 0.5, amp
    spec = np.abs(np.fft.rfft(x))
    peak = np.argmax(spec) * ADC / x.size
    assert abs(peak - f_snap) <= ADC / x.size
    resid = x - 2 * np.real(np.dot(x, ref) / x.size * np.conj(ref))
    expect = np.sqrt((0.02 * 511) ** 2 + 1 / 12)
    assert abs(resid.std() / expect - 1) < 0.03, (resid.std(), expect)
    # Stream 1: noise only, std 0.05 full scale (+ dither and rounding).
    y = np.concatenate([unpack10(h[0x3300]) for h in per[1]]).astype(float)
    assert abs(y.mean()) < 0.2
    assert abs(y.std() / np.sqrt((0.05 * 511) ** 2 + 1 / 6) - 1) < 0.02
    for h in per[0] + per[1]:
        assert h[0x3102] == 0, "no saturation expected"


def test_dsim_saturation_status(gpucbf, tmp_path):
    pcap = tmp_path / "s.pcap"
    run([gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--heaps", "8", "--pcap", str(pcap),
         "--signals", "nodither(cw(1.5, 100e6));", "127.0.0.1:7148"])
    per = check_heaps(heaps_from_stream(pcap_stream(pcap)), 8, 1)
    for h in per[0]:
        x = unpack10(h[0x3300])
        assert x.max() == 511 and x.min() == -511, "clip to ±511, never -512"
        status = h[0x3102]
        assert status & 2, "saturation flag (bit 1)"
        count = status >> 32
        # Without dither, clipped samples are exactly those with |1.5·511·cos| ≥ 511.5.
        t = h[0x1600] + np.arange(4096)
        f_snap = round(100e6 * PERIOD / ADC) * ADC / PERIOD
        v = 1.5 * 511 * np.cos(2 * np.pi * f_snap / ADC * t)
        assert count == np.sum(np.abs(np.round(v)) > 511)


def collect_heaps(ports, n):
    """A spead2 stream on the UDP `ports` and a thread that takes `n` heaps into
    result["heaps"] ((cnt, items) pairs) and counts the incomplete ones."""
    stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=8))
    for p in ports:
        stream.add_udp_reader(p, bind_hostname="127.0.0.1", buffer_size=16 << 20)
    result = {}

    def collect():
        hs = []
        for heap in stream:
            hs.append(heap)
            if len(hs) == n:
                break
        result["heaps"] = [(h.cnt, {it.id: it.immediate_value if it.is_immediate else bytes(np.frombuffer(it, np.uint8)) for it in h.get_items()}) for h in hs]
        result["incomplete"] = sum(isinstance(h, spead2.recv.IncompleteHeap) for h in hs)

    th = threading.Thread(target=collect)
    th.start()
    return stream, result, th


def test_dsim_udp_loopback_to_spead2(gpucbf):
    ports = [free_udp_port(), free_udp_port()]
    stream, result, th = collect_heaps(ports, 400)
    run([gpucbf, "dsim", "--adc-sample-rate", "200e6", "--heaps", "200", "--first-id", "4",
         "--signals", "cw(0.2, 50e6);", *(f"127.0.0.1:{p}" for p in ports)])
    th.join(timeout=30)
    stream.stop()
    assert not th.is_alive()
    assert result["incomplete"] == 0
    check_heaps(result["heaps"], 200, 2, first_id=4)


def test_dsim_two_send_threads_to_spead2(gpucbf):
    """--affinity with two cores: two send threads, one stream each, every heap of both
    streams arrives with contiguous timestamps (the same check as one thread); each thread
    is pinned where asked, whatever core the main thread is pinned to."""
    import os
    cores = sorted(os.sched_getaffinity(0))
    c0, c1 = cores[0], cores[-1]
    ports = [free_udp_port(), free_udp_port()]
    stream, result, th = collect_heaps(ports, 400)
    p = run([gpucbf, "dsim", "--adc-sample-rate", "200e6", "--heaps", "200", "--first-id", "4",
             "--affinity", f"{c0},{c1}", "--main-affinity", str(c1), "--send-buffer", "4194304",
             "--signals", "cw(0.2, 50e6);", *(f"127.0.0.1:{p}" for p in ports)])
    import re
    log = re.sub(r"\x1b\[[0-9;]*m", "", p.stderr)
    assert "not pinned" not in log, log[-600:]
    for j, c in enumerate((c0, c1)):
        assert f'thread="send-{j}" core={c}' in log, log[-600:]
    th.join(timeout=30)
    stream.stop()
    assert not th.is_alive()
    assert result["incomplete"] == 0
    check_heaps(result["heaps"], 200, 2, first_id=4)


def test_dsim_thread_options_are_checked(gpucbf):
    """More send threads than streams, a bad core and --send-buffer 0 are refused by name."""
    import subprocess
    base = [gpucbf, "dsim", "--adc-sample-rate", "200e6", "--heaps", "2"]
    for extra, says in [
        (["--affinity", "0,0,0", "127.0.0.1:7148", "127.0.0.1:7149"], "--affinity 0,0,0"),
        (["--affinity", "100000", "127.0.0.1:7148"], "core 100000 is not available"),
        (["--main-affinity", "-3", "127.0.0.1:7148"], "--main-affinity -3"),
        (["--send-buffer", "0", "127.0.0.1:7148"], "--send-buffer"),
    ]:
        p = subprocess.run(base + extra, capture_output=True, text=True, timeout=30)
        assert p.returncode != 0, extra
        assert says in p.stderr, (extra, p.stderr[-400:])
