#!/usr/bin/env bash
# The test command (README, CI): set-up, layout check, release build, cargo tests (unit, integration,
# property tests, NVRTC kernel compilation for sm_80/sm_90), 60 s of each fuzz target, two minutes of
# the CPU soak, the qualification quick subset, then the interop tests against real peers (spead2) in the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
source tools/env.sh
if [ -n "${GPUCBF_CUDA_INCLUDE:-}" ]; then
  echo "test: NVRTC from $(dirname "$GPUCBF_CUDA_INCLUDE")"
fi
export GPUCBF_REQUIRE_NVRTC=1
# The tree's shape: no import cycle between sibling modules, no source file over 800 lines.
python3 tools/layout_check.py
# The fuzz targets use the library's API: a change there must not break them late in the run.
cargo check --manifest-path fuzz/Cargo.toml --bins
# With the kernel-bypass features (GPUCBF_FEATURES from tools/env.sh: dpdk,ibverbs).
cargo build --release --features "$GPUCBF_FEATURES" --bin gpucbf
cargo test --release --features "$GPUCBF_FEATURES"
# Every fuzz target for 60 s (fuzz/, libFuzzer through cargo-fuzz; its own target dir).
tools/fuzz.sh all 60
# Two minutes of the CPU soak (2 antennas through the array, nothing lost after the warm-up).
tools/cpu_soak.sh 120 "${CARGO_TARGET_DIR:-target}/cpu-soak"
# The qualification checks' quick subset on the CPU backend (about a minute on 2 cores).
"${CARGO_TARGET_DIR:-target}/release/gpucbf" qualify --backend cpu --antennas 2 --channels 256 --only quick --output "${CARGO_TARGET_DIR:-target}/qualify"
.venv/bin/python -m pytest tests/interop -q -p no:cacheprovider
