#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Makes a running lab container a controller host, as an operator makes one with `git clone` and `make venv`: this
# working tree's tracked files at DEST (root-owned, writable by root only) and its venv DEST/.venv with the
# controller's packages, pinned by requirements.txt, and dspark-fleet built from tools/dspark-fleet. The lab's
# containers reach no package index, so the wheels are downloaded here for the container's Python (cached in
# .lab/controller-wheels) and installed there with --no-index. Used by tests/fleet/test_supervisor_service.py (the
# supervisor under a real systemd); the node image has no python3-venv, so pip comes from its own wheel. The
# wheels pass through /var/tmp: docker cp cannot write into the tmpfs the lab mounts on /tmp.
# Usage: lab/controller.sh CONTAINER [DEST]   (DEST default /opt/dspark-cluster; replaced when present)
set -euo pipefail

log() { printf 'controller: %s\n' "$*"; }
die() { printf 'controller: ERROR: %s\n' "$*" >&2; exit 1; }

(($# >= 1 && $# <= 2)) || die "usage: lab/controller.sh CONTAINER [DEST]"
container=$1
dest=${2:-/opt/dspark-cluster}
[[ $dest == /?* && $dest != *[[:space:]]* && $dest != */ ]] || die "DEST $dest: give an absolute path without spaces or a trailing /"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pip=${PIP:-$repo/.venv/bin/pip}
[[ -x $pip ]] || die "$pip not found: run make venv first"
[[ $(docker inspect -f '{{.State.Running}}' "$container" 2>/dev/null) == true ]] || die "container $container is not running"

# What a controller needs of requirements.txt (not the test tools): the same pins.
pins=$(grep -E '^(ansible|ansible-core|ansible-runner|jinja2|netaddr)==' "$repo/requirements.txt")
[[ $(wc -l <<<"$pins") == 5 ]] || die "requirements.txt lacks one of ansible, ansible-core, ansible-runner, jinja2, netaddr pinned with =="
py=$(docker exec "$container" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') ||
  die "no python3 in $container"
arch=$(docker exec "$container" uname -m)
key=$(printf '%s\n' "$py" "$arch" "$pins" | sha256sum | cut -c1-12)
wheels=$repo/.lab/controller-wheels/$key
if [[ ! -f $wheels/.complete ]]; then
  log "downloading the controller's wheels for Python $py on $arch into $wheels"
  rm -rf "$wheels"
  mkdir -p "$wheels"
  platforms=()
  for p in manylinux2014 manylinux_2_17 manylinux_2_28 manylinux_2_34; do platforms+=(--platform "${p}_$arch"); done
  # shellcheck disable=SC2086 # one pin per word
  "$pip" download -q --disable-pip-version-check --only-binary=:all: --python-version "$py" --implementation cp \
    "${platforms[@]}" -d "$wheels" pip $pins
  touch "$wheels/.complete"
fi
fleet=$(mktemp -d)
trap 'rm -rf "$fleet"' EXIT
# Built from a copy: setuptools leaves build/ and egg-info beside the sources it builds.
(cd "$repo" && git ls-files -z tools/dspark-fleet | tar --null -T - -cf -) | tar -x -C "$fleet"
"$pip" wheel -q --disable-pip-version-check --no-deps -w "$fleet" "$fleet/tools/dspark-fleet" >/dev/null
rm -rf "$fleet/tools"
printf '%s\n' "$pins" >"$fleet/pins"

log "copying the checkout into $container:$dest"
docker exec "$container" rm -rf "$dest" /var/tmp/dspark-controller-wheels
docker exec "$container" install -d -o root -g root -m 0755 "$dest" /var/tmp/dspark-controller-wheels
# Tracked files as they are in the working tree (what the tests run), owned by root, group and others read-only;
# the collections/ symlink goes as a symlink.
(cd "$repo" && git ls-files -z | tar --null -T - --owner=0 --group=0 --mode=go-w -cf -) |
  docker exec -i "$container" tar -x --no-same-permissions -C "$dest"
docker cp -q "$wheels/." "$container:/var/tmp/dspark-controller-wheels/"
docker cp -q "$fleet/." "$container:/var/tmp/dspark-controller-wheels/"
# The collections the roles and playbooks use (requirements.txt says which) and community.docker's dependency.
collections="community/docker community/library_inventory_filtering_v1 ansible/posix ansible/utils community/general"

log "making $dest/.venv (Python $py in $container)"
# The venv as requirements.txt pins it, but of the `ansible` package only the collections the roles use (and their
# dependency): its 36,000 files would take minutes to unpack into a container on a loaded machine.
docker exec -e COLLECTIONS="$collections" "$container" sh -euc '
  umask 022
  venv=$1/.venv wheels=/var/tmp/dspark-controller-wheels
  python3 -m venv --without-pip "$venv"
  "$venv/bin/python" "$(ls "$wheels"/pip-*.whl)/pip" install -q --disable-pip-version-check --no-index \
    --find-links "$wheels" --no-cache-dir --no-compile pip $(grep -v "^ansible==" "$wheels/pins") dspark-fleet
  "$venv/bin/python" -c "
import sys, sysconfig, zipfile
keep = tuple(\"ansible_collections/%s/\" % c for c in sys.argv[2:])
with zipfile.ZipFile(sys.argv[1]) as wheel:
    wheel.extractall(sysconfig.get_paths()[\"purelib\"], [n for n in wheel.namelist() if n.startswith(keep)])
" "$(ls "$wheels"/ansible-[0-9]*.whl)" $COLLECTIONS
  rm -rf "$wheels"
  "$venv/bin/dspark-fleet" --help >/dev/null
  "$venv/bin/ansible-doc" -t module community.docker.docker_image_info >/dev/null
' sh "$dest" 2>&1 || die "the venv in $container:$dest could not be made"
log "$container is a controller: $dest, $dest/.venv/bin/dspark-fleet"
