#!/usr/bin/env bash
# Second test lab: two Debian trixie VMs (spark-head, spark-worker) under QEMU software emulation, for what
# containers cannot do here: kernel NFS, sysctls, RDMA. Each VM has a management NIC (QEMU user-mode NAT,
# SSH on loopback) and a fabric NIC named enp1s0f1np1 (MTU 9000) carrying a soft-RoCE device rocep1s0f1;
# the two fabric NICs are joined by a QEMU UDP socket link.
# Usage: vmlab.sh build | up | down [--purge] | status | unplug-fabric NODE | plug-fabric NODE
set -euo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$VM_DIR/../.." && pwd)
# The key is shared with the container lab (lab/lab.sh): same path, same format, made only if missing.
KEY="$REPO/.lab/id_ed25519"
STATE="$REPO/.lab/vm"
BASE="$STATE/base.qcow2"
KERNEL="$STATE/vmlinuz"
INITRD="$STATE/initrd.img"
# Base images by recipe, shared by every checkout on this host: a clean clone boots the image an earlier one built
# instead of spending about 80 CPU-seconds on debootstrap. The image holds no key (dspark-vm-lab-key.service).
# shellcheck source=lab/host_cache.sh
source "$VM_DIR/../host_cache.sh"
CACHE=$(host_cache_dir vm)
# Which recipe the base image was built from (checked by up/build).
BASE_RECIPE="$STATE/base.recipe"
MIRROR=http://deb.debian.org/debian
SUITE=trixie
IMAGE_SIZE=4G
FABRIC_IF=enp1s0f1np1
FABRIC_HCA=rocep1s0f1
FABRIC_MTU=9000
NODES=(spark-head spark-worker)
declare -A SSH_PORT=([spark-head]=2231 [spark-worker]=2232)
# The fabric link is one UDP socket per VM on loopback, each sending to the other's.
declare -A FABRIC_UDP=([spark-head]=42231 [spark-worker]=42232)
declare -A PEER=([spark-head]=spark-worker [spark-worker]=spark-head)
# Fixed MACs: lab/vm/rootfs/etc/systemd/network/* match on them (keep both places in step).
declare -A MGMT_MAC=([spark-head]=52:54:00:d5:00:01 [spark-worker]=52:54:00:d5:00:02)
declare -A FABRIC_MAC=([spark-head]=52:54:00:d5:01:01 [spark-worker]=52:54:00:d5:01:02)
MEMORY=2048
# Hard limit for both VMs to answer SSH with the fabric ready. A boot takes 60-90 s under emulation on idle cores, and
# over 300 s while make test's other lanes share the 2 cores (measured); the wait ends as soon as both are ready.
UP_TIMEOUT=${DSPARK_VMLAB_UP_TIMEOUT:-900}
DOWN_TIMEOUT=15
# A VM that answers SSH with its fabric NIC up but no soft-RoCE device for this long is repaired (the unit started
# again, every REPAIR_EVERY s) instead of waited for until UP_TIMEOUT (issue #30: a start job that failed once).
REPAIR_AFTER=${DSPARK_VMLAB_REPAIR_AFTER:-15}
REPAIR_EVERY=30
# Slow-boot reproduction (issue #30): the nodes named here boot WITHOUT their fabric NIC, which is hot-plugged
# LATE_FABRIC_S seconds after the node answers SSH; their kernel command line cuts systemd's device timeout to
# 5 s, so any boot-time job that waited for the NIC has failed long before it appears.
LATE_FABRIC=${DSPARK_VMLAB_LATE_FABRIC:-}
LATE_FABRIC_S=${DSPARK_VMLAB_LATE_FABRIC_S:-20}
LATE_DEVICE_TIMEOUT_S=5
# A login to an emulated guest costs 1-2 s: up and status reuse one master connection per VM.
SSH_OPTS=(-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes
  -o ConnectTimeout=5 -o LogLevel=ERROR
  -o ControlMaster=auto -o "ControlPath=$STATE/ssh-%p" -o ControlPersist=60)

log() { printf 'vmlab: %s\n' "$*"; }
die() { printf 'vmlab: ERROR: %s\n' "$*" >&2; exit 1; }

# --- Build ---------------------------------------------------------------------------------------------

# Hash of everything that goes into the image, to tell a stale base image from a current one.
recipe_hash() {
  { (cd "$VM_DIR" && find packages.txt customize.sh rootfs -type f -print0 | sort -z | xargs -0 sha256sum)
    (cd "$VM_DIR/../image" && sha256sum install_ansiballz_cache.sh dspark_lab_ansiballz_cache.py); } |
    sha256sum | cut -c1-12
}

ensure_host_packages() {
  local missing=() cmd pkg
  for cmd in qemu-system-x86_64:qemu-system-x86 qemu-img:qemu-utils debootstrap:debootstrap; do
    pkg=${cmd#*:}
    command -v "${cmd%%:*}" >/dev/null || missing+=("$pkg")
  done
  ((${#missing[@]} == 0)) && return 0
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ensure_key() {
  [[ -s $KEY ]] || {
    mkdir -p "$(dirname "$KEY")"
    log "creating ssh key $KEY"
    # Generate aside and hard-link into place: if lab.sh makes the key at the same moment, one wins whole.
    local tmp
    tmp=$(mktemp -d "$(dirname "$KEY")/.keygen.XXXXXX")
    ssh-keygen -q -t ed25519 -N '' -C dspark-lab -f "$tmp/k"
    if ln "$tmp/k" "$KEY" 2>/dev/null; then cp "$tmp/k.pub" "$KEY.pub"; fi
    rm -rf "$tmp"
  }
  [[ -s $KEY.pub ]] || ssh-keygen -y -f "$KEY" >"$KEY.pub"
}

# Link (or copy, across file systems) SRC to DEST through a temporary name: DEST is whole or absent.
put_file() {
  ln -f "$1" "$2.tmp" 2>/dev/null || cp "$1" "$2.tmp"
  mv -f "$2.tmp" "$2"
}

# The cached image of RECIPE into $STATE; fails when the cache has none.
from_cache() {
  local dir="$CACHE/$1" f
  for f in base.qcow2 vmlinuz initrd.img; do [[ -s $dir/$f ]] || return 1; done
  put_file "$dir/vmlinuz" "$KERNEL"
  put_file "$dir/initrd.img" "$INITRD"
  put_file "$dir/base.qcow2" "$BASE"
  printf '%s\n' "$1" >"$BASE_RECIPE"
  log "base image of recipe $1 from the host's cache $dir"
}

# The image just built into the cache, and the images of other recipes out of it. A failure only costs the next
# checkout a build.
to_cache() {
  local dir="$CACHE/$1"
  if ! { mkdir -p "$dir" && put_file "$KERNEL" "$dir/vmlinuz" && put_file "$INITRD" "$dir/initrd.img" &&
    put_file "$BASE" "$dir/base.qcow2"; }; then
    log "could not keep the image in $dir (the next checkout builds it)"
    return 0
  fi
  host_cache_keep_only "$CACHE" "$1" 2>/dev/null || true
}

cmd_build() {
  local t0=$SECONDS rootfs raw pkgs recipe
  mkdir -p "$STATE"
  recipe=$(recipe_hash)
  if [[ -s $BASE && -s $KERNEL && -s $INITRD ]]; then
    if [[ $(cat "$BASE_RECIPE" 2>/dev/null) == "$recipe" ]]; then
      log "base image $BASE exists, nothing to build"
      return 0
    fi
    # A stale image would boot yesterday's units (issue #30: the old soft-RoCE unit). Rebuilt only while no VM
    # runs from it; the overlays are thrown away with the VMs anyway.
    if [[ -n $(for n in "${NODES[@]}"; do vm_pid "$n"; done) ]]; then
      warn_stale
      return 0
    fi
    log "lab/vm/ changed since the base image was built: rebuilding it"
    rm -f "$BASE" "$KERNEL" "$INITRD" "$BASE_RECIPE" "$STATE"/spark-*.qcow2
  fi
  ensure_key
  from_cache "$recipe" && return 0
  ensure_host_packages
  rootfs="$STATE/rootfs"
  raw="$STATE/base.raw"
  # A half-finished earlier build is thrown away whole (never through a /proc it left mounted).
  umount "$rootfs/proc" 2>/dev/null || true
  rm -rf --one-file-system "$rootfs" "$raw" "$BASE.tmp"
  pkgs=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$VM_DIR/packages.txt" | paste -sd, -)
  log "debootstrap $SUITE (minbase + $pkgs)"
  mkdir -p "$STATE/debs"
  # --cache-dir keeps the .debs, so a rebuild after `down --purge` downloads nothing.
  debootstrap --variant=minbase --include="$pkgs" --cache-dir="$STATE/debs" \
    "$SUITE" "$rootfs" "$MIRROR" >"$STATE/debootstrap.log" 2>&1 ||
    { tail -n 20 "$STATE/debootstrap.log" >&2; die "debootstrap failed (see $STATE/debootstrap.log)"; }
  log "customising the rootfs"
  cp -a "$VM_DIR/rootfs/." "$rootfs/"
  # Lab nodes only: modules reuse what an earlier task compiled (lab/image/dspark_lab_ansiballz_cache.py says why).
  bash "$VM_DIR/../image/install_ansiballz_cache.sh" "$rootfs/usr/lib/python3/dist-packages"
  # systemctl in the chroot wants /proc.
  mount -t proc proc "$rootfs/proc"
  trap 'umount "$rootfs/proc" 2>/dev/null || true' EXIT
  chroot "$rootfs" /bin/bash -s <"$VM_DIR/customize.sh"
  umount "$rootfs/proc"
  trap - EXIT
  # Direct -kernel boot: no bootloader in the image.
  install -m 0644 "$(printf '%s\n' "$rootfs"/boot/vmlinuz-* | sort -V | tail -n1)" "$KERNEL.tmp"
  install -m 0644 "$(printf '%s\n' "$rootfs"/boot/initrd.img-* | sort -V | tail -n1)" "$INITRD.tmp"
  log "making the disk image ($IMAGE_SIZE, sparse)"
  truncate -s "$IMAGE_SIZE" "$raw"
  mkfs.ext4 -q -L root -d "$rootfs" "$raw"
  qemu-img convert -O qcow2 "$raw" "$BASE.tmp"
  rm -rf --one-file-system "$rootfs" "$raw"
  mv "$KERNEL.tmp" "$KERNEL"
  mv "$INITRD.tmp" "$INITRD"
  printf '%s\n' "$recipe" >"$BASE_RECIPE"
  mv "$BASE.tmp" "$BASE"
  to_cache "$recipe"
  log "built $BASE ($(du -h "$BASE" | cut -f1)) in $((SECONDS - t0))s"
}

warn_stale() {
  [[ $(cat "$BASE_RECIPE" 2>/dev/null) == "$(recipe_hash)" ]] ||
    log "WARNING: lab/vm/ changed since the base image was built; to rebuild: vmlab.sh down --purge && vmlab.sh build"
}

# --- VMs -----------------------------------------------------------------------------------------------

# PID of a node's QEMU, or nothing: a qemu-system-x86_64 with this node's pidfile path as an argument.
# The path is unique to this lab, so a QEMU whose pidfile was deleted under it (lab.sh down --purge
# removes all of .lab/) is still found by scanning /proc.
is_our_qemu() {
  [[ $(readlink "/proc/$1/exe" 2>/dev/null) == */qemu-system-x86_64 ]] &&
    grep -qxzF -- "$2" "/proc/$1/cmdline" 2>/dev/null
}

vm_pid() {
  local pidfile="$STATE/$1.pid" pid f
  pid=$(cat "$pidfile" 2>/dev/null) || true
  if [[ $pid =~ ^[0-9]+$ ]] && is_our_qemu "$pid" "$pidfile"; then
    echo "$pid"
    return 0
  fi
  while read -r f; do
    pid=${f#/proc/}
    pid=${pid%/cmdline}
    if is_our_qemu "$pid" "$pidfile"; then
      echo "$pid"
      return 0
    fi
  done < <(grep -lxzF -- "$pidfile" /proc/[0-9]*/cmdline 2>/dev/null)
}

vm_ssh() {
  local n=$1
  shift
  # 9>&-: the master connection lives on in the background and must not hold the lock.
  ssh -i "$KEY" -p "${SSH_PORT[$n]}" "${SSH_OPTS[@]}" spark@127.0.0.1 "$@" </dev/null 9>&-
}

is_late() { [[ " $LATE_FABRIC " == *" $1 "* ]]; }

# The fabric NIC as a -device / device_add argument: on its own PCIe root port, so it can be unplugged and
# plugged while the VM runs (slow-boot reproduction, the lab's re-plug test).
fabric_nic_spec() {
  echo "virtio-net-pci,id=fabricnic,bus=fabricport,netdev=fabric,mac=${FABRIC_MAC[$1]},host_mtu=$FABRIC_MTU"
}

start_vm() {
  local n=$1 overlay="$STATE/$1.qcow2" out append nic=()
  if [[ ! -e $overlay ]]; then
    # Relative backing file: resolved next to the overlay, so the repo can move.
    qemu-img create -q -f qcow2 -F qcow2 -b base.qcow2 "$overlay"
  fi
  rm -f "$STATE/$n.pid" "$STATE/$n.qmp"
  # The lab key (public) for dspark-vm-lab-key.service: the image holds none.
  append="root=/dev/vda rw console=ttyS0 net.ifnames=0 systemd.hostname=$n dspark.lab_key=$(base64 -w0 <"$KEY.pub")"
  if is_late "$n"; then
    append+=" systemd.default_device_timeout_sec=$LATE_DEVICE_TIMEOUT_S"
  else
    nic=(-device "$(fabric_nic_spec "$n")")
  fi
  # KVM is a software hypervisor here that a stock kernel cannot boot under: TCG only.
  # 9>&-: the daemonized QEMU must not inherit the lock, or the next up/down waits for it forever.
  # -nodefaults: no VGA, floppy or default NIC; the two NICs appear in command-line order (eth0 = mgmt).
  out=$(qemu-system-x86_64 -name "$n" -nodefaults -machine q35 -accel tcg,tb-size=256 -cpu max -smp 1 \
    -m "$MEMORY" -display none -daemonize -pidfile "$STATE/$n.pid" \
    -serial "file:$STATE/$n.serial.log" \
    -kernel "$KERNEL" -initrd "$INITRD" \
    -append "$append" -qmp "unix:$STATE/$n.qmp,server=on,wait=off" \
    -drive "if=none,id=disk,file=$overlay,format=qcow2,discard=unmap" -device virtio-blk-pci,drive=disk \
    -netdev "user,id=mgmt,hostfwd=tcp:127.0.0.1:${SSH_PORT[$n]}-:22" \
    -device "virtio-net-pci,netdev=mgmt,mac=${MGMT_MAC[$n]}" \
    -netdev "socket,id=fabric,udp=127.0.0.1:${FABRIC_UDP[${PEER[$n]}]},localaddr=127.0.0.1:${FABRIC_UDP[$n]}" \
    -device pcie-root-port,id=fabricport,bus=pcie.0,chassis=1,slot=1 "${nic[@]}" \
    -device virtio-rng-pci 2>&1 9>&-) || die "QEMU for $n did not start: $out"
}

# qmp NODE HMP-COMMAND: one human-monitor command on NODE's QMP socket; prints its output, fails on a QMP error
# or on any answer to device_add/device_del (they answer nothing when they worked).
qmp() {
  python3 - "$STATE/$1.qmp" "$2" <<'PY'
import json
import socket
import sys

sock = socket.socket(socket.AF_UNIX)
sock.settimeout(15)
sock.connect(sys.argv[1])
stream = sock.makefile('rw')


def call(command, **arguments):
    stream.write(json.dumps({'execute': command, 'arguments': arguments}) + '\n')
    stream.flush()
    while True:
        reply = json.loads(stream.readline())
        if 'event' not in reply:  # events (DEVICE_DELETED, ...) arrive in between
            return reply


json.loads(stream.readline())  # the greeting
call('qmp_capabilities')
reply = call('human-monitor-command', **{'command-line': sys.argv[2]})
if 'error' in reply:
    sys.exit('QMP error: %s' % reply['error'].get('desc'))
out = reply.get('return', '')
print(out, end='')
sys.exit(1 if sys.argv[2].startswith('device_') and out.strip() else 0)
PY
}

# Whether NODE's QEMU holds the fabric NIC (plugged at start, or hot-plugged and not yet removed).
fabric_present() { qmp "$1" "info qtree" | grep -q 'id "fabricnic"'; }

fabric_plug() {
  local out
  out=$(qmp "$1" "device_add $(fabric_nic_spec "$1")" 2>&1) || die "plugging the fabric NIC into $1 failed: $out"
}

# Unplug the fabric NIC and wait until the guest released it (PCIe hot-unplug takes the guest ~5 s).
fabric_unplug() {
  local n=$1 out deadline=$((SECONDS + 60))
  fabric_present "$n" || { log "$n has no fabric NIC plugged"; return 0; }
  out=$(qmp "$n" "device_del fabricnic" 2>&1) || die "unplugging the fabric NIC of $n failed: $out"
  while fabric_present "$n"; do
    ((SECONDS < deadline)) || die "$n did not release its fabric NIC within 60 s of device_del"
    sleep 1
  done
}

# Inside a VM: the fabric NIC is UP at MTU 9000 and the soft-RoCE port is ACTIVE (prints one line).
# Run over SSH as spark, so a VM that passes it also answers `ssh spark@127.0.0.1 -p PORT true`.
# shellcheck disable=SC2016 # expanded in the VM
FABRIC_PROBE='i=/sys/class/net/'$FABRIC_IF' p=/sys/class/infiniband/'$FABRIC_HCA'/ports/1
echo "$(cat $i/operstate 2>/dev/null || echo missing) $(cat $i/mtu 2>/dev/null || echo -) $(cut -d" " -f2 $p/state 2>/dev/null || echo missing)"'

# PROBED[node]: what the probe last printed, for the timeout message.
declare -A PROBED=()
fabric_ok() {
  PROBED[$1]=$(vm_ssh "$1" "$FABRIC_PROBE" 2>/dev/null) || PROBED[$1]="no ssh"
  [[ ${PROBED[$1]} == "up $FABRIC_MTU ACTIVE" ]]
}

# die_with_console MSG1 MSG2 NODE...: the last serial console lines of each NODE, then die with "MSG1 MSG2".
die_with_console() {
  local msg="$1 $2" n
  shift 2
  for n in "$@"; do
    printf '\n--- last lines of %s ---\n' "$STATE/$n.serial.log" >&2
    # Without the console's carriage returns and colour/terminal escapes.
    tail -n 25 "$STATE/$n.serial.log" 2>/dev/null |
      sed -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\r//g' >&2 || true
  done
  die "$msg"
}

# What wait_ready does for a node that answers SSH but is not ready yet: plug a fabric NIC the VM lacks (at once,
# or LATE_FABRIC_S s after the first answer for a LATE_FABRIC node), and start the soft-RoCE unit again when the NIC
# is up but the device has been missing for REPAIR_AFTER s.
declare -A FIRST_ANSWER=() HCA_MISSING_SINCE=() REPAIRED_AT=()
settle_node() {
  local n=$1 state=${PROBED[$1]} out
  [[ $state != "no ssh" ]] || return 0
  : "${FIRST_ANSWER[$n]:=$SECONDS}"
  if [[ $state == missing* ]] && ! fabric_present "$n"; then
    if is_late "$n" && ((SECONDS < FIRST_ANSWER[$n] + LATE_FABRIC_S)); then
      return 0
    fi
    log "$n: plugging its fabric NIC$(is_late "$n" && echo " ${LATE_FABRIC_S}s after it answered SSH (slow-boot reproduction)")"
    fabric_plug "$n"
    return 0
  fi
  if [[ $state != "up $FABRIC_MTU missing" ]]; then
    unset "HCA_MISSING_SINCE[$n]"
    return 0
  fi
  : "${HCA_MISSING_SINCE[$n]:=$SECONDS}"
  ((SECONDS - HCA_MISSING_SINCE[$n] >= REPAIR_AFTER && SECONDS - ${REPAIRED_AT[$n]:--999} >= REPAIR_EVERY)) || return 0
  REPAIRED_AT[$n]=$SECONDS
  log "$n: $FABRIC_IF is up but $FABRIC_HCA has been missing for $((SECONDS - HCA_MISSING_SINCE[$n]))s: repairing" \
    "(restarting dspark-soft-roce.service)"
  out=$(vm_ssh "$n" "sudo systemctl reset-failed dspark-soft-roce.service; sudo timeout 60 systemctl restart \
    dspark-soft-roce.service || sudo journalctl -b -n 8 --no-pager -u dspark-soft-roce.service" 2>&1) || true
  [[ -z $out ]] || printf '%s\n' "$out" | sed "s/^/vmlab: $n: /"
}

# Wait for SSH and then the fabric on all nodes at once, under one hard deadline.
wait_ready() {
  local deadline=$((SECONDS + UP_TIMEOUT)) pending=("$@") still n why
  while ((${#pending[@]})); do
    still=()
    for n in "${pending[@]}"; do
      [[ -n $(vm_pid "$n") ]] || die_with_console "QEMU of $n exited during boot" "(pid gone)" "$n"
      if fabric_ok "$n"; then
        log "$n ready after $((SECONDS - T0))s"
      else
        settle_node "$n"
        still+=("$n")
      fi
    done
    pending=("${still[@]}")
    ((${#pending[@]})) || break
    if ((SECONDS >= deadline)); then
      why=
      for n in "${pending[@]}"; do why+=" $n: ${PROBED[$n]:-no ssh};"; done
      die_with_console "timed out after ${UP_TIMEOUT}s waiting for ssh as spark and" \
        "$FABRIC_IF up/$FABRIC_MTU + $FABRIC_HCA ACTIVE (last seen:${why%;})" "${pending[@]}"
    fi
    sleep 2
  done
}

# vm_ssh_patient NODE CMD...: vm_ssh, tried again while ssh itself fails (exit 255) for up to 120 s: an emulated guest
# on a loaded machine can miss ConnectTimeout in the banner exchange right after it answered (seen in CI). The
# command's own exit status is returned as it is.
vm_ssh_patient() {
  local n=$1 deadline=$((SECONDS + 120)) rc
  shift
  while :; do
    vm_ssh "$n" "$@" && return 0
    rc=$?
    ((rc == 255 && SECONDS < deadline)) || return "$rc"
    sleep 3
  done
}

# The UDP link must carry full jumbo frames unfragmented: 9000 - 40 (IPv6) - 8 (ICMPv6) = 8952 bytes.
# IPv6 link-local, because the fabric has no IPv4 until a role gives it one.
check_jumbo_link() {
  local peer_ll
  peer_ll=$(vm_ssh_patient spark-worker "ip -6 -o addr show dev $FABRIC_IF scope link" |
    awk '{sub(/\/.*/, "", $4); print $4; exit}')
  [[ -n $peer_ll ]] || die "spark-worker has no IPv6 link-local address on $FABRIC_IF"
  vm_ssh_patient spark-head "ping -6 -M do -s 8952 -c 1 -w 15 $peer_ll%$FABRIC_IF" >/dev/null ||
    die "a DF 8952-byte IPv6 ping spark-head -> spark-worker over $FABRIC_IF failed"
}

cmd_up() {
  local n pid
  T0=$SECONDS
  cmd_build
  ensure_key
  for n in "${NODES[@]}"; do
    pid=$(vm_pid "$n")
    if [[ -n $pid ]]; then
      log "$n already running (pid $pid), left as is"
    else
      log "starting $n (ssh 127.0.0.1:${SSH_PORT[$n]}, serial log $STATE/$n.serial.log)"
      start_vm "$n"
    fi
  done
  wait_ready "${NODES[@]}"
  check_jumbo_link
  cmd_status || die "lab is not healthy after up (vmlab.sh status)"
  log "up in $((SECONDS - T0))s"
}

cmd_down() {
  local purge=${1:-} n pid t0=$SECONDS deadline
  local -A pids=()
  [[ -z $purge || $purge == --purge ]] || die "usage: vmlab.sh down [--purge]"
  # The overlays are thrown away next, so no guest shutdown: QEMU powers off at once on SIGTERM.
  # Signal both first, then wait: each QEMU takes a few seconds to exit.
  for n in "${NODES[@]}"; do
    pid=$(vm_pid "$n")
    [[ -n $pid ]] || continue
    log "stopping $n (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    pids[$n]=$pid
  done
  deadline=$((SECONDS + DOWN_TIMEOUT))
  for n in "${!pids[@]}"; do
    while kill -0 "${pids[$n]}" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "${pids[$n]}" 2>/dev/null; then
      log "$n ignored SIGTERM for ${DOWN_TIMEOUT}s: SIGKILL"
      kill -KILL "${pids[$n]}" 2>/dev/null || true
      while kill -0 "${pids[$n]}" 2>/dev/null; do sleep 0.2; done
    fi
  done
  for n in "${NODES[@]}"; do
    # The SSH master would notice the dead VM only at its next use.
    ssh -o "ControlPath=$STATE/ssh-${SSH_PORT[$n]}" -O exit spark@127.0.0.1 >/dev/null 2>&1 || true
    rm -f "$STATE/$n.pid" "$STATE/$n.qcow2"
  done
  if [[ $purge == --purge ]]; then
    log "removing the base image, kernel and initrd (the .deb cache $STATE/debs and the host's cache $CACHE stay)"
    rm -f "$BASE" "$KERNEL" "$INITRD" "$BASE_RECIPE"
  fi
  log "down in $((SECONDS - t0))s"
}

cmd_status() {
  local n pid ssh_ok fabric oper mtu port rc=0
  for n in "${NODES[@]}"; do
    pid=$(vm_pid "$n")
    ssh_ok=fail fabric=-
    # One SSH round trip (each costs 1-3 s against an emulated guest): answering it is "ssh ok".
    if [[ -n $pid && -s $KEY ]] && fabric=$(vm_ssh "$n" "$FABRIC_PROBE" 2>/dev/null); then
      ssh_ok=ok
      read -r oper mtu port <<<"$fabric"
      fabric="$FABRIC_IF $oper mtu $mtu, $FABRIC_HCA $port"
    fi
    printf '%-13s %-17s ssh %-4s (127.0.0.1:%s)  %s\n' "$n" "${pid:+running pid }${pid:-stopped}" \
      "$ssh_ok" "${SSH_PORT[$n]}" "$fabric"
    [[ $ssh_ok == ok ]] || rc=1
  done
  return "$rc"
}

# Serialise build/up/down: pytest, Ansible runs and engineers share the one pair of VMs.
lock() {
  mkdir -p "$STATE"
  exec 9>>"$STATE/lock"
  flock -w 900 9 || die "another vmlab.sh build/up/down held $STATE/lock for 900s"
}

# unplug-fabric / plug-fabric NODE: take the fabric NIC out of a running VM, or put it back (the soft-RoCE device
# must follow it by itself: the lab's re-plug test); plug-fabric waits until the node's fabric is ready again.
cmd_fabric() {
  local verb=$1 n=${2:-}
  [[ -n $n && -n ${SSH_PORT[$n]:-} ]] || die "usage: vmlab.sh $verb-fabric ${NODES[*]// /|}"
  [[ -n $(vm_pid "$n") ]] || die "$n is not running (vmlab.sh up)"
  if [[ $verb == unplug ]]; then
    fabric_unplug "$n"
    log "$n: fabric NIC unplugged"
  else
    T0=$SECONDS
    fabric_present "$n" || fabric_plug "$n"
    wait_ready "$n"
  fi
}

validate_late() {
  local n
  for n in $LATE_FABRIC; do
    [[ -n ${SSH_PORT[$n]:-} ]] || die "DSPARK_VMLAB_LATE_FABRIC=$LATE_FABRIC: '$n' is not a lab VM (${NODES[*]})"
  done
  [[ $LATE_FABRIC_S =~ ^[0-9]+$ ]] || die "DSPARK_VMLAB_LATE_FABRIC_S=$LATE_FABRIC_S: give whole seconds, e.g. 20"
}

case ${1:-} in
  build) lock; cmd_build ;;
  up) validate_late; lock; cmd_up ;;
  down) lock; cmd_down "${2:-}" ;;
  status) cmd_status ;;
  unplug-fabric | plug-fabric) lock; cmd_fabric "${1%-fabric}" "${2:-}" ;;
  *) echo "usage: $0 build | up | down [--purge] | status | unplug-fabric NODE | plug-fabric NODE" >&2; exit 2 ;;
esac
