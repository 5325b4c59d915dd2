#!/usr/bin/env bash
# Runs on the GPU machine from .gpu/ (binaries built elsewhere): GPU tests with
# GPUCBF_REQUIRE_GPU=1, the benchmarks, and the engines on --backend gpu against cpu.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}
export GPUCBF_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
./lib-tests --test-threads 1 fengine:: > $OUT/lib_fengine.log 2>&1; echo "lib fengine rc=$?" | tee -a $OUT/summary.txt
tail -3 $OUT/lib_fengine.log >> $OUT/summary.txt
./xengine_tests --test-threads 1 > $OUT/xengine.log 2>&1; echo "xengine rc=$?" | tee -a $OUT/summary.txt
tail -3 $OUT/xengine.log >> $OUT/summary.txt
./gpucbf bench xbgpu > $OUT/bench_xbgpu.txt 2>&1; echo "bench xbgpu rc=$?" >> $OUT/summary.txt
./gpucbf bench fgpu > $OUT/bench_fgpu.txt 2>&1; echo "bench fgpu rc=$?" >> $OUT/summary.txt
# Engines: the same input through --backend cpu and --backend gpu.
./gpucbf dsim --adc-sample-rate 1712e6 --heaps 3072 --pcap d.pcap --dither-seed 1 \
  --signals "cw(0.3, 200e6) + wgn(0.05, 1); wgn(0.05, 2);" 127.0.0.1:7148 127.0.0.1:7149 2>/dev/null
for be in cpu gpu; do
  ./gpucbf fgpu --adc-sample-rate 1712e6 --sync-time 0 --array-size 1 --wideband name=wb,channels=4096,dst=127.0.0.1:7150 \
    --recv-chunk-samples 4194304 --gain 0.01 --dither-seed 3 --send-pcap f_$be.pcap --backend $be d.pcap > f_$be.json 2>> $OUT/engines.log
  echo "fgpu $be rc=$?" >> $OUT/summary.txt
done
python3 gpu_check.py f_cpu.pcap f_gpu.pcap int8 >> $OUT/summary.txt 2>&1; echo "fgpu compare rc=$?" >> $OUT/summary.txt
for be in cpu gpu; do
  ./gpucbf xbgpu --adc-sample-rate 1712e6 --sync-time 0 --array-size 1 --channels 4096 --channels-per-substream 4096 \
    --samples-between-spectra 8192 --heaps-per-fengine-per-chunk 2 --send-enabled \
    --corrprod name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=2 \
    --send-pcap x_$be.pcap --backend $be f_cpu.pcap > x_$be.json 2>> $OUT/engines.log
  echo "xbgpu $be rc=$?" >> $OUT/summary.txt
done
python3 gpu_check.py x_cpu.pcap x_gpu.pcap int32 >> $OUT/summary.txt 2>&1; echo "xbgpu compare rc=$?" >> $OUT/summary.txt
cp f_gpu.json x_gpu.json $OUT/ 2>/dev/null
timeout 120 ./gpucbf array --duration 4 --backend gpu --output arr > /dev/null 2>> $OUT/engines.log; echo "array gpu rc=$?" >> $OUT/summary.txt
cp arr/summary.json $OUT/array_summary.json 2>/dev/null
cat $OUT/summary.txt
