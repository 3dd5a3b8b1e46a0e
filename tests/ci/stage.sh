#!/usr/bin/env bash
# One stage of `make test`: the command's whole output goes to $CI_LOGS/NAME.log (default tests/output/ci,
# which git and the collection build ignore) and one line tells the stage's result and time. On failure the
# log's failure lines (pytest, Ansible) and its last $CI_TAIL lines (default 40) follow; the exit status is the command's.
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
rm -f "$logs/$name.why"
# Plain text in the log (Molecule, ansible-lint and pytest colour their output when TERM says xterm).
export NO_COLOR=1
# Where a stage spends its time: every log line carries the seconds since the stage began (Python unbuffered so
# that the stamp is the line's own time), and every pytest run lists its slowest tests.
export PYTHONUNBUFFERED=1
export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-} --durations=15 -p dspark_skip_policy"
# No silent skip: every pytest run of a stage fails on a skip that tests/ci/allowed_skips.txt does not allow.
PYTHONPATH="$(cd "$(dirname "$0")" && pwd)/pytest_plugins${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH

start=$SECONDS
# The stamps start from awk's own clock: `date +%s` reads a finer clock that can be a second ahead of awk's
# systime() at a second's edge, and stamped a first line -1.
{
  echo "# stage $name: $* (started $(date '+%F %T'))"
  "$@" </dev/null
} 2>&1 | awk -W interactive 'BEGIN { t0 = systime() } { printf "%5d %s\n", systime() - t0, $0; fflush() }' >"$log"
rc=${PIPESTATUS[0]}
secs=$((SECONDS - start))
# The report is written once, at the end: stages of other lanes (tests/ci/lanes.sh) print beside this one.
if ((rc == 0)); then
  printf '%-26s ok    %5d s\n' "$name" "$secs"
  exit 0
fi
# What failed, before the tail: a lab stage's tail is its teardown, which pushes pytest's summary and Ansible's
# failed task out of it. pytest's FAILED/ERROR lines and assertion lines (E ...); Ansible's fatal/failed/UNREACHABLE
# lines with the task they belong to and up to 4 lines of their indented (YAML) result, not those it then ignored.
# The last 60 of them; the last 12 also go to NAME.why, which tests/ci/lanes.sh prints again once every lane is done.
# The same pass keeps the first Ansible failure that was not ignored with up to 12 lines of its result (NAME.first):
# later failures are often its consequences (the group gate stops the peer), which push it out of the last 12 lines.
first_file=$logs/$name.first
rm -f "$first_file"
failures=$(tail -n +2 "$log" | awk -v first_file="$first_file" '
  function flush() {
    if (whole != "" && !saved) { printf "%s", whole > first_file; saved = 1 }
    printf "%s", buf; buf = ""; whole = ""
  }
  {
    c = $0
    if (match(c, /^ *[0-9]+ /)) c = substr(c, RLENGTH + 1)
    if (open && c ~ /^[ \t]+[^ \t]/) {
      if (cont > 0) { buf = buf $0 "\n"; cont-- }
      if (kept < 12) { whole = whole $0 "\n"; kept++ }
      next
    }
    open = 0
    if (c ~ /^\.\.\.ignoring/) { buf = ""; whole = ""; next }
    flush()
    if (c ~ /^TASK \[/) { task = $0; next }
    if (c ~ /(fatal|failed): \[|FAILED! =>|UNREACHABLE!/) {
      buf = (task != "" ? task "\n" : "") $0 "\n"; whole = buf
      task = ""; open = 1; cont = 4; kept = 0; next
    }
    if (c ~ /^(FAILED|ERROR) |^E  |^[^ ]+::[^ ]+ (FAILED|ERROR)/) print
  }
  END { flush() }' | tail -n 60)
first=$(cat "$first_file" 2>/dev/null)
rm -f "$first_file"
report=$(
  printf '%-26s FAIL  %5d s  (exit %d), whole output in %s\n' "$name" "$secs" "$rc" "$log"
  if [ -n "$failures" ]; then
    echo "  what failed (the log's FAILED, ERROR, E and fatal lines, at most 60):"
    printf '%s\n' "$failures" | cut -c1-400 | sed 's/^/  ! /'
  fi
  echo "  its last $lines lines:"
  tail -n "$lines" "$log" | sed 's/^/  | /'
)
printf '%s\n' "$report"
{
  printf '%s failed (exit %d) after %d s, in %s:\n' "$name" "$rc" "$secs" "$log"
  if [ -n "$failures" ]; then printf '%s\n' "$failures"; else tail -n 5 "$log"; fi | tail -n 12 | cut -c1-300 | sed 's/^/  ! /'
  # Last, where a service that keeps only the end of the output still shows it.
  if [ -n "$first" ]; then
    echo "  its first failure:"
    printf '%s\n' "$first" | cut -c1-300 | sed 's/^/  ! /'
  fi
} >"$logs/$name.why"
exit "$rc"
