#!/usr/bin/env bash
# One MeerKAT L-band antenna in real time on one host, without the array wrapper, so that the
# engines' receive options can be varied: dsim (2 pols × 1712 MS/s, 10-bit) -> fgpu -> xbgpu
# over loopback UDP for $SECS seconds; prints each engine's losses. Run from a folder holding
# the gpucbf binary: `NAME=base SECS=20 FGPU_EXTRA="..." XB_EXTRA="..." bash rt_run.sh`.
# Results (summaries, logs) go to $OUT/rt-$NAME.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; NAME=${NAME:-run}; SECS=${SECS:-20}
D=$OUT/rt-$NAME; mkdir -p "$D"
FS=1712e6; C=4096; JONES=${JONES:-1048576}
CHUNK=${CHUNK:-33554432}; HPC=${HPC:-32}; DUMP_BATCHES=${DUMP_BATCHES:-408}
SYNC=$(date +%s)
B=${BASE_PORT:-17000}
XIN=127.0.0.1:$((B + 100)); XOUT=127.0.0.1:$((B + 101))
# Prometheus ports: fgpu, xbgpu, dsim (sampled by `gpucbf soak`).
PF=$((B + 200)); PX=$((B + 201)); PD=$((B + 202))
./gpucbf xbgpu --adc-sample-rate $FS --sync-time $SYNC --array-size 1 --channels $C \
  --channels-per-substream $C --samples-between-spectra $((2 * C)) --jones-per-batch $JONES \
  --heaps-per-fengine-per-chunk $HPC --send-enabled --backend gpu \
  --corrprod name=bc,dst=$XOUT,heap_accumulation_threshold=$DUMP_BATCHES --prometheus-port $PX \
  ${XB_EXTRA:-} $XIN \
  > "$D/xbgpu.json" 2> "$D/xbgpu.log" &
XB=$!
./gpucbf fgpu --adc-sample-rate $FS --sync-time $SYNC --feng-id 0 --array-size 1 \
  --wideband name=wb,channels=$C,dst=$XIN,jones_per_batch=$JONES --recv-chunk-samples $CHUNK \
  --gain 0.02 --backend gpu --prometheus-port $PF ${FGPU_EXTRA:-} 127.0.0.1:$B,127.0.0.1:$((B + 1)) \
  > "$D/fgpu.json" 2> "$D/fgpu.log" &
FG=$!
for _ in $(seq 120); do
  grep -q "output ready" "$D/fgpu.log" 2>/dev/null && grep -q "output ready" "$D/xbgpu.log" 2>/dev/null && break
  sleep 0.5
done
HEAPS=$(python3 -c "print(int($SECS * $FS / 4096))")
# CPU seconds per thread of each engine (utime + stime from /proc), sampled twice.
cpu_snap() { # file
  for p in $FG $XB; do
    for t in /proc/$p/task/*; do
      echo "$p $(cat $t/comm 2>/dev/null | tr ' ' _) $(awk '{print $14 + $15}' $t/stat 2>/dev/null)"
    done
  done > "$1"
}
${DSIM_PREFIX:-} ./gpucbf dsim --adc-sample-rate $FS --sync-time $SYNC --period $((1 << 22)) \
  --heaps $HEAPS --dither-seed 1 --signals "cw(0.1, 300e6) + wgn(0.05, 1); wgn(0.05, 2);" \
  --summary --prometheus-port $PD ${DSIM_EXTRA:-} 127.0.0.1:$B 127.0.0.1:$((B + 1)) \
  > "$D/dsim.json" 2> "$D/dsim.log" &
DS=$!
# The soak report over the run (losses per second after a 10 s warm-up, lag, RSS, CPU).
sleep 1
./gpucbf soak --seconds $((SECS - 2)) --warm-up ${WARM:-10} --output "$D/soak" \
  --engine name=dsim,prometheus=127.0.0.1:$PD,pid=$DS \
  --engine name=fgpu,prometheus=127.0.0.1:$PF,pid=$FG \
  --engine name=xbgpu,prometheus=127.0.0.1:$PX,pid=$XB > "$D/soak.out" 2> "$D/soak.log" &
SK=$!
sleep 5; cpu_snap "$D/cpu0.txt"; T0=$(date +%s.%N)
sleep $((SECS > 15 ? SECS - 10 : 5)); cpu_snap "$D/cpu1.txt"; T1=$(date +%s.%N)
wait $DS
wait $SK; echo "soak rc=$?"; tail -5 "$D/soak.log" | cut -c1-400
python3 - "$D" "$FG" "$XB" "$T0" "$T1" <<'PY' | tee "$D/cpu.txt"
import sys, os
d, fg, xb, t0, t1 = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
hz = os.sysconf("SC_CLK_TCK")
def load(f):
    out = {}
    for line in open(f):
        p = line.split()
        if len(p) == 3:
            out[(p[0], p[1], len([k for k in out if k[0] == p[0] and k[1].startswith(p[1])]))] = int(p[2])
    return out
a, b = load(f"{d}/cpu0.txt"), load(f"{d}/cpu1.txt")
for k in sorted(b):
    if k in a:
        eng = "fgpu" if k[0] == fg else "xbgpu"
        pct = 100 * (b[k] - a[k]) / hz / (t1 - t0)
        if pct >= 1:
            print(f"cpu {eng} {k[1]}#{k[2]}: {pct:.0f} %")
PY
sleep 2
kill -TERM $FG; sleep 2; kill -TERM $XB
wait $FG; echo "fgpu rc=$?"; wait $XB; echo "xbgpu rc=$?"
python3 - "$D" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
def load(n):
    try:
        return json.loads((d / n).read_text())
    except Exception as e:
        return {"error": str(e)}
ds, fg, xb = load("dsim.json"), load("fgpu.json"), load("xbgpu.json")
print("dsim:", {k: ds.get(k) for k in ("heaps", "time_error_s", "late_s", "max_lag_s") if k in ds} or ds)
print("fgpu: heaps", fg.get("input_heaps"), "missing", fg.get("input_missing_heaps"),
      "rejected", fg.get("recv_rejected"),
      "out", [(o["name"], o["heaps"], o["skipped_heaps"]) for o in fg.get("outputs", [])])
print("xbgpu: heaps", xb.get("input_heaps"), "missing", xb.get("input_missing_heaps"),
      "incomplete", xb.get("input_incomplete_heaps"), "rejected", xb.get("recv_rejected"),
      "dumps", [(x.get("name"), x.get("heaps"), x.get("incomplete_accs"), x.get("skipped_accs")) for x in xb.get("corrprods", [])])
PY
