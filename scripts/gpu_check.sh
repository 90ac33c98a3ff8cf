#!/usr/bin/env bash
# Builds prnn with CUDA on a machine with an NVIDIA GPU, runs the GPU test
# suite, the suite's quick form under compute-sanitizer (memcheck, racecheck;
# also from a build that takes the few-chain backward WINDOW at every T),
# and the scan benchmark. Output goes to stdout and to $OUT/log (or ./gpu-log).
#
#   scripts/gpu_check.sh [--no-sanitize] [--no-bench] [--train] [--cell-bench] [bench options...]
#
# --train also runs a short bf16 training on the GPU (log and PNG into $OUT);
# --cell-bench runs the cell layer benchmark. SUITE_ARGS (e.g. --quick) go to
# every GPU suite; SANITIZE_FILTER (a regex) picks the suites run under
# compute-sanitizer; SUITE_TIMEOUT and BENCH_TIMEOUT bound each program.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
sanitize=1
bench=1
train=0
cellbench=0
bench_args=()
for arg in "$@"; do
  case "$arg" in
    --no-sanitize) sanitize=0 ;;
    --no-bench) bench=0 ;;
    --train) train=1 ;;
    --cell-bench) cellbench=1 ;;
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
    timeout "${SUITE_TIMEOUT:-300}" stdbuf -oL "$s" ${SUITE_ARGS:-} | grep -v "^  ok" ; echo "exit ${PIPESTATUS[0]}"
  done
  if [ "$sanitize" = 1 ]; then
    for s in "${suites[@]}"; do
      [[ "$s" =~ ${SANITIZE_FILTER:-.} ]] || continue
      echo "== compute-sanitizer memcheck ($s --quick)"
      timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$s" --quick | tail -3; echo "exit ${PIPESTATUS[0]}"
      echo "== compute-sanitizer racecheck ($s --quick)"
      timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 "$s" --quick | tail -3; echo "exit ${PIPESTATUS[0]}"
    done
    # Most of the quick suite's T are below the few-chain backward's
    # threshold (WINDOW, from T = 2048): a build that takes it at every T.
    cmake -S . -B build-gpu-window -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
          -DCMAKE_CUDA_FLAGS=-DPRNN_WINDOW_MIN_T=1 >/dev/null &&
      cmake --build build-gpu-window -j "$(nproc)" --target prnn_tests_cuda 2>&1 | grep -E "warning|error|Error"
    for tool in memcheck racecheck; do
      echo "== compute-sanitizer $tool (prnn_tests_cuda --quick, WINDOW at every T)"
      timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 ./build-gpu-window/prnn_tests_cuda --quick |
        tail -3; echo "exit ${PIPESTATUS[0]}"
    done
  fi
  if [ "$train" = 1 ]; then
    echo "== training on the GPU (bf16)"
    timeout "${TRAIN_TIMEOUT:-300}" stdbuf -oL ./build-gpu/prnn train --device cuda --dtype bf16 \
      ${TRAIN_ARGS:---steps 300 --warmup 30 --hidden 256 --layers 2 --seq-len 256 --batch 32} \
      --out "$out/train" | grep -a -v "^step" ; echo "exit ${PIPESTATUS[0]}"
    tail -n 3 "$out/train/log.tsv"
    python3 scripts/plot_loss.py "$out/train/log.tsv" -o "$out/train/loss.png" 2>&1 | tail -2
  fi
  if [ "$cellbench" = 1 ]; then
    echo "== cell layer benchmark"
    timeout "${BENCH_TIMEOUT:-400}" ./build-gpu/prnn_bench_cell ${CELL_BENCH_ARGS:-}; echo "exit $?"
  fi
  if [ "$bench" = 1 ]; then
    echo "== benchmark"
    timeout "${BENCH_TIMEOUT:-400}" ./build-gpu/prnn_bench_cuda "${bench_args[@]}"; echo "exit $?"
  fi
} 2>&1 | tee "$out/log"
