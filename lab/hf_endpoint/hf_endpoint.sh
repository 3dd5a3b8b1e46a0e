#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# The lab's Hugging Face endpoint (issue #24 item 2): lab/hf_endpoint/hf_endpoint.py, run with this host's python3,
# serves the lab's tiny model (.lab/model, made by lab/model/make.sh) to the checkpoint role's download
# (checkpoint_download_endpoint: HF_ENDPOINT of huggingface_hub), behind a sentinel token, and a pinned wheelhouse of
# huggingface_hub as a pip index (checkpoint_download_pip_index): the lab nodes cannot install from PyPI (they do not
# trust this machine's TLS proxy) nor reach huggingface.co.
# It listens on THIS HOST's address on the lab's management network (the bridge's gateway, 10.231.0.1 for the pair):
# the nodes reach it there through their default route, and no container joins the lab's network (lab.sh down
# removes that network; a container on it would block that). One endpoint per lab, state in .lab/hf_endpoint/<lab>/:
#   address     http://ADDRESS:PORT, the endpoint as the nodes reach it (checkpoint_download_endpoint)
#   token       the sentinel token (0600; made once, kept across up; never on a command line)
#   vars.yml    the variables that switch the checkpoint role's download to the endpoint:
#               ansible-playbook -i inventories/lab/hosts.yml playbooks/checkpoint.yml -e @.lab/hf_endpoint/lab/vars.yml
#   access.log  one line per request, without the token; server.log: the server's own messages; pid, spec
# .lab/hf_endpoint/wheels/ holds the wheelhouse, downloaded by this host's pip from lab/hf_endpoint/requirements.txt
# (pinned, one sha256 per wheel, for the nodes' CPython 3.13 on x86_64: Debian trixie). `lock` regenerates that file.
# Usage: hf_endpoint.sh up | down [--purge] | status | lock   [-i INVENTORY]   (default: inventories/lab/hosts.yml)
# Env: HF_ENDPOINT_PORT (default 5990), HF_ENDPOINT_READY_TIMEOUT (seconds the started server may take to answer,
# default 60), HF_ENDPOINT_MODEL (default .lab/model), HF_ENDPOINT_STATE (default .lab/hf_endpoint),
# HF_ENDPOINT_BIND (an address instead of the lab network's, state in <state>/$HF_ENDPOINT_LAB: tests),
# HF_ENDPOINT_WHEELS (a wheel directory served as it is, nothing downloaded: tests), HF_ENDPOINT_PYTHON (python3).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
INVENTORY=$REPO/inventories/lab/hosts.yml
PORT=${HF_ENDPOINT_PORT:-5990}
MODEL=${HF_ENDPOINT_MODEL:-$REPO/.lab/model}
STATE_ROOT=${HF_ENDPOINT_STATE:-$REPO/.lab/hf_endpoint}
WHEELS=${HF_ENDPOINT_WHEELS:-$STATE_ROOT/wheels}
LOCK_FILE=$HERE/requirements.txt
PYTHON=${HF_ENDPOINT_PYTHON:-python3}
SERVER=$HERE/hf_endpoint.py
# The nodes' interpreter (Debian trixie's python3 on x86_64): the wheels pip downloads for them.
TARGET_PIP_ARGS=(--only-binary=:all: --implementation cp --python-version 3.13 --abi cp313 --abi abi3 --abi none
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)

log() { printf 'hf_endpoint: %s\n' "$*"; }
die() { printf 'hf_endpoint: ERROR: %s\n' "$*" >&2; exit 1; }

# LAB NETWORK: the lab's name and its management network (lab/labspec.py's `lab` and `mgmt` lines).
lab_spec() {
  local spec
  spec=$(python3 "$REPO/lab/labspec.py" "$INVENTORY") || die "cannot read the lab from $INVENTORY (see above)"
  awk '$1 == "lab" {name = $2} $1 == "mgmt" {net = $2} END {if (name != "" && net != "") print name, net}' <<<"$spec"
}

# This host's IPv4 address on NETWORK's bridge (the nodes' gateway): the bridge's own address, else IPAM's gateway.
host_address() {
  local net=$1 json address
  json=$(docker network inspect "$net" 2>/dev/null) ||
    die "network $net does not exist: bring the lab up first (bash lab/lab.sh up${INVENTORY_ARG:+ -i $INVENTORY})"
  address=$(python3 -c '
import json, subprocess, sys
net = json.load(sys.stdin)[0]
bridge = (net.get("Options") or {}).get("com.docker.network.bridge.name") or "br-" + net["Id"][:12]
try:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", bridge], capture_output=True, text=True).stdout
except OSError:
    out = ""
found = [field.split("/")[0] for line in out.splitlines() for i, field in enumerate(line.split()) if line.split()[i - 1] == "inet"]
gateways = [c.get("Gateway") for c in (net.get("IPAM") or {}).get("Config") or [] if c.get("Gateway") and ":" not in c["Gateway"]]
print((found or gateways or [""])[0])
' <<<"$json")
  [[ -n $address ]] || die "no IPv4 address of this host on $net (its bridge has none and IPAM names no gateway)"
  echo "$address"
}

# The model to serve: .lab/model from lab/model/make.sh.
model_check() {
  [[ -d $MODEL/hf/hub && -s $MODEL/repo_id && -s $MODEL/revision ]] ||
    die "$MODEL has no model (hf/hub, repo_id, revision). Fix: bash lab/model/make.sh"
}

# The wheelhouse for the nodes: every wheel of the lock, checked against its sha256; downloaded (into a fresh
# directory, so no wheel of an older lock stays in the index) only when one is missing or the lock changed.
wheels_key() { sha256sum "$LOCK_FILE" | cut -c1-16; }

wheels_ok() {
  [[ $(cat "$WHEELS/.lock-key" 2>/dev/null) == "$(wheels_key)" ]] || return 1
  python3 - "$LOCK_FILE" "$WHEELS" <<'PY'
import hashlib, os, re, sys
lock, wheels = sys.argv[1:]
wanted = set(re.findall(r"--hash=sha256:([0-9a-f]{64})", open(lock).read()))
have = set()
for name in os.listdir(wheels):
    if name.endswith(".whl"):
        with open(os.path.join(wheels, name), "rb") as f:
            have.add(hashlib.sha256(f.read()).hexdigest())
sys.exit(0 if wanted and wanted <= have else 1)
PY
}

ensure_wheels() {
  local work
  if [[ -n ${HF_ENDPOINT_WHEELS:-} ]]; then
    [[ -d $WHEELS ]] || die "HF_ENDPOINT_WHEELS=$WHEELS is not a directory"
    return 0
  fi
  wheels_ok && return 0
  log "downloading the wheelhouse of $LOCK_FILE (pinned, checked by sha256) for the nodes"
  mkdir -p "$STATE_ROOT"
  work=$(mktemp -d "$STATE_ROOT/.wheels.XXXXXX")
  if ! pip download -q --no-deps --require-hashes "${TARGET_PIP_ARGS[@]}" -d "$work" -r "$LOCK_FILE" 2>"$work.err"; then
    grep -v -e 'is ignored: it is neither' "$work.err" >&2 || true
    rm -rf "$work" "$work.err"
    die "pip could not download the wheels of $LOCK_FILE (this host's index above)"
  fi
  rm -f "$work.err"
  chmod 755 "$work"
  wheels_key >"$work/.lock-key"
  rm -rf "$WHEELS"
  mv "$work" "$WHEELS"
  wheels_ok || die "the wheels in $WHEELS do not match $LOCK_FILE"
}

# The sentinel token: made once per lab (0600), never printed, never on a command line.
ensure_token() {
  local file=$1
  if [[ -s $file ]] && [[ $(stat -c %a "$file") == 600 ]]; then return 0; fi
  (umask 077 && python3 -c 'import secrets; print("hf_dsparkLabSentinel" + secrets.token_hex(16))' >"$file.tmp")
  mv "$file.tmp" "$file"
}

# pid_of DIR: the server's pid when it runs (its command line names this state directory), else nothing.
pid_of() {
  local dir=$1 pid
  pid=$(awk '{print $1; exit}' "$dir/pid" 2>/dev/null) || true
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--pid-file $dir/pid"; then echo "$pid"; fi
}

stop_server() {
  local dir=$1 pid i
  pid=$(pid_of "$dir")
  [[ -n $pid ]] || return 0
  log "stopping the endpoint (pid $pid)"
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    [[ -z $(pid_of "$dir") ]] && break
    sleep 0.2
  done
  if [[ -n $(pid_of "$dir") ]]; then kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$dir/pid"
}

# probe URL TOKEN_FILE REPO REVISION: the endpoint answers the model with the token, and 401 without it. The token is
# read from its file by python (argv holds the path only).
probe() {
  "$PYTHON" - "$@" <<'PY'
import json, sys, urllib.error, urllib.request
url, token_file, repo, revision = sys.argv[1:]
token = open(token_file).read().strip()
target = "%s/api/models/%s/revision/%s" % (url, repo, revision)
try:
    urllib.request.urlopen(target, timeout=5)
    sys.exit("answered without the token")
except urllib.error.HTTPError as error:
    if error.code != 401:
        sys.exit("HTTP %d without the token (401 expected)" % error.code)
except OSError as error:
    sys.exit("no answer (%s)" % getattr(error, "reason", error))
request = urllib.request.Request(target, headers={"Authorization": "Bearer " + token})
try:
    with urllib.request.urlopen(request, timeout=5) as answer:
        sha = json.load(answer).get("sha")
except (OSError, ValueError) as error:
    sys.exit("no model info with the token (%s)" % getattr(error, "reason", error))
if sha != revision:
    sys.exit("serves revision %s, not %s" % (sha, revision))
PY
}

# Until the endpoint answers: HF_ENDPOINT_READY_TIMEOUT seconds at most (a loaded machine hashes the model slowly), but
# a server that exited fails at once, with its last words.
wait_ready() {
  local dir=$1 pid=$2 url=$3 repo=$4 revision=$5 limit=${HF_ENDPOINT_READY_TIMEOUT:-60} deadline why
  [[ $limit =~ ^[0-9]+$ ]] || die "HF_ENDPOINT_READY_TIMEOUT must be a number of seconds, not '$limit'"
  deadline=$((SECONDS + limit))
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$dir/server.log" >&2 || true
      die "the endpoint (pid $pid) exited instead of answering on $url (its log above, $dir/server.log)"
    fi
    if [[ -s $dir/pid ]] && why=$(probe "$url" "$dir/token" "$repo" "$revision" 2>&1); then return 0; fi
    if ((SECONDS >= deadline)); then
      tail -n 20 "$dir/server.log" >&2 || true
      die "the endpoint (pid $pid) does not answer on $url after ${limit}s: ${why:-not listening yet} (a slower machine: raise HF_ENDPOINT_READY_TIMEOUT)"
    fi
    sleep 0.5
  done
}

write_vars() {
  local dir=$1 url=$2 repo=$3 revision=$4 package
  package=$(awk -F' ' '/^huggingface[-_]hub==/ {print $1; exit}' "$LOCK_FILE")
  [[ -n $package ]] || die "$LOCK_FILE pins no huggingface_hub"
  printf '%s\n' "$url" >"$dir/address.tmp"
  cat >"$dir/vars.yml.tmp" <<VARS
---
# Written by lab/hf_endpoint/hf_endpoint.sh up: the checkpoint role's download from the LAB Hugging Face endpoint
# (the lab's tiny model behind a sentinel token; huggingface_hub from the endpoint's pinned wheelhouse).
# ansible-playbook -i ${INVENTORY#"$REPO"/} playbooks/checkpoint.yml -e @${dir#"$REPO"/}/vars.yml
checkpoint_download: true
checkpoint_download_endpoint: "$url"
# The endpoint is plain http on the lab's own network: the checkpoint role refuses a token over http without this.
checkpoint_allow_insecure_endpoint: true
checkpoint_download_pip_index: "$url/simple/"
checkpoint_download_package: "$package"
checkpoint_hf_token: "{{ lookup('ansible.builtin.file', '$dir/token') }}"
dspark_model: "$repo"
dspark_model_revision: "$revision"
VARS
  mv "$dir/address.tmp" "$dir/address"
  mv "$dir/vars.yml.tmp" "$dir/vars.yml"
}

cmd_up() {
  local t0=$SECONDS lab net address url dir repo revision spec pid
  model_check
  repo=$(cat "$MODEL/repo_id")
  revision=$(cat "$MODEL/revision")
  if [[ -n ${HF_ENDPOINT_BIND:-} ]]; then
    lab=${HF_ENDPOINT_LAB:-custom} address=$HF_ENDPOINT_BIND
  else
    read -r lab net < <(lab_spec) || die "no lab name or management network in $INVENTORY"
    address=$(host_address "$net")
  fi
  url="http://$address:$PORT"
  [[ $address == *:* ]] && url="http://[$address]:$PORT"
  dir=$STATE_ROOT/$lab
  mkdir -p "$dir"
  ensure_wheels
  ensure_token "$dir/token"
  spec="$address $PORT $repo $revision $(cat "$MODEL/key" 2>/dev/null || echo -) $(wheels_key)"
  pid=$(pid_of "$dir")
  if [[ -n $pid && $(cat "$dir/spec" 2>/dev/null) == "$spec" ]] && probe "$url" "$dir/token" "$repo" "$revision" 2>/dev/null; then
    log "already up (pid $pid)"
  else
    stop_server "$dir"
    if timeout 3 bash -c ": <'/dev/tcp/$address/$PORT'" 2>/dev/null; then
      die "$address:$PORT is already in use. Fix: stop that program, or set HF_ENDPOINT_PORT"
    fi
    rm -f "$dir/pid"
    printf '%s\n' "$spec" >"$dir/spec"
    log "starting the endpoint for $repo@$revision on $url (lab $lab)"
    setsid "$PYTHON" "$SERVER" --hub "$MODEL/hf" --repo-id "$repo" --revision "$revision" --token-file "$dir/token" \
      --bind "$address" --port "$PORT" --wheels "$WHEELS" --log "$dir/access.log" --pid-file "$dir/pid" \
      </dev/null >>"$dir/server.log" 2>&1 9>&- &
    pid=$!
    wait_ready "$dir" "$pid" "$url" "$repo" "$revision"
  fi
  write_vars "$dir" "$url" "$repo" "$revision"
  log "up in $((SECONDS - t0))s: $url serves $repo@$revision (token: ${dir#"$REPO"/}/token)"
  log "checkpoint variables: ${dir#"$REPO"/}/vars.yml"
}

lab_dir() {
  local lab net
  if [[ -n ${HF_ENDPOINT_BIND:-} ]]; then echo "$STATE_ROOT/${HF_ENDPOINT_LAB:-custom}"; return 0; fi
  lab=$(python3 "$REPO/lab/labspec.py" --name "$INVENTORY" 2>/dev/null) || true
  if [[ -z $lab ]]; then read -r lab net < <(lab_spec) || die "no lab name in $INVENTORY"; fi
  echo "$STATE_ROOT/$lab"
}

cmd_down() {
  local purge=${1:-} dir
  dir=$(lab_dir)
  stop_server "$dir"
  rm -rf "$dir"
  if [[ $purge == --purge ]]; then rm -rf "$WHEELS"; fi
  log "down (${dir#"$REPO"/} removed${purge:+, and the wheelhouse})"
}

cmd_status() {
  local dir pid url why
  dir=$(lab_dir)
  pid=$(pid_of "$dir")
  url=$(cat "$dir/address" 2>/dev/null) || true
  if [[ -z $pid ]]; then
    echo "hf_endpoint ${dir##*/} down"
    return 1
  fi
  if why=$(probe "$url" "$dir/token" "$(awk '{print $3}' "$dir/spec")" "$(awk '{print $4}' "$dir/spec")" 2>&1); then
    echo "hf_endpoint ${dir##*/} up pid $pid $url serves $(awk '{print $3 "@" $4}' "$dir/spec")"
    return 0
  fi
  echo "hf_endpoint ${dir##*/} FAIL pid $pid $url: $why"
  return 1
}

# Regenerate requirements.txt: the role's default requirement (checkpoint_download_package), resolved for the nodes'
# interpreter by this host's pip, one sha256 per wheel.
cmd_lock() {
  local requirement work
  requirement=$(awk '/^checkpoint_download_package:/ {print $2; exit}' "$REPO/roles/checkpoint/defaults/main.yml")
  [[ -n $requirement ]] || die "no checkpoint_download_package in roles/checkpoint/defaults/main.yml"
  work=$(mktemp -d)
  if ! pip download -q "${TARGET_PIP_ARGS[@]}" -d "$work" "$requirement" 2> >(grep -v 'is ignored: it is neither' >&2); then
    rm -rf "$work"
    die "pip could not resolve $requirement for the nodes"
  fi
  python3 - "$work" "$requirement" >"$LOCK_FILE.tmp" <<'PY'
import hashlib, os, sys
work, requirement = sys.argv[1:]
print("# The lab endpoint's wheelhouse: %s for the lab nodes' CPython 3.13 on x86_64 (Debian trixie)," % requirement)
print("# one sha256 per wheel. Regenerate: bash lab/hf_endpoint/hf_endpoint.sh lock (then up downloads it again).")
for name in sorted(os.listdir(work), key=str.lower):
    if name.endswith(".whl"):
        project, version = name.split("-")[:2]
        digest = hashlib.sha256(open(os.path.join(work, name), "rb").read()).hexdigest()
        print("%s==%s \\\n    --hash=sha256:%s" % (project, version, digest))
PY
  rm -rf "$work"
  mv "$LOCK_FILE.tmp" "$LOCK_FILE"
  log "wrote $LOCK_FILE ($(grep -c -- '--hash=' "$LOCK_FILE") wheels)"
}

# One up or down at a time (all labs share the wheelhouse).
take_lock() {
  mkdir -p "$STATE_ROOT"
  exec 9>>"$STATE_ROOT/.lock"
  flock -w "${HF_ENDPOINT_LOCK_TIMEOUT:-300}" 9 || die "another hf_endpoint.sh up/down holds $STATE_ROOT/.lock"
}

usage() { echo "usage: $0 up | down [--purge] | status | lock   [-i INVENTORY]" >&2; exit 2; }

main() {
  local cmd=${1:-} purge=
  [[ -n $cmd ]] || usage
  shift
  while (($#)); do
    case $1 in
      -i | --inventory) [[ -n ${2:-} ]] || usage; INVENTORY=$2; INVENTORY_ARG=1; shift 2 ;;
      --purge) [[ $cmd == down ]] || usage; purge=--purge; shift ;;
      *) usage ;;
    esac
  done
  [[ -d $INVENTORY ]] && INVENTORY=$INVENTORY/hosts.yml
  case $cmd in
    up) take_lock; cmd_up ;;
    down) take_lock; cmd_down "$purge" ;;
    status) cmd_status ;;
    lock) cmd_lock ;;
    *) usage ;;
  esac
}

INVENTORY_ARG=
# Sourced (the unit tests), it only defines its functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
