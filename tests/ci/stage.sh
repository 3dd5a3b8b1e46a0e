#!/usr/bin/env bash
# One stage of `make test`: the command's whole output goes to $CI_LOGS/NAME.log (default tests/output/ci,
# which git and the collection build ignore) and one line tells the stage's result and time. On failure the
# last $CI_TAIL lines (default 40) of the log follow and the exit status is the command's.
# Usage: stage.sh NAME COMMAND [ARG...]
set -uo pipefail

if (($# < 2)); then
  echo "usage: stage.sh NAME COMMAND [ARG...]" >&2
  exit 2
fi
name=$1
shift
logs=${CI_LOGS:-tests/output/ci}
lines=${CI_TAIL:-40}
mkdir -p "$logs" || exit 1
log=$logs/$name.log
# Plain text in the log (Molecule, ansible-lint and pytest colour their output when TERM says xterm).
export NO_COLOR=1
# Where a stage spends its time: every log line carries the seconds since the stage began (Python unbuffered so
# that the stamp is the line's own time), and every pytest run lists its slowest tests.
export PYTHONUNBUFFERED=1
export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-} --durations=15"

start=$SECONDS
{
  echo "# stage $name: $* (started $(date '+%F %T'))"
  "$@" </dev/null
} 2>&1 | awk -W interactive -v t0="$(date +%s)" '{ printf "%5d %s\n", systime() - t0, $0; fflush() }' >"$log"
rc=${PIPESTATUS[0]}
secs=$((SECONDS - start))
# The report is written once, at the end: stages of other lanes (tests/ci/lanes.sh) print beside this one.
if ((rc == 0)); then
  printf '%-26s ok    %5d s\n' "$name" "$secs"
  exit 0
fi
report=$(
  printf '%-26s FAIL  %5d s  (exit %d), whole output in %s; its last %d lines:\n' "$name" "$secs" "$rc" "$log" "$lines"
  tail -n "$lines" "$log" | sed 's/^/  | /'
)
printf '%s\n' "$report"
exit "$rc"
