#!/usr/bin/env bash
# 4 antennas at $FS through rt_run.sh, the XB-engine with and without 4 beams
# (qualify's layout: dsims pinned in pairs on 0-7, XB receive on 15, F-engines floating).
# Run from a folder holding the gpucbf binary and rt_run.sh (as the device runs copy them).
cd "$(dirname "$0")"
FS=${FS:-214e6}
B=17000
BEAMS=""
for b in 0 1 2 3; do BEAMS="$BEAMS --beam name=b$b,dst=127.0.0.1:$((B + 120 + b)),pol=$((b / 3)),send_enabled=true"; done
for v in nobeams beams; do
  X=""; [ $v = beams ] && X="$BEAMS"
  NAME=$v NANT=4 NX=1 FS=$FS SECS=${SECS:-40} DUMP_BATCHES=51 DSIM_AFF="0,1 2,3 4,5 6,7" DSIM_MAIN="1 3 5 7" \
    F_RECV_AFF="- - - -" F_SEND_AFF="- - - -" X_RECV_AFF="15" \
    XB_EXTRA="--recv-buffer 67108864 --recv-prealloc 10 $X" bash rt_run.sh 2>&1 | grep -v "^cpu .* [1-9] %$" | tail -60
done
