#!/usr/bin/env bash
# Builds the chunked scan with several (steps per thread, min blocks per SM,
# cache hints 0/1, fence once 0/1) settings in parallel and benchmarks each on a few shapes.
#   dev/cuda/sweep.sh "S:MB[:HINTS[:FENCE]] ..." "shape shape ..." [dtypes]
set -uo pipefail
cd "$(dirname "$0")/../.."
variants=${1:-"8:2 4:3 4:4 6:3"}
shapes=${2:-"1x1048576x64 1x1048576x256 16x65536x1024"}
dtypes=${3:-"f32 bf16"}
parse() { IFS=: read -r S MB HINTS FENCE <<<"$1"; HINTS=${HINTS:-0}; FENCE=${FENCE:-0}; tag=v$S-$MB-$HINTS-$FENCE; }
for v in $variants; do
  parse "$v"
  ( cmake -S . -B build-$tag -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      "-DCMAKE_CUDA_FLAGS=-DPRNN_CHUNK_STEPS=$S -DPRNN_CHUNK_MIN_BLOCKS=$MB -DPRNN_CACHE_HINTS=$HINTS -DPRNN_FENCE_ONCE=$FENCE -Xptxas -v" >/dev/null &&
    cmake --build build-$tag -j 4 --target prnn_bench_cuda > build-$tag.log 2>&1 ) &
done
wait
for v in $variants; do
  parse "$v"
  spills=$(grep -A2 "chunked_scan_kernel" build-$tag.log | grep -oE "[0-9]+ bytes spill stores" | sort -u | tr '\n' ' ')
  regs=$(grep -A2 "chunked_scan_kernel" build-$tag.log | grep -oE "Used [0-9]+ registers" | sort -u | tr '\n' ' ')
  echo "== variant S=$S min_blocks=$MB cache_hints=$HINTS fence_once=$FENCE: $regs $spills"
  for dt in $dtypes; do
    for sh in $shapes; do
      timeout 60 ./build-$tag/prnn_bench_cuda --algo chunked --dtype $dt --shape $sh | grep "^| chunked"
    done
  done
done
