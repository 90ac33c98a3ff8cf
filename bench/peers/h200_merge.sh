#!/usr/bin/env bash
# Regenerates docs/benchmarks/peers_h200.md (and its plots and JSON) from the nine
# H200 runs kept in docs/benchmarks/peers_h200_runs/ (see the report preface).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 bench/peers/merge.py --out docs/benchmarks --preface docs/benchmarks/peers_h200.preface.md \
  docs/benchmarks/peers_h200_runs/run{1,2,3,4,5,6,7,8,9}.json
