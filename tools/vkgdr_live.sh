#!/usr/bin/env bash
# --use-vkgdr against the pinned path on a live loopback feed (issue 22), on the GPU machine,
# from a folder holding gpucbf (run tools/vkgdr_check.sh's loader step first). Two pipelines
# run side by side on the same sync time, one with --use-vkgdr, one without; two dsims with
# the same signals and seeds feed them, so every timestamp carries the same samples in both.
#   1. fgpu A (pinned) and fgpu B (--use-vkgdr), each from its own dsim, write their output
#      heaps to pcap files;
#   2. xbgpu A (pinned) and xbgpu B (--use-vkgdr), each fed over UDP by its own pinned fgpu
#      from its own dsim, write their dumps to pcap files.
# Heaps present in both runs must be byte-identical (a run may start or end a heap earlier
# than the other: only the common ones are compared, and their count is printed). X-engine
# dumps with MISSING markers in either run (an antenna's data lost there) are counted apart.
# FS (default 214e6), SECS (default 6); SKIP_F=1 leaves out step 1; XB lists step 2's
# variants as name|binary|options (default "xA|./gpucbf| xB|./gpucbf|--use-vkgdr"; the first
# is the reference), so a control (a second pinned run) or another binary can run beside
# them. Results: $OUT/vkgdr-live.txt.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; R=$OUT/vkgdr-live.txt
FS=${FS:-214e6}; SECS=${SECS:-6}; C=4096; B=${BASE_PORT:-18000}
HEAPS=$(python3 -c "print(int($SECS * $FS / 4096))")
common=(--adc-sample-rate "$FS" --array-size 1 --katcp-port 0)
fg() { # name port0 dst-port options...
  local n=$1 p=$2 d=$3; shift 3
  ./gpucbf fgpu "${common[@]}" --sync-time "$SYNC" --feng-id 0 \
    --wideband "name=wb,channels=$C,dst=127.0.0.1:$d,jones_per_batch=1048576" \
    --recv-chunk-samples 33554432 --gain 0.02 --dither-seed 3 --backend gpu "$@" \
    127.0.0.1:$p,127.0.0.1:$((p + 1)) > "$n.json" 2> "$n.log" &
}
ds() { # port0
  ./gpucbf dsim --adc-sample-rate "$FS" --sync-time "$SYNC" --heaps "$HEAPS" --dither-seed 1 \
    --katcp-port 0 --signals "cw(0.1, 53e6) + wgn(0.05, 1); wgn(0.05, 2);" \
    127.0.0.1:$1 127.0.0.1:$(($1 + 1)) > /dev/null 2>&1 &
}
xb() { # name port extra...
  local n=$1 p=$2; shift 2
  ${BIN:-./gpucbf} xbgpu "${common[@]}" --sync-time "$SYNC" --channels $C --channels-per-substream $C \
    --samples-between-spectra $((2 * C)) --jones-per-batch 1048576 \
    --heaps-per-fengine-per-chunk 32 --send-enabled --backend gpu \
    --corrprod name=bc,dst=127.0.0.1:$((p + 10)),heap_accumulation_threshold=52 \
    "$@" 127.0.0.1:$p > "$n.json" 2> "$n.log" &
}
ready() { # logs...: wait until each says "output ready" (60 s at most)
  for _ in $(seq 120); do
    local n=0; for f in "$@"; do grep -q "output ready" "$f" 2>/dev/null && n=$((n + 1)); done
    [ $n -ge $# ] && return 0; sleep 0.5
  done
  echo "not ready: $*" | tee -a "$R"
}
stop() { sleep 2; kill -TERM "$@" 2>/dev/null; for p in "$@"; do wait "$p"; done; }
rm -f ./*.pcap
# 1. F-engines.
SYNC=$(date +%s)
if [ "${SKIP_F:-0}" != 1 ]; then
fg fA $B $((B + 50)) --send-pcap fA.pcap; FA=$!
fg fB $((B + 10)) $((B + 50)) --send-pcap fB.pcap --use-vkgdr; FB=$!
ready fA.log fB.log
ds $B; D1=$!; ds $((B + 10)); D2=$!
wait $D1 $D2; stop $FA $FB
fi
# 2. X-engines, one per variant in XB (name|binary|options, space-separated; the first is
# the reference the others are compared with), each fed over UDP by its own pinned fgpu
# from its own dsim.
XB=${XB:-"xA|./gpucbf| xB|./gpucbf|--use-vkgdr"}
SYNC=$(date +%s)
i=0; pids=(); fpids=(); logs=(); names=()
for v in $XB; do
  IFS='|' read -r n bin opt <<< "$v"
  xp=$((B + 100 + 20 * i)); fp=$((B + 300 + 10 * i))
  # shellcheck disable=SC2086
  BIN=$bin xb "$n" $xp --send-pcap "$n.pcap" $opt; pids+=($!)
  fg "f_$n" $fp $xp; fpids+=($!)
  logs+=("$n.log" "f_$n.log"); names+=("$n"); i=$((i + 1))
done
ready "${logs[@]}"
i=0; dpids=()
for _ in "${names[@]}"; do ds $((B + 300 + 10 * i)); dpids+=($!); i=$((i + 1)); done
wait "${dpids[@]}"; stop "${fpids[@]}"; stop "${pids[@]}"
grep -h -o "use-vkgdr[^\"]*" fB.log "${names[@]/%/.log}" 2>/dev/null | sort | uniq -c | tee -a "$R"
SKIP_F=${SKIP_F:-0} XNAMES="${names[*]}" python3 - <<'PY' | tee -a "$R"
import hashlib, os, struct
def pointers(sp, k):
    """{item id: value} of a SPEAD packet's k item pointers (48-bit values)."""
    out = {}
    for i in range(k):
        (w,) = struct.unpack_from(">Q", sp, 8 + 8 * i)
        out[(w >> 48) & 0x7FFF] = w & ((1 << 48) - 1)
    return out
def has_missing(payload, offset):
    """True if the payload (at heap offset `offset`) holds the MISSING marker (-2^31, 1):
    little-endian int32 pairs on 8-byte boundaries of the heap."""
    start = (-offset) % 8
    for i in range(start, len(payload) - 7, 8):
        if struct.unpack_from("<ii", payload, i) == (-(2**31), 1):
            return True
    return False
def heaps(path, xb):
    """SPEAD packets of a pcap keyed by their item pointers (heap counter, offset,
    timestamp, ids), valued by (a hash of the payload, the heap counter, whether the
    payload holds a MISSING marker (X-engine dumps only))."""
    out = {}
    with open(path, "rb") as f:
        e = ">" if f.read(24)[:4] == b"\xa1\xb2\xc3\xd4" else "<"  # the file's byte order
        while True:
            h = f.read(16)
            if len(h) < 16:
                break
            n = struct.unpack_from(e + "I", h, 8)[0]
            p = f.read(n)
            sp = p[42:]  # Ethernet, IPv4 and UDP headers, then SPEAD
            if len(sp) < 8:
                continue
            k = struct.unpack_from(">H", sp, 6)[0]
            key = sp[:8 + 8 * k]
            ptr = pointers(sp, k)
            body = sp[8 + 8 * k:]
            out[key] = (hashlib.blake2b(body, digest_size=16).digest(), ptr.get(1),
                        xb and has_missing(body, ptr.get(3, 0)), ptr, body if xb else None)
    return out
def detail(k, x, y):
    """Where a differing X-engine packet differs: its dump's timestamp, heap offset, how
    many of its int32 values differ, and the first few pairs."""
    pa = x[k][3]
    ints = lambda body: struct.unpack(f"<{len(body) // 4}i", body[:len(body) // 4 * 4])
    a, b = ints(x[k][4]), ints(y[k][4])
    d = [i for i in range(min(len(a), len(b))) if a[i] != b[i]]
    z = sum(1 for i in d if b[i] == 0)
    first = ", ".join(f"[{i}] {a[i]} vs {b[i]}" for i in d[:4])
    return (f"    timestamp {pa.get(0x1600)} heap {pa.get(1)} offset {pa.get(3)}: {len(d)} of"
            f" {len(a)} int32 differ (zero in the second: {z}), first at {d[0] if d else None}: {first}")
names = os.environ.get("XNAMES", "xA xB").split()
pairs = [("fgpu", "fA.pcap", "fB.pcap")] * (os.environ.get("SKIP_F") != "1") + [(f"xbgpu {n}", f"{names[0]}.pcap", f"{n}.pcap") for n in names[1:]]
for e, a, b in pairs:
    xb = e.startswith("xbgpu")
    try:
        x, y = heaps(a, xb), heaps(b, xb)
    except OSError as err:
        print(f"{e}: {err}"); continue
    order = [k for k in x if k in y]  # common packets in the reference run's order
    # A dump with MISSING markers in either run lacks an antenna's data there: the two
    # runs' F-engines and sockets lose independently, so such dumps may differ.
    marked = {x[k][1] for k in order if x[k][2]} | {y[k][1] for k in order if y[k][2]}
    where = [i for i, k in enumerate(order) if x[k][0] != y[k][0] and x[k][1] not in marked]
    where_marked = [i for i, k in enumerate(order) if x[k][0] != y[k][0] and x[k][1] in marked]
    print(f"{e} live: {len(x)} vs {len(y)} packets, {len(order)} in both, {len(where)} differ"
          f" in whole heaps, identical={not where and len(order) > 0}"
          + (f"; differing packets at positions {where[:8]} of {len(order)}" if where else "")
          + (f"; {len(marked)} heaps with MISSING markers in either run, {len(where_marked)}"
             f" differing packets in them" if marked else ""))
    if xb:
        for i in where[:6]:
            print(detail(order[i], x, y))
PY
tar czf "$OUT/vkgdr-live-logs.tgz" fA.log fB.log "${logs[@]}" 2>/dev/null
