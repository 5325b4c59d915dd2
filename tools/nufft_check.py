#!/usr/bin/env python3
"""Cross-check `gpucbf nufft` against FINUFFT (CPU, Python wheel) on the same .npy input.

check (default): random points and strengths/modes are written as .npy, `gpucbf nufft
type1|type2` runs on them, finufft.nufft{2,3}d{1,2} runs with the same eps, isign and
upsampfac, and the relative l2 difference is reported. For small problems both results are
also compared with a float64 direct sum. Exit status 1 if the difference to FINUFFT (or our
error vs the direct sum) exceeds 10*eps.

bench: `--bench-dir DIR` reads x.npy, y.npy, c.npy, f.npy written by
`gpucbf nufft bench --save-dir DIR`, times finufft.nufft2d1 (plan + points + execute) with
`--threads` threads, prints points/s, and compares gpucbf's f.npy and FINUFFT's result with
each other and with float64 direct sums on a sample of modes.

Run with the project venv: /opt/gpucbf-venv/bin/python tools/nufft_check.py --help
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import finufft


def rel_l2(a, b):
    a = np.asarray(a, dtype=np.complex128).ravel()
    b = np.asarray(b, dtype=np.complex128).ravel()
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def modes_grid(modes):
    """k vectors (one row per mode, C order, first axis with x), modeord=0."""
    axes = [np.arange(n) - n // 2 for n in modes]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1).astype(np.float64)


def direct(ty, coords, data, modes, isign):
    k = modes_grid(modes)
    pts = np.stack([c.astype(np.float64) for c in coords], axis=1)
    s = 1.0 if isign >= 0 else -1.0
    if ty == 1:
        out = np.zeros(len(k), np.complex128)
        for i in range(0, len(pts), 2048):
            e = np.exp(1j * s * (k @ pts[i:i + 2048].T))
            out += e @ data[i:i + 2048].astype(np.complex128)
        return out.reshape(modes)
    f = data.astype(np.complex128).ravel()
    out = np.zeros(len(pts), np.complex128)
    for i in range(0, len(pts), 2048):
        out[i:i + 2048] = np.exp(1j * s * (pts[i:i + 2048] @ k.T)) @ f
    return out


def run_finufft(ty, coords, data, modes, eps, isign, upsampfac, threads):
    fn = {(1, 2): finufft.nufft2d1, (2, 2): finufft.nufft2d2,
          (1, 3): finufft.nufft3d1, (2, 3): finufft.nufft3d2}[(ty, len(coords))]
    kw = dict(eps=eps, isign=isign, upsampfac=upsampfac, nthreads=threads)
    if ty == 1:
        return fn(*coords, data, n_modes=tuple(modes), **kw)
    return fn(*coords, data, **kw)


def check(a):
    rng = np.random.default_rng(a.seed)
    modes = [int(v) for v in a.modes.split(",")]
    dim = len(modes)
    real = np.float32 if a.precision == "f32" else np.float64
    cplx = np.complex64 if a.precision == "f32" else np.complex128
    coords = [rng.uniform(-np.pi, np.pi, a.m).astype(real) for _ in range(dim)]
    if a.type == 1:
        data = (rng.standard_normal(a.m) + 1j * rng.standard_normal(a.m)).astype(cplx)
    else:
        data = (rng.standard_normal(modes) + 1j * rng.standard_normal(modes)).astype(cplx)
    isign = a.isign if a.isign is not None else (1 if a.type == 1 else -1)
    with tempfile.TemporaryDirectory() as tmp:
        names = ["x", "y", "z"][:dim]
        cmd = [a.bin, "nufft", f"type{a.type}"]
        for n, c in zip(names, coords):
            np.save(os.path.join(tmp, n + ".npy"), c)
            cmd += [f"--{n}", os.path.join(tmp, n + ".npy")]
        np.save(os.path.join(tmp, "in.npy"), data)
        cmd += ["--c" if a.type == 1 else "--f", os.path.join(tmp, "in.npy")]
        if a.type == 1:
            cmd += ["--modes", a.modes]
        out = os.path.join(tmp, "out.npy")
        cmd += ["--eps", repr(a.eps), "--isign", str(isign), "--upsampfac", repr(a.upsampfac),
                "--out", out]
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        t_ours = time.perf_counter() - t
        if r.returncode != 0:
            print(f"FAIL: {' '.join(cmd)} exited {r.returncode}:\n{r.stderr}")
            return 1
        ours = np.load(out)
    want_shape = tuple(modes) if a.type == 1 else (a.m,)
    if ours.shape != want_shape or ours.dtype != cplx:
        print(f"FAIL: output {ours.shape} {ours.dtype}, expected {want_shape} {np.dtype(cplx)}")
        return 1
    t = time.perf_counter()
    theirs = run_finufft(a.type, coords, data, modes, a.eps, isign, a.upsampfac, a.threads)
    t_fin = time.perf_counter() - t
    diff = rel_l2(ours, theirs)
    line = (f"type {a.type} {dim}-D {a.precision} M={a.m} modes={modes} eps={a.eps:g} "
            f"isign={isign} upsampfac={a.upsampfac}: |gpucbf - finufft|/|finufft| = {diff:.2e}")
    ok = diff <= 10 * a.eps
    if a.m * np.prod(modes) <= 5e7:
        exact = direct(a.type, coords, data, modes, isign)
        e_ours, e_fin = rel_l2(ours, exact), rel_l2(theirs, exact)
        line += f"; vs direct sum: gpucbf {e_ours:.2e}, finufft {e_fin:.2e}"
        ok = ok and e_ours <= 10 * a.eps
    line += f" (gpucbf CLI incl. I/O {t_ours:.2f} s, finufft {t_fin:.3f} s)"
    print(("ok   " if ok else "FAIL ") + line)
    return 0 if ok else 1


def bench(a):
    d = a.bench_dir
    x, y = np.load(os.path.join(d, "x.npy")), np.load(os.path.join(d, "y.npy"))
    c, ours = np.load(os.path.join(d, "c.npy")), np.load(os.path.join(d, "f.npy"))
    n = ours.shape
    best, best_cpu, out = None, None, None
    for _ in range(a.repeats):
        t, cpu = time.perf_counter(), time.process_time()
        out = finufft.nufft2d1(x, y, c, n_modes=n, eps=a.eps, isign=1,
                               upsampfac=a.upsampfac, nthreads=a.threads)
        el, cpu = time.perf_counter() - t, time.process_time() - cpu
        if best is None or el < best:
            best, best_cpu = el, cpu
    diff = rel_l2(ours, out)
    # Truth on a sample of modes: float64 direct sums over all points.
    rng = np.random.default_rng(1)
    idx = rng.integers(0, ours.size, a.sample_modes)
    k = modes_grid(n)[idx]
    xd, yd, cd = x.astype(np.float64), y.astype(np.float64), c.astype(np.complex128)
    exact = np.array([np.sum(cd * np.exp(1j * (kk[0] * xd + kk[1] * yd))) for kk in k])
    e_ours = rel_l2(ours.ravel()[idx], exact)
    e_fin = rel_l2(out.ravel()[idx], exact)
    # Pass if gpucbf is within 10*eps of the truth and of FINUFFT, or (FINUFFT in float at
    # large N sits near its N*eps_mach floor) if gpucbf is closer to the truth than FINUFFT.
    ok = e_ours <= 10 * a.eps and (diff <= 10 * a.eps or e_ours <= e_fin)
    print(f"finufft {finufft.__version__} nufft2d1 {x.dtype} M={len(x)} modes={n} eps={a.eps:g} "
          f"upsampfac={a.upsampfac} nthreads={a.threads}: best of {a.repeats} {best:.3f} s = "
          f"{len(x) / best:.3e} points/s; process CPU time {best_cpu:.3f} s = "
          f"{len(x) / best_cpu:.3e} points per CPU-second")
    print(f"  |gpucbf - finufft|/|finufft| = {diff:.2e}; rel l2 error on {a.sample_modes} random "
          f"modes vs float64 direct sum: gpucbf {e_ours:.2e}, finufft {e_fin:.2e} "
          f"{'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    default_bin = os.path.join(root, "target", "release", "gpucbf")
    if not os.path.exists(default_bin):
        default_bin = os.path.join(root, "target", "debug", "gpucbf")
    p.add_argument("--bin", default=default_bin, help="gpucbf binary")
    p.add_argument("--type", type=int, choices=[1, 2], default=1)
    p.add_argument("--modes", default="64,48", help="N1,N2[,N3]")
    p.add_argument("--m", type=int, default=20000, help="number of points")
    p.add_argument("--precision", choices=["f32", "f64"], default="f64")
    p.add_argument("--eps", type=float, default=1e-6)
    p.add_argument("--isign", type=int, default=None, help="default: +1 type 1, -1 type 2")
    p.add_argument("--upsampfac", type=float, default=2.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bench-dir", help="time finufft on gpucbf's saved bench input")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--sample-modes", type=int, default=16, help="bench: modes checked by direct sum")
    a = p.parse_args()
    return bench(a) if a.bench_dir else check(a)


if __name__ == "__main__":
    sys.exit(main())
