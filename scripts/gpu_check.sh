#!/usr/bin/env bash
# Builds prnn with CUDA on a machine with an NVIDIA GPU, runs the GPU test
# suite, the suite's quick form under compute-sanitizer (memcheck, racecheck),
# and the scan benchmark. Output goes to stdout and to $OUT/log (or ./gpu-log).
#
#   scripts/gpu_check.sh [--no-sanitize] [--no-bench] [bench options...]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
sanitize=1
bench=1
bench_args=()
for arg in "$@"; do
  case "$arg" in
    --no-sanitize) sanitize=0 ;;
    --no-bench) bench=0 ;;
    *) bench_args+=("$arg") ;;
  esac
done

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total --format=csv
  nvcc --version | tail -2
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
    cmake --build build-gpu -j "$(nproc)" 2>&1 | grep -E "warning|error|Error" ; echo "build done"
  suites=(./build-gpu/prnn_tests_cuda)
  for f in ./build-gpu/prnn_gpu_test_*; do [ -x "$f" ] && suites+=("$f"); done
  for s in "${suites[@]}"; do
    echo "== GPU suite $s"
    timeout "${SUITE_TIMEOUT:-300}" stdbuf -oL "$s" | grep -v "^  ok" ; echo "exit ${PIPESTATUS[0]}"
  done
  if [ "$sanitize" = 1 ]; then
    for s in "${suites[@]}"; do
      echo "== compute-sanitizer memcheck ($s --quick)"
      timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$s" --quick | tail -3; echo "exit ${PIPESTATUS[0]}"
      echo "== compute-sanitizer racecheck ($s --quick)"
      timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 "$s" --quick | tail -3; echo "exit ${PIPESTATUS[0]}"
    done
  fi
  if [ "$bench" = 1 ]; then
    echo "== benchmark"
    timeout "${BENCH_TIMEOUT:-400}" ./build-gpu/prnn_bench_cuda "${bench_args[@]}"; echo "exit $?"
  fi
} 2>&1 | tee "$out/log"
