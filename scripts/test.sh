#!/usr/bin/env bash
# Builds prnn and runs the CPU test suite; the last line of its output is
# "N passed, N failed" and the exit status is non-zero on any failure.
#
#   scripts/test.sh              Release build in build/ (with CUDA when nvcc exists)
#   scripts/test.sh --sanitize   ASan + UBSan build in build-asan/ (CPU only)
#   scripts/test.sh --gpu        also run the GPU suite (needs a CUDA device)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

mode=release
gpu=0
for arg in "$@"; do
  case "$arg" in
    --sanitize) mode=sanitize ;;
    --gpu) gpu=1 ;;
    *) echo "usage: $0 [--sanitize] [--gpu]" >&2; exit 2 ;;
  esac
done

if [ "$mode" = sanitize ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPRNN_SANITIZE=ON -DPRNN_CUDA=OFF \
        -DPRNN_WERROR=ON >/dev/null
  cmake --build build-asan -j "$jobs"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ./build-asan/prnn_tests
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPRNN_WERROR=ON >/dev/null
  cmake --build build -j "$jobs"
  ./build/prnn_tests
  if [ "$gpu" = 1 ]; then
    ./build/prnn_tests_cuda
  fi
fi
