#!/usr/bin/env bash
# The real-time array with and without --use-vkgdr (issue 22, item 3), on the GPU machine from
# a folder holding gpucbf, with the Vulkan loader .debs in ../.gl (tools/vkgdr_check.sh prepare):
# gpucbf array, 2 L-band antennas, 2 XB-engines, pinned
# chunks then --use-vkgdr, SECS each, PCIe throughput sampled (nvidia-smi dmon -s t).
# VARIANTS picks the runs (default "pin vk").
set -u
cd "$(dirname "$0")"
O=/tmp/o; rm -rf $O; mkdir -p $O; FINAL=$OUT
for f in ../.gl/*.deb; do dpkg -x "$f" /; done; ldconfig
if ldconfig -p | grep -q libGLX_nvidia.so.0 && [ -z "$(find / -xdev -name 'nvidia_icd*.json' 2>/dev/null | head -1)" ]; then
  echo '{"file_format_version":"1.0.0","ICD":{"library_path":"libGLX_nvidia.so.0","api_version":"1.3.0"}}' > /tmp/nvidia_icd.json
  export VK_DRIVER_FILES=/tmp/nvidia_icd.json
fi
SECS=${SECS:-180}
for v in ${VARIANTS:-pin vk}; do
  ex=""; [ $v = vk ] && ex="--use-vkgdr"
  nvidia-smi dmon -s t -d 1 > $O/dmon-$v.txt 2>&1 & DM=$!
  timeout $((SECS + 110)) ./gpucbf array --backend gpu --antennas 2 --channels 4096 --adc-sample-rate 1712e6 \
    --x-engines 2 --dump-seconds 0.5 --duration $SECS --soak-report $O/soak-$v --output $O/arr-$v $ex > $O/array-$v.log 2>&1
  echo "== array $v rc=$?"; kill $DM
  sed 's/\x1b\[[0-9;]*m//g' $O/array-$v.log | grep -E "lost|verdict|ERROR|real time" | cut -c1-250 | tail -8
  V=$v python3 - <<'PY'
import json, os
v = os.environ["V"]
s = json.load(open(f"/tmp/o/arr-{v}/summary.json"))
print("use_vkgdr", s.get("use_vkgdr"), "vkgdr_engines", s.get("vkgdr_engines"), "lost", s.get("lost"),
      "dumps", s.get("dumps_produced"), "rtf", s.get("real_time_factor"), "soak", (s.get("soak") or {}).get("ok"))
# CPU per thread: the soak report's own means over the run (warm-up included).
soak = json.load(open(f"/tmp/o/soak-{v}/soak.json"))
total = 0.0
for e in soak["engines"]:
    busy = [t for t in e.get("threads") or [] if t["mean_cpu_percent"] >= 3]
    total += sum(t["mean_cpu_percent"] for t in e.get("threads") or []) / 100
    print(e["name"], ", ".join(f"{t['thread']} {t['mean_cpu_percent']:.0f} %" for t in busy))
print(f"cores of work, all threads: {total:.2f}")
d = [l.split() for l in open(f"/tmp/o/dmon-{v}.txt") if l.strip() and not l.startswith("#")]
d = [r for r in d if len(r) >= 3 and r[1].isdigit()]
if d:
    rx = [int(r[1]) for r in d]; tx = [int(r[2]) for r in d]
    mid = len(d) // 2
    print(f"pcie MB/s (dmon rxpci, txpci) over {len(d)} s: rx median {sorted(rx)[mid]} max {max(rx)}; tx median {sorted(tx)[mid]} max {max(tx)}")
PY
  pkill -f "gpucbf (dsim|fgpu|xbgpu)"; sleep 2
done
tar czf $FINAL/all.tgz -C /tmp --exclude="*.npy" --exclude="*.fits" --exclude="*.png" o 2>/dev/null; ls $FINAL
