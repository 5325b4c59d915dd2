# Sourced by the tools: PATH for cargo, and NVRTC from the venv's CUDA wheels (libnvrtc and
# the CUDA headers) so kernels compile without a GPU or a CUDA install.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"
cu13=$(ls -d "$root"/.venv/lib/python3*/site-packages/nvidia/cu13 2>/dev/null | head -n1 || true)
if [ -n "$cu13" ]; then
  export LD_LIBRARY_PATH="$cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export GPUCBF_CUDA_INCLUDE="$cu13/include"
fi
export GPUCBF_BIN="${CARGO_TARGET_DIR:-$root/target}/release/gpucbf"
# Cargo features of the release binary that the tools build (README, CI): the kernel-bypass
# receive paths. GPUCBF_FEATURES= (empty) builds without them.
export GPUCBF_FEATURES="${GPUCBF_FEATURES-dpdk,ibverbs}"
