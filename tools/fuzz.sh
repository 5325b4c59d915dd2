#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer through cargo-fuzz, stable Rust, no sanitizer):
#
#   tools/fuzz.sh TARGET SECONDS [LIBFUZZER_ARG...]   one target (`tools/fuzz.sh list`)
#   tools/fuzz.sh all SECONDS [LIBFUZZER_ARG...]      every target, one after the other
#
# Installs what it needs idempotently (tools/setup.sh: apt packages, Rust; then cargo-fuzz
# from crates.io), builds the targets in fuzz/ (target dir $GPUCBF_FUZZ_TARGET_DIR, default
# fuzz/target), runs each from the committed seeds (fuzz/corpus/TARGET, read only) plus a
# working corpus (fuzz/corpus-local/TARGET, not committed), writes crashing inputs to
# fuzz/artifacts/TARGET/ and one line per target to fuzz/artifacts/summary.txt
# (`TARGET executions=N seconds=S crashes=C`). Exits non-zero when any target crashed:
# fix the library, keep the input under tests/data/fuzz/TARGET/ (a unit test feeds it).
set -euo pipefail
cd "$(dirname "$0")/.."
ALL=(spead_packet heap_assemble dig_place feng_place katcp signal pcap npy output_spec delay_model)
if [ "${1:-}" = list ]; then printf '%s\n' "${ALL[@]}"; exit 0; fi
if [ $# -lt 2 ]; then
  echo "usage: tools/fuzz.sh TARGET|all SECONDS [LIBFUZZER_ARG...] (targets: ${ALL[*]})" >&2
  exit 2
fi
what=$1 secs=$2
shift 2
if [ "$what" = all ]; then targets=("${ALL[@]}"); else targets=("$what"); fi
for t in "${targets[@]}"; do
  [ -f "fuzz/fuzz_targets/$t.rs" ] || { echo "fuzz: no target $t (${ALL[*]})" >&2; exit 2; }
done

command -v cargo >/dev/null || tools/setup.sh
# libfuzzer-sys compiles libFuzzer's C++ sources.
if ! command -v c++ >/dev/null; then
  SUDO=""; [ "$(id -u)" != 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq g++
fi
source tools/env.sh
CARGO_FUZZ_VERSION=0.13.2
if [ "$(cargo fuzz --version 2>/dev/null | awk '{print $2}')" != "$CARGO_FUZZ_VERSION" ]; then
  echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi
tdir=${GPUCBF_FUZZ_TARGET_DIR:-$PWD/fuzz/target}
# -s none: no sanitizer, so stable Rust builds it (Rust's checks still panic: overflow in
# debug assertions, bounds, unwraps); `cargo fuzz run` below then finds it built.
(cd fuzz && cargo fuzz build -s none --target-dir "$tdir")

mkdir -p fuzz/artifacts
summary=fuzz/artifacts/summary.txt
failed=()
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus-local/$t" "fuzz/artifacts/$t"
  log="fuzz/artifacts/$t.log"
  had=$(find "fuzz/artifacts/$t" -type f | wc -l)
  echo "fuzz: $t for ${secs}s"
  set +e
  (cd fuzz && cargo fuzz run -s none --target-dir "$tdir" "$t" "corpus-local/$t" "corpus/$t" -- \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -print_final_stats=1 -artifact_prefix="artifacts/$t/" "$@") >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  crashes=$(( $(find "fuzz/artifacts/$t" -type f | wc -l) - had ))
  line="$t executions=${execs:-0} seconds=$secs crashes=$crashes rc=$rc"
  echo "fuzz: $line"
  echo "$(date -u +%FT%TZ) $line" >>"$summary"
  if [ "$rc" != 0 ] || [ "$crashes" != 0 ]; then
    failed+=("$t")
    grep -m1 -A20 -E "panicked|ERROR: libFuzzer|==ERROR" "$log" >&2 || tail -n 30 "$log" >&2
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} target(s) ran ${secs}s each, no crash"
