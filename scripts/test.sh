#!/usr/bin/env bash
# Builds prnn and runs the CPU test suites; the last line of its output is
# "N passed, N failed" (summed over the suites) and the exit status is
# non-zero on any failure.
#
#   scripts/test.sh              Release build in build/ (with CUDA when nvcc exists)
#   scripts/test.sh --sanitize   ASan + UBSan build in build-asan/ (CPU only)
#   scripts/test.sh --gpu        also run the GPU suites (needs a CUDA device)
#
# CPU suites are the programs build*/prnn_tests and build*/prnn_test_*, and
# (release mode, PRNN_TEST_SIM=0 skips it) the CUDA scan kernels run on the
# CPU by dev/cuda/sim; GPU
# suites are prnn_tests_cuda and prnn_gpu_test_*. Each ends with its own
# "N passed, N failed" line. The distributed suites (prnn_test_dist,
# prnn_test_dist_seq, prnn_gpu_test_dist, prnn_gpu_test_dist_seq: built when
# MPI is found) run under mpirun with 2 and 3
# processes (the GPU one with 2), when mpirun is on the PATH.
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
for f in "$dir"/prnn_test_*; do [ -x "$f" ] && [[ "$f" != *_dist && "$f" != *_dist_seq ]] && suites+=("$f"); done
if [ "$gpu" = 1 ]; then
  suites+=("$dir/prnn_tests_cuda")
  for f in "$dir"/prnn_gpu_test_*; do [ -x "$f" ] && [[ "$f" != *_dist && "$f" != *_dist_seq ]] && suites+=("$f"); done
fi

passed=0
failed=0
# Runs one suite (a command and its arguments) and adds its counts.
run_suite() {
  local s="$*"
  echo "== $s"
  log=$(mktemp)
  rc=0
  "$@" 2>&1 | tee "$log" || rc=$?
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
}
for s in "${suites[@]}"; do run_suite "$s"; done

if [ -x "$dir/prnn_test_dist" ] && command -v mpirun >/dev/null; then
  if [ "$mode" = sanitize ]; then
    # OpenMPI's own allocations outlive MPI_Finalize: scripts/lsan_mpi.supp
    # ignores those, given plugins kept loaded and full stacks to name them.
    export OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1
    export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"
    export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan_mpi.supp:print_suppressions=0"
  fi
  mpi=(mpirun --allow-run-as-root --oversubscribe)
  for n in 2 3; do run_suite "${mpi[@]}" -np "$n" "$dir/prnn_test_dist"; done
  if [ -x "$dir/prnn_test_dist_seq" ]; then
    for n in 2 3; do run_suite "${mpi[@]}" -np "$n" "$dir/prnn_test_dist_seq"; done
  fi
  if [ "$gpu" = 1 ] && [ -x "$dir/prnn_gpu_test_dist" ]; then
    export NCCL_NVLS_ENABLE=0 # no NVLink multicast
    run_suite "${mpi[@]}" -x NCCL_NVLS_ENABLE -np 2 "$dir/prnn_gpu_test_dist"
    if [ -x "$dir/prnn_gpu_test_dist_seq" ]; then
      run_suite "${mpi[@]}" -x NCCL_NVLS_ENABLE -np 2 "$dir/prnn_gpu_test_dist_seq"
    fi
  fi
elif [ -x "$dir/prnn_test_dist" ]; then
  echo "== prnn_test_dist skipped: no mpirun on the PATH"
fi
# The CUDA scan's kernels on the CPU (release mode, where a C++ compiler is
# found): src/scan_cuda.cu and src/scan_window.cu compiled against
# dev/cuda/sim's simulator of blocks, warps, look-back words, mbarriers and
# tensor-map copies, every staged path forced, checked against the CPU
# reference (the GPU suite's quick shapes), its many-channel cases and kernel
# choices also on an H100's memory bandwidth; then the few-chain cases with
# WINDOW taken at every T (AUTO's forward too: from T = 1, or 2 for one
# chain of 64 columns; the fp32 forward's h by tensor-map stores where it
# takes them at all, one row of 64 channels), again on an H100's memory,
# where the 16-bit forward of one or two rows of 64 runs in chains of 32
# columns (here at every T).
if [ "$mode" = release ] && [ "${PRNN_TEST_SIM:-1}" = 1 ] && command -v g++ >/dev/null; then
  run_suite env SIM_DEFS="-DPRNN_STAGE_WAVES=0 -DPRNN_STAGE16_LONG_T=300" dev/cuda/sim/run.sh --quick
  # the many-channel cases and kernel choices again on an H100's memory
  # (2619 MHz x 5120 bits, 25 GB/s an SM): the 16-bit walks at 96 stripes
  # unstaged
  run_suite env PRNN_SIM_MEM_KHZ=2619000 PRNN_SIM_BUS_BITS=5120 build-sim/prnn_tests_cuda_sim --many --quick
  run_suite env SIM_DEFS="-DPRNN_WINDOW_MIN_T=1 -DPRNN_WINDOW_FWD_T=1,2,393216,1 -DPRNN_WINDOW_BULK_T=1 -DPRNN_WINDOW_NARROW16_T=1" dev/cuda/sim/run.sh --window --quick
  run_suite env PRNN_SIM_MEM_KHZ=2619000 PRNN_SIM_BUS_BITS=5120 build-sim/prnn_tests_cuda_sim --window --quick
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
