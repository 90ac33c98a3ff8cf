#!/usr/bin/env bash
# Builds prnn and runs the CPU test suites; the last line of its output is
# "N passed, N failed" (summed over the suites) and the exit status is
# non-zero on any failure.
#
#   scripts/test.sh              Release build in build/ (with CUDA when nvcc exists)
#   scripts/test.sh --sanitize   ASan + UBSan build in build-asan/ (CPU only)
#   scripts/test.sh --gpu        also run the GPU suites (needs a CUDA device)
#
# CPU suites are the programs build*/prnn_tests and build*/prnn_test_*; GPU
# suites are prnn_tests_cuda and prnn_gpu_test_*. Each ends with its own
# "N passed, N failed" line.
set -euo pipefail
cd "$(dirname "$0")/.."
# Idle OpenMP workers sleep instead of spinning: the suites run many small
# parallel loops, and spinning workers starve busy ones on a shared machine.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
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
  dir=build-asan
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DPRNN_SANITIZE=ON -DPRNN_CUDA=OFF \
        -DPRNN_WERROR=ON >/dev/null
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  dir=build
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DPRNN_WERROR=ON >/dev/null
fi
cmake --build "$dir" -j "$jobs"

suites=("$dir/prnn_tests")
for f in "$dir"/prnn_test_*; do [ -x "$f" ] && suites+=("$f"); done
if [ "$gpu" = 1 ]; then
  suites+=("$dir/prnn_tests_cuda")
  for f in "$dir"/prnn_gpu_test_*; do [ -x "$f" ] && suites+=("$f"); done
fi

passed=0
failed=0
for s in "${suites[@]}"; do
  echo "== $s"
  log=$(mktemp)
  rc=0
  "$s" 2>&1 | tee "$log" || rc=$?
  line=$(tail -n 1 "$log")
  rm -f "$log"
  if [[ "$line" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    passed=$((passed + BASH_REMATCH[1]))
    failed=$((failed + BASH_REMATCH[2]))
    if [ "$rc" != 0 ] && [ "${BASH_REMATCH[2]}" = 0 ]; then failed=$((failed + 1)); fi
  else
    echo "$s: exited with status $rc without a summary line" >&2
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
