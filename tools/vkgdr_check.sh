#!/usr/bin/env bash
# --use-vkgdr on the GPU machine (issue 22): the Vulkan → CUDA mapping and the engines with
# and without it. Two modes:
#   tools/vkgdr_check.sh prepare   (here, once per checkout) downloads the Vulkan loader
#                                  (libvulkan1) into .gl/ and copies this script to .gpu/;
#                                  build .gpu/gpucbf and .gpu/lib-tests first (without dpdk:
#                                  `cargo build --release --features ibverbs --bin gpucbf`,
#                                  `cargo test --release --features ibverbs --lib --no-run`).
#   bash .gpu/vkgdr_check.sh run   (on the device, carry [".gpu", ".gl"]) unpacks the loader,
#                                  runs the vkgdr GPU test with GPUCBF_REQUIRE_GPU=1 and
#                                  GPUCBF_REQUIRE_VKGDR=1, then fgpu and xbgpu on --backend gpu
#                                  from one pcap with and without --use-vkgdr; the output
#                                  files must be byte-identical. Results in $OUT/vkgdr.txt.
set -u
mode=${1:-run}
if [ "$mode" = prepare ]; then
  cd "$(dirname "$0")/.."
  grep -qx '/.gl/' "$(git rev-parse --git-dir)/info/exclude" 2>/dev/null ||
    echo /.gl/ >> "$(git rev-parse --git-dir)/info/exclude"
  mkdir -p .gl .gpu /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  apt-get $o update -qq && (cd .gl && apt-get $o download libvulkan1)
  cp tools/vkgdr_check.sh .gpu/
  exit 0
fi
OUT=${OUT:-/tmp/out}
R=$OUT/vkgdr.txt
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
[ -e /usr/share/vulkan/icd.d/nvidia_icd.json ] || [ -e /etc/vulkan/icd.d/nvidia_icd.json ] ||
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
ldconfig -p | grep -m1 libvulkan | tee -a "$R"
cd .gpu
export GPUCBF_REQUIRE_GPU=1 GPUCBF_REQUIRE_VKGDR=1
timeout 120 ./lib-tests --test-threads 1 vkgdr > "$OUT/vkgdr-tests.log" 2>&1
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
    while i + 16 <= len(b):
        n = struct.unpack_from("<I", b, i + 8)[0]; out.append(b[i + 16:i + 16 + n]); i += 16 + n
    return out
for e in ("f", "x"):
    a, v = packets(f"{e}_plain.pcap"), packets(f"{e}_vkgdr.pcap")
    print(f"{e}: {len(a)} vs {len(v)} packets, identical={a == v}")
PY
cp ./*.log "$OUT/" 2>/dev/null
