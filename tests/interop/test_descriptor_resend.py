"""SPEAD descriptors re-sent while an engine runs (#23 item 4, katgpucbf-compat.md §5.1): an
xbgpu with no input (capture not started: descriptors go out regardless) is captured for 12 s
on its correlation-products and beam destinations; each holds the descriptor heap at start and
then every 5 s, so at least twice, about 5 s apart, with unique heap counters."""

import socket
import struct
import subprocess
import time

from conftest import free_tcp_port, free_udp_port

DESCRIPTOR_ID = 0x0005


def heap_items(packet):
    """(heap_cnt, {item ids}) of one SPEAD-64-48 packet, parsed here."""
    magic, version, ptr_width, addr_width, _, n = struct.unpack(">BBBBHH", packet[:8])
    assert (magic, version, ptr_width, addr_width) == (0x53, 4, 2, 6), packet[:8]
    ids, cnt = set(), None
    for k in range(n):
        (v,) = struct.unpack(">Q", packet[8 + 8 * k: 16 + 8 * k])
        item = (v >> 48) & 0x7FFF
        ids.add(item)
        if item == 0x0001:
            cnt = v & ((1 << 48) - 1)
    return cnt, ids


def test_xbgpu_resends_descriptors_every_5_s(gpucbf, tmp_path):
    cport, bport = free_udp_port(), free_udp_port()
    socks = []
    for port in (cport, bport):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", port))
        s.settimeout(0.2)
        socks.append(s)
    xb = subprocess.Popen(
        [gpucbf, "xbgpu", "--adc-sample-rate", "6687500.0", "--sync-time", str(int(time.time()) - 1),
         "--array-size", "2", "--channels", "1024", "--channels-per-substream", "256",
         "--samples-between-spectra", "2048", "--jones-per-batch", "262144", "--heaps-per-fengine-per-chunk", "2",
         "--channel-offset-value", "256", "--katcp-port", str(free_tcp_port()),
         "--corrprod", f"name=bcp,heap_accumulation_threshold=4,dst=127.0.0.1:{cport}",
         "--beam", f"name=b0,dst=127.0.0.1:{bport},pol=0", "--backend", "cpu", f"127.0.0.1:{free_udp_port()}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "xbgpu.log", "w"))
    seen = {cport: {}, bport: {}}
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 12.5:
            assert xb.poll() is None, (tmp_path / "xbgpu.log").read_text()[-2000:]
            for port, s in zip((cport, bport), socks):
                try:
                    data = s.recv(65536)
                except socket.timeout:
                    continue
                cnt, ids = heap_items(data)
                if DESCRIPTOR_ID in ids:
                    seen[port].setdefault(cnt, time.monotonic() - t0)
    finally:
        xb.terminate()
        xb.wait(timeout=20)
        for s in socks:
            s.close()
    for port in (cport, bport):
        times = sorted(seen[port].values())
        assert len(times) >= 2, seen
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert all(4.0 <= g <= 6.0 for g in gaps), times
