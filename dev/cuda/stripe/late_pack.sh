#!/usr/bin/env bash
# Builds what late_ab.sh measures, on a machine with nvcc and no GPU: the
# library (lib: prnn_bench_cuda, prnn_tests_cuda and the cell and blocks GPU
# suites) and three lab builds of the late-finish 16-bit forward (l83, k82,
# l64: prnn_bench_cuda and prnn_tests_cuda), sm_90 only, no OpenBLAS, no
# -march=native, packed into DIR/bins.tar.xz (about 23 MB). DIR should be a
# folder git ignores (for example gpu-pack, named in .git/info/exclude), so
# that it travels only when a device call carries it:
#
#   dev/cuda/stripe/late_pack.sh gpu-pack && cp dev/cuda/stripe/late_ab.sh gpu-pack/
#   (device, carry gpu-pack)  BUDGET=420 bash gpu-pack/late_ab.sh
#
# The build folders are build-late-NAME in the checkout (ignored by /build*/).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
out=$(realpath -m "$1")
cd "$(dirname "$0")/../../.."
lab() {  # name targets cuda-flags
    local b=build-late-$1
    cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DPRNN_BLAS=OFF \
          -DPRNN_NATIVE=OFF -DPRNN_DIST=OFF "-DCMAKE_CUDA_FLAGS=$3" >/dev/null
    cmake --build "$b" -j "$(nproc)" --target $2 >/dev/null
    mkdir -p "$out/$1"
    for t in $2; do cp "$b/$t" "$out/$1/"; done
    strip "$out/$1"/*
    echo "built $1"
}
pair="prnn_bench_cuda prnn_tests_cuda"
lab lib "$pair prnn_gpu_test_cell prnn_gpu_test_blocks" ""
lab l83 "$pair" "-DPRNN_LATE16=2 -DPRNN_LATE16_S=8 -DPRNN_LATE16_D=3"
lab k82 "$pair" "-DPRNN_LATE16=2 -DPRNN_LATE16_S=8 -DPRNN_LATE16_D=2 -DPRNN_LATE16_KEEP=1"
lab l64 "$pair" "-DPRNN_LATE16=2 -DPRNN_LATE16_S=6 -DPRNN_LATE16_D=4"
(cd "$out" && tar cJf bins.tar.xz lib l83 k82 l64 && rm -rf lib l83 k82 l64)
ls -l "$out/bins.tar.xz"
