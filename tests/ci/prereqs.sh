#!/usr/bin/env bash
# The system packages (Debian/Ubuntu names) that `make lab` and `make test` need, installed when missing.
# Usage: prereqs.sh venv|lab|test
#   venv  python3 with venv (the controller's virtual environment)
#   lab   venv + the Docker engine and CLI (docker.io; docker-cli too where the distribution splits it out,
#         e.g. Debian 13), debootstrap (the node image), OpenSSH client, rsync
#   test  lab + git and shellcheck (sanity), make, QEMU (the vmlab scenario), nftables, HAProxy (the router's
#         behaviour test, tests/unit/playbooks/test_router_haproxy.py), keepalived (its configuration check), Prometheus and Alertmanager (promtool, amtool:
#         the monitoring role's rule and configuration tests, tests/unit/monitoring)
# Only commands are checked, so a provisioned machine does no apt work and this prints nothing. As root, the
# missing packages are installed with apt-get; otherwise it stops with the exact command to run.
# Starting dockerd when no engine answers is lab/lab.sh's job, not this script's.
set -euo pipefail

profile=${1:-}
case $profile in
  venv | lab | test) ;;
  *)
    echo "usage: prereqs.sh venv|lab|test" >&2
    exit 2
    ;;
esac

# Where commands are looked for: PATH and the sbin directories (dockerd and debootstrap live in /usr/sbin,
# often outside a user's PATH). PREREQS_PATH replaces it (the unit tests).
search_path=${PREREQS_PATH:-$PATH:/usr/local/sbin:/usr/sbin:/sbin}

missing=()

found() { PATH=$search_path command -v "$1" >/dev/null 2>&1; }

add() {
  local p
  for p in "${missing[@]}"; do [[ $p == "$1" ]] && return 0; done
  missing+=("$1")
}

# need PACKAGE COMMAND...: PACKAGE is missing when one of its COMMANDs is not found.
need() {
  local pkg=$1 cmd
  shift
  for cmd; do found "$cmd" || { add "$pkg"; return 0; }; done
}

# Debian 13 moved the docker command out of docker.io into docker-cli (only recommended by docker.io).
docker_cli_package() {
  if found apt-cache && PATH=$search_path apt-cache show docker-cli >/dev/null 2>&1; then
    echo docker-cli
  else
    echo docker.io
  fi
}

check() {
  missing=()
  if found python3; then
    # Debian ships venv without ensurepip: `python3 -m venv` fails until python3-venv is installed.
    PATH=$search_path python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || add python3-venv
  else
    add python3 && add python3-venv
  fi
  [[ $profile == venv ]] && return 0
  # A Docker CLI alone will do while an engine answers; otherwise lab/lab.sh starts dockerd.
  if ! found docker || ! PATH=$search_path docker info >/dev/null 2>&1; then need docker.io dockerd; fi
  found docker || add "$(docker_cli_package)"
  need debootstrap debootstrap
  need openssh-client ssh ssh-keygen
  need rsync rsync
  [[ $profile == lab ]] && return 0
  need git git
  need shellcheck shellcheck
  need make make
  need qemu-system-x86 qemu-system-x86_64
  need qemu-utils qemu-img
  # The serve firewall's unit tests apply rulesets in a user + network namespace (skipped without nft).
  need nftables nft
  # The router's edge is tested against a real HAProxy (skipped without one), its VRRP configuration by keepalived.
  need haproxy haproxy
  need keepalived keepalived
  # The monitoring role's alert rules and configuration are tested with promtool (skipped without it).
  need prometheus promtool
  need prometheus-alertmanager amtool
  # The fleet lab captures the router's health checks on the management bridge (tests/fleet/test_router.py).
  need tcpdump tcpdump
}

check
((${#missing[@]} == 0)) && exit 0

what="make $profile"
[[ $profile == venv ]] && what="the virtual environment"
uid=$(PATH=$search_path id -u)
if [[ $uid != 0 ]]; then
  {
    echo "prereqs: $what needs these packages: ${missing[*]}"
    if found apt-get; then
      echo "prereqs: install them as root, then run make again:"
      echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}"
      echo "prereqs: or let this script pick the names from fresh package lists: sudo bash $0 $profile"
    else
      echo "prereqs: no apt-get here: install their equivalents (Debian names above) as root, then run make again."
    fi
  } >&2
  exit 1
fi
found apt-get || {
  echo "prereqs: $what needs these packages: ${missing[*]} (Debian names); no apt-get here: install them first." >&2
  exit 1
}

# How long apt-get may wait for apt's locks (seconds): a fresh machine often runs its own apt jobs at boot
# (apt-daily, unattended-upgrades), and two `make` runs may install at once. PREREQS_APT_LOCK_WAIT sets it.
lock_wait=${PREREQS_APT_LOCK_WAIT:-600}
[[ $lock_wait =~ ^[0-9]+$ ]] || { echo "prereqs: PREREQS_APT_LOCK_WAIT must be a number of seconds" >&2; exit 2; }

# apt_get COMMAND ARG...: apt-get COMMAND, waiting for apt's locks instead of failing on them. `install` waits
# itself (DPkg::Lock::Timeout); `update` ignores that option for the lists lock, so a run refused for a lock is
# tried again every 5 s until the same deadline. Any other failure ends it at once, with apt's message. Downloads
# are retried (Acquire::Retries). Shell builtins only, apart from apt-get and sleep.
apt_get() {
  local cmd=$1 deadline=$((SECONDS + lock_wait)) err rc said=
  shift
  while :; do
    rc=0
    # stderr captured (to look for a lock message), stdout passed through.
    { err=$(PATH=$search_path apt-get "$cmd" -o "DPkg::Lock::Timeout=$lock_wait" -o Acquire::Retries=3 "$@" 2>&1 1>&3 3>&-) || rc=$?; } 3>&1
    if ((rc == 0)); then
      [[ -z $err ]] || printf '%s\n' "$err" >&2
      return 0
    fi
    case $err in
      *"Could not get lock"* | *"Unable to lock"* | *"Unable to acquire the dpkg frontend lock"*)
        if ((SECONDS < deadline)); then
          [[ -n $said ]] || echo "prereqs: apt-get $cmd: another apt or dpkg run holds apt's lock; waiting for it (up to ${lock_wait}s, PREREQS_APT_LOCK_WAIT)"
          said=1
          PATH=$search_path sleep 5
          continue
        fi
        ;;
    esac
    printf '%s\n' "$err" >&2
    [[ -z $said ]] || echo "prereqs: apt-get $cmd: gave up after waiting ${lock_wait}s for apt's lock" >&2
    return "$rc"
  done
}

start=$SECONDS
export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1
apt_get update -qq
check # again: only the fresh package lists tell whether docker-cli exists
echo "prereqs: installing ${missing[*]} (apt-get, for $what)"
apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
installed=("${missing[@]}")
check
if ((${#missing[@]})); then
  echo "prereqs: still missing after apt-get install: ${missing[*]}" >&2
  exit 1
fi
echo "prereqs: installed ${installed[*]} in $((SECONDS - start)) s"
