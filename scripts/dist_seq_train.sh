#!/usr/bin/env bash
# Sequence-parallel training on NP GPUs of one machine (prnn train --dist
# --seq-parallel, one process per GPU, NCCL): one sequence too long for one
# GPU's memory, cut over the GPUs, and a shorter one that fits one GPU, run
# on 1 GPU and on NP for the scaling efficiency. Writes a markdown table to
# $OUT/dist_seq_train.md (or the build directory) and prints it.
#
# The model: B = 1 row, --hidden 256, 2 layers of minGRU, fp32, the adding
# task (synthetic, any length). Its memory per token is about 26 KB
# (residual stream and norm outputs of 3 places, 2 x 3 saved cell values per
# layer, logits and their gradient over 256 bytes, 3 gradient buffers, the
# cell's scratch: ~6400 fp32 values), so T = 2^23 needs ~215 GB and fits no
# single 141 GB H200, while T / NP steps per GPU do (2^24 at NP = 4 to 7:
# ~430 GB in all, ~108 GB per GPU at NP = 4; 2^25 from NP = 8). Peak memory is sampled with
# nvidia-smi every 0.2 s. Steps: 3 per run (the first, with its
# allocations, is left out of the rate); about 4 minutes in all on H200s.
#
#   NP=4 OUT=/tmp/out scripts/dist_seq_train.sh [--no-build] [build-dir]
#
# Needs mpirun: when it is not on the PATH, a carried OpenMPI in .mpi/
# (.mpi/env.sh) is sourced. NVLink multicast stays off.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v mpirun >/dev/null && [ -f .mpi/env.sh ]; then
  # shellcheck disable=SC1091
  source .mpi/env.sh
fi
export NCCL_NVLS_ENABLE=0
export OMP_WAIT_POLICY=passive

build=1
dir=build-dist-seq
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
  cmake --build "$dir" -j "$(nproc)" --target prnn
fi
[ -x "$dir/prnn" ] || { echo "$dir/prnn is missing" >&2; exit 1; }
gpus=$(nvidia-smi -L | wc -l)
NP=${NP:-$gpus}
[ "$NP" -ge 2 ] && [ "$NP" -le "$gpus" ] || { echo "NP=$NP, but $gpus GPUs" >&2; exit 1; }
out=${OUT:-$dir}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The long sequence: 2^23 (2 or 3 GPUs), 2^24 (4 to 7), 2^25 (8 or more):
# about 108 GB per GPU at the smallest NP of each.
if [ "$NP" -ge 8 ]; then big=33554432; elif [ "$NP" -ge 4 ]; then big=16777216; else big=8388608; fi
small=2097152

mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none
     -x NCCL_NVLS_ENABLE -x OMP_WAIT_POLICY -x LD_LIBRARY_PATH -x PATH)
common=(--task adding --cell mingru --layers 2 --hidden 256 --batch 1 --steps 3 --warmup 1
        --eval-interval 0 --eval-batches 1 --ckpt-interval 0 --device cuda --dtype f32)

# run NAME NP T: trains, then prints "tokens/s peak_GiB_max peak_GiB_list status".
run() {
  local name=$1 np=$2 T=$3 log="$work/$1.txt" mem="$work/$1.mem"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$mem" &
  local smi=$!
  local rc=0
  if [ "$np" = 1 ]; then
    timeout 150 "$dir/prnn" train "${common[@]}" --seq-len "$T" --out "$work/$name" \
      >"$log" 2>&1 || rc=$?
  else
    timeout 150 "${mpi[@]}" -np "$np" "$dir/prnn" train "${common[@]}" --dist --seq-parallel \
      --seq-len "$T" --out "$work/$name" >"$log" 2>&1 || rc=$?
  fi
  kill "$smi" 2>/dev/null || true
  wait "$smi" 2>/dev/null || true
  # tokens/s: the mean over the steps after the first (log columns: step,
  # train, loss, bits, grad norm, lr, ms, tokens/s)
  local tps
  tps=$(awk -F'\t' '$2 == "train" && $1 > 1 { s += $8; n++ } END { if (n) printf "%.3g", s / n; else print "-" }' \
        "$work/$name/log.tsv" 2>/dev/null || echo -)
  # peak MiB per GPU: the samples come NGPU lines at a time, in GPU order
  local peaks
  peaks=$(awk -v g="$gpus" '{ i = (NR - 1) % g; if ($1 > m[i]) m[i] = $1 }
           END { for (i = 0; i < g; i++) printf "%s%.1f", (i ? " " : ""), m[i] / 1024 }' "$mem")
  local st=ok
  [ "$rc" = 0 ] || st="exit $rc: $(grep -m1 -i 'fail\|error\|memory' "$log" | cut -c1-80)"
  echo "$tps|$peaks|$st"
}

echo "== $NP GPUs: $(nvidia-smi -L | head -n 1)"
table="$out/dist_seq_train.md"
{
  echo "# Sequence-parallel training, prnn train --dist --seq-parallel"
  echo
  echo "minGRU, 2 layers, hidden 256, B = 1, fp32, adding task; 3 steps, tokens/s averaged"
  echo "over steps 2-3; peak memory per GPU sampled by nvidia-smi (GiB, GPUs 0..$((gpus - 1)))."
  echo
  echo "| T | GPUs | tokens/s | scaling efficiency | peak GiB per GPU | status |"
  echo "|---|---|---|---|---|---|"
} >"$table"

IFS='|' read -r s1 m1 st1 <<<"$(run small1 1 "$small")"
IFS='|' read -r sn mn stn <<<"$(run smalln "$NP" "$small")"
eff=$(awk -v a="$s1" -v b="$sn" -v n="$NP" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.0f%%", 100 * b / (a * n); else print "-" }')
IFS='|' read -r sb mb stb <<<"$(run bign "$NP" "$big")"
{
  echo "| $small | 1 | $s1 | (base) | $m1 | $st1 |"
  echo "| $small | $NP | $sn | $eff | $mn | $stn |"
  echo "| $big | $NP | $sb | - (does not fit 1 GPU) | $mb | $stb |"
} >>"$table"
cat "$table"
for f in small1 smalln bign; do echo "---- $f"; tail -n 5 "$work/$f.txt"; done
