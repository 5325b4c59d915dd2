"""Two `gpucbf array` runs compared dump by dump (tools/compare_arrays.py), as the 2-GPU
device check compares a one-GPU array with a two-GPU one.

* Two CPU arrays started side by side from one `--sync-time` (one XB-engine against two,
  so the channel split differs as the GPU placement does) give byte-identical products for
  every timestamp whole in both: the data are a function of the timestamp.
* The comparison catches a dump that differs in one value, ignores dumps with the MISSING
  marker, and fails when too few dumps are common.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
COMPARE = ROOT / "tools" / "compare_arrays.py"
MISSING = np.array([-(2**31), 1], dtype=np.int32)


def compare(a, b, *extra):
    p = subprocess.run([sys.executable, str(COMPARE), str(a), str(b), *map(str, extra)],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def fake_run(d: Path, timestamps, products, incomplete=None):
    d.mkdir()
    np.save(d / "timestamps.npy", np.array(timestamps, dtype=np.uint64))
    np.save(d / "products.npy", np.array(products, dtype=np.int32))
    if incomplete is not None:
        np.save(d / "incomplete.npy", np.array(incomplete, dtype=bool))


def test_compare_catches_a_differing_dump_and_skips_missing(tmp_path):
    rng = np.random.default_rng(1)
    p = rng.integers(-1000, 1000, size=(6, 4, 3, 4, 2), dtype=np.int32)
    ts = [1000 * (i + 1) for i in range(6)]
    # B starts one dump later and runs one dump past A; its first common dump is marked
    # (flag computed from the marker, no incomplete.npy).
    pb = np.concatenate([p[1:], p[:1]]).copy()
    pb[0, 2, 1, 3] = MISSING
    pb[0, 0, 0, 0] += 7
    fake_run(tmp_path / "a", ts, p, [False] * 6)
    fake_run(tmp_path / "b", ts[1:] + [7000], pb)
    rc, out = compare(tmp_path / "a", tmp_path / "b", "--min-common", 4, "--json", tmp_path / "r.json")
    assert rc == 0, out
    r = json.loads((tmp_path / "r.json").read_text())
    assert (r["dumps_a"], r["dumps_b"], r["common"], r["common_whole"], r["identical"]) == (6, 6, 5, 4, 4), r
    assert r["incomplete_b"] == 1
    rc, out = compare(tmp_path / "a", tmp_path / "b", "--min-common", 5)
    assert rc == 1 and "need 5" in out, out
    # One value of one whole dump off by 3: caught, named, measured.
    pb[3, 1, 2, 0, 1] -= 3
    np.save(tmp_path / "b" / "products.npy", pb)
    rc, out = compare(tmp_path / "a", tmp_path / "b", "--min-common", 1, "--json", tmp_path / "r.json")
    r = json.loads((tmp_path / "r.json").read_text())
    assert rc == 1, out
    assert (r["identical"], r["differing"], r["max_abs_difference"]) == (3, 1, 3), r
    assert r["first_differing_timestamps"] == [5000], r
    # Folders that cannot be compared.
    (tmp_path / "c").mkdir()
    assert compare(tmp_path / "a", tmp_path / "c")[0] == 2
    fake_run(tmp_path / "d", ts, p[:, :2])
    assert compare(tmp_path / "a", tmp_path / "d")[0] == 2


def test_side_by_side_arrays_from_one_sync_time_agree(gpucbf, tmp_path):
    sync = int(time.time()) - 1
    runs = {}
    for name, x, port in (("a", 1, 28110), ("b", 2, 28310)):
        out = tmp_path / name
        runs[name] = (out, subprocess.Popen(
            [gpucbf, "array", "--backend", "cpu", "--antennas", "2", "--channels", "256", "--x-engines", str(x),
             "--adc-sample-rate", str(1712e6 / 1024), "--duration", "6", "--dump-seconds", "0.3",
             "--sync-time", str(sync), "--base-port", str(port), "--output", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for name, (out, p) in runs.items():
        so, se = p.communicate(timeout=120)
        assert p.returncode == 0, f"array {name} exited {p.returncode}\n{se}"
        assert json.loads(so)["dumps_produced"] >= 10, so
    a, b = runs["a"][0], runs["b"][0]
    rc, out = compare(a, b, "--min-common", 8, "--json", tmp_path / "r.json")
    assert rc == 0, out
    r = json.loads((tmp_path / "r.json").read_text())
    # Real products, not zeros: antenna 0's autocorrelation is positive in every channel.
    p = np.load(a / "products.npy")
    assert p.dtype == np.int32 and p.shape[1:] == (256, 3, 4, 2)
    assert (p[-1, :, 0, 0, 0] > 0).all()
    ts = np.load(a / "timestamps.npy")
    assert ts.dtype == np.uint64 and (np.diff(ts.astype(np.int64)) > 0).all()
    assert r["identical"] == r["common_whole"] >= 8, r
