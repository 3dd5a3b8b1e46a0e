#!/usr/bin/env bash
# Build the lab node image (a Debian trixie rootfs running systemd as PID 1) without any registry:
# debootstrap -> cached rootfs tarball -> docker import.
# Usage: build.sh IMAGE CACHE_DIR [BUILD_ID]   (BUILD_ID becomes the image label dspark.lab.build)
# CACHE_DIR keeps the raw debootstrap result, so a rebuild after `docker rmi` takes seconds; only a changed
# packages.txt re-runs debootstrap (minutes).
set -euo pipefail

image=${1:?usage: build.sh IMAGE CACHE_DIR}
cache=${2:?usage: build.sh IMAGE CACHE_DIR}
build_id=${3:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite=trixie
mirror=http://deb.debian.org/debian

log() { printf 'lab: %s\n' "$*"; }
die() { printf 'lab: ERROR: %s\n' "$*" >&2; exit 1; }

pkgs=$(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$here/packages.txt" | paste -sd, -)
# The cache holds the raw debootstrap result, keyed by what debootstrap was given; the customisation below is
# cheap and re-applied on every import, so editing it never re-runs debootstrap.
key=$(printf '%s %s %s' "$suite" "$mirror" "$pkgs" | sha256sum | cut -c1-12)
tarball="$cache/rootfs-$suite-$key.tar"
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
# The unpacked rootfs holds device nodes and ~300 MB: always remove it.
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"

if [[ -s $tarball ]]; then
  log "unpacking cached rootfs $tarball"
  mkdir "$root"
  tar --numeric-owner --xattrs -C "$root" -xf "$tarball"
else
  command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"
  log "debootstrap $suite (a few minutes; log: $cache/debootstrap.log)"
  if ! debootstrap --variant=minbase --include="$pkgs" "$suite" "$root" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    tail -n 30 "$cache/debootstrap.log" >&2
    die "debootstrap failed"
  fi
  log "caching rootfs as $tarball"
  tar --numeric-owner --xattrs -C "$root" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  # Tarballs of other package lists are dead weight.
  find "$cache" -maxdepth 1 -name "rootfs-$suite-*.tar" ! -name "${tarball##*/}" -delete
fi

log "customising rootfs"
# Every node must get its own SSH host keys and machine-id: none may be baked into the image.
rm -f "$root"/etc/ssh/ssh_host_*
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
# pam_env warns on every login without it; C.UTF-8 needs no locales package.
echo 'LANG=C.UTF-8' >"$root/etc/default/locale"

# deb822 sources for trixie main (+updates, +security), like a fresh trixie install.
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
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb

# Generate host keys at boot, before sshd starts, so a fresh node boots clean ("running", not "degraded").
cat >"$root/etc/systemd/system/dspark-lab-ssh-hostkeys.service" <<'UNIT'
[Unit]
Description=Generate SSH host keys for this lab node
Before=ssh.service ssh.socket
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/dspark-lab-ssh-hostkeys.service \
  "$root/etc/systemd/system/multi-user.target.wants/dspark-lab-ssh-hostkeys.service"

# Units that cannot work in a container (no consoles, no udev, read-only /proc/sys, network set up by Docker).
for unit in getty.target console-getty.service systemd-networkd-wait-online.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done

# Lab nodes only: Ansible modules reuse what an earlier task compiled (dspark_lab_ansiballz_cache.py says why).
# Debian's python3 reads dist-packages whatever its minor version.
bash "$here/install_ansiballz_cache.sh" "$root/usr/lib/python3/dist-packages"

log "importing rootfs as $image"
# container=docker tells systemd it runs in a container. (docker import here refuses STOPSIGNAL: lab.sh sets
# --stop-signal SIGRTMIN+3 on the containers instead.)
tar --numeric-owner --xattrs -C "$root" -c . | docker import \
  -c 'CMD ["/lib/systemd/systemd"]' \
  -c 'ENV container=docker' \
  -c "LABEL dspark.lab=1 dspark.lab.rootfs=$key dspark.lab.build=$build_id" \
  - "$image" >/dev/null
