#!/usr/bin/env bash
# Runs every benchmark against the lab pair (brought up if needed) and writes bench/results/*.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash lab/lab.sh up
for bench in bench/bench_*.py; do
  echo "== $bench"
  python3 "$bench"
done
