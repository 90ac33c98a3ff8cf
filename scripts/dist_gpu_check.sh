#!/usr/bin/env bash
# Distributed prnn on a machine with several NVIDIA GPUs (one process per GPU,
# NCCL between them, mpirun to start them): builds with MPI and NCCL, runs
# the distributed GPU suite, then the benchmarks, and writes a markdown report
# (build-dir/dist_gpu.md, printed at the end):
#
#   - sequence-parallel scan, B=1, H=256: bf16 forward over T = 2^26 steps
#     (the largest power of two whose a, b and h fit one 141 GB GPU), bf16
#     forward + backward over T = 2^25 (six tensors), fp32 forward over
#     T = 2^25, each on 1 and on NP GPUs, against the plain one-GPU scan;
#   - data-parallel training (prnn train --dist, bf16) at 1, 2, 4, ... NP
#     GPUs (powers of two), 16 or 8 rows per GPU, for two models: minGRU
#     4 x 1024 at T = 4096 (compute-heavy) and minGRU 8 x 2048 at T = 512
#     (68 M parameters: the gradient average is a larger share of a step).
#     Each GPU count runs three ways: the gradient average overlapped with
#     the backward (the default), --no-overlap (after the backward) and
#     --zero1 (optimizer sharded; its AdamW memory per GPU is in the table).
#     Tokens/s and ms/step are medians over the steps after the first 5;
#   - the same global batch (16) on 1 and NP GPUs, whose losses must agree.
#
# The number of GPUs is NP (default: all visible). After the build, the
# suite and the benchmarks get BUDGET seconds (default 330): no run starts
# after that, and each run is cut off at the budget's end (plus 30 s), so
# the script ends in bounded time; skipped rows show '-' and the exit status
# is 1. Training runs first, then the scan benchmark. A cold build takes
# minutes of its own: build first (cmake --build ... or this script with
# NP=1 --skip-suite --skip-scan), then measure with --no-build.
#
# Needs mpirun (Debian: apt-get install libopenmpi-dev openmpi-bin) or an
# OpenMPI unpacked under .mpi/ with its .mpi/env.sh (sourced when present),
# and NCCL (nccl.h and libnccl in the CUDA toolkit). NVLink multicast stays
# off.
#
#   NP=4 scripts/dist_gpu_check.sh [--no-build] [--skip-suite] [--skip-scan] [build-dir]
#   (default build-dir: build-dist-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
# A carried OpenMPI (the GPU machine may have none of its own).
if [ -f .mpi/env.sh ]; then
  # shellcheck disable=SC1091
  source .mpi/env.sh
fi
export NCCL_NVLS_ENABLE=0 # NVLink multicast off
export OMP_WAIT_POLICY=passive
BUDGET=${BUDGET:-330}
STEPS=${STEPS:-20}

build=1
suite=1
scan=1
dir="build-dist-gpu"
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    --skip-suite) suite=0 ;;
    --skip-scan) scan=0 ;;
    -*) echo "usage: NP=N $0 [--no-build] [--skip-suite] [--skip-scan] [build-dir]" >&2; exit 2 ;;
    *) dir=$arg ;;
  esac
done
command -v mpirun >/dev/null || { echo "no mpirun on the PATH (and no .mpi/env.sh)" >&2; exit 1; }
if [ "$build" = 1 ]; then
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DPRNN_CUDA=ON -DPRNN_DIST=ON \
        -DPRNN_WERROR=ON >/dev/null
  cmake --build "$dir" -j "$(nproc)" --target prnn prnn_gpu_test_dist prnn_bench_dist
fi
for p in prnn prnn_gpu_test_dist prnn_bench_dist; do
  [ -x "$dir/$p" ] || { echo "$dir/$p is missing (MPI or NCCL not found?)" >&2; exit 1; }
done
gpus=$(nvidia-smi -L | wc -l)
NP=${NP:-$gpus}
if [ "$NP" -lt 1 ] || [ "$NP" -gt "$gpus" ]; then
  echo "NP=$NP, but this machine has $gpus GPUs" >&2
  exit 1
fi
# GPU counts: powers of two up to NP.
counts=()
for ((n = 1; n <= NP; n *= 2)); do counts+=("$n"); done
nvidia-smi -L
nvidia-smi topo -m || true
start=$SECONDS
echo "NP=$NP: GPU counts ${counts[*]}; time budget ${BUDGET}s, $STEPS training steps a run"

# Processes spread freely over the cores (the default binds each to one).
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none
     -x NCCL_NVLS_ENABLE -x OMP_WAIT_POLICY -x LD_LIBRARY_PATH -x PATH)
# One run: a time limit of its own, cut to what is left of the budget (and
# no run at all once it is spent).
limited() { # seconds command...
  local t=$1 left=$((BUDGET - (SECONDS - start)))
  shift
  if [ "$left" -le 0 ]; then
    echo "skipped (time budget of ${BUDGET}s spent): $*" >&2
    return 3
  fi
  [ "$t" -gt $((left + 30)) ] && t=$((left + 30))
  timeout -k 10 "$t" "$@"
}

# A failure is reported at the end; the measurements still run.
status=0
if [ "$suite" = 1 ] && [ "$NP" -ge 2 ]; then
  echo "== distributed GPU suite (2 processes)"
  limited 240 "${mpi[@]}" -np 2 "$dir/prnn_gpu_test_dist" | tee "$dir/dist_gpu_test.log" || true
  tail -n 1 "$dir/dist_gpu_test.log" | grep -q " 0 failed$" ||
    { echo "GPU suite failed" >&2; status=1; }
fi

echo "== data-parallel training"
common=(train --dist --device cuda --dtype bf16 --cell mingru --steps "$STEPS" --warmup 5
        --eval-interval 0 --eval-batches 1 --ckpt-interval 0 --seed 7)
# name | model options | rows per GPU
models=("4x1024 T=4096|--hidden 1024 --layers 4 --seq-len 4096|16"
        "8x2048 T=512|--hidden 2048 --layers 8 --seq-len 512|8")
modes=("overlapped|" "after backward|--no-overlap" "zero1 (overlapped)|--zero1")
rows="$dir/dist_train_rows.txt"
: >"$rows"
# Runs one training and appends a row: model, GPUs, batch, mode, and the
# measurements from its log (or "-" when it failed or was skipped).
train_row() { # model-name model-opts gpus batch mode-name mode-opts tag
  local out="$dir/dist_train_$7"
  rm -rf "$out"
  # shellcheck disable=SC2086
  if limited 120 "${mpi[@]}" -np "$3" "$dir/prnn" "${common[@]}" $2 --batch "$4" $6 \
       --out "$out" >"$out.txt" 2>&1; then
    grep -v "^step" "$out.txt" | tail -n 3 || true
  else
    echo "training failed or skipped: -np $3 --batch $4 $2 $6 (see $out.txt)" >&2
    status=1
  fi
  local ms=- tok=- loss=- mem=-
  if [ -f "$out/log.tsv" ]; then
    ms=$(awk -F'\t' '$2 == "train" && $1 > 5 {print $7}' "$out/log.tsv" | sort -g |
         awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "-"}')
    tok=$(awk -F'\t' '$2 == "train" && $1 > 5 {print $8}' "$out/log.tsv" | sort -g |
          awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "-"}')
    loss=$(awk -F'\t' -v s="$STEPS" '$2 == "train" && $1 == s {print $3}' "$out/log.tsv")
    mem=$(sed -n 's/.*AdamW moments \([0-9.]*\) MiB per process.*/\1/p' "$out.txt" | head -n 1)
  fi
  printf '%s|%s|%s|%s|%s|%s|%s|%s\n' "$1" "$3" "$4" "$5" "${ms:--}" "${tok:--}" "${loss:--}" \
    "${mem:--}" >>"$rows"
}
for mdl in "${models[@]}"; do
  IFS='|' read -r mname mopts per <<<"$mdl"
  for n in "${counts[@]}"; do
    for md in "${modes[@]}"; do
      IFS='|' read -r dname dopts <<<"$md"
      # One process: nothing to average or shard, one row.
      if [ "$n" = 1 ] && [ -n "$dopts" ]; then continue; fi
      [ "$n" = 1 ] && dname="-"
      tag="$(echo "$mname" | tr -c 'a-zA-Z0-9\n' '_')_n${n}_$(echo "${dopts:-overlap}" | tr -d '-')"
      echo "-- $mname, $n GPUs, batch $((per * n)), gradient average: $dname"
      train_row "$mname" "$mopts" "$n" "$((per * n))" "$dname" "$dopts" "$tag"
    done
  done
done
# The same global batch on NP GPUs as on one: the losses must agree.
loss1=-
lossN=-
if [ "$NP" -gt 1 ]; then
  IFS='|' read -r mname mopts per <<<"${models[0]}"
  echo "-- $mname, $NP GPUs at the one-GPU batch $per"
  train_row "$mname" "$mopts" "$NP" "$per" "overlapped" "" "same_batch_n$NP"
  lossN=$(tail -n 1 "$rows" | cut -d'|' -f7)
  loss1=$(awk -F'|' -v m="$mname" '$1 == m && $2 == 1 {print $7}' "$rows")
  sed -i '$d' "$rows" # not a row of the table
fi

bench="$dir/dist_gpu_bench.log"
: >"$bench"
if [ "$scan" = 1 ]; then
  echo "== sequence-parallel scan"
  scan_counts=(1)
  [ "$NP" -gt 1 ] && scan_counts+=("$NP")
  for args in "--dtype bf16 --T 67108864" "--dtype bf16 --T 33554432 --backward" \
              "--dtype f32 --T 33554432"; do
    for n in "${scan_counts[@]}"; do
      # shellcheck disable=SC2086
      limited 90 "${mpi[@]}" -np "$n" "$dir/prnn_bench_dist" --B 1 --H 256 --reps 5 $args |
        tee -a "$bench" || { echo "benchmark failed or skipped: -np $n $args" >&2; status=1; }
    done
  done
fi

md="$dir/dist_gpu.md"
{
  echo "# Distributed prnn on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) x $NP"
  echo
  if [ -s "$bench" ]; then
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
  fi
  echo "Data-parallel training: prnn train --dist --device cuda --dtype bf16, minGRU, $STEPS"
  echo "steps, global batch = rows per GPU x GPUs; ms/step and tokens/s (global) are medians"
  echo "over steps 6-$STEPS of log.tsv. 'overlapped': each layer's gradients start averaging"
  echo "(NCCL on a side stream, buckets of up to 4 MiB) while the backward of the earlier"
  echo "layers runs; 'after backward': --no-overlap, one all-reduce after the backward;"
  echo "'zero1': --zero1, reduce-scatter of the gradients (overlapped), AdamW on each GPU's"
  echo "shard, all-gather of the weights. Optimizer MiB: the AdamW moments one GPU holds."
  echo "Scaling: tokens/s against the same model on one GPU."
  echo
  echo "| model | GPUs | global batch | gradient average | ms/step | tokens/s | scaling | optimizer MiB/GPU | loss at step $STEPS |"
  echo "|---|---|---|---|---|---|---|---|---|"
  awk -F'|' '
    { row[NR] = $0; if ($2 == 1 && $6 != "-") base[$1] = $6 }
    END {
      for (i = 1; i <= NR; i++) {
        split(row[i], f, "|")
        sc = (f[1] in base && f[6] != "-" && base[f[1]] > 0) ? sprintf("%.2fx", f[6] / base[f[1]]) : "-"
        tok = f[6] == "-" ? "-" : sprintf("%.0f", f[6])
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], f[4], f[5], tok, sc, f[8], f[7]
      }
    }' "$rows"
  echo
  if [ "$NP" -gt 1 ]; then
    echo "The same global batch (${models[0]%%|*}, batch 16): loss at step $STEPS on 1 GPU $loss1,"
    echo "on $NP GPUs $lossN (they differ only by the summation order of the gradient average"
    echo "and bf16 rounding)."
  fi
  echo
  echo "Time: ${SECONDS}s in all, $((SECONDS - start))s after the build (budget ${BUDGET}s)."
} >"$md"
echo
cat "$md"
exit "$status"
