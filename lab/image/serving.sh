#!/usr/bin/env bash
# Build the serving labs' node image: the base node image (build.sh) with packages-serving.txt installed, as a DGX
# OS node comes with Docker and the roles' tools. No registry: a container of the base image installs them from the
# Debian mirror and is committed.
# Usage: serving.sh BASE_IMAGE IMAGE [BUILD_ID]   (BUILD_ID becomes the image label dspark.lab.build)
set -euo pipefail

base=${1:?usage: serving.sh BASE_IMAGE IMAGE [BUILD_ID]}
image=${2:?usage: serving.sh BASE_IMAGE IMAGE [BUILD_ID]}
build_id=${3:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
builder=dspark-lab-image-build

log() { printf 'lab: %s\n' "$*"; }

mapfile -t pkgs < <(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$here/packages-serving.txt")
docker rm -f "$builder" >/dev/null 2>&1 || true
trap 'docker rm -f "$builder" >/dev/null 2>&1 || true' EXIT

log "installing into $image: ${pkgs[*]}"
# systemd does not run in the builder, so the packages' scripts enable their units without starting them; the node
# starts them at boot. Nothing that identifies a node may stay in the image (build.sh removed it from the base).
# shellcheck disable=SC2016 # expanded in the builder
docker run --name "$builder" "$base" /bin/bash -c '
  set -euo pipefail
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q "$@" >/dev/null
  apt-get clean
  rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /etc/ssh/ssh_host_* /var/lib/dbus/machine-id
  : >/etc/machine-id
  dpkg-query -W -f "\${Package} \${Version}\n" "$@"
' installer "${pkgs[@]}"
docker commit \
  -c 'CMD ["/lib/systemd/systemd"]' \
  -c 'ENV container=docker' \
  -c "LABEL dspark.lab=1 dspark.lab.build=$build_id dspark.lab.base=$base" \
  "$builder" "$image" >/dev/null
