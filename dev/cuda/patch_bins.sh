#!/usr/bin/env bash
# Builds the scan's GPU suite and benchmark with a lab patch applied, on a
# machine with nvcc but no GPU, into a folder to carry to the GPU machine
# (sm_90, no OpenBLAS, no -march=native, so the programs run there):
#
#   PATCH_BASE=2ac7c63 dev/cuda/patch_bins.sh dev/cuda/warpscan/chunked-warpscan.patch gpu-bin
#
# then, on the GPU machine (carry gpu-bin):
#
#   gpu-bin/prnn_tests_cuda --quick && compute-sanitizer --tool memcheck gpu-bin/prnn_tests_cuda --quick
#   gpu-bin/prnn_tests_cuda                 # the full suite
#   gpu-bin/prnn_bench_cuda --algo fast     # AUTO, CHUNKED and STRIPED
#
# PATCH_CUDA_FLAGS (e.g. "-DPRNN_CHUNK_STEPS=8 -DPRNN_CHUNK_MIN_BLOCKS=2")
# sets a patch's knobs. PATCH_BASE (default HEAD) is the commit the patch
# applies to: dev/cuda/README.md gives each patch's. The patch is applied to
# a temporary git worktree of that commit; the checkout itself is left alone.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 PATCH OUTDIR" >&2; exit 2; }
patch=$(realpath "$1")
out=$(realpath -m "$2")
cd "$(dirname "$0")/../.."
tree=$(mktemp -d /tmp/prnn-patch-XXXXXX)
trap 'git worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"' EXIT
git worktree add --detach "$tree" "${PATCH_BASE:-HEAD}" >/dev/null
git -C "$tree" apply "$patch"
cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DPRNN_BLAS=OFF -DPRNN_NATIVE=OFF -DPRNN_DIST=OFF "-DCMAKE_CUDA_FLAGS=${PATCH_CUDA_FLAGS:-}" >/dev/null
cmake --build "$tree/build" -j "$(nproc)" --target prnn_tests_cuda prnn_bench_cuda >/dev/null
mkdir -p "$out"
cp "$tree/build/prnn_tests_cuda" "$tree/build/prnn_bench_cuda" "$out/"
strip "$out/prnn_tests_cuda" "$out/prnn_bench_cuda"
echo "built with $(basename "$patch"): $(ls "$out")"
