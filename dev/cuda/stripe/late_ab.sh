#!/usr/bin/env bash
# One device call that gives what adopting the late-finish 16-bit forward
# takes (run from a folder holding late_pack.sh's bins.tar.xz and a copy of
# this script):
#   1. AUTO fwd / fwd+bwd of the library (lib) against the lab builds l83,
#      k82 and l64 at the 96- and 128-stripe 16-bit shapes, then a second
#      pass of the three misses (bf16 16x64Kx768, 8x64Kx1536, 16x4Kx1024);
#   2. the lab builds' many-channel quick cases (prnn_tests_cuda --many --quick);
#   3. the library's quick scan suite, cell suite and blocks suite;
#   4. compute-sanitizer memcheck and racecheck over the lab builds'
#      many-channel quick cases, memcheck over the quick cell suite.
# BUDGET (seconds, default 440) scales where each step stops, so a shorter
# device call still gets the A/B first. Output: $OUT/log, the summary
# lines last ($OUT/sum).
set -uo pipefail
cd "$(dirname "$0")"
tar xJf bins.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
say() { echo "$*" | tee -a $OUT/sum; }
el() { echo $(( $(date +%s) - t0 )); }
B=${BUDGET:-440}   # seconds this script may take
tm() { local l=$(( B - $(el) - 5 )); [ $l -gt $1 ] && l=$1; [ $l -lt 1 ] && l=1; echo $l; }
# Runs a suite (or a suite under compute-sanitizer) within `tm $1` seconds
# and prints its last result lines on one line.
suite() { local t=$1; shift; timeout $(tm $t) "$@" 2>&1 | grep -E "FAIL|passed|SUMMARY|Hazard" | tail -4 | tr '\n' ' '; }
ab() { local pass=$1 sh=$2; shift 2
  for v in "$@"; do
    out=$(timeout 30 ./$v/prnn_bench_cuda --dtype ${sh%%:*} --algo auto --shape ${sh#*:} 2>&1)
    r=$(echo "$out" | grep -E "^auto " | head -1)
    k=$(echo "$out" | grep -E "auto: forward" | head -1 | sed 's/.*forward //; s/; backward.*//')
    say "AB$pass $v $sh | $r | $k"
  done; }
{
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem,memory.total --format=csv,noheader
./lib/prnn_bench_cuda --dtype bf16 --algo auto --shape 16x65536x768 2>&1 | grep -E "device|roofline" | head -3
for sh in bf16:16x65536x768 bf16:8x65536x1536 bf16:16x4096x1024 bf16:16x65536x896 f16:16x65536x768 bf16:16x65536x1024 bf16:16x4096x768; do
  [ $(el) -lt $((B*25/100)) ] && ab 1 $sh lib l83 k82 l64
done; echo "elapsed $(el) s"
for v in l83 k82; do
  say "QUICKMANY $v: $(suite 40 ./$v/prnn_tests_cuda --many --quick)"
done
for sh in bf16:16x65536x768 bf16:8x65536x1536 bf16:16x4096x1024; do
  [ $(el) -lt $((B*38/100)) ] && ab 2 $sh lib l83 k82
done; echo "elapsed $(el) s"
say "SUITE scan quick: $(suite 90 ./lib/prnn_tests_cuda --quick)"
say "SUITE cell: $(suite 90 ./lib/prnn_gpu_test_cell)"
say "SUITE blocks: $(suite 60 ./lib/prnn_gpu_test_blocks)"
echo "elapsed $(el) s"
for v in l83 k82; do for tool in memcheck racecheck; do
  [ $(el) -lt $((B*84/100)) ] && say "SAN $tool $v many: $(suite 60 compute-sanitizer --tool $tool ./$v/prnn_tests_cuda --many --quick)"
done; done
[ $(el) -lt $((B*90/100)) ] && say "SAN memcheck lib cell: $(suite 50 compute-sanitizer --tool memcheck ./lib/prnn_gpu_test_cell --quick)"
echo "elapsed $(el) s"
echo "=== table"; cat $OUT/sum
} 2>&1 | tee $OUT/log
