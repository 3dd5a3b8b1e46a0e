#!/usr/bin/env bash
# Runs every benchmark against the lab pair (brought up if needed) and writes bench/results/*.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
make -s lab         # the lab pair and the SIMULATOR image archive the lab inventory distributes
make -s lab-fleet   # the fleet lab (bench_fleet, bench_router_roll, bench_recovery)
for bench in bench/bench_*.py; do
  echo "== $bench"
  (cd bench && python3 "$(basename "$bench")")
done
