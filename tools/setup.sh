#!/usr/bin/env bash
# Idempotent set-up on Debian 12 / Ubuntu 24.04: system packages (only those missing), the Rust
# toolchain if it is missing, and the Python venv (.venv) with spead2, numpy and the NVRTC wheels.
# Safe to run repeatedly: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
command -v curl >/dev/null || need_apt+=(curl ca-certificates)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v python3 >/dev/null || need_apt+=(python3)
python3 -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# The release build has the kernel-bypass features (`--features dpdk,ibverbs`): DPDK's
# headers and libraries (own bindgen bindings in ffi/dpdk-sys need libclang and clang),
# dpdk-dev for testpmd. ibverbs needs nothing to build (libibverbs is dlopened at run time).
for pkg in libdpdk-dev dpdk-dev libclang-dev clang; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need_apt+=("$pkg")
done
# Chromium, where Debian packages it, so that the qualify test screenshots report.html in
# a headless browser (tests/qualify.rs; the test says it skipped where no browser is).
if grep -q '^ID=debian' /etc/os-release 2>/dev/null && ! command -v chromium >/dev/null; then
  need_apt+=(chromium)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

# Rust: at least the crate's rust-version (Debian 12's own cargo, 1.63, is too old; rustup's
# toolchain in ~/.cargo/bin comes first on PATH, as in tools/env.sh).
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
need_rust=$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' Cargo.toml)
rust_ok() {
  local have
  have=$(rustc --version 2>/dev/null | cut -d' ' -f2) || return 1
  [ -n "$have" ] && [ "$(printf '%s\n' "$need_rust" "$have" | sort -V | head -n1)" = "$need_rust" ]
}
if ! command -v cargo >/dev/null || ! rust_ok; then
  if command -v rustup >/dev/null; then
    echo "setup: updating the Rust toolchain (rustup, rustc $need_rust or newer needed)"
    rustup toolchain install stable --profile minimal
    rustup default stable
  else
    echo "setup: installing the Rust toolchain (rustup)"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
      | RUSTUP_INIT_SKIP_PATH_CHECK=yes sh -s -- -y --profile minimal
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi

stamp=.venv/.requirements.sha256
want=$(sha256sum tools/requirements.txt | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: creating the Python venv (.venv)"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r tools/requirements.txt
  echo "$want" > "$stamp"
fi
