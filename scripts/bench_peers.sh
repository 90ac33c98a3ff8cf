#!/usr/bin/env bash
# Benchmarks prnn against what users would pick instead (bench/peers/run.py),
# on a machine with an NVIDIA GPU and PyTorch: builds build-gpu/ (the prnn
# program and libprnn_shared.so from cmake/peers.cmake), installs the wheels
# carried in .whl/, builds accelerated-scan's CUDA extension in the
# background while cmake runs, then runs the harness with what is left of
# the time limit. Every section of the harness keeps its own share of the
# time and records its failures instead of stopping.
#
#   scripts/bench_peers.sh [run.py options, e.g. --quick, --sections scan,wall]
#
# Output in $OUT (or gpu-out/peers): peers_h200.md, peers_h200_scan.png,
# peers_h200_layers.png, peers_h200_wall.png, peers_h200.json (every row)
# and peers_h200.log (this script's output). PEERS_PREBUILT=DIR uses DIR/prnn
# and DIR/libprnn_shared.so built beforehand for this card (Release,
# -DCMAKE_CUDA_ARCHITECTURES=90 -DPRNN_BLAS=OFF -DPRNN_NATIVE=OFF, so that
# they run on another machine) instead of building here. The first five belong in
# docs/benchmarks/. PEERS_LIMIT (seconds, default 570) bounds the whole
# script, the build included; PEERS_WORK (default /tmp/prnn-peers) holds the
# per-section results, the extension build and the prnn train run.
#
# Python packages the GPU machine lacks travel as wheels in .whl/ (not in
# git; name .whl in the device call's carry). accelerated-scan 0.3.1 is a
# pure-Python wheel (py3-none-any: its CUDA kernel is compiled at import by
# torch.utils.cpp_extension), fetched on a machine with PyPI by
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux2014_x86_64 -d .whl accelerated-scan==0.3.1
#
# Its only requirement, torch >= 2.9, is on the GPU machine already.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
start=$(date +%s)
limit=${PEERS_LIMIT:-570}
out=${OUT:-gpu-out/peers}
work=${PEERS_WORK:-/tmp/prnn-peers}
mkdir -p "$out" "$work"

main() {
  echo "== bench_peers.sh $*: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), limit ${limit} s"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total --format=csv,noheader || true

  if compgen -G ".whl/*.whl" >/dev/null; then
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
      export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    ls .whl
  else
    echo "no wheels in .whl/: accelerated-scan must be installed already, or its rows will say why not"
  fi

  # accelerated-scan's CUDA extension, compiled while cmake builds prnn; the
  # harness waits for PEERS_WARP_DONE (the build's exit code) before using it.
  export TORCH_EXTENSIONS_DIR="$work/torch_extensions"
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" MAX_JOBS="${MAX_JOBS:-8}"
  export PEERS_WARP_DONE="$work/warp_build.done" PEERS_WARP_LOG="$work/warp_build.log"
  rm -f "$PEERS_WARP_DONE"
  # its own process group (setsid), so that it can be stopped as a whole below
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid bash -c 'timeout 400 python3 -c "import accelerated_scan.warp" >"$PEERS_WARP_LOG" 2>&1; echo $? >"$PEERS_WARP_DONE"' \
    </dev/null >/dev/null 2>&1 &
  warp_pid=$!

  bin=build-gpu
  if [ -n "${PEERS_PREBUILT:-}" ] && "$PEERS_PREBUILT/prnn" --version >/dev/null 2>&1; then
    bin=$PEERS_PREBUILT # built elsewhere for this card: no build here
    echo "== using the prnn program and libprnn_shared.so in $bin: $("$bin/prnn" --version)"
  else
    cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$work/cmake.log" 2>&1 &&
      cmake --build build-gpu -j "$(nproc)" --target prnn prnn_shared >>"$work/cmake.log" 2>&1
    build_rc=$?
    grep -E "error|warning" "$work/cmake.log" | head -20
    echo "== build exit $build_rc after $(($(date +%s) - start)) s"
  fi
  [ -f "$bin/libprnn_shared.so" ] ||
    echo "no $bin/libprnn_shared.so: is include(cmake/peers.cmake) at the end of CMakeLists.txt? (prnn rows will fail)"

  left=$((limit - ($(date +%s) - start) - 45))
  [ "$left" -lt 60 ] && left=60
  timeout $((left + 35)) python3 -u bench/peers/run.py --lib "$bin/libprnn_shared.so" --prnn "$bin/prnn" \
    --out "$out" --work "$work" --budget "$left" --command "scripts/bench_peers.sh $*" "$@"
  rc=$?
  echo "== harness exit $rc after $(($(date +%s) - start)) s"
  if [ "$rc" -ne 0 ]; then # killed or crashed: the report from what the sections saved
    python3 bench/peers/run.py --render-only --out "$out" --work "$work"
  fi
  if kill -0 "$warp_pid" 2>/dev/null; then
    kill -- -"$warp_pid" 2>/dev/null
    echo "the accelerated-scan extension build was still running and was stopped"
  fi
  echo "== accelerated-scan extension build (exit $(cat "$PEERS_WARP_DONE" 2>/dev/null || echo none)), last lines:"
  tail -n 5 "$PEERS_WARP_LOG" 2>/dev/null
  ls -la "$out"
}

main "$@" 2>&1 | tee "$out/peers_h200.log"
