#!/usr/bin/env python3
"""Compares the dumps of two `gpucbf array` runs (their --output folders), as two arrays
started side by side from one `--sync-time` must agree (e.g. one GPU against two):

    python3 tools/compare_arrays.py DIR_A DIR_B [--min-common 10] [--json FILE]

Dumps are matched by timestamp (`timestamps.npy`); those whole in both (no MISSING marker:
`incomplete.npy`) are compared byte for byte (`products.npy`, int32 as the XB-engines sent
them; `visibilities.npy` where a run has no products.npy). Prints the dumps in A and in B,
the common timestamps, the common whole dumps, how many are identical, the largest
absolute difference and the first timestamps that differ. Exit status 0 only when at least
--min-common dumps are whole in both and every one is identical; 1 otherwise; 2 when the
folders cannot be compared (missing files, different shapes). Needs numpy only.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

MISSING = (-(2**31), 1)


class Unusable(Exception):
    """A folder that cannot be compared."""


def load(d: Path):
    """(timestamps, incomplete flags, products) of one run; products (dump, ...) int32 or
    complex64 with the re/im pairs on the last axis."""
    ts_path = d / "timestamps.npy"
    if not ts_path.exists():
        raise Unusable(f"{ts_path} not found (an array run of this version writes it)")
    ts = np.load(ts_path).astype(np.uint64)
    if (d / "products.npy").exists():
        p = np.load(d / "products.npy", mmap_mode="r")
    elif (d / "visibilities.npy").exists():
        v = np.load(d / "visibilities.npy", mmap_mode="r")
        p = np.stack([v.real, v.imag], axis=-1)
    else:
        raise Unusable(f"{d}: neither products.npy nor visibilities.npy")
    if p.shape[0] != len(ts):
        raise Unusable(f"{d}: {p.shape[0]} dumps but {len(ts)} timestamps")
    if (d / "incomplete.npy").exists():
        inc = np.load(d / "incomplete.npy").astype(bool)
    else:
        flat = p.reshape(len(ts), -1, 2)
        inc = ((flat[..., 0] == MISSING[0]) & (flat[..., 1] == MISSING[1])).any(axis=1)
    if len(inc) != len(ts):
        raise Unusable(f"{d}: {len(inc)} incomplete flags but {len(ts)} timestamps")
    return ts, inc, p


def compare(a: Path, b: Path, min_common: int = 10) -> dict:
    """The comparison's numbers and verdict (`ok`)."""
    ta, ia, pa = load(a)
    tb, ib, pb = load(b)
    if pa.shape[1:] != pb.shape[1:]:
        raise Unusable(f"dumps of shape {pa.shape[1:]} (A) and {pb.shape[1:]} (B)")
    row_a = {int(t): i for i, t in enumerate(ta)}
    row_b = {int(t): i for i, t in enumerate(tb)}
    common = sorted(set(row_a) & set(row_b))
    whole = [t for t in common if not ia[row_a[t]] and not ib[row_b[t]]]
    identical, differing, max_abs = 0, [], 0
    for t in whole:
        x, y = pa[row_a[t]], pb[row_b[t]]
        if np.array_equal(x, y):
            identical += 1
            continue
        if x.dtype.kind in "iu" and y.dtype.kind in "iu":
            d = np.abs(x.astype(np.int64) - y.astype(np.int64)).max()
        else:
            d = np.abs(x.astype(np.float64) - y.astype(np.float64)).max()
        differing.append(t)
        max_abs = max(max_abs, d.item())
    out = {
        "dumps_a": len(ta),
        "dumps_b": len(tb),
        "incomplete_a": int(ia.sum()),
        "incomplete_b": int(ib.sum()),
        "common": len(common),
        "common_whole": len(whole),
        "identical": identical,
        "differing": len(differing),
        "first_differing_timestamps": differing[:5],
        "max_abs_difference": max_abs,
        "min_common": min_common,
    }
    out["ok"] = len(whole) >= min_common and not differing
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="first array's --output folder")
    ap.add_argument("b", type=Path, help="second array's --output folder")
    ap.add_argument("--min-common", type=int, default=10, help="fewest common whole dumps to pass (default 10)")
    ap.add_argument("--json", type=Path, help="also write the numbers as JSON here")
    args = ap.parse_args(argv)
    try:
        r = compare(args.a, args.b, args.min_common)
    except (Unusable, OSError, ValueError) as e:
        print(f"compare: cannot compare {args.a} and {args.b}: {e}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(r, indent=1) + "\n")
    print(f"compare: dumps in A {r['dumps_a']} ({r['incomplete_a']} with MISSING), "
          f"in B {r['dumps_b']} ({r['incomplete_b']} with MISSING)")
    print(f"compare: common timestamps {r['common']}, whole in both {r['common_whole']}, "
          f"identical {r['identical']}, differing {r['differing']}, max abs difference {r['max_abs_difference']}")
    if r["differing"]:
        print(f"compare: first differing timestamps {r['first_differing_timestamps']}")
    if r["ok"]:
        print(f"compare: PASS ({r['common_whole']} common whole dumps, all identical)")
    elif r["differing"]:
        print(f"compare: FAIL ({r['differing']} of {r['common_whole']} common whole dumps differ)")
    else:
        print(f"compare: FAIL (only {r['common_whole']} common whole dumps, need {args.min_common})")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
