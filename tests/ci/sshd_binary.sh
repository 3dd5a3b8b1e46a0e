#!/usr/bin/env bash
# Prints the path of an sshd for tests/unit/playbooks/test_supervisor_node_key.py (a real sshd, run unprivileged on
# loopback: the supervisor key's from= proven). The machine's own when it has one; else openssh-server's binary
# unpacked from the distribution's package into /tmp/dspark-sshd-pkg (apt-get download + dpkg -x: not installed,
# since installing it starts an SSH service on the test machine), with libwrap0 where sshd links it, behind a wrapper
# that sets LD_LIBRARY_PATH. Outside the checkout: the test runs sshd as nobody, which cannot enter a checkout below
# a directory only root may (a clean clone in mktemp -d). Prints nothing when neither works (the test then skips, and
# make test fails on that).
set -euo pipefail
for found in "$(command -v sshd || true)" /usr/sbin/sshd; do
  [[ -n $found && -x $found ]] && { echo "$found"; exit 0; }
done
OUT=${TMPDIR:-/tmp}/dspark-sshd-pkg
[[ -x $OUT/sshd ]] && { echo "$OUT/sshd"; exit 0; }
rm -rf "$OUT" && mkdir -p "$OUT/debs" "$OUT/root"
(cd "$OUT/debs" && apt-get download -q openssh-server >/dev/null 2>&1) || exit 0
# sshd of Debian 12 links libwrap0; Debian 13's does not (its package may be absent: no matter).
(cd "$OUT/debs" && apt-get download -q libwrap0 >/dev/null 2>&1) || true
for deb in "$OUT"/debs/*.deb; do dpkg -x "$deb" "$OUT/root"; done
[[ -x $OUT/root/usr/sbin/sshd ]] || exit 0
libwrap=$(find "$OUT/root" -name 'libwrap.so.0' -print -quit 2>/dev/null || true)
libdir=${libwrap:+$(dirname "$libwrap")}
cat > "$OUT/sshd" <<SH
#!/bin/sh
# sshd from the distribution's package, unpacked (not installed), for tests only (tests/ci/sshd_binary.sh).
exec env LD_LIBRARY_PATH=${libdir:-} $OUT/root/usr/sbin/sshd "\$@"
SH
chmod -R a+rX "$OUT"
chmod 0755 "$OUT/sshd"
echo "$OUT/sshd"
