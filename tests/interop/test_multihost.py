"""The array over several hosts (network namespaces on a bridge, tests/interop/multihost.py),
every engine started from the command line `gpucbf deploy --format commands` wrote for it:
dsims send each antenna's pols to their own multicast groups, F-engines send one channel
substream per XB-engine group, the capture joins the XB-engines' correlation-product groups.

* The same plan run on one host (every engine in one namespace) and on its own hosts (one
  engine per namespace) gives the same correlation products, byte for byte. The two runs go
  side by side (their own bridges) from one sync time, so their dumps have the same
  timestamps; the data are functions of the timestamp (seeded dsim noise and dither, seeded
  F-engine dither).
* Killing one F-engine's host process puts the ICD's MISSING marker (-2^31, 1) on every
  product of exactly that antenna's baselines, nothing else; after it restarts from the same
  command line the dumps are whole again.
* Killing one XB-engine loses its channel range only: the other's heaps keep coming, whole.
* Each host's bridge port carries only the groups its engine joined (IGMP snooping).
* The manifests of the same `gpucbf deploy` validate against the Kubernetes schemas
  (kubernetes-validate, strict), and their probe commands run against the engines here.
"""

import time

import numpy as np
import pytest

import multihost as mh

REASON = mh.unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"multi-host harness: {REASON}")

ANTS, NX, C = 4, 2, 256
ADC = 1712e6 / 4096
N_ENGINES = 2 * ANTS + NX
SYNC = int(time.time()) - 1
DEPLOY = ["--antennas", ANTS, "--channels", C, "--x-engines", NX, "--adc-sample-rate", ADC,
          "--jones-per-batch", 32768, "--int-time", 0.3, "--dsims", "--gain", 0.14, "--sync-time", SYNC, "--backend", "cpu",
          "--fgpu-cores", 1, "--xbgpu-cores", 1, "--dsim-cores", 1, "--dsim-period", 1 << 20]


@pytest.fixture(scope="module")
def plan(gpucbf, tmp_path_factory):
    pytest.importorskip("spead2")
    d = tmp_path_factory.mktemp("multihost")
    hosts = mh.hosts_file(d / "hosts.json", N_ENGINES)
    return d, hosts, mh.deploy(gpucbf, hosts, *DEPLOY)


def by_key(heaps):
    return {(ts, ch): data for _, ts, ch, data in heaps}


@pytest.fixture(scope="module")
def runs(gpucbf, plan):
    """The one-host and the multi-host run side by side (same sync time, so the same
    timestamps), then the multi-host run's kills and restart; the captures and the times."""
    d, _, p = plan
    assert [h["name"] for h in p["hosts"]] == [f"h{i}" for i in range(N_ENGINES)]
    # One engine per host: the spread placement.
    assert sorted(e["host"] for e in p["engines"]) == sorted(f"h{i}" for i in range(N_ENGINES))
    out = {}
    tag = time.time_ns() % 100000
    nets = []
    try:
        nets.append(mh.Net(2, tag=f"g26a{tag}"))
        nets.append(mh.Net(N_ENGINES + 1, tag=f"g26b{tag}"))
        one = mh.Array(gpucbf, p, nets[0], d / "one-host", one_host=True)
        arr = mh.Array(gpucbf, p, nets[1], d / "multi-host")
        try:
            one.start_capture(d / "one.jsonl", 1)
            arr.start_capture(d / "multi.jsonl", N_ENGINES)
            for a in (one, arr):
                for n in a.names("xbgpu", "fgpu"):
                    a.start(n)
            for a in (one, arr):
                a.wait_live(a.names("xbgpu", "fgpu"))
            for a in (one, arr):
                for n in a.names("dsim"):
                    a.start(n)
            for a in (one, arr):
                a.wait_live(a.names("dsim"))
            l0 = nets[1].link_bytes()
            time.sleep(8)
            out["links"] = (l0, nets[1].link_bytes(), {e["name"]: arr.where[e["name"]] for e in p["engines"]})
            for key, a in (("one", one), ("multi", arr)):
                out[key + "_ready"] = {n: a.probe(n, "ready") for n in ("xbgpu0", "fgpu0", "dsim0")}
                out[key + "_rx"] = {n: a.request(n, "sensor-value", "rx.device-status", "--expect-status", "nominal")
                                    for n in ("xbgpu0", "fgpu0")}
                out[key + "_clock"] = {n: a.request(n, "sensor-value", "time.synchronised", "--expect-status",
                                                    "nominal") for n in ("xbgpu0", "fgpu0", "dsim0")}
            one.stop()
            one.stop_engines()
            out["kill_f"] = time.time()
            arr.kill("fgpu1")
            time.sleep(5)
            out["restart_f"] = time.time()
            arr.start("fgpu1")
            arr.wait_live(["fgpu1"])
            time.sleep(6)
            out["kill_x"] = time.time()
            arr.kill("xbgpu1")
            time.sleep(4)
            out["live_after_kill"] = {n: arr.probe(n, "live") for n in ("xbgpu0", "fgpu1")}
        finally:
            for a in (one, arr):
                a.stop()
                a.stop_engines()
    finally:
        for n in nets:
            n.close()
    out["one"] = mh.read_capture(d / "one.jsonl")
    out["multi"] = mh.read_capture(d / "multi.jsonl")
    return out


def test_one_host_and_multi_host_give_identical_products(runs):
    one = by_key(runs["one"])
    multi = by_key(h for h in runs["multi"] if h[0] < runs["kill_f"])
    common = sorted(set(one) & set(multi))
    # The runs' first accumulations may be partial (marked) where their dsims started a heap
    # apart; every dump whole in both must be identical.
    clean = [k for k in common if not mh.any_missing(one[k]) and not mh.any_missing(multi[k])]
    assert {ch for _, ch in clean} == {0, C // NX}, common
    assert len(clean) >= 16, (len(one), len(multi), len(common), len(clean))
    for k in clean:
        assert np.array_equal(one[k], multi[k]), f"dump {k} differs"
    # Real products: autocorrelations of correlated noise, well above zero.
    v = one[clean[-1]].reshape(C // NX, ANTS * (ANTS + 1) // 2, 4, 2)
    assert (v[:, 0, 0, 0] > 0).all()


def test_each_host_link_carries_only_the_groups_its_engine_joined(runs):
    """IGMP snooping on the bridge: a dsim's port receives (almost) nothing, an F-engine's
    its own digitiser's two groups, an XB-engine's its share of every F-engine's output."""
    l0, l1, where = runs["links"]
    sent = {n: l1[i][0] - l0[i][0] for n, i in where.items()}
    got = {n: l1[i][1] - l0[i][1] for n, i in where.items()}
    for a in range(ANTS):
        assert sent[f"dsim{a}"] > 100_000, sent
        assert got[f"dsim{a}"] < 0.02 * sent[f"dsim{a}"], (a, got[f"dsim{a}"])
        assert 0.9 < got[f"fgpu{a}"] / sent[f"dsim{a}"] < 1.1, (a, got[f"fgpu{a}"], sent[f"dsim{a}"])
    f_out = sum(sent[f"fgpu{a}"] for a in range(ANTS))
    for k in range(NX):
        assert 0.9 < got[f"xbgpu{k}"] / (f_out / NX) < 1.1, (k, got[f"xbgpu{k}"], f_out)


def test_readiness_and_liveness_probes_pass_on_running_engines(runs):
    for key in ("one", "multi"):
        # Data flowing into every F- and XB-engine.
        assert runs[key + "_rx"] == {"xbgpu0": 0, "fgpu0": 0}, (key, runs[key + "_rx"])
        # Ready (device-status nominal) exactly where nothing else is wrong: where the
        # host's clock is not synchronised (time.synchronised error, as in a container
        # without NTP), device-status is degraded and the probe must say not ready.
        want = {n: 0 if runs[key + "_clock"][n] == 0 else 1 for n in ("xbgpu0", "fgpu0", "dsim0")}
        assert runs[key + "_ready"] == want, (key, runs[key + "_ready"], runs[key + "_clock"])
    # xbgpu0 still live after the kills; the restarted fgpu1 too.
    assert runs["live_after_kill"] == {"xbgpu0": 0, "fgpu1": 0}


def test_killed_fengine_marks_exactly_its_baselines_then_recovers(runs):
    want = {(a1, a2) for a2 in range(ANTS) for a1 in range(a2 + 1) if 1 in (a1, a2)}
    during = [h for h in runs["multi"] if runs["kill_f"] + 2 < h[0] < runs["restart_f"]]
    assert {ch for _, _, ch, _ in during} == {0, C // NX}, len(during)
    assert len(during) >= 4
    for _, ts, ch, data in during:
        assert mh.missing_baselines(data, ANTS, C // NX) == want, (ts, ch)
        # Nothing outside those baselines is marked.
        v = data.reshape(C // NX, -1, 4, 2)
        others = [a2 * (a2 + 1) // 2 + a1 for a2 in range(ANTS) for a1 in range(a2 + 1) if (a1, a2) not in want]
        assert not mh.any_missing(v[:, others]), (ts, ch)
    after = [h for h in runs["multi"] if runs["restart_f"] + 4 < h[0] < runs["kill_x"]]
    assert {ch for _, _, ch, _ in after} == {0, C // NX}
    assert len(after) >= 4
    for _, ts, ch, data in after:
        assert not mh.any_missing(data), (ts, ch)


def test_killed_xengine_loses_only_its_channel_range(runs):
    after = [h for h in runs["multi"] if h[0] > runs["kill_x"] + 1.5]
    assert len(after) >= 4
    assert {ch for _, _, ch, _ in after} == {0}
    for _, ts, ch, data in after:
        assert not mh.any_missing(data), ts
    # Timestamps keep advancing on the range that is left.
    ts = [t for _, t, _, _ in after]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)


def test_manifests_validate_against_the_kubernetes_schemas(gpucbf, plan):
    kv = pytest.importorskip("kubernetes_validate")
    import yaml
    d, hosts, p = plan
    docs = list(yaml.safe_load_all(mh.deploy(gpucbf, hosts, *DEPLOY, fmt="yaml")))
    assert [x["kind"] for x in docs] == ["ConfigMap"] + ["Pod"] * N_ENGINES
    # A GPU deployment at L-band on 4 hosts of 2 GPUs and 32 cores each.
    gpu_hosts = d / "gpu-hosts.json"
    gpu_hosts.write_text('{"hosts": [' + ",".join(
        f'{{"name": "cbf-{i:02}", "interfaces": ["ens1f0np0"], "gpus": 2, "cores": 32}}' for i in range(4)) + "]}")
    gpu_docs = list(yaml.safe_load_all(mh.deploy(gpucbf, gpu_hosts, "--antennas", 4, "--channels", 4096,
                                                 "--x-engines", 4, "--sync-time", SYNC, fmt="yaml")))
    for doc in docs + gpu_docs:
        kv.validate(doc, "1.30.0", strict=True)
    # What the harness ran is what the manifests run.
    pods = {x["metadata"]["labels"]["gpucbf/engine"]: x for x in docs if x["kind"] == "Pod"}
    for e in p["engines"]:
        c = pods[e["name"]]["spec"]["containers"][0]
        assert c["command"] == e["argv"]
        assert pods[e["name"]]["spec"]["hostNetwork"] is True
        assert c["livenessProbe"]["exec"]["command"][1:] == ["katcp-request", f"127.0.0.1:{e['katcp_port']}", "watchdog"]
    for x in gpu_docs[1:]:
        spec = x["spec"]
        r = spec["containers"][0]["resources"]
        assert r["requests"] == r["limits"], "guaranteed QoS"
        assert r["requests"]["cpu"].isdigit(), "integer CPUs"
        assert x["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
        if x["metadata"]["labels"]["app.kubernetes.io/component"] != "dsim":
            assert r["requests"]["nvidia.com/gpu"] == "1" and "hugepages-2Mi" in r["requests"]
    # Each host gets at most its GPUs' worth of GPU engines.
    per_host = {}
    for x in gpu_docs[1:]:
        h = x["spec"]["nodeSelector"]["kubernetes.io/hostname"]
        per_host[h] = per_host.get(h, 0) + 1
    assert per_host == {f"cbf-{i:02}": 2 for i in range(4)}
