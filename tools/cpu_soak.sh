#!/usr/bin/env bash
# The CPU soak: `gpucbf array` with 2 antennas at its scaled ADC rate (CPU backend, loopback)
# for SECONDS (default 1800), with the soak report; fails (exit 1) when anything is lost after
# the 10 s warm-up. CI runs 120 s of it (tools/test.sh); the 30-minute run is the evidence
# for real-time operation on a small host. X_ENGINES=N splits the channels over N XB-engines
# (default 1); BASE_PORT=P moves its ports (default 17400).  Usage: [X_ENGINES=N] [BASE_PORT=P] tools/cpu_soak.sh [SECONDS] [OUTPUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-1800}
OUT=${2:-out/cpu-soak}
rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
BIN=${GPUCBF_BIN:-${CARGO_TARGET_DIR:-target}/release/gpucbf}
X_ENGINES=${X_ENGINES:-1}
rc=0
"$BIN" array --backend cpu --antennas 2 --x-engines "$X_ENGINES" --duration "$SECS" --output "$OUT" \
  --soak-report "$OUT/soak" --base-port "${BASE_PORT:-17400}" > "$OUT.summary.json" 2> "$OUT.log" || rc=$?
python3 - "$OUT" <<'PY'
import json, sys
d = sys.argv[1]
s = json.load(open(f"{d}/summary.json"))
r = json.load(open(f"{d}/soak/soak.json"))
print(f"cpu soak: {s['antennas']} antennas, {s['x_engines']} X-engine(s), "
      f"{s['duration_s']} s at {s['adc_sample_rate']:.0f} S/s, "
      f"{s['dumps_produced']} dumps, real-time factor {s['real_time_factor']:.4f}")
print(f"  soak verdict ok={r['verdict']['ok']}; lost (whole run, warm-up included): {s['lost'] or 'nothing'}")
for e in r["engines"]:
    lag = e.get("max_lag_s")
    print(f"  {e['name']}: losses after warm-up {sum(e['losses_after_warm_up'].values()):.0f}, "
          f"RSS growth {e['rss']['growth_pct']:.2f} %, max lag {lag if lag is None else round(lag, 3)} s")
PY
exit $rc
