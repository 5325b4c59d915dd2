#!/usr/bin/env bash
# MeerKAT L-band antennas in real time on one host, without the array wrapper, so that the
# engines' options can be varied: per antenna one dsim (2 pols × 1712 MS/s, 10-bit) and one
# fgpu; NX xbgpu engines, each taking C/NX channels (the F-engines send one channel substream
# to each, as MeerKAT does); all over loopback UDP for $SECS seconds, with `gpucbf soak`
# sampling every engine. Prints each engine's losses, CPU per thread and time per thread
# stage. Run from a folder holding the gpucbf binary:
#   NANT=2 NX=2 SECS=60 DSIM_AFF="0,1 8,9" F_RECV_AFF="2,3 10,11" F_SEND_AFF="4 12" \
#   X_RECV_AFF="6 14" bash rt_run.sh
# Per-antenna (DSIM_AFF, DSIM_MAIN, F_RECV_AFF, F_SEND_AFF) and per-X-engine (X_RECV_AFF)
# core lists are space-separated, one entry per engine ("-" for none); FGPU_EXTRA, XB_EXTRA
# and DSIM_EXTRA go to every engine of the kind. SPARE=CORES starts every process under
# `taskset -c CORES`, so that its unpinned threads (main, GPU, Prometheus) stay off the pinned
# cores. Every second the kernel's own drop counters are sampled into kern.txt: per-CPU
# backlog drops and time squeezes (/proc/net/softnet_stat) and UDP RcvbufErrors /
# InErrors (/proc/net/snmp), so that a loss can be placed (before or in a socket).
# Results go to $OUT/rt-$NAME.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; NAME=${NAME:-run}; SECS=${SECS:-20}
NANT=${NANT:-1}; NX=${NX:-1}
# Ports per pol: each digitiser pol goes to PPP ports (heaps round-robin, as MeerKAT's
# digitisers spread a pol over several multicast groups), so PPP receive threads per pol
# can share it. Antenna a pol p uses ports B + 8a + 2j + p, j < PPP.
PPP=${PPP:-1}
pol_eps() { # antenna pol -> comma list of endpoints
  local e=(); for j in $(seq 0 $((PPP - 1))); do e+=(127.0.0.1:$((B + 8 * $1 + 2 * j + $2))); done
  (IFS=,; echo "${e[*]}")
}
D=$OUT/rt-$NAME; mkdir -p "$D"
FS=${FS:-1712e6}; C=${C:-4096}; BACKEND=${BACKEND:-gpu}; JONES=${JONES:-1048576}
CHUNK=${CHUNK:-33554432}; HPC=${HPC:-32}; DUMP_BATCHES=${DUMP_BATCHES:-408}
SYNC=$(date +%s)
B=${BASE_PORT:-17000}
read -r -a DSIM_AFF <<< "${DSIM_AFF:-0,1}"; read -r -a DSIM_MAIN <<< "${DSIM_MAIN:-1}"
read -r -a F_RECV_AFF <<< "${F_RECV_AFF:-2,3}"; read -r -a F_SEND_AFF <<< "${F_SEND_AFF:-4}"
read -r -a X_RECV_AFF <<< "${X_RECV_AFF:-6}"
TS=""; [ -n "${SPARE:-}" ] && TS="taskset -c $SPARE"
opt() { # option value: "--option value" unless the value is empty or "-"
  [ -n "${2:-}" ] && [ "$2" != "-" ] && echo "$1 $2"
}
# X-engine k listens on 127.0.0.(k+1):B+100 (the F-engines' dst=127.0.0.1+(NX-1)) and sends
# its dumps to 127.0.0.1:B+110+k; Prometheus ports: fgpu a B+200+a, xbgpu k B+300+k,
# dsim a B+400+a.
CPS=$((C / NX))
SOAK_ENGINES=()
declare -A PIDS
for k in $(seq 0 $((NX - 1))); do
  $TS ./gpucbf xbgpu --adc-sample-rate $FS --sync-time $SYNC --array-size $NANT --channels $C \
    --channels-per-substream $CPS --channel-offset-value $((k * CPS)) \
    --samples-between-spectra $((2 * C)) --jones-per-batch $JONES \
    --heaps-per-fengine-per-chunk $HPC --send-enabled --backend $BACKEND \
    --corrprod name=bc,dst=127.0.0.1:$((B + 110 + k)),heap_accumulation_threshold=$DUMP_BATCHES \
    --prometheus-port $((B + 300 + k)) --katcp-port 0 $(opt --recv-affinity "${X_RECV_AFF[$k]:-}") \
    ${XB_EXTRA:-} 127.0.0.$((k + 1)):$((B + 100)) \
    > "$D/xbgpu$k.json" 2> "$D/xbgpu$k.log" &
  PIDS[xbgpu$k]=$!
  SOAK_ENGINES+=(--engine name=xbgpu$k,prometheus=127.0.0.1:$((B + 300 + k)),pid=$!)
done
XDST=127.0.0.1:$((B + 100)); [ "$NX" -gt 1 ] && XDST=127.0.0.1+$((NX - 1)):$((B + 100))
for a in $(seq 0 $((NANT - 1))); do
  $TS ./gpucbf fgpu --adc-sample-rate $FS --sync-time $SYNC --feng-id $a --array-size $NANT \
    --wideband name=wb,channels=$C,dst=$XDST,jones_per_batch=$JONES --recv-chunk-samples $CHUNK \
    --gain 0.02 --backend $BACKEND --prometheus-port $((B + 200 + a)) --katcp-port 0 \
    $(opt --recv-affinity "${F_RECV_AFF[$a]:-}") $(opt --send-affinity "${F_SEND_AFF[$a]:-}") \
    ${FGPU_EXTRA:-} $(pol_eps $a 0),$(pol_eps $a 1) \
    > "$D/fgpu$a.json" 2> "$D/fgpu$a.log" &
  PIDS[fgpu$a]=$!
  SOAK_ENGINES+=(--engine name=fgpu$a,prometheus=127.0.0.1:$((B + 200 + a)),pid=$!)
done
for _ in $(seq 120); do
  n=$(cat "$D"/fgpu*.log "$D"/xbgpu*.log 2>/dev/null | grep -c "output ready")
  [ "$n" -ge $((NANT + NX)) ] && break
  sleep 0.5
done
HEAPS=$(python3 -c "print(int($SECS * $FS / 4096))")
# CPU seconds per thread of each engine (utime + stime from /proc) and seconds per thread
# stage (NAMESPACE_thread_stage_seconds_total), sampled twice.
snap() { # file
  for e in "${!PIDS[@]}"; do
    for t in /proc/${PIDS[$e]}/task/*; do
      echo "cpu $e $(cat $t/comm 2>/dev/null | tr ' ' _) $(awk '{print $14 + $15}' $t/stat 2>/dev/null)"
    done
  done > "$1"
  python3 - "${SOAK_ENGINES[@]}" >> "$1" <<'PY'
import re, sys, urllib.request
for spec in sys.argv[2::2]:
    f = dict(kv.split("=", 1) for kv in spec.split(","))
    try:
        text = urllib.request.urlopen(f"http://{f['prometheus']}/metrics", timeout=2).read().decode()
    except OSError:
        continue
    for m in re.finditer(r'^\w+_thread_stage_seconds_total\{thread="([^"]*)",stage="([^"]*)"\} (\S+)', text, re.M):
        print(f"stage {f['name']} {m[1]}/{m[2]} {m[3]}")
PY
}
for a in $(seq 0 $((NANT - 1))); do
  ${DSIM_PREFIX:-} $TS ./gpucbf dsim --adc-sample-rate $FS --sync-time $SYNC --period $((1 << 22)) \
    --heaps $HEAPS --dither-seed $((a + 1)) \
    --signals "cw(0.1, 300e6) + wgn(0.05, $((2 * a + 1))); wgn(0.05, $((2 * a + 2)));" \
    --summary --prometheus-port $((B + 400 + a)) --katcp-port 0 \
    $(opt --affinity "${DSIM_AFF[$a]:-}") $(opt --main-affinity "${DSIM_MAIN[$a]:-}") \
    ${DSIM_EXTRA:-} $(pol_eps $a 0) $(pol_eps $a 1) \
    > "$D/dsim$a.json" 2> "$D/dsim$a.log" &
  PIDS[dsim$a]=$!
  DSIMS+=($!)
  SOAK_ENGINES+=(--engine name=dsim$a,prometheus=127.0.0.1:$((B + 400 + a)),pid=$!)
done
# Kernel drop counters every second: elapsed, backlog drops, time squeezes (summed over
# CPUs, softnet_stat columns 2 and 3), UDP InErrors, RcvbufErrors, and the CPUs with drops.
( T00=$(date +%s.%N)
  while kill -0 "${DSIMS[0]}" 2>/dev/null; do
    python3 - "$T00" <<'PY'
import sys, time
drops, squeeze, cpus = 0, 0, []
for i, line in enumerate(open("/proc/net/softnet_stat")):
    c = [int(x, 16) for x in line.split()]
    drops += c[1]; squeeze += c[2]
    if c[1]:
        cpus.append(f"{i}:{c[1]}")
snmp = [l.split() for l in open("/proc/net/snmp") if l.startswith("Udp:")]
u = dict(zip(snmp[0][1:], map(int, snmp[1][1:])))
print(f"{time.time() - float(sys.argv[1]):.1f} {drops} {squeeze} {u.get('InErrors', 0)} "
      f"{u.get('RcvbufErrors', 0)} {','.join(cpus)}")
PY
    sleep 1
  done ) > "$D/kern.txt" 2>&1 &
# The soak report over the run (losses per second after the warm-up, lag, RSS, CPU).
sleep 1
$TS ./gpucbf soak --seconds $((SECS - 2)) --warm-up ${WARM:-10} --output "$D/soak" \
  "${SOAK_ENGINES[@]}" > "$D/soak.out" 2> "$D/soak.log" &
SK=$!
sleep 5; snap "$D/snap0.txt"; T0=$(date +%s.%N)
sleep $((SECS > 15 ? SECS - 10 : 5)); snap "$D/snap1.txt"; T1=$(date +%s.%N)
for p in "${DSIMS[@]}"; do wait $p; done
wait $SK; echo "soak rc=$?"; grep -v '^ *[0-9]*: \|^ *at ' "$D/soak.log" | tail -4 | cut -c1-300
python3 - "$D/kern.txt" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l[:1].isdigit()]
if len(rows) >= 2:
    a, b = rows[0], rows[-1]
    names = ("backlog drops", "time squeezes", "UDP InErrors", "UDP RcvbufErrors")
    print("kernel over the run: " + ", ".join(f"{n} +{int(b[i + 1]) - int(a[i + 1])}" for i, n in enumerate(names)))
    rose = [f"{r[0]} s (+{int(r[1]) - int(p[1])} drops, +{int(r[4]) - int(p[4])} rcvbuf)"
            for p, r in zip(rows, rows[1:]) if r[1] != p[1] or r[4] != p[4]]
    print("kernel counters rose at: " + ("; ".join(rose[:20]) or "never"))
PY
python3 - "$D" "$T0" "$T1" <<'PY' | tee "$D/cpu.txt"
import sys, os
d, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
hz = os.sysconf("SC_CLK_TCK")
def load(f):
    cpu, st = {}, {}
    for line in open(f):
        p = line.split()
        if len(p) == 4 and p[0] == "cpu":
            n = len([k for k in cpu if k[0] == p[1] and k[1] == p[2]])
            cpu[(p[1], p[2], n)] = int(p[3])
        elif len(p) == 4 and p[0] == "stage":
            st[(p[1], p[2])] = float(p[3])
    return cpu, st
(ca, sa), (cb, sb) = load(f"{d}/snap0.txt"), load(f"{d}/snap1.txt")
for k in sorted(sb):
    pct = 100 * (sb[k] - sa.get(k, 0.0)) / (t1 - t0)
    if pct >= 0.5:
        print(f"stage {k[0]} {k[1]}: {pct:.1f} %")
for k in sorted(cb):
    if k in ca:
        pct = 100 * (cb[k] - ca[k]) / hz / (t1 - t0)
        if pct >= 1:
            print(f"cpu {k[0]} {k[1]}#{k[2]}: {pct:.0f} %")
PY
sleep 2
for a in $(seq 0 $((NANT - 1))); do kill -TERM ${PIDS[fgpu$a]}; done; sleep 2
for k in $(seq 0 $((NX - 1))); do kill -TERM ${PIDS[xbgpu$k]}; done
for e in $(printf '%s\n' "${!PIDS[@]}" | grep -v dsim | sort); do wait ${PIDS[$e]}; echo "$e rc=$?"; done
python3 - "$D" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
def load(p):
    try:
        return json.loads(p.read_text())
    except Exception as e:
        return {"error": str(e)}
for p in sorted(d.glob("dsim*.json")):
    ds = load(p)
    print(p.stem + ":", {k: ds.get(k) for k in ("heaps", "time_error_s") if k in ds} or ds)
for p in sorted(d.glob("fgpu*.json")):
    fg = load(p)
    print(p.stem + ": heaps", fg.get("input_heaps"), "missing", fg.get("input_missing_heaps"),
          "rejected", fg.get("recv_rejected"),
          "out", [(o["name"], o["heaps"], o["skipped_heaps"]) for o in fg.get("outputs", [])])
for p in sorted(d.glob("xbgpu*.json")):
    xb = load(p)
    print(p.stem + ": heaps", xb.get("input_heaps"), "missing", xb.get("input_missing_heaps"),
          "incomplete", xb.get("input_incomplete_heaps"), "rejected", xb.get("recv_rejected"),
          "dumps", [(x.get("name"), x.get("heaps"), x.get("incomplete_accs"), x.get("skipped_accs")) for x in xb.get("corrprods", [])])
PY
