#!/usr/bin/env python3
"""Golden outputs of the engines, for refactors that must not change behaviour.

    tools/golden.py BIN OUTDIR            # writes OUTDIR/*.pcap, *.npy, ... and OUTDIR/manifest.json
    tools/golden.py --compare A/manifest.json B/manifest.json

Runs dsim -> fgpu (wideband 8-bit and 4-bit, narrowband) -> xbgpu (correlation products and
beams) through pcap files on the CPU backend, `gpucbf image` and `gpucbf nufft` on the
results, and `gpucbf array` (CPU backend, loopback UDP), and records the SHA-256 of every
output file (of a pcap: its frames, not the wall-clock record times). Two binaries' manifests
must match key for key. The array's data start at the wall clock (dsim's first timestamp is
now minus the sync time), so its outputs are not byte-comparable: the check compares the
shape of its run instead (engines, dumps, losses)."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "interop"))
from conftest import read_pcap, write_pcap  # noqa: E402

ADC = 1712e6
C = 256
JONES = 65536
N_ANTS = 3


def run(cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{cmd} exited {p.returncode}\n{p.stderr}")
    return p.stdout


def sha(path):
    """SHA-256 of a file; of a pcap, of its frames (record times are the wall clock)."""
    path = Path(path)
    if path.suffix != ".pcap":
        return hashlib.sha256(path.read_bytes()).hexdigest()
    h = hashlib.sha256()
    for ip_ok, udp_ok, src, dst, payload in read_pcap(path):
        h.update(repr((ip_ok, udp_ok, src, dst)).encode())
        h.update(payload)
    return h.hexdigest()


def merge(fpcaps, out):
    per = [[p for _, _, _, _, p in read_pcap(f)] for f in fpcaps]
    grams = []
    for k in range(max(map(len, per))):
        for ps in per:
            if k < len(ps):
                grams.append((("239.10.0.1", 7150), ps[k]))
    write_pcap(out, grams)


def produce(bin_, out):
    out.mkdir(parents=True, exist_ok=True)
    files = []
    sig = "base = cw(0.2, 300e6) + wgn(0.05, 42); base + wgn(0.03, 7); base + wgn(0.03, 8);"
    f8, f4 = [], []
    for a in range(N_ANTS):
        d = out / f"dsim{a}.pcap"
        run([bin_, "dsim", "--adc-sample-rate", ADC, "--heaps", 512, "--pcap", d,
             "--dither-seed", 10 + a, "--signals", sig, "127.0.0.1:7148", "127.0.0.1:7149"])
        files.append(d)
        for bits, lst in ((8, f8), (4, f4)):
            f = out / f"fgpu{a}_{bits}bit.pcap"
            run([bin_, "fgpu", "--adc-sample-rate", ADC, "--sync-time", 0, "--feng-id", a,
                 "--array-size", N_ANTS, "--wideband",
                 f"name=wb,channels={C},dst=127.0.0.1:7150,jones_per_batch={JONES}",
                 "--recv-chunk-samples", 1 << 18, "--gain", 0.002 if bits == 8 else 0.0002,
                 "--dither-seed", 3, "--send-sample-bits", bits, "--send-pcap", f,
                 "--backend", "cpu", d])
            lst.append(f)
            files.append(f)
    nb = out / "fgpu0_narrowband.pcap"
    run([bin_, "fgpu", "--adc-sample-rate", ADC, "--sync-time", 0, "--feng-id", 0,
         "--array-size", N_ANTS, "--wideband",
         f"name=wb,channels={C},dst=127.0.0.1:7150,jones_per_batch={JONES}",
         "--narrowband",
         "name=nb,channels=256,centre_frequency=300e6,decimation=8,dst=127.0.0.1:7152",
         "--recv-chunk-samples", 1 << 18, "--dither-seed", 5, "--send-pcap", nb,
         "--backend", "cpu", out / "dsim0.pcap"])
    files.append(nb)
    for bits, lst in ((8, f8), (4, f4)):
        m = out / f"fmerged_{bits}bit.pcap"
        merge(lst, m)
        x = out / f"xbgpu_{bits}bit.pcap"
        run([bin_, "xbgpu", "--adc-sample-rate", ADC, "--sync-time", 0, "--array-size", N_ANTS,
             "--channels", C, "--channels-per-substream", C, "--samples-between-spectra", 2 * C,
             "--jones-per-batch", JONES, "--heaps-per-fengine-per-chunk", 4, "--send-enabled",
             "--corrprod", f"name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=4",
             "--beam", "name=b0x,dst=127.0.0.1:7161,pol=0",
             "--beam", "name=b1y,dst=127.0.0.1:7162,pol=1",
             "--sample-bits", bits, "--send-pcap", x, "--backend", "cpu", m])
        files.append(x)
    img = out / "image"
    run([bin_, "image", "--pcap", out / "xbgpu_8bit.pcap", "--array-size", N_ANTS,
         "--size", 128, "--out-fits", img.with_suffix(".fits"), "--out-png", img.with_suffix(".png")])
    files += [img.with_suffix(".fits"), img.with_suffix(".png")]
    arr = out / "array"
    summary = json.loads(run([bin_, "array", "--antennas", 2, "--channels", 256, "--duration", 3,
                              "--backend", "cpu", "--base-port", 17300, "--output", arr]))
    return files, arr, summary


def main():
    if sys.argv[1] == "--compare":
        a, b = (json.loads(Path(p).read_text()) for p in sys.argv[2:4])
        bad = [k for k in sorted(set(a["files"]) | set(b["files"]))
               if a["files"].get(k) != b["files"].get(k)]
        bad += [f"array {k}" for k in a["array"] if a["array"][k] != b["array"].get(k)]
        for k in bad:
            print(f"golden: DIFFERS {k}")
        print(f"golden: {len(a['files']) + len(a['array']) - len(bad)} outputs identical, "
              f"{len(bad)} differ")
        sys.exit(1 if bad else 0)
    bin_, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    files, arr, summary = produce(bin_, out)
    eng = summary["engines"]
    manifest = {
        "files": {f.name: sha(f) for f in files},
        "array": {
            "outputs": sorted(p.name for p in arr.iterdir()),
            "dumps_produced": summary["dumps_produced"],
            "receiver_dropped": summary["receiver"]["dropped_packets"],
            "fgpu_missing": [e["summary"]["input_missing_heaps"] for e in eng["fgpu"]],
            "xbgpu_missing": eng["xbgpu"]["summary"]["input_missing_heaps"],
            "exit": [e["exit_status"] for e in [eng["dsim"], *eng["fgpu"], eng["xbgpu"]]],
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
