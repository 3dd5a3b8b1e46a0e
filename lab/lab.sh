#!/usr/bin/env bash
# Test lab: two simulated NVIDIA DGX Spark nodes (spark-head, spark-worker) as systemd containers on the
# host's Docker engine, with a management network (NAT, SSH published on loopback) and an internal MTU-9000
# fabric network whose interface is renamed to the ConnectX name enp1s0f1np1.
# Usage: lab.sh up | down [--purge] | status
set -euo pipefail

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$LAB_DIR")
STATE="$REPO/.lab"
KEY="$STATE/id_ed25519"
IMAGE=dspark-lab/node:trixie
MGMT_NET=dspark-lab-mgmt
MGMT_SUBNET=10.231.0.0/24
FABRIC_NET=dspark-lab-fabric
FABRIC_SUBNET=192.168.100.0/24
# Docker gives the host bridge the first address by default, which is spark-head's: move it to the end.
FABRIC_GATEWAY=192.168.100.254
FABRIC_IF=enp1s0f1np1
FABRIC_MTU=9000
NODES=(spark-head spark-worker)
declare -A MGMT_IP=([spark-head]=10.231.0.11 [spark-worker]=10.231.0.12)
declare -A FABRIC_IP=([spark-head]=192.168.100.1 [spark-worker]=192.168.100.2)
declare -A SSH_PORT=(
  [spark-head]=${DSPARK_LAB_HEAD_SSH_PORT:-2221}
  [spark-worker]=${DSPARK_LAB_WORKER_SSH_PORT:-2222}
)
SSH_OPTS=(-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes
  -o ConnectTimeout=5 -o LogLevel=ERROR)

log() { printf 'lab: %s\n' "$*"; }
die() { printf 'lab: ERROR: %s\n' "$*" >&2; exit 1; }

# wait_for SECONDS WHAT CMD...: poll CMD every second; die with WHAT after SECONDS.
wait_for() {
  local limit=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out after ${limit}s waiting for $what"
    sleep 1
  done
}

# --- Docker engine -------------------------------------------------------------------------------------

engine_up() { docker info >/dev/null 2>&1; }

# The host has no systemd: if no engine answers, run dockerd ourselves, detached from this shell.
ensure_engine() {
  engine_up && return 0
  command -v dockerd >/dev/null || die "no Docker engine and no dockerd (apt-get install docker.io)"
  mkdir -p "$STATE"
  log "starting dockerd (log: $STATE/dockerd.log)"
  # 9>&-: dockerd must not inherit the up/down lock, or it would hold it for its whole life.
  setsid nohup dockerd >>"$STATE/dockerd.log" 2>&1 </dev/null 9>&- &
  local deadline=$((SECONDS + 60))
  until engine_up; do
    if ((SECONDS >= deadline)); then
      tail -n 20 "$STATE/dockerd.log" >&2 || true
      die "dockerd did not answer within 60s (see $STATE/dockerd.log)"
    fi
    sleep 1
  done
}

# --- Image, key, networks ------------------------------------------------------------------------------

# The image is rebuilt when absent or built from other recipe files (label dspark.lab.build); running nodes
# keep their old image until `down` + `up`.
ensure_image() {
  local want have old t0=$SECONDS
  want=$(cat "$LAB_DIR/image/build.sh" "$LAB_DIR/image/packages.txt" | sha256sum | cut -c1-12)
  have=$(docker image inspect -f '{{index .Config.Labels "dspark.lab.build"}}' "$IMAGE" 2>/dev/null) || true
  [[ $have == "$want" ]] && return 0
  old=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null) || true
  log "building image $IMAGE (${have:+outdated, }recipe $want)"
  bash "$LAB_DIR/image/build.sh" "$IMAGE" "$STATE/cache" "$want"
  # The previous build is now untagged; drop it unless a container still uses it.
  if [[ -n $old ]]; then docker rmi "$old" >/dev/null 2>&1 || true; fi
  log "image built in $((SECONDS - t0))s"
}

ensure_key() {
  [[ -s $KEY && -s $KEY.pub ]] && return 0
  mkdir -p "$STATE"
  rm -f "$KEY" "$KEY.pub"
  log "creating ssh key $KEY"
  ssh-keygen -q -t ed25519 -N '' -C dspark-lab -f "$KEY"
}

ensure_networks() {
  if ! docker network inspect "$MGMT_NET" >/dev/null 2>&1; then
    log "creating network $MGMT_NET ($MGMT_SUBNET, NAT)"
    docker network create --driver bridge --subnet "$MGMT_SUBNET" --label dspark.lab=1 "$MGMT_NET" >/dev/null
  fi
  if ! docker network inspect "$FABRIC_NET" >/dev/null 2>&1; then
    # --internal: no gateway, so no default route and no NAT over the fabric, like a point-to-point link.
    log "creating network $FABRIC_NET ($FABRIC_SUBNET, internal, MTU $FABRIC_MTU)"
    docker network create --driver bridge --internal --subnet "$FABRIC_SUBNET" --gateway "$FABRIC_GATEWAY" \
      -o com.docker.network.driver.mtu="$FABRIC_MTU" --label dspark.lab=1 "$FABRIC_NET" >/dev/null
  fi
}

# --- Nodes ---------------------------------------------------------------------------------------------

node_state() {
  local s
  s=$(docker container inspect -f '{{.State.Status}}' "$1" 2>/dev/null) || true
  echo "${s:-absent}"
}

# The loopback port a node's sshd is published on, as created.
node_port() { docker inspect -f '{{with index .HostConfig.PortBindings "22/tcp"}}{{(index . 0).HostPort}}{{end}}' "$1" 2>/dev/null || true; }

create_node() {
  local n=$1
  log "creating $n (mgmt ${MGMT_IP[$n]}, fabric ${FABRIC_IP[$n]}, ssh 127.0.0.1:${SSH_PORT[$n]})"
  # --privileged fails on this host (no CAP_SYS_RESOURCE); this set is what runs systemd and Docker-in-Docker.
  # /var/lib/docker is a volume because the inner engine cannot use overlay2 on top of overlay2.
  # SIGRTMIN+3 asks systemd for a clean shutdown on `docker stop`.
  docker create --name "$n" --hostname "$n" --label dspark.lab=1 --stop-signal SIGRTMIN+3 \
    --network "$MGMT_NET" --ip "${MGMT_IP[$n]}" -p "127.0.0.1:${SSH_PORT[$n]}:22" \
    --cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add SYS_PTRACE --cap-add MKNOD \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --cgroupns=host -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
    --tmpfs /run:rw,exec,mode=755 --tmpfs /run/lock --tmpfs /tmp:rw,exec,mode=1777 \
    -v "$n-docker:/var/lib/docker" \
    --add-host "spark-head-fabric:${FABRIC_IP[spark-head]}" \
    --add-host "spark-worker-fabric:${FABRIC_IP[spark-worker]}" \
    "$IMAGE" >/dev/null
  docker network connect --ip "${FABRIC_IP[$n]}" "$FABRIC_NET" "$n"
}

ensure_node() {
  local n=$1 state port
  state=$(node_state "$n")
  port=$(node_port "$n")
  if [[ $state != absent && $port != "${SSH_PORT[$n]}" ]]; then
    # Ports are fixed at create time; the /var/lib/docker volume survives the re-create.
    log "$n publishes ssh on ${port:-nothing}, wanted ${SSH_PORT[$n]}: re-creating it"
    docker rm -f "$n" >/dev/null
    state=absent
  fi
  if [[ $state == absent ]]; then create_node "$n"; fi
  if [[ $(node_state "$n") != running ]]; then
    log "starting $n"
    docker start "$n" >/dev/null
  fi
}

systemd_settled() {
  local s
  s=$(docker exec "$1" systemctl is-system-running 2>/dev/null) || true
  [[ $s == running || $s == degraded ]]
}

# Runs inside a node as root (docker exec bash -c): rename the fabric NIC, host keys, user spark, authorized keys, sshd.
# Every step checks first, so re-running it on a configured node changes nothing.
# shellcheck disable=SC2016 # expanded inside the node
NODE_SETUP='
set -euo pipefail
fabric_ip=$1 fabric_if=$2 mtu=$3
pubkey=$(cat)
dev=$(ip -o -4 addr show | awk -v ip="$fabric_ip/" "index(\$4, ip) == 1 {sub(/@.*/, \"\", \$2); print \$2; exit}")
[[ -n $dev ]] || { echo "no interface has $fabric_ip" >&2; exit 1; }
if [[ $dev != "$fabric_if" ]]; then
  ip link set "$dev" down
  ip link set "$dev" name "$fabric_if"
  ip link set "$fabric_if" up
  echo "renamed $dev to $fabric_if"
fi
got=$(cat "/sys/class/net/$fabric_if/mtu")
[[ $got == "$mtu" ]] || { echo "$fabric_if has MTU $got, expected $mtu" >&2; exit 1; }
restart=
if [[ ! -s /etc/ssh/ssh_host_ed25519_key ]]; then ssh-keygen -A >/dev/null; restart=1; fi
id spark >/dev/null 2>&1 || useradd -m -s /bin/bash spark
if [[ ! -f /etc/sudoers.d/spark ]]; then
  echo "spark ALL=(ALL:ALL) NOPASSWD: ALL" >/etc/sudoers.d/spark.tmp
  chmod 0440 /etc/sudoers.d/spark.tmp
  visudo -cqf /etc/sudoers.d/spark.tmp
  mv /etc/sudoers.d/spark.tmp /etc/sudoers.d/spark
fi
for home in /root /home/spark; do
  owner=$(stat -c %U "$home")
  install -d -m 0700 -o "$owner" -g "$owner" "$home/.ssh"
  if [[ "$(cat "$home/.ssh/authorized_keys" 2>/dev/null)" != "$pubkey" ]]; then
    printf "%s\n" "$pubkey" >"$home/.ssh/authorized_keys"
    chown "$owner:$owner" "$home/.ssh/authorized_keys"
    chmod 0600 "$home/.ssh/authorized_keys"
  fi
done
if [[ -n $restart ]]; then systemctl restart ssh
elif ! systemctl is-active -q ssh; then systemctl start ssh
fi
'

setup_node() {
  local n=$1 out
  wait_for 90 "systemd in $n to finish booting" systemd_settled "$n"
  out=$(docker exec -i "$n" bash -c "$NODE_SETUP" node-setup "${FABRIC_IP[$n]}" "$FABRIC_IF" "$FABRIC_MTU" \
    <"$KEY.pub") || die "setting up $n failed: $out"
  [[ -z $out ]] || log "$n: $out"
}

node_ssh() {
  local n=$1
  shift
  ssh -i "$KEY" -p "${SSH_PORT[$n]}" "${SSH_OPTS[@]}" spark@127.0.0.1 "$@"
}

# A node is fine when it runs, publishes the wanted port, has its fabric NIC renamed and answers ssh as spark.
node_ok() {
  local n=$1
  [[ $(node_state "$n") == running ]] || return 1
  [[ $(node_port "$n") == "${SSH_PORT[$n]}" ]] || return 1
  docker exec "$n" test -e "/sys/class/net/$FABRIC_IF" || return 1
  node_ssh "$n" true </dev/null >/dev/null 2>&1
}

lab_ok() {
  engine_up || return 1
  docker image inspect "$IMAGE" >/dev/null 2>&1 || return 1
  local n
  for n in "${NODES[@]}"; do node_ok "$n" || return 1; done
}

# --- Commands ------------------------------------------------------------------------------------------

cmd_status() {
  if ! engine_up; then
    printf '%-13s engine-down\n' "${NODES[@]}"
    return 1
  fi
  local n state mgmt fabric ssh_ok rc=0
  for n in "${NODES[@]}"; do
    state=$(node_state "$n")
    mgmt=- fabric=- ssh_ok=fail
    if [[ $state == running ]]; then
      mgmt=$(docker inspect -f "{{with index .NetworkSettings.Networks \"$MGMT_NET\"}}{{.IPAddress}}{{end}}" "$n")
      fabric=$(docker exec "$n" sh -c "ip -o -4 addr show dev $FABRIC_IF 2>/dev/null | awk '{print \$4}';
        cat /sys/class/net/$FABRIC_IF/mtu 2>/dev/null" | paste -sd' ' -) || true
      if [[ -n $fabric ]]; then fabric="$FABRIC_IF ${fabric% *} mtu ${fabric##* }"; else fabric="$FABRIC_IF missing"; fi
      [[ -s $KEY ]] && node_ssh "$n" true </dev/null >/dev/null 2>&1 && ssh_ok=ok
    fi
    printf '%-13s %-8s mgmt %-12s fabric %-36s ssh %s (127.0.0.1:%s)\n' \
      "$n" "$state" "${mgmt:--}" "$fabric" "$ssh_ok" "${SSH_PORT[$n]}"
    [[ $state == running && $ssh_ok == ok && $fabric == *" mtu $FABRIC_MTU" ]] || rc=1
  done
  return "$rc"
}

cmd_up() {
  local t0=$SECONDS n
  ensure_engine
  if lab_ok; then
    log "already up, nothing to do"
  else
    ensure_image
    ensure_key
    ensure_networks
    for n in "${NODES[@]}"; do ensure_node "$n"; done
    for n in "${NODES[@]}"; do setup_node "$n"; done
    for n in "${NODES[@]}"; do
      wait_for 60 "ssh spark@127.0.0.1:${SSH_PORT[$n]} ($n)" node_ssh "$n" true
    done
    # The fabric must carry full jumbo frames unfragmented (9000 - 20 IP - 8 ICMP = 8972 bytes).
    wait_for 20 "a DF 8972-byte ping spark-head -> spark-worker over $FABRIC_IF" \
      docker exec spark-head ping -M "do" -s 8972 -c1 -W2 "${FABRIC_IP[spark-worker]}"
    wait_for 20 "a DF 8972-byte ping spark-worker -> spark-head over $FABRIC_IF" \
      docker exec spark-worker ping -M "do" -s 8972 -c1 -W2 "${FABRIC_IP[spark-head]}"
  fi
  cmd_status || die "lab is not healthy after up"
  log "up in $((SECONDS - t0))s"
}

cmd_down() {
  local purge=${1:-} n
  [[ -z $purge || $purge == --purge ]] || die "usage: lab.sh down [--purge]"
  ensure_engine
  for n in "${NODES[@]}"; do
    if [[ $(node_state "$n") != absent ]]; then
      log "removing $n"
      docker rm -f "$n" >/dev/null
    fi
    if docker volume inspect "$n-docker" >/dev/null 2>&1; then
      log "removing volume $n-docker"
      docker volume rm "$n-docker" >/dev/null
    fi
  done
  for n in "$FABRIC_NET" "$MGMT_NET"; do
    if docker network inspect "$n" >/dev/null 2>&1; then
      log "removing network $n"
      docker network rm "$n" >/dev/null
    fi
  done
  if [[ $purge == --purge ]]; then
    if docker image inspect "$IMAGE" >/dev/null 2>&1; then
      log "removing image $IMAGE"
      docker rmi "$IMAGE" >/dev/null
    fi
    # dockerd keeps logging into .lab/dockerd.log; only the file goes, the engine keeps running.
    log "removing $STATE"
    rm -rf "$STATE"
  fi
  log "down"
}

# Serialise up/down: several engineers and test runs share this one lab.
lock() {
  mkdir -p "$STATE"
  exec 9>>"$STATE/lock"
  flock -w 600 9 || die "another lab.sh up/down held $STATE/lock for 600s"
}

case ${1:-} in
  up) lock; cmd_up ;;
  down) lock; cmd_down "${2:-}" ;;
  status) cmd_status ;;
  *) echo "usage: $0 up | down [--purge] | status" >&2; exit 2 ;;
esac
