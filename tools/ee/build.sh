#!/usr/bin/env bash
# Build the execution environment dspark-ee:<collection version> (and :latest) for AWX/AAP, with no registry:
#   1. the base image dspark-ee-base:trixie (tools/ee/base.sh: debootstrap + docker import; kept when current),
#   2. the collection's tarball from this checkout (ansible-galaxy collection build; galaxy.yml's build_ignore),
#   3. ansible-builder build with the docker runtime (execution-environment.yml; the base image is never pulled).
# Usage: tools/ee/build.sh            (root or the docker group; debootstrap needs root the first time)
# Environment: DSPARK_EE_FROM (default HEAD: the committed collection; a commit, or "worktree" for the checkout as it
#   is), ANSIBLE_BUILDER (default: ansible-builder on PATH, else .venv/bin, else /tmp/eevenv/bin),
#   DSPARK_EE_IMAGE (default dspark-ee), DSPARK_EE_BASE (default dspark-ee-base:trixie).
# Idempotent: a second run reuses the base image and docker's layer cache (seconds when nothing changed).
# Then: tools/ee/check.sh (the smoke check inside the image). docs/awx.md has the measured times and sizes.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
image=${DSPARK_EE_IMAGE:-dspark-ee}
base=${DSPARK_EE_BASE:-dspark-ee-base:trixie}
work=$repo/.lab/ee

log() { printf 'ee: %s\n' "$*"; }
die() { printf 'ee: ERROR: %s\n' "$*" >&2; exit 1; }

builder=${ANSIBLE_BUILDER:-}
if [[ -z $builder ]]; then
  for b in "$(command -v ansible-builder || true)" "$repo/.venv/bin/ansible-builder" /tmp/eevenv/bin/ansible-builder; do
    [[ -n $b && -x $b ]] && { builder=$b; break; }
  done
fi
[[ -n $builder ]] || die "ansible-builder not found (python3 -m venv /tmp/eevenv && /tmp/eevenv/bin/pip install ansible-builder)"
galaxy=$repo/.venv/bin/ansible-galaxy
[[ -x $galaxy ]] || galaxy=$(command -v ansible-galaxy) || die "ansible-galaxy not found (make venv)"
command -v docker >/dev/null || die "docker not found"

start=$SECONDS

log "base image $base"
"$here/base.sh" "$base"

# The collection as committed (git archive HEAD), unless DSPARK_EE_FROM=worktree: a shared working tree's uncommitted
# edits stay out of the image, and an unchanged commit gives the same tarball (docker's cache holds).
from=${DSPARK_EE_FROM:-HEAD}
src=$repo
if [[ $from != worktree ]]; then
  src=$work/src
  rm -rf "$src" && mkdir -p "$src"
  git -C "$repo" archive "$from" | tar -x -C "$src"
  from="$from ($(git -C "$repo" rev-parse --short "$from"))"
fi
version=$(sed -n 's/^version: *//p' "$src/galaxy.yml")
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || die "no version in galaxy.yml"
log "collection tarball dspark-cluster-$version.tar.gz from $from ($galaxy)"
mkdir -p "$work/dist"
rm -f "$work/dist"/dspark-cluster-*.tar.gz
(cd "$src" && "$galaxy" collection build --force --output-path "$work/dist" . >/dev/null)
# A fixed name: tools/ee/requirements.yml and execution-environment.yml name it.
# ansible-galaxy stamps the build time into the tarball: compare the contents (MANIFEST.json and FILES.json hold
# every file's checksum) and keep the previous tarball when they are the same, so docker's cache holds.
content() { tar -xzOf "$1" MANIFEST.json FILES.json 2>/dev/null | sha256sum; }
if [[ -s $work/dist/dspark-cluster.tar.gz ]] &&
  [[ $(content "$work/dist/dspark-cluster-$version.tar.gz") == $(content "$work/dist/dspark-cluster.tar.gz") ]]; then
  rm "$work/dist/dspark-cluster-$version.tar.gz"
  log "collection unchanged: keeping the previous tarball"
else
  mv "$work/dist/dspark-cluster-$version.tar.gz" "$work/dist/dspark-cluster.tar.gz"
fi
log "tarball: $(du -h "$work/dist/dspark-cluster.tar.gz" | cut -f1), $(tar -tzf "$work/dist/dspark-cluster.tar.gz" | wc -l) entries"

# The PyPI `ansible` wheel of requirements.txt's pin, for the galaxy stage's collections (execution-environment.yml):
# downloaded here, where pip's cache usually holds it already (the venv installed it), not again inside the build.
ansible_pin=$(sed -n 's/^ansible==//p' "$repo/requirements.txt")
pip=$repo/.venv/bin/pip
[[ -x $pip ]] || pip=$(command -v pip3) || die "pip not found (make venv)"
mkdir -p "$work/ansible-wheel"
find "$work/ansible-wheel" -name 'ansible-*.whl' ! -name "ansible-$ansible_pin-py3-none-any.whl" -delete
"$pip" download -q --no-deps --only-binary=:all: -d "$work/ansible-wheel" "ansible==$ansible_pin" \
  || die "pip download ansible==$ansible_pin"
log "ansible $ansible_pin wheel: $(du -h "$work/ansible-wheel/ansible-$ansible_pin-py3-none-any.whl" | cut -f1)"

log "ansible-builder $("$builder" --version) build -t $image:$version -t $image:latest (context $work/context)"
rm -rf "$work/context"
previous=$(docker image inspect -f '{{ .Id }}' "$image:latest" 2>/dev/null || true)
started=$(date +%s)
# --force-rm: a failed step leaves no stopped container behind.
(cd "$repo" && "$builder" build -v 3 --container-runtime docker -f execution-environment.yml -c "$work/context" \
  --extra-build-cli-args=--force-rm -t "$image:$version" "$image:latest")

# When the image changed, the untagged images of earlier builds go: the replaced image and earlier builds' galaxy and
# builder stages (only images labelled dspark.ee, which every image on the base carries, made before this build).
# This build's stages stay: they are the next build's cache.
if [[ $(docker image inspect -f '{{ .Id }}' "$image:latest") != "$previous" ]]; then
  docker image prune -f --filter label=dspark.ee=1 --filter "until=$started" | sed -n 's/^Total/ee: removed earlier builds, total/p'
fi

size=$(docker image inspect -f '{{ .Size }}' "$image:$version" | awk '{ printf "%.0f MB", $1 / 1e6 }')
log "built $image:$version ($size) in $((SECONDS - start)) s"
