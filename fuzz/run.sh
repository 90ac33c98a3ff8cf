#!/usr/bin/env bash
# Builds the trainer's libFuzzer targets with clang (AddressSanitizer +
# UndefinedBehaviorSanitizer), writes their seed corpora, and runs each for
# SECONDS (default 60). Findings land in build-fuzz/crash-*; the exit status
# is non-zero when any target found one.
#
#   fuzz/run.sh [SECONDS] [TARGET...]     targets: safetensors ckpt json data
#
# The corpus each run grows is kept in build-fuzz/corpus/TARGET and reused by
# the next run. Needs clang with libFuzzer (Debian: apt-get install clang).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors ckpt json data)
CC=${CC:-clang}
out=build-fuzz
mkdir -p "$out"

srcs=(tools/train/fileio.c tools/train/rng.c tools/train/json.c tools/train/corpus.c
      tools/train/data.c tools/train/ckpt.c tools/train/options.c tools/train/log.c
      tools/train/sample.c)
flags=(-std=c11 -g -O1 -Wall -Wextra -Itools/train -Iinclude
       -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)

"$CC" "${flags[@]}" fuzz/make_seeds.c "${srcs[@]}" -lm -o "$out/make_seeds"
rm -rf "$out/seeds"
"$out/make_seeds" "$out/seeds"

status=0
for t in "${targets[@]}"; do
  case "$t" in safetensors | ckpt | json | data) ;; *) echo "unknown target '$t'" >&2; exit 2 ;; esac
  "$CC" "${flags[@]}" -fsanitize=fuzzer fuzz/fuzz_$t.c "${srcs[@]}" -lm -o "$out/fuzz_$t"
  mkdir -p "$out/corpus/$t"
  cp -n "$out/seeds/$t"/* "$out/corpus/$t/" 2>/dev/null || true
  dict=()
  case "$t" in
    safetensors | json) dict=(-dict=fuzz/safetensors.dict) ;;
    data) dict=(-dict=fuzz/data.dict) ;;
  esac
  echo "== fuzz_$t for ${secs}s"
  if ! "$out/fuzz_$t" "$out/corpus/$t" "${dict[@]}" -max_total_time="$secs" -timeout=10 \
       -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="$out/crash-$t-" 2>"$out/fuzz_$t.log"; then
    echo "fuzz_$t: FOUND A PROBLEM (see $out/fuzz_$t.log and $out/crash-$t-*)" >&2
    tail -n 40 "$out/fuzz_$t.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$out/fuzz_$t.log" || true
    echo "fuzz_$t: nothing found"
  fi
done
exit $status
