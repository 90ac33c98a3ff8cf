#!/usr/bin/env bash
# Builds the GPU test suite against the host simulator and runs it:
#   dev/cuda/sim/run.sh [test args...]     (default: --quick)
# The library's CPU sources, src/scan_cuda.cu and src/scan_window.cu compile unchanged; only the
# CUDA headers are the simulator's (include/). Output in build-sim/.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=build-sim
mkdir -p "$out"
opt="-O2 -g"
# Stale objects are removed first and every compile's status is checked, so
# a source that no longer compiles fails the run instead of linking an old
# object.
rm -f "$out"/{context,scan,scan_cpu,scan_cuda,scan_window,sim,test_scan_cuda}.o "$out/prnn_tests_cuda_sim"
pids=()
for f in context scan scan_cpu; do
  gcc $opt -std=c11 -fopenmp -Iinclude -Isrc -c "src/$f.c" -o "$out/$f.o" & pids+=($!)
done
g++ $opt -std=c++17 -Wall -Wextra -Wno-unknown-pragmas -Idev/cuda/sim/include -Iinclude -Isrc ${SIM_DEFS:-} \
    -x c++ -c src/scan_cuda.cu -o "$out/scan_cuda.o" & pids+=($!)
g++ $opt -std=c++17 -Wall -Wextra -Wno-unknown-pragmas -Idev/cuda/sim/include -Iinclude -Isrc ${SIM_DEFS:-} \
    -x c++ -c src/scan_window.cu -o "$out/scan_window.o" & pids+=($!)
g++ $opt -std=c++17 -Wall -Wextra -Idev/cuda/sim/include -c dev/cuda/sim/sim.cpp -o "$out/sim.o" & pids+=($!)
gcc $opt -std=c11 -fopenmp -Wall -Wextra -Idev/cuda/sim/include -Iinclude -Itests -Itools \
    -c tests/test_scan_cuda.c -o "$out/test_scan_cuda.o" & pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
g++ -fopenmp "$out"/{context,scan,scan_cpu,scan_cuda,scan_window,sim,test_scan_cuda}.o -lm -o "$out/prnn_tests_cuda_sim"
if [ $# -eq 0 ]; then set -- --quick; fi
exec "$out/prnn_tests_cuda_sim" "$@"
