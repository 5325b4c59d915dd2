"""The engines started from the command lines katsdpcontroller builds (katgpucbf-compat.md §2.2):
`dsim`, `schedrr taskset -c CORE fgpu` and `schedrr taskset -c CORE xbgpu` as links to the gpucbf
binary (tools/install-links.sh), the option words exactly as the generator writes them
(`--opt=value`, key order of the sub-options, Python floats, `send_enabled=False`), with the
interface `lo`, the cores of this machine, unicast 127.0.0.x addresses for the multicast
groups and small values where the product allows them (1 antenna, 1024 channels, a scaled ADC
rate; `--recv-chunk-samples` and `--period` as command_line_extra). It runs: katcp answers on
each engine, the XB-engine's correlation products arrive after ?capture-start."""

import asyncio
import os
import socket
import subprocess
import time
from pathlib import Path

import aiokatcp
import pytest

from conftest import ROOT, free_tcp_port, free_udp_port, katcp_connect, scrape

ADC = 1712e6 / 1024  # Python str(float): "1671875.0"
SYNC = float(int(time.time()) - 2)


def spead_timestamp(packet):
    """The timestamp item (0x1600) of a SPEAD-64-48 packet, or None (a descriptor heap)."""
    n = int.from_bytes(packet[6:8], "big")
    for k in range(n):
        v = int.from_bytes(packet[8 + 8 * k: 16 + 8 * k], "big")
        if (v >> 48) & 0x7FFF == 0x1600:
            return v & ((1 << 48) - 1)
    return None


def can_sched_rr() -> bool:
    """True if this process may take SCHED_RR (root or CAP_SYS_NICE), as schedrr needs."""
    r = subprocess.run(["python3", "-c", "import os; os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))"],
                       capture_output=True)
    return r.returncode == 0


@pytest.fixture(scope="module")
def links(tmp_path_factory, gpucbf):
    d = tmp_path_factory.mktemp("bin")
    subprocess.run(["sh", str(ROOT / "tools" / "install-links.sh"), gpucbf, str(d)], check=True, capture_output=True)
    for name in ("fgpu", "xbgpu", "dsim", "schedrr"):
        assert os.path.realpath(d / name) == os.path.realpath(gpucbf)
    env = dict(os.environ, PATH=f"{d}:{os.environ['PATH']}")
    return env


def start(words, env, log):
    p = subprocess.Popen(words, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"), text=True)
    p.log = log
    return p


def test_schedrr_sets_round_robin_then_execs(links):
    probe = ["python3", "-c", "import os; print(os.sched_getscheduler(0) == os.SCHED_RR, os.sched_getparam(0).sched_priority)"]
    r = subprocess.run(["schedrr", *probe], env=links, capture_output=True, text=True)
    if can_sched_rr():
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["True", "1"]
    else:
        assert r.returncode == 1 and "sched_setscheduler failed" in r.stderr, r
    r = subprocess.run(["schedrr"], env=links, capture_output=True, text=True)
    assert r.returncode != 0 and "schedrr" in r.stderr.lower()
    r = subprocess.run(["schedrr", "/no/such/program"], env=links, capture_output=True, text=True)
    assert r.returncode == 1


def test_version_and_unknown_interface(links):
    for name in ("fgpu", "xbgpu", "dsim"):
        r = subprocess.run([name, "--version"], env=links, capture_output=True, text=True)
        assert r.returncode == 0 and "gpucbf" in r.stdout, r
    r = subprocess.run(["dsim", "--interface=nosuch0", "--adc-sample-rate=1e6", "127.0.0.1:7148"], env=links,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "nosuch0" in r.stderr, r.stderr


def test_engines_run_from_the_controllers_command_lines(links, tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    c0, c1 = cores[0], cores[-1]
    port = free_udp_port()  # the controller's 7148, free here
    dk, dp, fk, fp, xk, xp = (free_tcp_port() for _ in range(6))
    amon = [str(free_tcp_port()) for _ in range(3)]
    corr_port = free_udp_port()
    rr = ["schedrr"] if can_sched_rr() else []
    # dsim (§2.2), disable_ibverbs: no --ibv; 8 groups per pol.
    dsim = ["dsim", "--interface=lo", f"--adc-sample-rate={ADC}", "--ttl=4", "--sample-bits=10",
            "--heap-samples=4096", f"--sync-time={SYNC}", f"--katcp-port={dk}", f"--prometheus-port={dp}",
            f"--affinity={c1}", f"--comp-vector={c1}", f"--main-affinity={c0}",
            "--period=4194304",  # command_line_extra
            f"127.0.0.2+7:{port}", f"127.0.0.10+7:{port}"]
    # fgpu (§2.2) for antenna 0 of a 1-antenna product, wideband and narrowband.
    fgpu = [*rr, "taskset", "-c", str(c1), "fgpu",
            "--recv-interface=lo", "--send-interface=lo", "--send-packet-payload=8192",
            f"--adc-sample-rate={ADC}", "--dig-sample-bits=10", "--recv-packet-samples=4096", "--feng-id=0",
            "--array-size=1", f"--sync-time={SYNC}", f"--katcp-port={fk}", f"--prometheus-port={fp}", "--aiomonitor",
            f"--aiomonitor-port={amon[0]}", f"--aiomonitor-webui-port={amon[1]}", f"--aioconsole-port={amon[2]}",
            "--wideband",
            f"name=wide-acv,channels=1024,taps=16,w_cutoff=1.0,jones_per_batch=262144,dst=127.0.0.20+3:{port},window_function=hann",
            "--narrowband",
            f"name=nb-acv,channels=1024,taps=16,w_cutoff=1.0,jones_per_batch=65536,dst=127.0.0.24+3:{port},window_function=hann,decimation=8,centre_frequency=284000.0,ddc_taps=128,weight_pass=0.005",
            f"--recv-affinity={c0}", f"--send-affinity={c1}",
            "--recv-chunk-samples=1048576", "--backend=cpu",  # command_line_extra
            f"127.0.0.2+7:{port},127.0.0.10+7:{port}"]
    # xbgpu (§2.2) for substream 0: 256 of the 1024 channels.
    xbgpu = [*rr, "taskset", "-c", str(c1), "xbgpu",
             f"--adc-sample-rate={ADC}", "--array-size=1", "--channels=1024", "--channels-per-substream=256",
             "--samples-between-spectra=2048", "--jones-per-batch=262144", "--heaps-per-fengine-per-chunk=2",
             "--channel-offset-value=0", "--sample-bits=8", "--recv-interface=lo", "--send-interface=lo",
             "--send-packet-payload=8192", f"--sync-time={SYNC}", f"--katcp-port={xk}", f"--prometheus-port={xp}",
             "--aiomonitor", f"--aiomonitor-port={amon[0]}", f"--aiomonitor-webui-port={amon[1]}",
             f"--aioconsole-port={amon[2]}",
             "--corrprod",
             f"name=bcp,heap_accumulation_threshold=2,dst=127.0.0.30:{corr_port}",
             "--beam", f"name=beam-0x,dst=127.0.0.31:{port},pol=0,send_enabled=False",
             "--beam", f"name=beam-0y,dst=127.0.0.32:{port},pol=1,send_enabled=False",
             f"--recv-affinity={c0}", f"--send-affinity={c1}", "--backend=cpu",
             f"127.0.0.20:{port}"]
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.30", corr_port))
    rx.settimeout(0.5)
    procs = []
    try:
        procs.append(start(xbgpu, links, tmp_path / "xbgpu.log"))
        procs.append(start(fgpu, links, tmp_path / "fgpu.log"))
        procs.append(start(dsim, links, tmp_path / "dsim.log"))

        def alive():
            for p in procs:
                assert p.poll() is None, (p.args[:5], p.returncode, open(p.log).read()[-3000:])

        # Readiness as the controller sees it: TCP connects on the katcp and Prometheus ports.
        for port_ in (dk, dp, fk, fp, xk, xp):
            deadline = time.monotonic() + 30
            while True:
                alive()
                try:
                    socket.create_connection(("127.0.0.1", port_), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, f"port {port_} never opened"
                    time.sleep(0.2)

        async def drive():
            clients = [await asyncio.wait_for(katcp_connect(p, n), 20) for p, n in ((dk, "dsim"), (fk, "fgpu"), (xk, "xbgpu"))]
            try:
                for c, name in zip(clients, ("dsim", "fgpu", "xbgpu")):
                    _, informs = await c.request("version-list")
                    dev = [i.arguments for i in informs if i.arguments[0] == b"katcp-device"]
                    assert dev and dev[0][1].decode().startswith(f"katgpucbf-{name}"), dev
                reply, _ = await clients[0].request("time")
                assert abs(float(reply[0]) - time.time()) < 5
                # Capture from an ADC timestamp 1.5 s ahead: no earlier dump may go out.
                start_ts[0] = int((time.time() + 1.5 - SYNC) * ADC)
                await clients[2].request("capture-start", "bcp", str(start_ts[0]))
                # The beams were started with send_enabled=False: capture-start works on them.
                await clients[2].request("capture-start", "beam-0x")
                await clients[2].request("capture-stop", "beam-0x")
            finally:
                for c in clients:
                    c.close()
                    await c.wait_closed()

        start_ts = [0]
        asyncio.run(drive())
        got, deadline = [], time.monotonic() + 60
        while sum(spead_timestamp(g) is not None for g in got) < 2 and time.monotonic() < deadline:
            alive()
            try:
                got.append(rx.recv(65536))
            except socket.timeout:
                pass
        logs = {n: (tmp_path / f"{n}.log").read_text()[-3000:] for n in ("dsim", "fgpu", "xbgpu")}
        assert sum(spead_timestamp(g) is not None for g in got) >= 2, logs
        assert got[0][:4] == b"\x53\x04\x02\x06", got[0][:8]
        stamps = [ts for ts in map(spead_timestamp, got) if ts is not None]
        assert stamps and min(stamps) >= start_ts[0], (stamps, start_ts)
        m = scrape(fp)
        assert m.get('fgpu_output_heaps_total{stream="wide-acv"}', 0) > 0, logs["fgpu"]
        assert "not applicable" in logs["fgpu"] and "not applicable" in logs["xbgpu"]
    finally:
        rx.close()
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
