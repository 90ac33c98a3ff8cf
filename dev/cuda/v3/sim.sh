#!/usr/bin/env bash
# Runs scan_v3.cu on the host simulator (sim_v3.h), no GPU needed, in several
# knob settings at once; each prints its checks and "N passed, N failed".
#   dev/cuda/v3/sim.sh [seed]
# Settings: the defaults; the cp.async loader; a 2-stage ring with a 1-deep
# first look-back round; a 2-deep look-back window with mostly stale reads
# (multi-round walks, long folds); 16 compute warps (two columns per
# look-back lane). Output in build/.
set -uo pipefail
cd "$(dirname "$0")"
mkdir -p build
seed=${1:-$RANDOM}
configs=(
  "default|"
  "cpasync|-DV3_LOADER=1"
  "stages2|-DV3_STAGES=2 -DV3_LB_FIRST=1"
  "lbk2|-DV3_LB_K=2"
  "cwarps16|-DV3_CWARPS=16 -DV3_STEPS_F32=4 -DV3_STEPS_BF16=8 -DV3_STAGES=2 -DV3_LB_K=4"
)
for c in "${configs[@]}"; do
  name=${c%%|*}; defs=${c#*|}
  ( g++ -std=c++17 -O2 -g -Wall -Wextra -Wno-unknown-pragmas -DV3_SIM $defs -x c++ scan_v3.cu \
      -o "build/sim_$name" &&
    stale=0.5; [ "$name" = lbk2 ] && stale=0.9
    V3_SIM_STALE=$stale timeout 600 "./build/sim_$name" --seed "$seed" > "build/sim_$name.log" 2>&1
    echo "== $name ($defs, stale $stale): rc=$? $(tail -1 "build/sim_$name.log")" ) &
done
wait
grep -h -E "FAILED|mismatch|v3 sim:" build/sim_*.log | head -20
