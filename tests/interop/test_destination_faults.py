"""An F-engine whose destination disappears and comes back: two network namespaces this test
creates, joined by a veth pair (link-local 169.254.77.0/24, nothing leaves the machine). The
engine (fed live by dsim over the namespace's loopback) sends to a receiver in the other
namespace; the test removes the engine side's address (sends then fail with "Network is
unreachable"), then puts it back. The engine keeps running, logs the unreachable destination
by name, counts the dropped packets in `fgpu_output_unreachable_packets_total`, and the
receiver gets packets again once the route is back. Skips without the rights to create
namespaces."""

import os
import signal
import subprocess
import sys
import time

import pytest

ADC = 1712e6 / 256
C = 1024
RECEIVER = r"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind(("169.254.77.2", 7150))
s.settimeout(0.05)
n, end = 0, time.time() + float(sys.argv[1])
last = 0.0
while time.time() < end:
    try:
        s.recv(65536)
        n += 1
    except socket.timeout:
        pass
    if time.time() - last > 0.2:
        print(n, flush=True)
        last = time.time()
"""


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


@pytest.fixture
def namespaces():
    a, b = f"gcbf-dst-a-{os.getpid()}", f"gcbf-dst-b-{os.getpid()}"
    if os.geteuid() != 0 or ip("netns", "add", a, check=False).returncode != 0:
        pytest.skip("no rights to create network namespaces")
    try:
        ip("netns", "add", b)
        ip("-n", a, "link", "set", "lo", "up")
        ip("-n", a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b)
        ip("-n", a, "addr", "add", "169.254.77.1/24", "dev", "va")
        ip("-n", b, "addr", "add", "169.254.77.2/24", "dev", "vb")
        # Jumbo frames, as a CBF network has: 8 KiB SPEAD packets go whole.
        ip("-n", a, "link", "set", "va", "mtu", "9000", "up")
        ip("-n", b, "link", "set", "vb", "mtu", "9000", "up")
        yield a, b
    finally:
        ip("netns", "del", a, check=False)
        ip("netns", "del", b, check=False)


def received(proc, seen):
    """The receiver's latest count (its stdout lines so far are read without blocking)."""
    os.set_blocking(proc.stdout.fileno(), False)
    for line in proc.stdout:
        seen.append(int(line))
    return seen[-1] if seen else 0


def unreachable_metric(ns):
    """fgpu_output_unreachable_packets_total of the engine in namespace `ns` (its Prometheus
    port 17090 there)."""
    code = ("import urllib.request; print(urllib.request.urlopen("
            "'http://127.0.0.1:17090/metrics', timeout=5).read().decode())")
    text = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=30, check=True).stdout
    for line in text.splitlines():
        if line.startswith("fgpu_output_unreachable_packets_total "):
            return float(line.split()[1])
    raise AssertionError("no fgpu_output_unreachable_packets_total in the metrics")


def wait_for(cond, seconds):
    for _ in range(int(seconds * 20)):
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_an_unreachable_destination_drops_packets_and_the_engine_goes_on(gpucbf, namespaces):
    a, b = namespaces
    sync = str(int(time.time()) - 1)
    rx = subprocess.Popen(["ip", "netns", "exec", b, sys.executable, "-c", RECEIVER, "40"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    feng = subprocess.Popen(
        ["ip", "netns", "exec", a, gpucbf, "fgpu", "--adc-sample-rate", str(ADC), "--sync-time", sync,
         "--array-size", "1", "--wideband", f"name=wb,channels={C},dst=169.254.77.2:7150,jones_per_batch={1 << 18}",
         "--dither-seed", "1", "--katcp-port", "0", "--prometheus-port", "17090", "--backend", "cpu",
         "127.0.0.1:17001,127.0.0.1:17002"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dsim = subprocess.Popen(
        ["ip", "netns", "exec", a, gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--sync-time", sync,
         "--heaps", str(int(40 * ADC / 4096)), "--period", str(1 << 22), "--katcp-port", "0",
         "--signals", "wgn(0.05);", "127.0.0.1:17001", "127.0.0.1:17002"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        assert wait_for(lambda: received(rx, seen) > 50, 15), f"no output reached the receiver ({seen[-1:]})"
        ip("-n", a, "addr", "del", "169.254.77.1/24", "dev", "va")
        time.sleep(0.5)
        gone = received(rx, seen)
        time.sleep(2.0)
        assert feng.poll() is None, "the engine stopped when its destination went away"
        assert received(rx, seen) == gone, "packets arrived with no route"
        dropped = unreachable_metric(a)
        assert dropped > 0, "fgpu_output_unreachable_packets_total did not count the dropped packets"
        ip("-n", a, "addr", "add", "169.254.77.1/24", "dev", "va")
        assert wait_for(lambda: received(rx, seen) > gone + 50, 10), "no packets after the route came back"
        assert feng.poll() is None
        feng.send_signal(signal.SIGTERM)
        _, err = feng.communicate(timeout=30)
    finally:
        for p in (dsim, feng, rx):
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=30)
    assert feng.returncode == 0, err[-3000:]
    assert "destination unreachable" in err and "169.254.77.2:7150" in err, err[-3000:]
    assert "Network is unreachable" in err, err[-3000:]
    assert "reachable again" in err, err[-3000:]
