#!/usr/bin/env bash
# Runs INSIDE the debootstrapped rootfs (chroot), after lab/vm/rootfs/ was copied over it.
# Usage (from vmlab.sh): chroot ROOTFS /bin/bash -s <customize.sh
set -euo pipefail

# Nothing may survive that would make the two VMs look like one host: host keys come from
# dspark-vm-firstboot.service, the machine-id from systemd at first boot.
rm -f /etc/ssh/ssh_host_*
: >/etc/machine-id
rm -f /var/lib/dbus/machine-id /etc/hostname

# The deb822 file from rootfs/ replaces debootstrap's one-line sources.
rm -f /etc/apt/sources.list

# User spark (passwordless sudo) and root, both by the lab key only: no key is in the image (it is cached on the
# host for every checkout); dspark-vm-lab-key.service writes the one the kernel command line gives at each boot.
id spark >/dev/null 2>&1 || useradd -m -s /bin/bash spark
passwd -l root >/dev/null
echo 'spark ALL=(ALL:ALL) NOPASSWD: ALL' >/etc/sudoers.d/spark
chmod 0440 /etc/sudoers.d/spark
visudo -cqf /etc/sudoers.d/spark

systemctl enable -q systemd-networkd.service dspark-vm-firstboot.service dspark-soft-roce.service \
  dspark-vm-lab-key.service
# Boot stallers and background CPU eaters under TCG (every emulated second counts):
# wait-online blocks for 2 min when a NIC has no carrier/address; firstboot can prompt on the console
# because the machine-id is empty; timers would run apt/e2scrub/fstrim behind the tests' back.
systemctl mask -q systemd-networkd-wait-online.service systemd-firstboot.service getty@tty1.service \
  apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service \
  fstrim.timer
# The NFS server is installed but off, as on a fresh node: the export role enables it (not masked,
# so `systemctl enable --now nfs-server` works as on real hardware).
# nfs-blkmap (pNFS block layouts) is of no use here and one more daemon to start.
systemctl disable -q nfs-server.service nfs-blkmap.service

# A smaller image: no package cache or lists (roles run apt with update_cache when they install).
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /var/log/*.log

# Mark /etc and /var as up to date with /usr, so the first boot skips ldconfig.service and
# systemd-journal-catalog-update.service (ConditionNeedsUpdate), ~8 s of emulated CPU.
touch /etc/.updated /var/.updated
