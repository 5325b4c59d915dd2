#!/usr/bin/env bash
# --use-vkgdr on the GPU machine (issue 22): the Vulkan → CUDA mapping and the engines with
# and without it. Two modes:
#   tools/vkgdr_check.sh prepare   (here, once per checkout) downloads the Vulkan loader
#                                  (libvulkan1, glvnd) into .gl/ and copies this script to .gpu/;
#                                  build .gpu/gpucbf and .gpu/lib-tests first (without dpdk:
#                                  `cargo build --release --features ibverbs --bin gpucbf`,
#                                  `cargo test --release --features ibverbs --lib --no-run`).
#   bash .gpu/vkgdr_check.sh run   (on the device, carry [".gpu", ".gl"]) unpacks the loader,
#                                  runs the vkgdr GPU test with GPUCBF_REQUIRE_GPU=1 and
#                                  GPUCBF_REQUIRE_VKGDR=1, then fgpu and xbgpu on --backend gpu
#                                  from one pcap with and without --use-vkgdr; the output
#                                  files must be byte-identical; then tools/vkgdr_live.sh
#                                  (the same on a live loopback feed) and `gpucbf bench
#                                  fgpu-vkgdr` with the GPU's PCIe counters sampled
#                                  (nvidia-smi dmon) alongside. Results in $OUT/vkgdr.txt.
set -u
mode=${1:-run}
if [ "$mode" = prepare ]; then
  cd "$(dirname "$0")/.."
  grep -qx '/.gl/' "$(git rev-parse --git-dir)/info/exclude" 2>/dev/null ||
    echo /.gl/ >> "$(git rev-parse --git-dir)/info/exclude"
  mkdir -p .gl .gpu /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  # The NVIDIA ICD (libGLX_nvidia) needs glvnd: without it vkCreateInstance finds no driver.
  apt-get $o update -qq && (cd .gl && apt-get $o download libvulkan1 libglvnd0 libglx0 libegl1 libgl1)
  cp tools/vkgdr_check.sh tools/vkgdr_live.sh tools/array_vkgdr.sh .gpu/
  exit 0
fi
OUT=${OUT:-/tmp/out}
R=$OUT/vkgdr.txt
# The loader's .deb lies in the checkout's .gl/, beside .gpu/ where this script runs from.
for f in "$(dirname "$0")"/../.gl/*.deb .gl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done
ldconfig
# The NVIDIA driver's Vulkan ICD manifest: the usual places, else any on the disk, else one
# written here for the driver's libGLX_nvidia.so.0 (the ICD library) when that is installed.
if [ -z "${VK_DRIVER_FILES:-}" ]; then
  for j in /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json \
    /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
    $(find / -xdev -name 'nvidia_icd*.json' 2>/dev/null | head -3); do
    [ -e "$j" ] && { export VK_DRIVER_FILES=$j; break; }
  done
fi
if [ -z "${VK_DRIVER_FILES:-}" ] && ldconfig -p | grep -q libGLX_nvidia.so.0; then
  echo '{"file_format_version":"1.0.0","ICD":{"library_path":"libGLX_nvidia.so.0","api_version":"1.3.0"}}' \
    > /tmp/nvidia_icd.json
  export VK_DRIVER_FILES=/tmp/nvidia_icd.json
fi
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-none} $(tr -d ' \n' < "${VK_DRIVER_FILES:-/dev/null}")" | tee -a "$R"
ldconfig -p | grep -E -m3 'libvulkan|libGLX_nvidia|libnvidia-glvkspirv' | tee -a "$R"
cd "$(dirname "$0")"
export GPUCBF_REQUIRE_GPU=1 GPUCBF_REQUIRE_VKGDR=1
VK_LOADER_DEBUG=error,warn timeout 120 ./lib-tests --test-threads 1 vkgdr > "$OUT/vkgdr-tests.log" 2>&1
echo "vkgdr tests rc=$?" | tee -a "$R"
grep -E "test result|panicked|FAILED|SKIP" "$OUT/vkgdr-tests.log" | head -10 >> "$R"
./gpucbf dsim --adc-sample-rate 1712e6 --heaps 3072 --pcap d.pcap --dither-seed 1 \
  --signals "cw(0.3, 200e6) + wgn(0.05, 1); wgn(0.05, 2);" 127.0.0.1:7148 127.0.0.1:7149 2>/dev/null
for v in plain vkgdr; do
  opt=""; [ $v = vkgdr ] && opt="--use-vkgdr"
  timeout 90 ./gpucbf fgpu --adc-sample-rate 1712e6 --sync-time 0 --array-size 1 \
    --wideband name=wb,channels=4096,dst=127.0.0.1:7150 --recv-chunk-samples 4194304 --gain 0.01 \
    --dither-seed 3 --send-pcap f_$v.pcap --backend gpu $opt d.pcap > f_$v.json 2> f_$v.log
  echo "fgpu $v rc=$? $(grep -m1 -o 'use-vkgdr[^"]*' f_$v.log)" | tee -a "$R"
  timeout 90 ./gpucbf xbgpu --adc-sample-rate 1712e6 --sync-time 0 --array-size 1 --channels 4096 \
    --channels-per-substream 4096 --samples-between-spectra 8192 --heaps-per-fengine-per-chunk 2 \
    --send-enabled --corrprod name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=2 \
    --send-pcap x_$v.pcap --backend gpu $opt f_plain.pcap > x_$v.json 2> x_$v.log
  echo "xbgpu $v rc=$? $(grep -m1 -o 'use-vkgdr[^"]*' x_$v.log)" | tee -a "$R"
done
# pcap record timestamps differ between runs: compare the packets, not the files.
python3 - <<'PY' | tee -a "$R"
import struct
def packets(p):
    b = open(p, "rb").read(); i, out = 24, []
    e = ">" if b[:4] == b"\xa1\xb2\xc3\xd4" else "<"  # the file's byte order
    while i + 16 <= len(b):
        n = struct.unpack_from(e + "I", b, i + 8)[0]; out.append(b[i + 16:i + 16 + n]); i += 16 + n
    return out
for e in ("f", "x"):
    a, v = packets(f"{e}_plain.pcap"), packets(f"{e}_vkgdr.pcap")
    print(f"{e}: {len(a)} vs {len(v)} packets, identical={a == v}")
PY
tar czf "$OUT/vkgdr-logs.tgz" ./*.log 2>/dev/null
OUT=$OUT timeout 200 bash vkgdr_live.sh > "$OUT/vkgdr-live.log" 2>&1
echo "vkgdr_live rc=$?" | tee -a "$R"
nvidia-smi dmon -s t -d 1 > "$OUT/pcie-dmon.txt" 2>&1 &
DM=$!
timeout 200 ./gpucbf bench --json "$OUT/bench-vkgdr.json" fgpu-vkgdr --cores ${BENCH_CORES:-2,3} \
  2>&1 | tee -a "$R"
kill $DM 2>/dev/null
