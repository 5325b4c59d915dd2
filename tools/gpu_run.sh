#!/usr/bin/env bash
# Runs on the GPU machine from .gpu/ (binaries built elsewhere: gpucbf, lib-tests,
# fgpu_engine, xbgpu_engine, plus this script and gpu_check.py): GPU tests with GPUCBF_REQUIRE_GPU=1, the benchmarks, and the
# engines on --backend gpu against --backend cpu. Results go to $OUT.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}
export GPUCBF_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
step() { # name, limit, command...
  local name=$1 lim=$2; shift 2; local t0=$(date +%s)
  timeout "$lim" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "$name rc=$rc in $(( $(date +%s) - t0 )) s" | tee -a $S
  grep -E "test result|panicked|FAILED" "$OUT/$name.log" | head -8 >> $S
}
# The NVRTC compile-everything test runs in CI (no GPU needed); skipped here for time. On a fresh
# machine the xengine tests spend most of their time compiling the correlator variants (over 150 s
# with 2 threads; 12 s with the compile cache warm).
# PART=tests (GPU tests and the engines), bench (the benchmarks) or all (default): a call to the
# device is limited to 10 minutes, and all of it takes longer on a fresh machine.
PART=${PART:-all}
if [ "$PART" != bench ]; then
step lib_gpu 200 ./lib-tests --test-threads 4 --skip gpu_kernels_compile_with_nvrtc \
  fengine:: fgpu:: nufft:: chunk:: image::
step fgpu_engine 90 ./fgpu_engine --test-threads 2
step xengine 420 ./lib-tests --test-threads 4 xengine::tests::gpu_
step xbgpu_engine 120 ./xbgpu_engine --test-threads 2
# Engines: the same input through --backend cpu and --backend gpu.
./gpucbf dsim --adc-sample-rate 1712e6 --heaps 3072 --pcap d.pcap --dither-seed 1 \
  --signals "cw(0.3, 200e6) + wgn(0.05, 1); wgn(0.05, 2);" 127.0.0.1:7148 127.0.0.1:7149 2>/dev/null
for be in cpu gpu; do
  timeout 90 ./gpucbf fgpu --adc-sample-rate 1712e6 --sync-time 0 --array-size 1 \
    --wideband name=wb,channels=4096,dst=127.0.0.1:7150 --recv-chunk-samples 4194304 --gain 0.01 \
    --dither-seed 3 --send-pcap f_$be.pcap --backend $be d.pcap > f_$be.json 2>> $OUT/engines.log
  echo "fgpu wideband $be rc=$?" >> $S
  timeout 90 ./gpucbf fgpu --adc-sample-rate 1712e6 --sync-time 0 --array-size 1 \
    --narrowband name=nb,channels=1024,centre_frequency=200e6,jones_per_batch=65536,dst=127.0.0.1:7151,decimation=8 \
    --recv-chunk-samples 4194304 --gain 0.05 --dither-seed 3 --send-pcap n_$be.pcap --backend $be d.pcap \
    > n_$be.json 2>> $OUT/engines.log
  echo "fgpu narrowband $be rc=$?" >> $S
done
echo "wideband:" >> $S; python3 gpu_check.py f_cpu.pcap f_gpu.pcap int8 >> $S 2>&1
echo "narrowband:" >> $S; python3 gpu_check.py n_cpu.pcap n_gpu.pcap int8 >> $S 2>&1
for be in cpu gpu; do
  timeout 90 ./gpucbf xbgpu --adc-sample-rate 1712e6 --sync-time 0 --array-size 1 --channels 4096 \
    --channels-per-substream 4096 --samples-between-spectra 8192 --heaps-per-fengine-per-chunk 2 \
    --send-enabled --corrprod name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=2 \
    --send-pcap x_$be.pcap --backend $be f_cpu.pcap > x_$be.json 2>> $OUT/engines.log
  echo "xbgpu $be rc=$?" >> $S
done
echo "xbgpu:" >> $S; python3 gpu_check.py x_cpu.pcap x_gpu.pcap int32 >> $S 2>&1
# 4-bit: fgpu --send-sample-bits 4 into xbgpu --sample-bits 4, both backends.
timeout 90 ./gpucbf fgpu --adc-sample-rate 1712e6 --sync-time 0 --array-size 1 \
  --wideband name=wb,channels=4096,dst=127.0.0.1:7150 --recv-chunk-samples 4194304 --gain 0.01 \
  --dither-seed 3 --send-sample-bits 4 --send-pcap f4.pcap --backend cpu d.pcap > /dev/null 2>> $OUT/engines.log
for be in cpu gpu; do
  timeout 90 ./gpucbf xbgpu --adc-sample-rate 1712e6 --sync-time 0 --array-size 1 --channels 4096 \
    --channels-per-substream 4096 --samples-between-spectra 8192 --heaps-per-fengine-per-chunk 2 \
    --sample-bits 4 --send-enabled --corrprod name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=2 \
    --send-pcap x4_$be.pcap --backend $be f4.pcap > /dev/null 2>> $OUT/engines.log
  echo "xbgpu 4-bit $be rc=$?" >> $S
done
echo "xbgpu 4-bit:" >> $S; python3 gpu_check.py x4_cpu.pcap x4_gpu.pcap int32 >> $S 2>&1
timeout 120 ./gpucbf array --duration 4 --backend gpu --output arr > /dev/null 2>> $OUT/engines.log
echo "array gpu rc=$?" >> $S
cp arr/summary.json $OUT/array_summary.json 2>/dev/null
fi
if [ "$PART" != tests ]; then
step bench_xbgpu 280 ./gpucbf bench xbgpu
step bench_fgpu 120 ./gpucbf bench fgpu
step bench_fgpu_nb 60 ./gpucbf bench fgpu-narrowband
step bench_nufft 60 ./gpucbf bench nufft
fi
cat $S
