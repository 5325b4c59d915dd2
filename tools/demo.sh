#!/usr/bin/env bash
# The main job on a machine with no GPU or special NIC: simulate a dual-polarisation L-band
# digitiser (a tone plus noise) into a pcap file, then decode it and summarise it.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
source tools/env.sh
cargo build --release --bin gpucbf
out=${1:-out}
mkdir -p "$out"
"$GPUCBF_BIN" dsim --adc-sample-rate 1712e6 --heaps 4096 --dither-seed 1 \
  --signals "cw(0.25, 1e9 - 856e6) + wgn(0.03); wgn(0.03);" \
  --pcap "$out/dsim.pcap" --summary 239.102.0.64:7148 239.102.0.72:7148 | tee "$out/dsim-summary.json"
"$GPUCBF_BIN" pcap-info "$out/dsim.pcap" | tee "$out/pcap-summary.json"
echo "demo: wrote $out/dsim.pcap, $out/dsim-summary.json and $out/pcap-summary.json"
