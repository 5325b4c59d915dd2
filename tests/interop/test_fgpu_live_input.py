"""A live F-engine (UDP loopback, CPU backend): against far timestamps (#27 item 1), packets far
in the future inside the feed are dropped as bad timestamps and the output goes on, a lone far
packet before the feed does not keep the feed out, and SIGTERM stops the engine within 2 s
whatever arrived; with two pinned receive threads (a stream group, #21) the feed arrives whole."""

import json
import os
import signal
import subprocess
import time

import pytest

from conftest import free_udp_port, spead_packet

ADC = 1712e6 / 256
C = 1024
JONES = 1 << 18


def dig(ts, pol):
    return spead_packet({0x1600: ts, 0x3101: pol, 0x3102: 0}, bytes(5120), heap_cnt=2 * (ts // 4096) + pol + 2)


def run_engine(gpucbf, tmp_path, packets, extra=(), groups=None):
    """Starts fgpu, sends `packets` (ts, pol) paced to the loopback socket buffer (a ts of None:
    a pause), stops it with SIGTERM; `groups` (one multicast address per pol): the input is
    those groups, sent to out of `lo`.
    returns (seconds from SIGTERM to exit, summary)."""
    import socket

    p0, p1 = free_udp_port(), free_udp_port()
    hosts = groups or ("127.0.0.1", "127.0.0.1")
    feng = subprocess.Popen(
        [gpucbf, "fgpu", "--adc-sample-rate", str(ADC), "--sync-time", str(int(time.time()) - 1),
         "--array-size", "1", "--wideband", f"name=wb,channels={C},dst=127.0.0.1:7150,jones_per_batch={JONES}",
         "--recv-chunk-samples", str(1 << 19), "--dither-seed", "1",
         "--send-pcap", str(tmp_path / "f.pcap"), "--backend", "cpu", *extra, f"{hosts[0]}:{p0},{hosts[1]}:{p1}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # the sockets are bound
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            if groups:
                s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
                s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            for k, (ts, pol) in enumerate(packets):
                if ts is None:
                    time.sleep(0.2)  # the packets before are received first (two sockets)
                    continue
                s.sendto(dig(ts, pol), (hosts[pol], p1 if pol else p0))
                if k % 64 == 63:
                    time.sleep(0.002)
        time.sleep(1.0)
        assert feng.poll() is None, feng.communicate()
        t0 = time.monotonic()
        feng.send_signal(signal.SIGTERM)
        out, err = feng.communicate(timeout=30)
        dt = time.monotonic() - t0
    finally:
        if feng.poll() is None:
            feng.kill()
            feng.wait()
    assert feng.returncode == 0, err
    return dt, json.loads(out), err


def feed(h0, h1):
    return [(h * 4096, pol) for h in range(h0, h1) for pol in (0, 1)]


def test_far_future_packets_inside_a_live_feed(gpucbf, tmp_path):
    far = [(1 << 44, 0), (1 << 44, 1), ((1 << 44) + (1 << 26), 0), ((1 << 44) + (1 << 26), 1)]
    dt, summary, err = run_engine(gpucbf, tmp_path, feed(0, 1024) + far + feed(1024, 2048))
    assert dt < 2.0, f"SIGTERM took {dt:.2f} s"
    assert summary["recv_rejected"].get("bad_timestamp_heaps") == 4, summary
    assert "too_old_heaps" not in summary["recv_rejected"], summary
    wb = summary["outputs"][0]
    # The output went on past the far packets (heap 1024): batches of 128 heaps (256
    # spectra × 2048 samples), the last whole one of 2048 heaps is batch 14.
    assert wb["last_timestamp"] >= 12 * 128 * 4096, wb
    assert "far outside the receive window" in err


def test_a_lone_far_packet_before_a_live_feed(gpucbf, tmp_path):
    dt, summary, err = run_engine(gpucbf, tmp_path, [(1 << 46, 0), (None, 0)] + feed(0, 2048))
    assert dt < 2.0, f"SIGTERM took {dt:.2f} s"
    assert summary.get("recv_window_moves") == 1, json.dumps(summary) + err[-3000:]
    assert "too_old_heaps" not in summary["recv_rejected"], summary
    wb = summary["outputs"][0]
    assert wb["batches"] > 0 and wb["last_timestamp"] >= 12 * 128 * 4096, wb
    assert "the stream moved" in err


def test_two_pinned_receive_threads_take_the_whole_feed(gpucbf, tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    pair = f"{cores[0]},{cores[-1]}" if len(cores) > 1 else f"{cores[0]}"
    if len(cores) < 2:
        pytest.skip("one core: no group of two threads")
    dt, summary, err = run_engine(gpucbf, tmp_path, feed(0, 2048), ["--recv-affinity", pair])
    assert dt < 2.0, f"SIGTERM took {dt:.2f} s"
    assert summary["input_heaps"] == [2048, 2048], summary
    assert summary["input_missing_heaps"] == [0, 0], summary
    assert summary["recv_rejected"] == {}, summary
    wb = summary["outputs"][0]
    assert wb["batches"] == 15 and wb["skipped_heaps"] == 0, wb


def test_multicast_on_every_recv_interface_and_the_monitor_log(gpucbf, tmp_path):
    """Two --recv-interface names (both loopback: tests stay on lo): the groups are joined and
    the feed arrives whole; --monitor-log has the queue depths and counts, and ends cleanly
    after SIGTERM (stop-requested, then stopped)."""
    log = tmp_path / "monitor.jsonl"
    groups = ("239.200.23.10", "239.200.23.11")
    extra = ["--recv-interface", "lo,127.0.0.1", "--monitor-log", str(log)]
    dt, summary, err = run_engine(gpucbf, tmp_path, feed(0, 2048), extra, groups=groups)
    assert dt < 2.0, f"SIGTERM took {dt:.2f} s"
    assert summary["input_heaps"] == [2048, 2048], summary
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert all({"time", "type", "name"} <= r.keys() for r in recs), recs[:3]
    ready = [r for r in recs if r["type"] == "qsize" and r["name"] == "recv-ready"]
    assert ready and all(0 <= r["qsize"] <= r["maxsize"] == 4 for r in ready), ready[:3]
    chunks = [r["value"] for r in recs if r["type"] == "count" and r["name"] == "chunks"]
    assert chunks and chunks[-1] >= 10, chunks
    states = [r["state"] for r in recs if r["type"] == "state" and r["name"] == "engine"]
    assert states == ["running", "stop-requested", "stopped"], states
