"""Multi-host harness: N "hosts" as network namespaces on one Linux bridge, each engine of
a `gpucbf deploy --format commands` plan started in its host's namespace with its exact
command line, data moving over multicast groups as a deployment's do.

Topology (nothing is added to the caller's namespace but the namespaces' names):
* a switch namespace `<tag>sw` holding bridge `br0` with IGMP snooping on and the bridge as
  querier (each port carries only the groups its host joined, as a deployment's switches do;
  `snooping=False`: snooping off, every group flooded to every port);
* host namespaces `<tag>h<i>`, each with `lo` and `eth0` (a veth whose peer is a bridge
  port; MTU 9000 everywhere), link-local address 169.254.<1 + i // 250>.<1 + i % 250>/16 and the multicast route
  224.0.0.0/4 on eth0;
* every host's interface is `eth0`, so a plan's command lines (which name interfaces)
  run unchanged whether its engines share one namespace or each has its own.

Also a command line tool (the SKA-Mid note's simulation, docs/scale.md):

    python tests/interop/multihost.py simulate --gpucbf BIN --antennas 8 --x-engines 4 \
        --channels 512 --seconds 20 [--one-host]

Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN) for `ip netns`; `unavailable()` says why not.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

MISSING = -(2 ** 31)
# Jumbo frames, as the data networks have: one 5192-byte digitiser packet per heap, F- and
# XB-engine packets of 8192-byte payloads.
MTU = 9000


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable():
    """None when namespaces, veths and bridges can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root for ip netns"
    name = f"g26probe{os.getpid()}"
    try:
        r = _ip("netns", "add", name, check=False)
        if r.returncode != 0:
            return f"ip netns add failed: {r.stderr.strip()}"
        r = _ip("-n", name, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0", check=False)
        if r.returncode != 0:
            return f"no bridge in a namespace: {r.stderr.strip()}"
        r = _ip("-n", name, "link", "add", "v0", "type", "veth", "peer", "name", "v1", check=False)
        if r.returncode != 0:
            return f"no veth in a namespace: {r.stderr.strip()}"
        return None
    except (OSError, subprocess.SubprocessError) as e:
        return f"ip: {e}"
    finally:
        _ip("netns", "del", name, check=False)


def address(i):
    """Host i's link-local address."""
    return f"169.254.{1 + i // 250}.{1 + i % 250}"


class Net:
    """The switch namespace and `n` host namespaces; `close()` removes them all."""

    def __init__(self, n, tag=None, snooping=True):
        self.snooping = snooping
        self.tag = tag or f"g26x{os.getpid() % 100000}"
        self.switch = f"{self.tag}sw"
        self.hosts = [f"{self.tag}h{i}" for i in range(n)]
        self.made = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self):
        _ip("netns", "add", self.switch)
        self.made.append(self.switch)
        sw = ["-n", self.switch]
        # IGMP snooping with the bridge as querier (a switch's multicast as a deployment has
        # it: each port gets the groups its host joined), or off (every group flooded).
        mc = ["mcast_snooping", "0"]
        if self.snooping:
            # The querier sends from the bridge's own address (a querier with source 0.0.0.0
            # does not count as one, and without a querier the bridge floods every group).
            # It floods until a query response interval after it became querier: 1 s, set
            # before the querier is switched on (the kernel takes the interval then).
            mc = ["mcast_snooping", "1", "mcast_query_use_ifaddr", "1", "mcast_startup_query_interval", "100",
                  "mcast_query_response_interval", "100"]
        _ip(*sw, "link", "add", "br0", "type", "bridge", *mc)
        if self.snooping:
            _ip(*sw, "addr", "add", "169.254.255.254/16", "dev", "br0")
            _ip(*sw, "link", "set", "br0", "type", "bridge", "mcast_querier", "1")
        _ip(*sw, "link", "set", "br0", "mtu", str(MTU), "up")
        for i, h in enumerate(self.hosts):
            _ip("netns", "add", h)
            self.made.append(h)
            _ip(*sw, "link", "add", f"v{i}", "mtu", str(MTU), "type", "veth", "peer", "name", "eth0", "mtu", str(MTU),
                "netns", h)
            _ip(*sw, "link", "set", f"v{i}", "master", "br0")
            _ip(*sw, "link", "set", f"v{i}", "up")
            _ip("-n", h, "addr", "add", f"{address(i)}/16", "dev", "eth0")
            _ip("-n", h, "link", "set", "eth0", "up")
            _ip("-n", h, "link", "set", "lo", "up")
            _ip("-n", h, "route", "add", "224.0.0.0/4", "dev", "eth0")

    def link_bytes(self):
        """{host: (bytes the host sent, bytes delivered to it)} on its bridge port so far."""
        r = _ip("-n", self.switch, "-s", "-j", "link", "show")
        out = {}
        for link in json.loads(r.stdout):
            name = link.get("ifname", "")
            if name.startswith("v") and name[1:].isdigit():
                st = link["stats64"]
                # The bridge port receives what the host sends and transmits what it gets.
                out[int(name[1:])] = (st["rx"]["bytes"], st["tx"]["bytes"])
        return out

    def wrap(self, i, argv):
        """argv run in host i's namespace."""
        return ["ip", "netns", "exec", self.hosts[i], *argv]

    def close(self):
        for ns in reversed(self.made):
            _ip("netns", "del", ns, check=False)
        self.made = []


def hosts_file(path, n, cores=1):
    """A hosts file of `n` CPU hosts h0.. with interface eth0 (what Net builds)."""
    hosts = [{"name": f"h{i}", "interfaces": ["eth0"], "gpus": 0, "cores": cores} for i in range(n)]
    Path(path).write_text(json.dumps({"hosts": hosts}, indent=1))
    return path


def deploy(gpucbf, hosts, *args, fmt="commands"):
    """`gpucbf deploy` output: the plan (dict) for --format commands, else the text."""
    r = subprocess.run([gpucbf, "deploy", "--hosts", str(hosts), "--format", fmt, *map(str, args)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"gpucbf deploy failed: {r.stderr}")
    return json.loads(r.stdout) if fmt == "commands" else r.stdout


CAPTURE = r"""
import json, sys, time
import numpy as np
import spead2, spead2.recv
out, full, iface, groups = sys.argv[1], sys.argv[2] == "full", sys.argv[3], sys.argv[4:]
MISSING = -(2 ** 31)
cfg = spead2.recv.StreamConfig(max_heaps=8, memory_allocator=spead2.MemoryPool(16384, 8 << 20, 16, 8))
stream = spead2.recv.Stream(spead2.ThreadPool(), cfg)
for g in groups:
    host, port = g.rsplit(":", 1)
    stream.add_udp_reader(host, int(port), buffer_size=16 << 20, interface_address=iface)
open(out + ".ready", "w").close()
with open(out, "w") as f:
    for heap in stream:
        items = {it.id: it for it in heap.get_items()}
        if 0x1800 not in items:
            continue
        raw = np.frombuffer(items[0x1800], "<i4")
        rec = {"t": time.time(), "ts": items[0x1600].immediate_value, "chan": items[0x4103].immediate_value}
        if full:
            rec["data"] = raw.tobytes().hex()
        else:
            v = raw.reshape(-1, 2)
            rec["missing"] = int(((v[:, 0] == MISSING) & (v[:, 1] == 1)).sum())
        f.write(json.dumps(rec) + "\n")
        f.flush()
"""


class Array:
    """A plan's engines started on a Net: engine e in the namespace of its plan host (or
    every engine in host 0's with `one_host`), plus a capture of every XB-engine's
    correlation products in a namespace of its own (the Net's last host)."""

    def __init__(self, gpucbf, plan, net, logs, one_host=False, python=sys.executable):
        self.gpucbf, self.plan, self.net, self.logs = gpucbf, plan, net, Path(logs)
        self.logs.mkdir(parents=True, exist_ok=True)
        names = [h["name"] for h in plan["hosts"]]
        self.where = {e["name"]: 0 if one_host else names.index(e["host"]) for e in plan["engines"]}
        self.engines = {e["name"]: e for e in plan["engines"]}
        self.procs = {}
        self.python = python
        self.capture = None
        self.events = []

    def argv(self, name):
        """The engine's command line from the plan, run by this gpucbf binary."""
        return [self.gpucbf, *self.engines[name]["argv"][1:]]

    def start(self, name):
        i = self.where[name]
        log = open(self.logs / f"{name}.log", "a")
        self.procs[name] = subprocess.Popen(self.net.wrap(i, self.argv(name)), stdout=subprocess.DEVNULL,
                                            stderr=log)
        self.events.append((time.time(), "start", name))

    def kill(self, name):
        p = self.procs.pop(name)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        self.events.append((time.time(), "kill", name))

    def request(self, name, *req, timeout=1.0):
        """`gpucbf katcp-request 127.0.0.1:PORT REQ...` for engine `name`, in its namespace:
        its exit status."""
        port = self.engines[name]["katcp_port"]
        cmd = [self.gpucbf, "katcp-request", f"127.0.0.1:{port}", *req, "--timeout", str(timeout)]
        r = subprocess.run(self.net.wrap(self.where[name], cmd), capture_output=True, text=True, timeout=30)
        return r.returncode

    def probe(self, name, which, timeout=1.0):
        """Runs the manifest's liveness ("live") or readiness ("ready") probe request for
        engine `name` in its namespace: its exit status."""
        if which == "live":
            return self.request(name, "watchdog", timeout=timeout)
        return self.request(name, "sensor-value", "device-status", "--expect-status", "nominal", timeout=timeout)

    def wait_live(self, names, timeout=60):
        deadline = time.time() + timeout
        for n in names:
            while self.probe(n, "live") != 0:
                p = self.procs[n]
                if p.poll() is not None:
                    raise RuntimeError(f"{n} exited {p.returncode}: {(self.logs / (n + '.log')).read_text()[-2000:]}")
                if time.time() > deadline:
                    raise RuntimeError(f"{n} not live after {timeout} s")
                time.sleep(0.3)

    def start_capture(self, path, sink, full=True):
        """Capture in host `sink`'s namespace of every XB-engine's correlation products:
        each heap's data (`full`), or only its count of MISSING values."""
        groups = [g for e in self.plan["engines"] if e["kind"] == "xbgpu" for g in e["sends"]]
        self.capture_path = Path(path)
        cmd = [self.python, "-c", CAPTURE, str(path), "full" if full else "count", address(sink), *groups]
        self.capture = subprocess.Popen(self.net.wrap(sink, cmd), stdout=subprocess.DEVNULL,
                                        stderr=open(self.logs / "capture.log", "w"))
        deadline = time.time() + 30
        while not Path(str(path) + ".ready").exists():
            if self.capture.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"capture did not start: {(self.logs / 'capture.log').read_text()}")
            time.sleep(0.1)

    def names(self, *kinds):
        return [e["name"] for k in kinds for e in self.plan["engines"] if e["kind"] == k]

    def start_all(self):
        """XB-engines, then F-engines, each live (katcp ?watchdog) before the dsims start."""
        for n in self.names("xbgpu", "fgpu"):
            self.start(n)
        self.wait_live(self.names("xbgpu", "fgpu"))
        for n in self.names("dsim"):
            self.start(n)
        self.wait_live(self.names("dsim"))

    def cpu_seconds(self):
        """CPU seconds (user + system) each running engine has used so far."""
        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for n, p in self.procs.items():
            try:
                f = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[n] = (int(f[11]) + int(f[12])) / tick
            except (OSError, IndexError, ValueError):
                pass
        return out

    def stop(self):
        if self.capture is not None:
            self.capture.send_signal(signal.SIGKILL)
            self.capture.wait(timeout=10)
            self.capture = None
        for n in list(self.procs):
            p = self.procs.pop(n)
            p.send_signal(signal.SIGTERM)
        deadline = time.time() + 10
        for p in list(self.procs.values()):
            p.wait(timeout=max(0.1, deadline - time.time()))

    def stop_engines(self):
        procs = list(self.procs.items())
        self.procs = {}
        for _, p in procs:
            p.send_signal(signal.SIGTERM)
        for n, p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


def read_capture(path):
    """[(arrival time, timestamp, first channel, int32 array or count of MISSING values)]
    in arrival order."""
    import numpy as np
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue  # the line being written when the capture was killed
        data = np.frombuffer(bytes.fromhex(d["data"]), "<i4") if "data" in d else d["missing"]
        out.append((d["t"], d["ts"], d["chan"], data))
    return out


def missing_baselines(data, antennas, channels):
    """The baselines (a1, a2) every product of which carries the MISSING marker in every
    channel of one correlation-product heap (`channels` channels)."""
    v = data.reshape(channels, antennas * (antennas + 1) // 2, 4, 2)
    marked = ((v[..., 0] == MISSING) & (v[..., 1] == 1)).all(axis=(0, 2))
    out = set()
    for a2 in range(antennas):
        for a1 in range(a2 + 1):
            if marked[a2 * (a2 + 1) // 2 + a1]:
                out.add((a1, a2))
    return out


def any_missing(data):
    v = data.reshape(-1, 2)
    return bool(((v[:, 0] == MISSING) & (v[:, 1] == 1)).any())


def simulate(argv):
    """Runs a plan on namespace hosts (one engine per host, the capture on one more) and
    prints, over `--seconds` after a warm-up: dumps received and expected, dumps with
    MISSING, CPU per engine kind and the bytes on each kind's bridge ports (docs/scale.md)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["simulate"])
    ap.add_argument("--gpucbf", required=True)
    ap.add_argument("--antennas", type=int, default=4)
    ap.add_argument("--x-engines", type=int, default=2)
    ap.add_argument("--channels", type=int, default=256)
    ap.add_argument("--adc-sample-rate", type=float, default=1712e6 / 2048)
    ap.add_argument("--jones-per-batch", type=int, default=32768)
    ap.add_argument("--int-time", type=float, default=0.3)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warm-up", type=float, default=3)
    ap.add_argument("--no-snooping", action="store_true")
    ap.add_argument("--one-host", action="store_true", help="every engine in one namespace")
    ap.add_argument("--full", action="store_true", help="capture the products, not only MISSING counts")
    ap.add_argument("--out", default="/tmp/g26-sim")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    n_engines = 2 * a.antennas + a.x_engines
    hf = hosts_file(out / "hosts.json", n_engines)
    plan = deploy(a.gpucbf, hf, "--antennas", a.antennas, "--channels", a.channels, "--x-engines", a.x_engines,
                  "--adc-sample-rate", a.adc_sample_rate, "--jones-per-batch", a.jones_per_batch, "--int-time", a.int_time,
                  "--backend", "cpu", "--dsims", "--gain", 0.14, "--sync-time", int(time.time()),
                  "--fgpu-cores", 1, "--xbgpu-cores", 1, "--dsim-cores", 1, "--dsim-period", 1 << 20)
    net = Net(n_engines + 1, snooping=not a.no_snooping)
    arr = Array(a.gpucbf, plan, net, out / "logs", one_host=a.one_host)
    try:
        arr.start_capture(out / "capture.jsonl", n_engines, full=a.full)
        t_start = time.time()
        arr.start_all()
        started = time.time() - t_start
        time.sleep(a.warm_up)
        t0, c0, l0 = time.time(), arr.cpu_seconds(), net.link_bytes()
        time.sleep(a.seconds)
        t1, c1, l1 = time.time(), arr.cpu_seconds(), net.link_bytes()
        arr.stop()
    finally:
        arr.stop_engines()
        net.close()
    span = t1 - t0
    heaps = [h for h in read_capture(out / "capture.jsonl") if t0 <= h[0] < t1]
    kind = {arr.where[e["name"]]: e["kind"] for e in plan["engines"]}
    kind[n_engines] = "capture"
    by_kind = {}
    for i in l1:
        k = kind.get(i, "?")
        sent, got = (l1[i][0] - l0[i][0]) * 8 / span / 1e6, (l1[i][1] - l0[i][1]) * 8 / span / 1e6
        d = by_kind.setdefault(k, {"hosts": 0, "sent_mbps": [], "received_mbps": []})
        d["hosts"] += 1
        d["sent_mbps"].append(sent)
        d["received_mbps"].append(got)
    for k, d in by_kind.items():
        for f in ("sent_mbps", "received_mbps"):
            d[f] = {"mean": round(sum(d[f]) / len(d[f]), 2), "max": round(max(d[f]), 2)}
        cpu = [(c1[n] - c0[n]) / span for n in c1 if n in c0 and arr.engines[n]["kind"] == k]
        if cpu:
            d["cpu_cores"] = {"total": round(sum(cpu), 3), "max": round(max(cpu), 3)}
    print(json.dumps({
        "hosts": n_engines + 1, "antennas": a.antennas, "x_engines": a.x_engines, "channels": a.channels,
        "adc_sample_rate": a.adc_sample_rate, "igmp_snooping": not a.no_snooping, "one_host": a.one_host,
        "dump_seconds": plan["dump_seconds"], "start_seconds": round(started, 1), "measured_seconds": round(span, 1),
        "dumps_received": len(heaps), "dumps_expected": round(span / plan["dump_seconds"] * a.x_engines),
        "dumps_with_missing": sum(any_missing(d) if a.full else d > 0 for _, _, _, d in heaps),
        "by_kind": by_kind,
        "load_average_1min_at_end": round(os.getloadavg()[0], 1),
    }, indent=1))


if __name__ == "__main__":
    simulate(sys.argv[1:])
