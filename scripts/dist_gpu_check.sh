#!/usr/bin/env bash
# Distributed prnn on a machine with 2 NVIDIA GPUs (one process per GPU,
# NCCL between them, mpirun to start them): builds with MPI and NCCL, runs
# the distributed GPU suite, then the scaling benchmark, and writes a
# markdown table (build-dir/dist_gpu.md, printed at the end):
#
#   - sequence-parallel scan, B=1, H=256: bf16 forward over T = 2^26 steps
#     (the largest power of two whose a, b and h fit one 141 GB GPU), bf16
#     forward + backward over T = 2^25 (six tensors), fp32 forward over
#     T = 2^25, each on 1 and 2 GPUs, against the plain one-GPU scan;
#   - data-parallel training (prnn train --dist, bf16, 4 x 1024 minGRU,
#     T = 4096): tokens/s on 1 GPU at batch 16, on 2 GPUs at batch 32
#     (16 per GPU) and at batch 16 (8 per GPU), with the losses of the
#     batch-16 runs side by side (they must agree: same global batch).
#
# Needs mpirun (Debian: apt-get install libopenmpi-dev openmpi-bin) and
# NCCL (nccl.h and libnccl in the CUDA toolkit). NVLink multicast stays off.
#
#   scripts/dist_gpu_check.sh [--no-build] [build-dir]   (default build-dist-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 # NVLink multicast off
export OMP_WAIT_POLICY=passive

build=1
dir=build-dist-gpu
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    -*) echo "usage: $0 [--no-build] [build-dir]" >&2; exit 2 ;;
    *) dir=$arg ;;
  esac
done
if [ "$build" = 1 ]; then
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DPRNN_CUDA=ON -DPRNN_DIST=ON \
        -DPRNN_WERROR=ON >/dev/null
  cmake --build "$dir" -j "$(nproc)" --target prnn prnn_gpu_test_dist prnn_bench_dist
fi
for p in prnn prnn_gpu_test_dist prnn_bench_dist; do
  [ -x "$dir/$p" ] || { echo "$dir/$p is missing (MPI or NCCL not found?)" >&2; exit 1; }
done
gpus=$(nvidia-smi -L | wc -l)
[ "$gpus" -ge 2 ] || { echo "needs 2 GPUs, found $gpus" >&2; exit 1; }
nvidia-smi -L
nvidia-smi topo -m || true

# Processes spread freely over the cores (the default binds each to one).
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none
     -x NCCL_NVLS_ENABLE -x OMP_WAIT_POLICY -x LD_LIBRARY_PATH -x PATH)

# A failure is reported at the end; the measurements still run.
status=0
echo "== distributed GPU suite (2 processes)"
"${mpi[@]}" -np 2 "$dir/prnn_gpu_test_dist" | tee "$dir/dist_gpu_test.log" || true
tail -n 1 "$dir/dist_gpu_test.log" | grep -q " 0 failed$" || { echo "GPU suite failed" >&2; status=1; }

echo "== sequence-parallel scan"
bench="$dir/dist_gpu_bench.log"
: >"$bench"
for args in "--dtype bf16 --T 67108864" "--dtype bf16 --T 33554432 --backward" \
            "--dtype f32 --T 33554432"; do
  for n in 1 2; do
    # shellcheck disable=SC2086
    "${mpi[@]}" -np "$n" "$dir/prnn_bench_dist" --B 1 --H 256 --reps 5 $args | tee -a "$bench" ||
      { echo "benchmark failed: -np $n $args" >&2; status=1; }
  done
done

echo "== data-parallel training"
train=(train --dist --device cuda --dtype bf16 --cell mingru --hidden 1024 --layers 4
       --seq-len 4096 --steps 30 --warmup 5 --eval-interval 0 --eval-batches 1
       --ckpt-interval 0 --seed 7)
declare -A tok
runs=("1 16" "2 32" "2 16")
for r in "${runs[@]}"; do
  set -- $r
  out="$dir/dist_train_n$1_b$2"
  rm -rf "$out"
  "${mpi[@]}" -np "$1" "$dir/prnn" "${train[@]}" --batch "$2" --out "$out" | grep -v "^step" |
    tail -n 4 || { echo "training failed: -np $1 --batch $2" >&2; status=1; }
  [ -f "$out/log.tsv" ] || { status=1; tok[$r]=0; continue; }
  # Median tokens/s over steps 11-30 (after warm-up and the first allocations).
  tok[$r]=$(awk -F'\t' '$2 == "train" && $1 > 10 {print $8}' "$out/log.tsv" | sort -g |
            awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : 0}')
done
loss1=$(awk -F'\t' '$2 == "train" && $1 == 30 {print $3}' "$dir/dist_train_n1_b16/log.tsv" || true)
loss2=$(awk -F'\t' '$2 == "train" && $1 == 30 {print $3}' "$dir/dist_train_n2_b16/log.tsv" || true)

md="$dir/dist_gpu.md"
{
  echo "# Distributed prnn on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) x $gpus"
  echo
  echo "Sequence-parallel scan, B = 1, H = 256, one process per GPU (NCCL). 'dist' is the"
  echo "distributed scan of the whole sequence (summary pass, all-gather of the segments'"
  echo "summaries, local scan from the true start state); 'local' is the plain one-GPU scan"
  echo "of one segment, the floor. TB/s counts the bytes a one-GPU scan of the whole"
  echo "sequence moves (forward: read a, b, write h; backward adds 5 tensors), so rows compare."
  echo
  echo "| op | dtype | T | GPUs | dist ms | dist TB/s | speed-up | local ms (T/GPUs) | local TB/s |"
  echo "|---|---|---|---|---|---|---|---|---|"
  awk '
    $1 == "dist" || $1 == "local" {
      for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
      key = f["op"] " " f["dtype"] " " f["gpus"]
      if ($1 == "dist") { T[key] = f["T"]; dms[key] = f["ms"]; dtb[key] = f["tbps"]; order[++n] = key }
      else { lms[key] = f["ms"]; ltb[key] = f["tbps"] }
    }
    END {
      for (i = 1; i <= n; i++) {
        k = order[i]; split(k, p, " ")
        base = p[1] " " p[2] " 1"
        sp = (base in dms && dms[k] > 0) ? sprintf("%.2fx", dms[base] / dms[k]) : "-"
        printf "| %s | %s | %d | %s | %.1f | %.2f | %s | %.1f | %.2f |\n", p[1], p[2], T[k], p[3], dms[k], dtb[k], sp, lms[k], ltb[k]
      }
    }' "$bench"
  echo
  echo "Data-parallel training: prnn train --dist --device cuda --dtype bf16, minGRU 4 x 1024,"
  echo "T = 4096; tokens/s is the median over steps 11-30 (global tokens per second)."
  echo
  echo "| GPUs | global batch | per GPU | tokens/s | scaling |"
  echo "|---|---|---|---|---|"
  for r in "${runs[@]}"; do
    set -- $r
    awk -v n="$1" -v b="$2" -v t="${tok[$r]}" -v base="${tok[1 16]}" \
      'BEGIN { printf("| %d | %d | %d | %.0f | %.2fx |\n", n, b, b / n, t, (base > 0 ? t / base : 0)) }'
  done
  echo
  echo "Loss at step 30, global batch 16: 1 GPU $loss1, 2 GPUs $loss2 (the same global batch:"
  echo "they differ only by the summation order of the gradient average and bf16 rounding)."
} >"$md"
echo
cat "$md"
exit "$status"
