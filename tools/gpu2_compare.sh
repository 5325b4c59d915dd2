#!/usr/bin/env bash
# Issue #26 item 1 on a 2-GPU host: 4 F-engines and 2 X-engines over 2 GPUs, output identical
# to the one-GPU run. Run from the repo root: `bash tools/gpu2_compare.sh` (binary $BIN,
# default .gpu/gpucbf; python3 + numpy; results under $OUT; SKIP_A=1 runs only (b)).
#  (a) array A (--gpus 1, on the second GPU) and array B (--gpus 2) side by side from one
#      --sync-time at FS (default 214e6) for SECS (default 60), each on its own half of the
#      cores (taskset; --pin auto then pins within that half when it has enough cores),
#      each with --soak-report; then tools/compare_arrays.py A B.
#  (b) array B alone (--gpus 2, every core) at FS2 (default 856e6) for SECS2 (default 120).
# $OUT: summary.txt (everything below), compare.json, {a,b,b2}_summary.json, all.tgz (logs,
# soak reports, summaries; not the .npy dumps).
set -u
ROOT=$(pwd)
BIN=${BIN:-$ROOT/.gpu/gpucbf}
OUT=${OUT:-/tmp/out}
FS=${FS:-214e6}
SECS=${SECS:-60}
FS2=${FS2:-856e6}
SECS2=${SECS2:-120}
MIN_COMMON=${MIN_COMMON:-10}
WARM=${WARM:-10}
PY=${PY:-python3}
W=${W:-/tmp/gpu2}
S=$OUT/summary.txt
mkdir -p "$OUT"
rm -rf "$W" && mkdir -p "$W"
PGIDS=()
T0=$(date +%s)
say() { echo "$*" | tee -a "$S"; }
cleanup() {
  # Only what this script started: each array runs under `timeout`, which leads its own
  # process group (the array's engines stay in it, and die with the array: PDEATHSIG).
  for g in "${PGIDS[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
  sleep 2
  for g in "${PGIDS[@]}"; do kill -KILL -- "-$g" 2>/dev/null; done
  left=$(pgrep -a gpucbf || true)
  [ -n "$left" ] && say "left running (not started here?): $left"
}
trap cleanup EXIT

# The verdict and loss lines of one array's summary.json.
report() { # name dir rc
  say "== $1: exit $3"
  if [ ! -f "$2/summary.json" ]; then
    say "no summary.json; stderr tail:"; tail -n 15 "$2.err" | tee -a "$S"; return
  fi
  cp "$2/summary.json" "$OUT/$1_summary.json"
  "$PY" - "$2/summary.json" <<'EOF' | tee -a "$S"
import json, sys
s = json.load(open(sys.argv[1]))
soak = s.get("soak") or {}
cp = s.get("core_plan") or {}
print(f"dumps {s['dumps_produced']}, dump {s['dump_seconds']:.3f} s, real-time factor {s['real_time_factor']:.4f}, "
      f"gpus {s['gpus']}, pinned {cp.get('pinned')} ({cp.get('threads')} threads on {cp.get('available')}"
      f"{'; ' + cp['unpinned_because'] if cp.get('unpinned_because') else ''})")
print("soak verdict:", "ok" if soak.get("ok") else "FAIL", "; ".join(soak.get("problems") or []))
print("lost:", json.dumps(s.get("lost")))
print("kernel drops:", json.dumps(s.get("kernel_drops")))
print("receiver:", json.dumps(s.get("receiver")))
EOF
}

say "gpu2.sh: FS=$FS SECS=$SECS FS2=$FS2 SECS2=$SECS2 on $(nproc) cores, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
NGPU=$(nvidia-smi -L | wc -l)
[ "$NGPU" -ge 2 ] || say "WARNING: $NGPU GPU(s): --gpus 2 needs two"
N=$(nproc)
H=$((N / 2))
A_CORES=0-$((H - 1))
B_CORES=$H-$((N - 1))

# (a) A and B side by side from one sync time (SKIP_A=1: only (b)).
if [ -z "${SKIP_A:-}" ]; then
SYNC=$(( $(date +%s) - 1 ))
COMMON=(array --backend gpu --antennas 4 --x-engines 2 --channels 4096 --dump-seconds 0.5
        --adc-sample-rate "$FS" --duration "$SECS" --sync-time "$SYNC")
say "== (a) sync time $SYNC: A --gpus 1 (GPU 1, cores $A_CORES), B --gpus 2 (cores $B_CORES)"
CUDA_VISIBLE_DEVICES=1 timeout $((SECS + 120)) taskset -c "$A_CORES" "$BIN" "${COMMON[@]}" --gpus 1 \
  --base-port 17100 --output "$W/a" --soak-report "$W/a/soak" --soak-warm-up "$WARM" > "$W/a.json" 2> "$W/a.err" &
PA=$!; PGIDS+=("$PA")
timeout $((SECS + 120)) taskset -c "$B_CORES" "$BIN" "${COMMON[@]}" --gpus 2 \
  --base-port 17600 --output "$W/b" --soak-report "$W/b/soak" --soak-warm-up "$WARM" > "$W/b.json" 2> "$W/b.err" &
PB=$!; PGIDS+=("$PB")
wait "$PA"; RA=$?
wait "$PB"; RB=$?
say "(a) done after $(( $(date +%s) - T0 )) s"
report a "$W/a" "$RA"
report b "$W/b" "$RB"
say "== compare A (1 GPU) with B (2 GPUs)"
timeout 60 "$PY" tools/compare_arrays.py "$W/a" "$W/b" --min-common "$MIN_COMMON" \
  --json "$OUT/compare.json" 2>&1 | tee -a "$S"
say "compare exit ${PIPESTATUS[0]}"
fi

# (b) B alone at FS2 on every core.
say "== (b) B alone: --gpus 2 at $FS2 for $SECS2 s (cores 0-$((N - 1)))"
timeout $((SECS2 + 110)) "$BIN" array --backend gpu --antennas 4 --x-engines 2 --channels 4096 \
  --dump-seconds 0.5 --adc-sample-rate "$FS2" --duration "$SECS2" --gpus 2 --base-port 18100 \
  --output "$W/b2" --soak-report "$W/b2/soak" --soak-warm-up "$WARM" > "$W/b2.json" 2> "$W/b2.err" &
P2=$!; PGIDS+=("$P2")
wait "$P2"; R2=$?
report b2 "$W/b2" "$R2"
grep -h "core plan" "$W/b2.err" | head -12 >> "$S"
say "total $(( $(date +%s) - T0 )) s"

# Everything but the dumps and images, for reading later.
(cd "$W" && tar czf "$OUT/all.tgz" --exclude='*.npy' --exclude='*.fits' --exclude='*.png' . )
ls -la "$OUT" >> "$S"
