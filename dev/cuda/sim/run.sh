#!/usr/bin/env bash
# Builds the GPU test suite against the host simulator and runs it:
#   dev/cuda/sim/run.sh [test args...]     (default: --quick)
# The library's CPU sources and src/scan_cuda.cu compile unchanged; only the
# CUDA headers are the simulator's (include/). Output in build-sim/.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=build-sim
mkdir -p "$out"
opt="-O2 -g"
for f in context scan scan_cpu; do
  gcc $opt -std=c11 -fopenmp -Iinclude -Isrc -c "src/$f.c" -o "$out/$f.o" &
done
g++ $opt -std=c++17 -Wall -Wextra -Wno-unknown-pragmas -Idev/cuda/sim/include -Iinclude -Isrc ${SIM_DEFS:-} \
    -x c++ -c src/scan_cuda.cu -o "$out/scan_cuda.o" &
g++ $opt -std=c++17 -Wall -Wextra -Idev/cuda/sim/include -c dev/cuda/sim/sim.cpp -o "$out/sim.o" &
gcc $opt -std=c11 -fopenmp -Wall -Wextra -Idev/cuda/sim/include -Iinclude -Itests -Itools \
    -c tests/test_scan_cuda.c -o "$out/test_scan_cuda.o" &
wait
g++ -fopenmp "$out"/{context,scan,scan_cpu,scan_cuda,sim,test_scan_cuda}.o -lm -o "$out/prnn_tests_cuda_sim"
if [ $# -eq 0 ]; then set -- --quick; fi
exec "$out/prnn_tests_cuda_sim" "$@"
