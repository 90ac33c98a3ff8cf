#!/usr/bin/env bash
# The late-finish 16-bit forward (lab setting PRNN_LATE16) on the CPU
# simulator: the many-channel quick cases with the staged paths forced, in
# the configurations of the lab builds l83 (tiles kept in their slots, 3
# slots) and k82 (kept in registers, 2 slots). Prints each run's
# "N passed, N failed" and exits non-zero on a failure. About 10 minutes a
# configuration on 2 cores (the simulated build is most of it).
set -euo pipefail
cd "$(dirname "$0")/../../.."
base="-DPRNN_STAGE_WAVES=0 -DPRNN_STAGE16_LONG_T=300 -DPRNN_LATE16=1"
rc=0
for extra in "" "-DPRNN_LATE16_KEEP=1 -DPRNN_LATE16_D=2"; do
  echo "== late-finish forward on the simulator: $base $extra"
  SIM_DEFS="$base $extra" dev/cuda/sim/run.sh --many --quick || rc=1
done
exit $rc
