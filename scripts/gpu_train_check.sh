#!/usr/bin/env bash
# The trainer on a GPU, after build-gpu/ is built (scripts/gpu_check.sh):
#  1. --resume equals an uninterrupted run bit for bit with --deterministic
#     (and how far apart two plain runs are without it);
#  2. throughput and the time per phase of a 4-layer minGRU, width 1024,
#     T = 4096, B = 16, bf16;
#  3. a loss curve of a few minutes on a synthetic long-range task.
# Output in $OUT (default gpu-out): log, the runs' logs and PNGs.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
P=./build-gpu/prnn
{
  echo "== 1. resume on the GPU"
  A="--device cuda --dtype bf16 --layers 2 --hidden 256 --seq-len 512 --batch 16 --steps 20
     --warmup 2 --eval-interval 10 --ckpt-interval 10"
  for mode in "--deterministic" ""; do
    rm -rf "$out/r1" "$out/r2" "$out/r3"
    $P train $A $mode --out "$out/r1" >/dev/null
    $P train $A $mode --out "$out/r2" --stop-after 8 >/dev/null
    $P train $A $mode --out "$out/r2" --resume >/dev/null
    $P train $A $mode --out "$out/r3" >/dev/null
    for r in r2 r3; do
      if cmp -s "$out/r1/model.safetensors" "$out/$r/model.safetensors"; then same=identical; else same=different; fi
      l1=$(awk -F'\t' '$1==20 && $2=="train" {print $3}' "$out/r1/log.tsv")
      l2=$(awk -F'\t' '$1==20 && $2=="train" {print $3}' "$out/$r/log.tsv")
      echo "mode '${mode:-default}': run 1 vs $( [ $r = r2 ] && echo 'stopped at 8 + resumed' || echo 'run 2'): weights $same, step-20 loss $l1 vs $l2"
    done
  done
  echo "== 2. throughput: 4-layer minGRU, width 1024, T 4096, B 16, bf16"
  T="--device cuda --dtype bf16 --layers 4 --hidden 1024 --seq-len 4096 --batch 16 --warmup 5
     --eval-interval 0 --eval-batches 1"
  timeout 120 $P train $T --steps 60 --phase-times --out "$out/p1" | grep -a phase
  timeout 120 $P train $T --steps 60 --out "$out/p2" >/dev/null
  awk -F'\t' '$2=="train" && $1>10 {n++; ms+=$7; tk+=$8} END {printf "steps 11-60: %.3f ms/step, %.3g tokens/s\n", ms/n, tk/n}' "$out/p2/log.tsv"
  echo "== 3. selective copy, T 4096"
  timeout "${CURVE_TIMEOUT:-180}" $P train --device cuda --dtype bf16 --task selective-copy --seq-len 4096 \
    --batch 32 --layers 2 --hidden 256 --steps 3000 --warmup 100 --lr 2e-3 --eval-interval 250 \
    --eval-batches 4 --out "$out/copy" | grep -a -E "^(val|prnn|  )" | tail -20
  python3 scripts/plot_loss.py "$out/copy/log.tsv" -o "$out/copy/loss.png" 2>&1 | tail -1
} 2>&1 | tee "$out/train_log"
