#!/usr/bin/env bash
# Build the execution environment's base image (default dspark-ee-base:trixie) without any registry:
# debootstrap a minimal Debian trixie with python3 and pip -> cached rootfs tarball -> docker import.
# The lab's node image is built the same way (lab/image/build.sh); this one holds no systemd, no sshd.
# Usage: base.sh [IMAGE] [CACHE_DIR]
# Idempotent: an image whose label dspark.ee.rootfs matches the key (packages, the apt-get shim, the local CAs) is kept; the rootfs tarball is
# cached, so a rebuild after `docker rmi` takes seconds; only a changed package list re-runs debootstrap (minutes).
set -euo pipefail

image=${1:-dspark-ee-base:trixie}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${2:-${DSPARK_EE_CACHE:-$repo/.lab/cache/ee}}
suite=trixie
mirror=${DSPARK_EE_MIRROR:-http://deb.debian.org/debian}
# python3 and pip for ansible-builder's stages (its pip_install step is skipped: Debian's python has no ensurepip);
# ca-certificates for pip over HTTPS. Everything else comes through bindep.txt and apt-get in the build.
pkgs=python3,python3-pip,ca-certificates
# Local CAs this machine trusts (a TLS-inspecting egress proxy's, a site's own), added to the image's trust store so
# pip (build) and the playbooks (run) verify TLS as this machine does; every file is named in the log. Set
# DSPARK_EE_EXTRA_CA_DIR= (empty) for an image without them.
ca_dir=${DSPARK_EE_EXTRA_CA_DIR-/usr/local/share/ca-certificates}
cas=()
if [[ -n $ca_dir && -d $ca_dir ]]; then
  while IFS= read -r -d '' f; do cas+=("$f"); done < <(find "$ca_dir" -maxdepth 1 -type f -name '*.crt' -print0 | sort -z)
fi

log() { printf 'ee-base: %s\n' "$*"; }
die() { printf 'ee-base: ERROR: %s\n' "$*" >&2; exit 1; }

rootfs_key=$(printf '%s %s %s' "$suite" "$mirror" "$pkgs" | sha256sum | cut -c1-12)
# The image's key adds what is applied on top of the cached rootfs: the apt-get shim and the local CAs.
key=$( (echo "$rootfs_key"; cat "$here/apt-get-ee" ${cas[@]+"${cas[@]}"}) | sha256sum | cut -c1-12)
if [[ $(docker image inspect -f '{{ index .Config.Labels "dspark.ee.rootfs" }}' "$image" 2>/dev/null || true) == "$key" ]]; then
  log "$image is current (rootfs $key); nothing to do"
  exit 0
fi

tarball="$cache/rootfs-$suite-$rootfs_key.tar"
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"

if [[ -s $tarball ]]; then
  log "unpacking cached rootfs $tarball"
  mkdir "$root"
  tar --numeric-owner --xattrs -C "$root" -xf "$tarball"
else
  command -v debootstrap >/dev/null || PATH=$PATH:/usr/sbin:/sbin
  command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"
  [[ $(id -u) == 0 ]] || die "debootstrap needs root"
  log "debootstrap --variant=minbase $suite with $pkgs (a few minutes; log: $cache/debootstrap.log)"
  if ! debootstrap --variant=minbase --include="$pkgs" "$suite" "$root" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    tail -n 30 "$cache/debootstrap.log" >&2
    die "debootstrap failed"
  fi
  log "customising rootfs"
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<SRC
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  # No recommends, no docs: the image is a controller, not a workstation.
  cat >"$root/etc/apt/apt.conf.d/90dspark-ee" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
APT
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
  : >"$root/etc/machine-id"
  log "caching rootfs as $tarball"
  tar --numeric-owner --xattrs -C "$root" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  find "$cache" -maxdepth 1 -name "rootfs-$suite-*.tar" ! -name "${tarball##*/}" -delete
fi

# ansible-builder's scripts call "$PKGMGR install -y PKGS" and "$PKGMGR clean all"; apt-get takes both, but needs
# package lists first. The shim runs apt-get update in the same layer as the install and drops the lists after.
install -m 0755 "$here/apt-get-ee" "$root/usr/local/sbin/apt-get-ee"
if ((${#cas[@]})); then
  log "trusting this machine's local CAs: ${cas[*]}"
  install -m 0644 "${cas[@]}" "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null
fi

log "importing rootfs as $image"
tar --numeric-owner --xattrs -C "$root" -c . | docker import \
  -c 'CMD ["/bin/bash"]' \
  -c 'ENV LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive PYCMD=/usr/bin/python3' \
  -c "LABEL dspark.ee=1 dspark.ee.rootfs=$key" \
  - "$image" >/dev/null
log "built $image ($(docker image inspect -f '{{ .Size }}' "$image" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
