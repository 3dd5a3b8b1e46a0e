#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# A picture of the monitor's web UI in the fleet lab (issue #28), taken with headless Chromium the way an operator
# looks at it: through an SSH tunnel to the monitor's loopback (Prometheus and Alertmanager listen nowhere else).
# Needs the fleet lab serving with playbooks/monitoring.yml applied, and chromium on this machine
# (apt-get install chromium). Not part of make test: the picture is a document (docs/img/), not a proof.
# Usage: lab/screenshot.sh PATH OUT.png   e.g. lab/screenshot.sh '/alerts' docs/img/prometheus-alerts.png
#        LAB_MONITOR_SSH_PORT (2248: spark-router in inventories/lab-fleet/hosts.yml), LAB_MONITOR_PORT (9090),
#        LAB_SCREENSHOT_SIZE (1400,900), LAB_SCREENSHOT_WAIT_MS (the page's scripts' time, 15000)
set -euo pipefail

die() { printf 'screenshot: ERROR: %s\n' "$*" >&2; exit 1; }

(($# == 2)) || die "usage: lab/screenshot.sh PATH OUT.png (PATH on the monitor's Prometheus, e.g. /alerts)"
path=$1 out=$2
[[ $path == /* ]] || die "PATH $path: give the UI's path, starting with / (e.g. /alerts)"
[[ $out == *.png ]] || die "OUT $out: give a .png file"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
key=${DSPARK_LAB_STATE:-$repo/.lab}/id_ed25519
[[ -r $key ]] || die "$key not found: bring the fleet lab up first (make lab-fleet)"
browser=$(command -v chromium || command -v chromium-browser || true)
[[ -n $browser ]] || die "no chromium on this machine: apt-get install chromium"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ssh -N -o ExitOnForwardFailure=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
  -i "$key" -p "${LAB_MONITOR_SSH_PORT:-2248}" -L "127.0.0.1:$port:127.0.0.1:${LAB_MONITOR_PORT:-9090}" \
  spark@127.0.0.1 &
tunnel=$!
trap 'kill "$tunnel" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  curl -fsS -o /dev/null "http://127.0.0.1:$port/-/ready" 2>/dev/null && break
  kill -0 "$tunnel" 2>/dev/null || die "the SSH tunnel to the monitor ended (is the fleet lab up?)"
  sleep 0.2
done
curl -fsS -o /dev/null "http://127.0.0.1:$port/-/ready" || die "Prometheus did not answer through the tunnel"
mkdir -p "$(dirname "$out")"
# --no-sandbox: Chromium's sandbox needs user namespaces this machine's root does not get.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="${LAB_SCREENSHOT_SIZE:-1400,900}" \
  --virtual-time-budget="${LAB_SCREENSHOT_WAIT_MS:-15000}" --screenshot="$out" "http://127.0.0.1:$port$path" 2>/dev/null
[[ -s $out ]] || die "chromium wrote no picture to $out"
printf 'screenshot: %s -> %s\n' "$path" "$out"
