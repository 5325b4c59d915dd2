#!/bin/sh
# Makes the commands katsdpcontroller runs — fgpu, xbgpu, dsim and schedrr — as symbolic
# links to the gpucbf binary, in the binary's directory or in DIR:
#   tools/install-links.sh [GPUCBF [DIR]]
# GPUCBF defaults to `command -v gpucbf` (after `cargo install --path .` that is
# ~/.cargo/bin/gpucbf). gpucbf dispatches on its program name: `fgpu ARGS` runs
# `gpucbf fgpu ARGS`. schedrr sets SCHED_RR, so it needs CAP_SYS_NICE: in an image, give the
# binary the capability (setcap cap_sys_nice+ep) or run the container with --cap-add SYS_NICE.
set -eu
bin=${1:-$(command -v gpucbf || true)}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "install-links.sh: no gpucbf binary (give its path)" >&2
    exit 1
fi
dir=${2:-$(dirname "$bin")}
mkdir -p "$dir"
for name in fgpu xbgpu dsim schedrr; do
    ln -sf "$(realpath "$bin")" "$dir/$name"
done
echo "linked fgpu xbgpu dsim schedrr -> $(realpath "$bin") in $dir"
