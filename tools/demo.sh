#!/usr/bin/env bash
# The main job on a machine with no GPU or special NIC: a loopback array of 4 antennas
# (dsim → 4 F-engines → XB-engine over UDP on 127.0.0.1) for 10 s of simulated sky,
# writing visibilities, a spectrum plot, a dirty image (PNG and FITS) and a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
source tools/env.sh
cargo build --release --features "$GPUCBF_FEATURES" --bin gpucbf
out=${1:-out/array}
"$GPUCBF_BIN" array --antennas 4 --channels 1024 --duration 10 --output "$out" >/dev/null
python3 - "$out/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(json.dumps({k: s[k] for k in ["antennas", "channels", "adc_sample_rate", "dumps_produced", "real_time_factor", "receiver", "products"]}, indent=2))
PY
echo "demo: wrote $out/{visibilities.npy,spectrum.png,image.png,image.fits,summary.json}"
