#!/bin/sh
# Leak-sweep sampler (molecule serve, issue #13 point 6), run as an unprivileged user on a lab node: what any
# local user sees while the playbooks run. Only lines holding a sentinel are kept; the sentinels come from a
# file, so this script's own command line holds none. Stops when DIR/stop appears.
set -u
dir=$1
n=0
while [ ! -e "$dir/stop" ]; do
    # every process's whole command line, matched against a patterns file: not a job for pgrep
    # shellcheck disable=SC2009
    ps -eo args | grep -F -f "$dir/sentinels" >> "$dir/ps.hits"
    if [ $((n % 25)) -eq 0 ]; then
        systemctl show docker > "$dir/systemctl.last" 2>&1
        grep -F -f "$dir/sentinels" "$dir/systemctl.last" >> "$dir/systemctl.hits"
    fi
    n=$((n + 1))
    echo "$n" > "$dir/samples"
    sleep 0.2
done
