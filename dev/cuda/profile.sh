#!/usr/bin/env bash
# Nsight Compute on one chunked-scan launch per shape (forward and backward
# kernels), after build-gpu/ exists: speed of light, occupancy, warp stalls.
#   dev/cuda/profile.sh [dtype] [shape...]
set -uo pipefail
cd "$(dirname "$0")/../.."
dt=${1:-f32}; shift || true
shapes=${*:-1x1048576x64 16x65536x1024}
for sh in $shapes; do
  echo "== ncu chunked $dt $sh"
  timeout 120 ncu --clock-control none --kernel-name regex:chunked_scan_kernel --launch-skip 2 \
    --launch-count 2 --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section LaunchStats ./build-gpu/prnn_bench_cuda --algo chunked --dtype "$dt" --shape "$sh" \
    2>&1 | grep -E "chunked_scan_kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Block Limit|Grid Size|----" | grep -v "^    ---" | head -60
done
