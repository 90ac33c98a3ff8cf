#!/usr/bin/env bash
# Builds the chunked scan with several (steps per thread, min blocks per SM)
# settings in parallel and benchmarks each on a few shapes, in one go.
#   dev/cuda/sweep.sh "S:MB S:MB ..." "shape shape ..." [dtypes]
set -uo pipefail
cd "$(dirname "$0")/../.."
variants=${1:-"8:2 4:3 4:4 6:3"}
shapes=${2:-"1x1048576x64 1x1048576x256 16x65536x1024"}
dtypes=${3:-"f32 bf16"}
for v in $variants; do
  S=${v%%:*}; MB=${v##*:}
  ( cmake -S . -B build-v$S-$MB -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      "-DCMAKE_CUDA_FLAGS=-DPRNN_CHUNK_STEPS=$S -DPRNN_CHUNK_MIN_BLOCKS=$MB -Xptxas -v" >/dev/null &&
    cmake --build build-v$S-$MB -j 4 --target prnn_bench_cuda > build-v$S-$MB.log 2>&1 ) &
done
wait
for v in $variants; do
  S=${v%%:*}; MB=${v##*:}
  spills=$(grep -A2 "chunked_scan_kernel" build-v$S-$MB.log | grep -oE "[0-9]+ bytes spill stores" | sort -u | tr '\n' ' ')
  regs=$(grep -A2 "chunked_scan_kernel" build-v$S-$MB.log | grep -oE "Used [0-9]+ registers" | sort -u | tr '\n' ' ')
  echo "== variant S=$S min_blocks=$MB: $regs $spills"
  for dt in $dtypes; do
    for sh in $shapes; do
      timeout 60 ./build-v$S-$MB/prnn_bench_cuda --algo chunked --dtype $dt --shape $sh | grep "^| chunked"
    done
  done
done
