#!/usr/bin/env bash
# A/B (run from a folder holding bins.tar.xz: lib/, l83/, l64/, k82/, k83/, each with prnn_bench_cuda and prnn_tests_cuda): the staged 16-bit forward finished a tile late (l83, l64; k82, k83 keep the tile in registers) against the library (lib).
set -uo pipefail
cd "$(dirname "$0")"
tar xJf bins.tar.xz
L=$OUT/log
ab() { # pass shape variants...
  local pass=$1 sh=$2; shift 2
  for v in "$@"; do
   out=$(timeout 30 ./$v/prnn_bench_cuda --dtype ${sh%%:*} --algo auto --shape ${sh#*:})
   r=$(echo "$out" | grep -E "^auto ")
   k=$(echo "$out" | grep -E "auto: forward" | sed 's/.*forward //; s/; backward.*//')
   echo "AB pass$pass $v ${sh} | $r | $k"
  done
}
{
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem,memory.total --format=csv,noheader
t0=$(date +%s)
for sh in bf16:16x65536x768 bf16:16x4096x1024 bf16:8x65536x1536 bf16:16x4096x768 bf16:16x65536x896 bf16:16x65536x1024 bf16:16x16384x768 bf16:16x65536x704; do
  ab 1 $sh lib l83 l64 k82 k83
  echo "elapsed $(( $(date +%s) - t0 )) s"
done
echo "QUICKMANY l83: $(timeout 40 ./l83/prnn_tests_cuda --many --quick 2>&1 | grep -E "FAIL|passed" | grep -v "auto bf16 forward B=16" | tail -3 | tr '\n' ' ')"
echo "QUICKMANY k82: $(timeout 40 ./k82/prnn_tests_cuda --many --quick 2>&1 | grep -E "FAIL|passed" | grep -v "auto bf16 forward B=16" | tail -3 | tr '\n' ' ')"
for sh in bf16:16x65536x768 bf16:16x4096x1024 bf16:8x65536x1536; do
  [ $(( $(date +%s) - t0 )) -lt 150 ] && ab 2 $sh lib l83 l64 k82 k83
done
echo "elapsed $(( $(date +%s) - t0 )) s"
} 2>&1 | tee $L
