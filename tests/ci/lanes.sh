#!/usr/bin/env bash
# `make test`'s lanes: each argument is one lane, a space-separated list of stages (targets of the Makefile) run in
# order through tests/ci/stage.sh; the lanes run beside each other. A lane stops at its first failed stage and
# names the stages it skipped; the other lanes run to their end, so one run reports every failing lane.
# --pool "ITEM ITEM...": stages that need no lab of their own. A lane that has passed its own stages takes the next
# item, in the order given, until none is left, so that the lane that ends first does the rest instead of one lane
# ending minutes after the others. An item is one stage or several joined by "+" (run in order by one lane: stages
# that must not overlap). Items no lane took are named at the end, and fail the run.
# Exit status 0 only when every stage of every lane and every pool item passed.
# Why lanes: the pair lab, the fleet lab and the VM lab (separate containers, networks and VMs) can overlap, and
# timer-bound waits of one lane fill with another's work. On the 2-core CI machine they keep both cores about 96 %
# busy (session 20's sampler): the run's length follows its total CPU, and its tail the balance of the lanes.
# Usage: lanes.sh [--pool "ITEM..."] "STAGE STAGE..." ["STAGE..." ...]    (env: MAKE, CI_LOGS, CI_TAIL as in stage.sh)
set -uo pipefail

pool=()
if [[ ${1:-} == --pool ]]; then
  read -r -a pool <<<"${2:-}"
  shift 2 || shift $#
fi
if (($# < 1)); then
  echo "usage: lanes.sh [--pool \"ITEM...\"] \"STAGE...\" [\"STAGE...\" ...]" >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
make=${MAKE:-make}
logs=${CI_LOGS:-tests/output/ci}
queue=$(mktemp -d)
trap 'rm -rf "$queue"' EXIT
((${#pool[@]})) && printf '%s\n' "${pool[@]}" >"$queue/items"
touch "$queue/items"

# run_stages N STAGES: stages in order until one fails.
run_stages() {
  local n=$1 stage left
  read -r -a left <<<"$2"
  while ((${#left[@]})); do
    stage=${left[0]}
    left=("${left[@]:1}")
    if ! bash "$here/stage.sh" "$stage" "$make" --no-print-directory "$stage"; then
      ((${#left[@]})) && echo "lane $n stopped: ${left[*]} not run"
      return 1
    fi
  done
}

# take_item: the pool's next item, its stages space-separated (nothing when the pool is empty), under a lock.
take_item() {
  (
    flock 9
    local item
    item=$(head -n 1 "$queue/items")
    tail -n +2 "$queue/items" >"$queue/rest" && mv "$queue/rest" "$queue/items"
    echo "${item//+/ }"
  ) 9>"$queue/lock"
}

# run_lane N STAGES: the lane's own stages, then pool items while there are any.
run_lane() {
  local n=$1 item
  run_stages "$n" "$2" || return 1
  while item=$(take_item) && [[ -n $item ]]; do
    run_stages "$n" "$item" || return 1
  done
}

# How busy the machine was meanwhile (tests/ci/cpu_sample.py): its samples in $CI_LOGS/cpu.log, a summary at the end.
sampler=
if [[ -n ${CI_LOGS:-} ]] && mkdir -p "$CI_LOGS"; then
  rm -f "$CI_LOGS/cpu.log"
  python3 "$here/cpu_sample.py" "$CI_LOGS/cpu.log" "${CI_CPU_INTERVAL:-10}" &
  sampler=$!
  # Its header is written once it handles SIGTERM: a stop before that would lose the summary.
  for _ in $(seq 1 50); do [[ -s $CI_LOGS/cpu.log ]] && break; sleep 0.1; done
fi

# Each failed stage leaves NAME.why (tests/ci/stage.sh); a CI service may show only the end of the output.
rm -f "$logs"/*.why 2>/dev/null

pids=()
n=0
for lane; do
  n=$((n + 1))
  run_lane "$n" "$lane" &
  pids+=("$!")
done
rc=0
for pid in "${pids[@]}"; do
  wait "$pid" || rc=1
done
if [[ -s $queue/items ]]; then
  echo "pool: $(tr '\n' ' ' <"$queue/items")not run (every lane stopped before it)"
  rc=1
fi
if [[ -n $sampler ]]; then
  kill -TERM "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
fi
# Why each failed stage failed, again, as the last lines: the lanes' reports and the sampler's summary come first.
for why in "$logs"/*.why; do
  [[ -f $why ]] && cat "$why"
done
exit "$rc"
