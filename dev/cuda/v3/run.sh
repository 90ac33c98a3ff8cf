#!/usr/bin/env bash
# Builds scan_v3.cu for sm_90 into dev/cuda/v3/build/ and runs it on the GPU
# (120 s limit; a full run takes well under a minute on an H200).
#   dev/cuda/v3/run.sh [-DV3_KNOB=N ...] [--quick] [--seed N]
# -D arguments go to nvcc (the knobs: NOTES.md), the rest to the program.
# The scan kernels' ptxas lines (registers, spills) print first; the
# program ends with a markdown table and "N passed, N failed".
# A sweep: for v in "" -DV3_LOADER=1 -DV3_LB_K=32; do dev/cuda/v3/run.sh $v --quick; done
set -euo pipefail
cd "$(dirname "$0")"
defs=()
args=()
for a in "$@"; do
  case "$a" in
    -D*) defs+=("$a") ;;
    *) args+=("$a") ;;
  esac
done
mkdir -p build
if ! nvcc -std=c++17 -O3 -arch=sm_90 -lineinfo -Xptxas -v ${defs[@]+"${defs[@]}"} \
    -o build/scan_v3 scan_v3.cu 2> build/ptxas.log; then
  cat build/ptxas.log
  exit 1
fi
grep -v -E "^ptxas info|bytes stack frame" build/ptxas.log || true # warnings, if any
awk '/Compiling entry function .*v3_scan_kernel/ { k = ($0 ~ /bf16/) ? "bf16" : "f32" }
     k && /spill|Used/ { sub(/^ptxas info *: /, ""); print "ptxas v3_scan_kernel<" k ">: " $0 }
     /Compiling entry function/ && !/v3_scan_kernel/ { k = "" }' build/ptxas.log
echo "build: nvcc -O3 -arch=sm_90 ${defs[*]:-}"
exec timeout 120 ./build/scan_v3 ${args[@]+"${args[@]}"}
