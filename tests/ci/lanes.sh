#!/usr/bin/env bash
# `make test`'s lanes: each argument is one lane, a space-separated list of stages (targets of the Makefile) run in
# order through tests/ci/stage.sh; the lanes run beside each other. A lane stops at its first failed stage and
# names the stages it skipped; the other lanes run to their end, so one run reports every failing lane.
# Exit status 0 only when every stage of every lane passed.
# Why lanes: the pair lab, the fleet lab and the VM lab (separate containers, networks and VMs) can overlap, and
# timer-bound waits of one lane fill with another's work. On the 2-core CI machine they keep both cores about 96 %
# busy (session 20's sampler): the run's length follows its total CPU, not the balance of the lanes.
# Usage: lanes.sh "STAGE STAGE..." ["STAGE..." ...]    (env: MAKE, CI_LOGS, CI_TAIL as in stage.sh)
set -uo pipefail

if (($# < 1)); then
  echo "usage: lanes.sh \"STAGE...\" [\"STAGE...\" ...]" >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
make=${MAKE:-make}
logs=${CI_LOGS:-tests/output/ci}

# run_lane N STAGES: the stages of one lane, in order, until one fails.
run_lane() {
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
if [[ -n $sampler ]]; then
  kill -TERM "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
fi
# Why each failed stage failed, again, as the last lines: the lanes' reports and the sampler's summary come first.
for why in "$logs"/*.why; do
  [[ -f $why ]] && cat "$why"
done
exit "$rc"
