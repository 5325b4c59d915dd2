"""spead2-produced packets decoded by gpucbf's SPEAD codec, item for item: digitiser-format
heaps, multi-packet heaps, descriptors and the stop heap, over UDP loopback and from a pcap."""

import json
import socket
import subprocess
import time

import numpy as np
import spead2
import spead2.send

from conftest import free_udp_port, run, write_pcap

FLAVOUR = spead2.Flavour(4, 64, 48, 0)


def make_heaps():
    """A list of (heap, expected items {id: int | bytes}, expected descriptors, packet size)."""
    rng = np.random.default_rng(1)
    out = []
    ig = spead2.send.ItemGroup(flavour=FLAVOUR)
    ig.add_item(0x1600, "timestamp", "ADC timestamp", shape=(), format=[("u", 48)])
    ig.add_item(0x3101, "digitiser_id", "id", shape=(), format=[("u", 48)])
    ig.add_item(0x3102, "digitiser_status", "status", shape=(), format=[("u", 48)])
    ig.add_item(0x3300, "adc_samples", "raw samples", shape=(5120,), dtype=np.uint8)
    ig.add_item(0x4300, "feng_raw", "channelised voltages", shape=(64, 256, 2, 2), dtype=np.int8)
    # 1. Descriptors for all items.
    desc_heap = ig.get_heap(descriptors="all", data="none")
    out.append((desc_heap, {}, ["timestamp", "digitiser_id", "digitiser_status", "adc_samples", "feng_raw"], 1500))
    # 2. Digitiser-format heaps: one packet each, repeat pointers.
    for k in range(5):
        samples = rng.integers(0, 256, 5120, dtype=np.uint8)
        ig["timestamp"].value = 4096 * (100 + k)
        ig["digitiser_id"].value = k & 1
        ig["digitiser_status"].value = (3 << 32) | 2 if k == 3 else 0
        ig["adc_samples"].value = samples
        h = spead2.send.Heap(FLAVOUR)
        h.repeat_pointers = True
        for name in ["timestamp", "digitiser_id", "digitiser_status", "adc_samples"]:
            h.add_item(ig[name])
        exp = {0x1600: 4096 * (100 + k), 0x3101: k & 1, 0x3102: ig["digitiser_status"].value, 0x3300: samples.tobytes()}
        out.append((h, exp, [], 5192))
    # 3. A multi-packet heap (64 KiB in 1500-byte packets), pointers once.
    raw = rng.integers(-127, 128, (64, 256, 2, 2), dtype=np.int8)
    ig["feng_raw"].value = raw
    h = spead2.send.Heap(FLAVOUR)
    h.add_item(ig["timestamp"])
    h.add_item(ig["feng_raw"])
    out.append((h, {0x1600: ig["timestamp"].value, 0x4300: raw.tobytes()}, [], 1500))
    return out, ig


def compare(lines, heaps):
    got = [json.loads(l) for l in lines if l.strip()]
    data = [g for g in got if not g["stop"]]
    assert len(data) == len(heaps), f"{len(data)} heaps decoded, {len(heaps)} sent"
    assert got[-1]["stop"], "stop heap decoded last"
    for g, (_h, exp, descs, _ps) in zip(data, heaps):
        assert g["complete"]
        items = {it["id"]: it.get("immediate", bytes.fromhex(it.get("hex", ""))) for it in g["items"]}
        for k, v in exp.items():
            assert items.get(k) == v, f"item {k:#x}"
        names = [d["name"] for d in g["descriptors"]]
        assert names == descs
        for d in g["descriptors"]:
            if d["name"] == "feng_raw":
                assert d["shape"] == [64, 256, 2, 2] and d["dtype"] in ("|i1", "i1")
            if d["name"] == "timestamp":
                assert d["format"] == [["u", 48]] and d["shape"] == []


def send_all(stream, heaps, ig, addr):
    for h, _e, _d, _ps in heaps:
        stream.send_heap(h)
    stream.send_heap(ig.get_end())


def test_spead2_udp_to_gpucbf(gpucbf):
    port = free_udp_port()
    dump = subprocess.Popen([gpucbf, "spead-dump", "--udp", f"127.0.0.1:{port}", "--idle-timeout", "10"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    heaps, ig = make_heaps()
    cfg = spead2.send.StreamConfig(max_packet_size=1500, rate=50e6)
    stream = spead2.send.UdpStream(spead2.ThreadPool(), [("127.0.0.1", port)], cfg)
    stream.set_cnt_sequence(1000, 1)  # distinct heap counters from the jumbo stream's
    # Digitiser heaps must go out as single 5192-byte packets: send those on a jumbo stream.
    jumbo = spead2.send.UdpStream(spead2.ThreadPool(), [("127.0.0.1", port)],
                                  spead2.send.StreamConfig(max_packet_size=8872, rate=50e6))
    for h, _e, _d, ps in heaps:
        (jumbo if ps == 5192 else stream).send_heap(h)
    stream.send_heap(ig.get_end())
    out, err = dump.communicate(timeout=60)
    assert dump.returncode == 0, err
    compare(out.splitlines(), heaps)


def test_spead2_pcap_to_gpucbf(gpucbf, tmp_path):
    """spead2 sends to a plain socket; the datagrams are written to a pcap for gpucbf."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(2)
    port = rx.getsockname()[1]
    heaps, ig = make_heaps()
    stream = spead2.send.UdpStream(spead2.ThreadPool(), [("127.0.0.1", port)],
                                   spead2.send.StreamConfig(max_packet_size=8872, rate=20e6))
    for h, _e, _d, _ps in heaps:
        stream.send_heap(h)
    stream.send_heap(ig.get_end())
    grams = []
    try:
        while True:
            grams.append(rx.recv(65536))
    except socket.timeout:
        pass
    sizes = [len(g) for g in grams]
    assert 5192 in sizes
    pcap = tmp_path / "spead2.pcap"
    write_pcap(pcap, [(("127.0.0.1", 7148), g) for g in grams])
    out = run([gpucbf, "spead-dump", "--pcap", str(pcap)]).stdout
    compare(out.splitlines(), heaps)
