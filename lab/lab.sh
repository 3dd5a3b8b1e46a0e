#!/usr/bin/env bash
# Container test lab: simulated NVIDIA DGX Spark nodes as systemd containers on the host's Docker engine,
# built from an inventory. Every host of group `dspark` becomes a container of that name on the lab's
# management network (NAT, SSH published on 127.0.0.1:ansible_port); every serving group gets its own
# internal fabric network (its dspark_fabric_cidr, dspark_fabric_mtu), whose interface in each node is renamed
# to dspark_fabric_interface. Every host of group `dspark_router` (the fleet's router) becomes a container on the
# management network only, with its lab_published_ports published on 127.0.0.1 too.
# lab/labspec.py reads the inventory; this script only reads its plain output.
# Usage: lab.sh up | down [--purge] | status | image | engine   [-i INVENTORY]   (default: inventories/lab/hosts.yml, the pair)
set -euo pipefail

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$LAB_DIR")
STATE="$REPO/.lab"
KEY="$STATE/id_ed25519"
IMAGE=dspark-lab/node:trixie
# The serving nodes' image: the base with Docker and the roles' packages installed (lab/image/serving.sh), as DGX OS
# ships them. LAB_NODE_IMAGE=bare gives them the base image (Molecule's docker_runtime scenario: Docker from nothing).
SERVING_IMAGE=dspark-lab/node-serving:trixie
case ${LAB_NODE_IMAGE:-serving} in
  serving) NODE_IMAGE=$SERVING_IMAGE ;;
  bare) NODE_IMAGE=$IMAGE ;;
  *) printf 'lab: ERROR: LAB_NODE_IMAGE=%s: use serving (the default: Docker installed) or bare\n' "$LAB_NODE_IMAGE" >&2; exit 2 ;;
esac
# /dev/shm of every serving node (see create_node).
NODE_SHM_SIZE=${LAB_NODE_SHM_SIZE:-2g}
DEFAULT_INVENTORY="$REPO/inventories/lab/hosts.yml"
SSH_OPTS=(-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes
  -o ConnectTimeout=5 -o LogLevel=ERROR)

# Filled by load_spec from `labspec.py INVENTORY`.
INVENTORY=$DEFAULT_INVENTORY
LAB_NAME=
MGMT_NET=
MGMT_SUBNET=
FABRIC_NETS=()
NODES=()
ROUTERS=()
declare -A PUBLISH=()
declare -A NET_GROUP=() NET_CIDR=() NET_GATEWAY=() NET_MTU=() MEMBERS=()
declare -A GROUP=() SSH_PORT=() MGMT_IP=() FABRIC_NET=() FABRIC_IP=() FABRIC_PREFIX=() FABRIC_IF=() MTU=() ADD_HOSTS=()

log() { printf 'lab: %s\n' "$*"; }
die() { printf 'lab: ERROR: %s\n' "$*" >&2; exit 1; }

# How long `up` waits for each thing, in seconds. Every wait polls its condition (every second) and ends as soon as
# it holds, so these are only upper bounds, generous for a slow machine: `make test` runs three labs at once on two
# cores, and a fresh machine builds every image first. A container that stops meanwhile fails at once instead.
# Each can be raised (or lowered) in the environment.
timeout_var() {
  local var=$1 default=$2 value
  value=${!var:-$default}
  [[ $value =~ ^[0-9]+$ ]] || die "$var must be a number of seconds, not '$value'"
  printf '%s' "$value"
}
load_timeouts() {
  BOOT_TIMEOUT=$(timeout_var LAB_BOOT_TIMEOUT 300)       # systemd in a node finishing its boot (was a fixed 120)
  SSH_TIMEOUT=$(timeout_var LAB_SSH_TIMEOUT 120)         # sshd of a node answering on its published port
  PING_TIMEOUT=$(timeout_var LAB_PING_TIMEOUT 60)        # full-MTU DF pings between the members of a group
  DOCKERD_TIMEOUT=$(timeout_var LAB_DOCKERD_TIMEOUT 120) # a dockerd started here answering
  LOCK_TIMEOUT=$(timeout_var LAB_LOCK_TIMEOUT 1800)      # another lab.sh up/down (another lab of make test) finishing
  SETUP_TRIES=$(timeout_var LAB_SETUP_TRIES 3)           # runs of the (idempotent) node setup before giving up
}

# HOPELESS: set by a probe of wait_node when waiting longer cannot help (e.g. systemd in maintenance mode).
HOPELESS=

# wait_node NODE SECONDS VAR WHAT CMD...: poll CMD every second until it succeeds. NODE's container must keep running:
# when it stops (or the probe says HOPELESS) the wait ends at once. After SECONDS it dies naming WHAT and VAR (the
# environment variable that sets SECONDS), with what systemd in the node is still doing.
wait_node() {
  local n=$1 limit=$2 var=$3 what=$4 deadline
  shift 4
  deadline=$((SECONDS + limit))
  HOPELESS=
  until "$@" >/dev/null 2>&1; do
    node_alive "$n"
    if [[ -n $HOPELESS ]]; then
      node_diagnosis "$n" >&2
      die "$what: $HOPELESS"
    fi
    if ((SECONDS >= deadline)); then
      node_diagnosis "$n" >&2
      die "timed out after ${limit}s waiting for $what (a slower machine: raise $var)"
    fi
    sleep 1
  done
}

# node_alive NODE: dies at once, with the container's state and the end of its log, unless NODE is running.
node_alive() {
  local n=$1 state detail
  state=$(docker container inspect -f '{{.State.Status}}' "$n" 2>/dev/null) ||
    die "container $n disappeared while lab.sh waited for it"
  [[ $state == running ]] && return 0
  detail=$(docker container inspect -f 'exit code {{.State.ExitCode}}{{with .State.Error}}, {{.}}{{end}}' "$n" 2>/dev/null) || true
  docker logs --tail 20 "$n" 2>&1 | sed "s/^/  $n| /" >&2 || true
  die "container $n is $state (${detail:-no detail}): it stopped while lab.sh waited for it (the end of its log above)"
}

# What systemd in a node is doing: its state, the jobs it still waits on, the units that failed.
node_diagnosis() {
  local n=$1
  # shellcheck disable=SC2016 # expanded inside the node
  docker exec "$n" sh -c 'echo "systemd: $(systemctl is-system-running 2>&1)"
    echo "jobs still waiting:"; systemctl list-jobs --no-pager --no-legend 2>&1 | head -n 20
    echo "failed units:"; systemctl list-units --failed --no-pager --no-legend --plain 2>&1 | head -n 20' 2>&1 |
    sed "s/^/  $n| /" || true
}

# --- The inventory -------------------------------------------------------------------------------------

load_spec() {
  local spec kind a b c d e f g h i j k
  spec=$(python3 "$LAB_DIR/labspec.py" "$INVENTORY") || return 1
  # Node lines: node NAME GROUP RANK ..., where RANK (c) is unused: labspec.py lists each group in rank order.
  while read -r kind a b c d e f g h i j k; do
    case $kind in
      lab) LAB_NAME=$a ;;
      mgmt) MGMT_NET=$a MGMT_SUBNET=$b ;;
      fabric)
        FABRIC_NETS+=("$a")
        NET_GROUP[$a]=$b NET_CIDR[$a]=$c NET_GATEWAY[$a]=$d NET_MTU[$a]=$e
        ;;
      node)
        # node NAME GROUP RANK SSH_PORT MGMT_IP FABRIC_NETWORK FABRIC_IP PREFIXLEN FABRIC_IF MTU HOSTS
        NODES+=("$a")
        GROUP[$a]=$b SSH_PORT[$a]=$d MGMT_IP[$a]=$e FABRIC_NET[$a]=$f FABRIC_IP[$a]=$g FABRIC_PREFIX[$a]=$h
        FABRIC_IF[$a]=$i MTU[$a]=$j ADD_HOSTS[$a]=$k
        MEMBERS[$b]="${MEMBERS[$b]:-}${MEMBERS[$b]:+ }$a"
        ;;
      router)
        # router NAME SSH_PORT MGMT_IP PUBLISH (HOSTPORT:CONTAINERPORT,... or -)
        ROUTERS+=("$a")
        GROUP[$a]=dspark_router SSH_PORT[$a]=$b MGMT_IP[$a]=$c PUBLISH[$a]=${d/#-/}
        ;;
      *) die "labspec.py printed an unknown line: $kind $a" ;;
    esac
  done <<<"$spec"
  [[ -n $LAB_NAME && -n $MGMT_NET && ${#NODES[@]} -gt 0 ]] || die "labspec.py described no lab for $INVENTORY"
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
  local pid=$! deadline=$((SECONDS + DOCKERD_TIMEOUT))
  until engine_up; do
    # One that exited (a bad configuration, another engine's pid file) fails now, not after the whole deadline.
    if ! dockerd_alive "$pid"; then
      engine_up && break
      tail -n 20 "$STATE/dockerd.log" >&2 || true
      die "dockerd exited without answering (see $STATE/dockerd.log)"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 20 "$STATE/dockerd.log" >&2 || true
      die "dockerd did not answer within ${DOCKERD_TIMEOUT}s (see $STATE/dockerd.log; a slower machine: raise LAB_DOCKERD_TIMEOUT)"
    fi
    sleep 1
  done
}

# dockerd_alive PID: the dockerd started here (PID, or its child when setsid had to fork) or another one still runs.
dockerd_alive() { kill -0 "$1" 2>/dev/null || pgrep -x dockerd >/dev/null 2>&1; }

# owner KIND NAME: the lab a container/network/volume belongs to (label dspark.lab.name); "lab" for one made
# by the lab.sh before inventories (label dspark.lab=1 only: it built only the pair lab), "absent", or
# "foreign" (not made by lab.sh).
owner() {
  local kind=$1 name=$2 labels out
  case $kind in
    container) labels=.Config.Labels ;;
    *) labels=.Labels ;;
  esac
  out=$(docker "$kind" inspect -f "{{with $labels}}{{index . \"dspark.lab.name\"}}/{{index . \"dspark.lab\"}}{{end}}" \
    "$name" 2>/dev/null) || { echo absent; return 0; }
  case $out in
    /1) echo lab ;;
    ?*/*) echo "${out%/*}" ;;
    *) echo foreign ;;
  esac
}

describe() { if [[ $1 == foreign ]]; then echo "no lab (not made by lab.sh)"; else echo "lab $1"; fi; }

# mine KIND NAME: true when NAME exists and belongs to this lab; dies when it exists and belongs elsewhere.
mine() {
  local who
  who=$(owner "$1" "$2")
  [[ $who == absent ]] && return 1
  [[ $who == "$LAB_NAME" ]] || die "$1 $2 exists but belongs to $(describe "$who").
  Fix: take that down first (lab.sh down -i <its inventory>), or rename the host/group in $INVENTORY"
}

LABELS=()
set_labels() { LABELS=(--label dspark.lab=1 --label "dspark.lab.name=$LAB_NAME"); }

# --- Image, key, networks ------------------------------------------------------------------------------

# The image is rebuilt when absent or built from other recipe files (label dspark.lab.build); running nodes
# keep their old image until `down` + `up`.
# build_image IMAGE WANT BUILDER ARGS...: (re)build IMAGE with BUILDER unless its label dspark.lab.build is WANT; the
# previous build, now untagged, is dropped unless a container still uses it.
build_image() {
  local image=$1 want=$2 have old t0=$SECONDS
  shift 2
  have=$(docker image inspect -f '{{index .Config.Labels "dspark.lab.build"}}' "$image" 2>/dev/null) || true
  [[ $have == "$want" ]] && return 0
  old=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null) || true
  log "building image $image (${have:+outdated, }recipe $want)"
  bash "$@" "$want"
  if [[ -n $old ]]; then docker rmi "$old" >/dev/null 2>&1 || true; fi
  log "image built in $((SECONDS - t0))s"
}

# The base image, then the serving image made from that very base build (its recipe names the base's).
ensure_image() {
  local base serving
  base=$(cat "$LAB_DIR/image/build.sh" "$LAB_DIR/image/packages.txt" "$LAB_DIR/image/install_ansiballz_cache.sh" \
    "$LAB_DIR/image/dspark_lab_ansiballz_cache.py" | sha256sum | cut -c1-12)
  build_image "$IMAGE" "$base" "$LAB_DIR/image/build.sh" "$IMAGE" "$STATE/cache"
  serving=$(cat "$LAB_DIR/image/serving.sh" "$LAB_DIR/image/packages-serving.txt" | sha256sum | cut -c1-6)
  build_image "$SERVING_IMAGE" "$base-$serving" "$LAB_DIR/image/serving.sh" "$IMAGE" "$SERVING_IMAGE"
}

ensure_key() {
  [[ -s $KEY && -s $KEY.pub ]] && return 0
  mkdir -p "$STATE"
  rm -f "$KEY" "$KEY.pub"
  log "creating ssh key $KEY"
  ssh-keygen -q -t ed25519 -N '' -C dspark-lab -f "$KEY"
}

# What a network is, as `docker network inspect` shows it: subnet gateway internal mtu.
net_config() {
  docker network inspect -f \
    '{{range .IPAM.Config}}{{.Subnet}} {{.Gateway}}{{end}} {{.Internal}} {{index .Options "com.docker.network.driver.mtu"}}' \
    "$1" 2>/dev/null || true
}
net_want() {
  if [[ $1 == "$MGMT_NET" ]]; then
    # Docker picks the mgmt gateway (.1) and MTU itself.
    echo "$MGMT_SUBNET"
  else
    echo "${NET_CIDR[$1]} ${NET_GATEWAY[$1]} true ${NET_MTU[$1]}"
  fi
}
net_ok() {
  local have
  have=$(net_config "$1")
  if [[ $1 == "$MGMT_NET" ]]; then have=${have%% *}; fi
  [[ $have == "$(net_want "$1")" ]]
}

ensure_network() {
  local net=$1 out
  if mine network "$net"; then
    net_ok "$net" || die "network $net is '$(net_config "$net")', the inventory wants '$(net_want "$net")'.
  Fix: bash lab/lab.sh down -i $INVENTORY, then up (networks cannot change under their containers)"
    return 0
  fi
  if [[ $net == "$MGMT_NET" ]]; then
    log "creating network $net ($MGMT_SUBNET, NAT)"
    out=$(docker network create --driver bridge --subnet "$MGMT_SUBNET" "${LABELS[@]}" "$net" 2>&1) ||
      die "creating network $net failed: $out"
  else
    # --internal: no default route and no NAT over the fabric, like a point-to-point link. Docker would give
    # the host's end of the bridge the first address (rank 0's): it gets the last usable one instead.
    log "creating network $net (group ${NET_GROUP[$net]}: ${NET_CIDR[$net]}, internal, MTU ${NET_MTU[$net]})"
    out=$(docker network create --driver bridge --internal --subnet "${NET_CIDR[$net]}" \
      --gateway "${NET_GATEWAY[$net]}" -o com.docker.network.driver.mtu="${NET_MTU[$net]}" "${LABELS[@]}" "$net" 2>&1) ||
      die "creating network $net failed: $out"
  fi
}

ensure_networks() {
  local net
  for net in "$MGMT_NET" "${FABRIC_NETS[@]}"; do ensure_network "$net"; done
}

# --- Nodes ---------------------------------------------------------------------------------------------

node_state() {
  local s
  s=$(docker container inspect -f '{{.State.Status}}' "$1" 2>/dev/null) || true
  echo "${s:-absent}"
}

# How a node was created: published SSH, the static address on each network (sorted by network name, as
# Go templates range over maps), the --add-host entries. node_want is the same line from the inventory.
node_config() {
  docker container inspect -f '{{.Config.Image}}|{{with index .HostConfig.PortBindings "22/tcp"}}{{(index . 0).HostIp}}:{{(index . 0).HostPort}}{{end}}|{{range $k, $v := .NetworkSettings.Networks}}{{$k}}={{with $v.IPAMConfig}}{{.IPv4Address}}{{end}},{{end}}|{{range $i, $h := .HostConfig.ExtraHosts}}{{if $i}},{{end}}{{$h}}{{end}}' \
    "$1"
}
node_want() {
  local n=$1 nets
  nets=$(printf '%s\n' "$MGMT_NET=${MGMT_IP[$n]}," "${FABRIC_NET[$n]}=${FABRIC_IP[$n]}," | LC_ALL=C sort | tr -d '\n')
  echo "$NODE_IMAGE|127.0.0.1:${SSH_PORT[$n]}|$nets|${ADD_HOSTS[$n]}"
}

# The same for a router: published SSH, every other published port (sorted), the management address only.
router_config() {
  docker container inspect -f '{{with index .HostConfig.PortBindings "22/tcp"}}{{(index . 0).HostIp}}:{{(index . 0).HostPort}}{{end}}|{{range $p, $b := .HostConfig.PortBindings}}{{if ne $p "22/tcp"}}{{(index $b 0).HostIp}}:{{(index $b 0).HostPort}}:{{$p}},{{end}}{{end}}|{{range $k, $v := .NetworkSettings.Networks}}{{$k}}={{with $v.IPAMConfig}}{{.IPv4Address}}{{end}},{{end}}' \
    "$1"
}
router_want() {
  local n=$1 p published=()
  IFS=, read -r -a published <<<"${PUBLISH[$n]}"
  for p in "${!published[@]}"; do published[p]="127.0.0.1:${published[p]}/tcp,"; done
  echo "127.0.0.1:${SSH_PORT[$n]}|$( ((${#published[@]})) && printf '%s\n' "${published[@]}" | LC_ALL=C sort -t: -k3 | tr -d '\n')|$MGMT_NET=${MGMT_IP[$n]},"
}
is_router() { [[ ${GROUP[$1]:-} == dspark_router ]]; }
config_of() { if is_router "$1"; then router_config "$1"; else node_config "$1"; fi; }
want_of() { if is_router "$1"; then router_want "$1"; else node_want "$1"; fi; }

# True when something already listens on 127.0.0.1:PORT (another lab, the VM lab, any program).
port_busy() { timeout 3 bash -c ": <'/dev/tcp/127.0.0.1/$1'" 2>/dev/null; }

check_port_free() {
  local n=$1 p published=()
  if port_busy "${SSH_PORT[$n]}"; then
    die "127.0.0.1:${SSH_PORT[$n]} (ansible_port of $n) is already in use by another program or lab (the VM lab
  uses 2231/2232). Fix: stop it, or give $n another ansible_port in $INVENTORY"
  fi
  IFS=, read -r -a published <<<"${PUBLISH[$n]:-}"
  for p in "${published[@]}"; do
    if port_busy "${p%%:*}"; then
      die "127.0.0.1:${p%%:*} (lab_published_ports of $n) is already in use by another program or lab.
  Fix: stop it, or publish another port in $INVENTORY"
    fi
  done
}

create_node() {
  local n=$1 h hosts=()
  check_port_free "$n"
  IFS=, read -r -a hosts <<<"${ADD_HOSTS[$n]}"
  for h in "${!hosts[@]}"; do hosts[h]="--add-host=${hosts[h]}"; done
  log "creating $n (group ${GROUP[$n]}: mgmt ${MGMT_IP[$n]}, fabric ${FABRIC_IP[$n]} on ${FABRIC_NET[$n]}, ssh 127.0.0.1:${SSH_PORT[$n]})"
  if [[ $(owner volume "$n-docker") == absent ]]; then
    docker volume create "${LABELS[@]}" "$n-docker" >/dev/null
  fi
  # --privileged fails on this host (no CAP_SYS_RESOURCE); this set is what runs systemd and Docker-in-Docker.
  # /var/lib/docker is a volume because the inner engine cannot use overlay2 on top of overlay2.
  # SIGRTMIN+3 asks systemd for a clean shutdown on `docker stop`.
  # --shm-size: the serving container runs with `ipc: host`, i.e. on this node's /dev/shm; Docker's 64 MiB default is
  # too small for real vLLM (its CPU build asks for 160 MiB: "Insufficient space in /dev/shm"). tmpfs: memory is only
  # used as it fills.
  docker create --name "$n" --hostname "$n" "${LABELS[@]}" --stop-signal SIGRTMIN+3 --shm-size "$NODE_SHM_SIZE" \
    --network "$MGMT_NET" --ip "${MGMT_IP[$n]}" -p "127.0.0.1:${SSH_PORT[$n]}:22" \
    --cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add SYS_PTRACE --cap-add MKNOD \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --cgroupns=host -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
    --tmpfs /run:rw,exec,mode=755 --tmpfs /run/lock --tmpfs /tmp:rw,exec,mode=1777 \
    -v "$n-docker:/var/lib/docker" "${hosts[@]}" \
    "$NODE_IMAGE" >/dev/null
  docker network connect --ip "${FABRIC_IP[$n]}" "${FABRIC_NET[$n]}" "$n"
}

# A router: the node image (systemd, sshd), the management network only, no Docker volume.
create_router() {
  local n=$1 p published=() ports=()
  check_port_free "$n"
  IFS=, read -r -a published <<<"${PUBLISH[$n]}"
  for p in "${published[@]}"; do ports+=(-p "127.0.0.1:$p"); done
  log "creating $n (router: mgmt ${MGMT_IP[$n]}, ssh 127.0.0.1:${SSH_PORT[$n]}${PUBLISH[$n]:+, published 127.0.0.1:${PUBLISH[$n]}})"
  docker create --name "$n" --hostname "$n" "${LABELS[@]}" --stop-signal SIGRTMIN+3 \
    --network "$MGMT_NET" --ip "${MGMT_IP[$n]}" -p "127.0.0.1:${SSH_PORT[$n]}:22" "${ports[@]}" \
    --cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add SYS_PTRACE --cap-add MKNOD \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --cgroupns=host -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
    --tmpfs /run:rw,exec,mode=755 --tmpfs /run/lock --tmpfs /tmp:rw,exec,mode=1777 \
    "$IMAGE" >/dev/null
}

# A node of this lab created otherwise than the inventory now says is removed (and re-created by ensure_node):
# ports, addresses and /etc/hosts are fixed at create time. Its /var/lib/docker volume survives.
drop_stale_node() {
  local n=$1 have want
  mine container "$n" || return 0
  # Never re-create on a failed inspect: the node may be someone's working lab.
  have=$(config_of "$n") || die "cannot inspect container $n"
  [[ -n $have ]] || die "inspecting container $n printed nothing"
  want=$(want_of "$n")
  [[ $have != "$want" ]] || return 0
  log "$n was created as '$have', the inventory wants '$want': re-creating it"
  docker rm -f "$n" >/dev/null
}

ensure_node() {
  local n=$1
  if [[ $(node_state "$n") == absent ]]; then
    if is_router "$n"; then create_router "$n"; else create_node "$n"; fi
  fi
  if [[ $(node_state "$n") != running ]]; then
    check_port_free "$n"
    log "starting $n"
    docker start "$n" >/dev/null
  fi
}

# True once systemd in the node has finished booting: "running", or "degraded" (a unit failed: setup_node names it).
# Maintenance (emergency) mode and stopping never get there: HOPELESS ends the wait at once.
BOOT_STATE=
systemd_settled() {
  BOOT_STATE=$(docker exec "$1" systemctl is-system-running 2>/dev/null) || true
  case $BOOT_STATE in
    running | degraded) return 0 ;;
    maintenance | stopping) HOPELESS="systemd in $1 is '$BOOT_STATE'" ;;
  esac
  return 1
}

# Runs inside a node as root (docker exec bash -c): rename the fabric NIC, host keys, user spark, authorized keys, sshd.
# Every step checks first, so re-running it on a configured node changes nothing.
# shellcheck disable=SC2016 # expanded inside the node
NODE_SETUP='
set -euo pipefail
fabric_ip=$1 fabric_if=$2 mtu=$3
pubkey=$(cat)
# A router (fabric address "-") has no fabric.
if [[ $fabric_ip != - ]]; then
dev=$(ip -o -4 addr show | awk -v ip="$fabric_ip/" "index(\$4, ip) == 1 {sub(/@.*/, \"\", \$2); print \$2; exit}")
[[ -n $dev ]] || { echo "no interface has $fabric_ip" >&2; exit 1; }
if [[ $dev != "$fabric_if" ]]; then
  ip link set "$dev" down
  ip link set "$dev" name "$fabric_if"
  echo "renamed $dev to $fabric_if"
fi
# Up again also when an earlier run stopped between the rename and this.
if [[ $(ip -o link show dev "$fabric_if") != *[\<,]UP[,\>]* ]]; then ip link set "$fabric_if" up; fi
got=$(cat "/sys/class/net/$fabric_if/mtu")
[[ $got == "$mtu" ]] || { echo "$fabric_if has MTU $got, expected $mtu" >&2; exit 1; }
fi
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
  local n=$1 out try=1
  wait_node "$n" "$BOOT_TIMEOUT" LAB_BOOT_TIMEOUT "systemd in $n to finish booting" systemd_settled "$n"
  if [[ $BOOT_STATE == degraded ]]; then
    log "WARNING: $n booted degraded; failed units:"
    node_diagnosis "$n"
  fi
  # Every step of NODE_SETUP checks first: a run that failed on something passing (an ssh restart refused while
  # systemd was busy) is simply run again; one that keeps failing is reported with its output.
  until out=$(docker exec -i "$n" bash -c "$NODE_SETUP" node-setup "${FABRIC_IP[$n]:--}" "${FABRIC_IF[$n]:--}" \
    "${MTU[$n]:--}" <"$KEY.pub" 2>&1); do
    node_alive "$n"
    ((try < SETUP_TRIES)) || die "setting up $n failed $try times; the last time: $out"
    log "setting up $n failed (try $try of $SETUP_TRIES), trying again: $out"
    try=$((try + 1))
    sleep 2
  done
  [[ -z $out ]] || log "$n: $out"
}

node_ssh() {
  local n=$1
  shift
  ssh -i "$KEY" -p "${SSH_PORT[$n]}" "${SSH_OPTS[@]}" spark@127.0.0.1 "$@"
}

# ping_peers NODE: NODE sends one unfragmentable full-MTU ping (MTU - 20 IP - 8 ICMP bytes) to every other
# member of its group over the fabric.
# shellcheck disable=SC2016 # expanded inside the node
ping_peers() {
  local n=$1 m peers=()
  is_router "$n" && return 0
  for m in ${MEMBERS[${GROUP[$n]}]}; do [[ $m == "$n" ]] || peers+=("${FABRIC_IP[$m]}"); done
  ((${#peers[@]})) || return 0
  docker exec "$n" bash -c 'size=$1; shift; for ip; do ping -M do -s "$size" -c1 -W2 "$ip" >/dev/null || exit 1; done' \
    ping-peers "$((MTU[$n] - 28))" "${peers[@]}"
}

# orphans KIND: this lab's containers or networks that the inventory no longer names (a host or group removed).
orphans() {
  local kind=$1 x have
  declare -A want=()
  if [[ $kind == container ]]; then
    for x in "${NODES[@]}" "${ROUTERS[@]}"; do want[$x]=1; done
    have=$(docker container ls -a --filter "label=dspark.lab.name=$LAB_NAME" --format '{{.Names}}')
  else
    for x in "$MGMT_NET" "${FABRIC_NETS[@]}"; do want[$x]=1; done
    have=$(docker network ls --filter "label=dspark.lab.name=$LAB_NAME" --format '{{.Name}}')
  fi
  for x in $have; do if [[ -z ${want[$x]:-} ]]; then echo "$x"; fi; done
}

remove_orphan_containers() {
  local x
  for x in $(orphans container); do
    log "removing $x and its volume: no longer in $INVENTORY"
    docker rm -f "$x" >/dev/null
    if [[ $(owner volume "$x-docker") == "$LAB_NAME" ]]; then docker volume rm "$x-docker" >/dev/null; fi
  done
}

# After drop_stale_node: a node moved to another group leaves its old network only when re-created.
remove_orphan_networks() {
  local x
  for x in $(orphans network); do
    log "removing network $x: no longer in $INVENTORY"
    docker network rm "$x" >/dev/null
  done
}

# The lab is as the inventory says: image, networks, every node created as wanted and running. Whether the
# nodes answer (fabric NIC, ssh) is for cmd_status.
lab_ok() {
  engine_up || return 1
  docker image inspect "$IMAGE" >/dev/null 2>&1 || return 1
  docker image inspect "$NODE_IMAGE" >/dev/null 2>&1 || return 1
  local x
  for x in "$MGMT_NET" "${FABRIC_NETS[@]}"; do
    [[ $(owner network "$x") == "$LAB_NAME" ]] || return 1
    net_ok "$x" || return 1
  done
  [[ -z $(orphans container) && -z $(orphans network) ]] || return 1
  for x in "${NODES[@]}" "${ROUTERS[@]}"; do
    [[ $(node_state "$x") == running ]] || return 1
    [[ $(owner container "$x") == "$LAB_NAME" ]] || return 1
    [[ $(config_of "$x" 2>/dev/null) == "$(want_of "$x")" ]] || return 1
  done
}

# --- Commands ------------------------------------------------------------------------------------------

cmd_status() {
  if ! engine_up; then
    printf '%-13s engine-down\n' "${NODES[@]}" "${ROUTERS[@]}"
    return 1
  fi
  local n state who mgmt fabric want ssh_ok rc=0
  for n in "${NODES[@]}" "${ROUTERS[@]}"; do
    state=$(node_state "$n")
    who=$(owner container "$n")
    mgmt=- fabric=- ssh_ok=fail
    if [[ $who != "$LAB_NAME" && $state != absent ]]; then
      state="foreign(${who})"
    elif [[ $state == running ]]; then
      mgmt=$(docker inspect -f "{{with index .NetworkSettings.Networks \"$MGMT_NET\"}}{{.IPAddress}}{{end}}" "$n")
      [[ -s $KEY ]] && node_ssh "$n" true </dev/null >/dev/null 2>&1 && ssh_ok=ok
    fi
    if is_router "$n"; then
      printf '%-13s %-9s %-8s mgmt %-12s ssh %s (127.0.0.1:%s)%s\n' "$n" router "$state" "${mgmt:--}" "$ssh_ok" \
        "${SSH_PORT[$n]}" "${PUBLISH[$n]:+ published 127.0.0.1:${PUBLISH[$n]}}"
      [[ $state == running && $ssh_ok == ok && $mgmt == "${MGMT_IP[$n]}" ]] || rc=1
      continue
    fi
    if [[ $state == running ]]; then
      fabric=$(docker exec "$n" sh -c "ip -o -4 addr show dev ${FABRIC_IF[$n]} 2>/dev/null | awk '{print \$4}';
        cat /sys/class/net/${FABRIC_IF[$n]}/mtu 2>/dev/null" | paste -sd' ' -) || true
      if [[ -n $fabric ]]; then
        fabric="${FABRIC_IF[$n]} ${fabric% *} mtu ${fabric##* }"
      else
        fabric="${FABRIC_IF[$n]} missing"
      fi
    fi
    printf '%-13s %-9s %-8s mgmt %-12s fabric %-36s ssh %s (127.0.0.1:%s)\n' \
      "$n" "${GROUP[$n]}" "$state" "${mgmt:--}" "$fabric" "$ssh_ok" "${SSH_PORT[$n]}"
    want="${FABRIC_IF[$n]} ${FABRIC_IP[$n]}/${FABRIC_PREFIX[$n]} mtu ${MTU[$n]}"
    [[ $state == running && $ssh_ok == ok && $mgmt == "${MGMT_IP[$n]}" && $fabric == "$want" ]] || rc=1
  done
  return "$rc"
}

cmd_up() {
  local t0=$SECONDS n out
  ensure_engine
  set_labels
  if lab_ok && out=$(cmd_status); then
    printf '%s\n' "$out"
    log "lab $LAB_NAME already up, nothing to do"
  else
    # Refuse before changing anything when a name or port is taken by another lab or program.
    for n in "${NODES[@]}" "${ROUTERS[@]}"; do
      if ! mine container "$n"; then check_port_free "$n"; fi
    done
    for n in "$MGMT_NET" "${FABRIC_NETS[@]}"; do mine network "$n" || true; done
    remove_orphan_containers
    for n in "${NODES[@]}" "${ROUTERS[@]}"; do drop_stale_node "$n"; done
    remove_orphan_networks
    ensure_image
    ensure_key
    ensure_networks
    for n in "${NODES[@]}" "${ROUTERS[@]}"; do ensure_node "$n"; done
    for n in "${NODES[@]}" "${ROUTERS[@]}"; do setup_node "$n"; done
    for n in "${NODES[@]}" "${ROUTERS[@]}"; do
      wait_node "$n" "$SSH_TIMEOUT" LAB_SSH_TIMEOUT "ssh spark@127.0.0.1:${SSH_PORT[$n]} ($n)" node_ssh "$n" true </dev/null
    done
    # Every fabric must carry full jumbo frames unfragmented, between every two members of a group.
    for n in "${NODES[@]}"; do
      wait_node "$n" "$PING_TIMEOUT" LAB_PING_TIMEOUT \
        "DF $((MTU[$n] - 28))-byte pings $n -> the other members of ${GROUP[$n]} over ${FABRIC_IF[$n]}" ping_peers "$n"
    done
    cmd_status || die "lab $LAB_NAME is not healthy after up"
  fi
  log "lab $LAB_NAME up in $((SECONDS - t0))s"
}

# Everything of this lab: the inventory's names plus whatever carries its label (hosts since removed from it).
lab_objects() {
  local kind=$1 x filter=(--filter "label=dspark.lab.name=$LAB_NAME")
  {
    case $kind in
      container)
        printf '%s\n' "${NODES[@]}" "${ROUTERS[@]}"
        docker container ls -a "${filter[@]}" --format '{{.Names}}'
        ;;
      volume)
        for x in "${NODES[@]}"; do echo "$x-docker"; done
        docker volume ls "${filter[@]}" --format '{{.Name}}'
        ;;
      network)
        printf '%s\n' "${FABRIC_NETS[@]}" "$MGMT_NET"
        docker network ls "${filter[@]}" --format '{{.Name}}'
        ;;
    esac
  } | awk 'NF && !seen[$0]++'
}

# The lab registry (lab/registry.sh) joins the management network but is no node of the lab: it leaves the network
# (and keeps running on Docker's default bridge), or the network could not be removed.
detach_registry() {
  local net=$1 c
  for c in $(docker network inspect -f '{{range .Containers}}{{.Name}} {{end}}' "$net" 2>/dev/null); do
    if [[ $(docker container inspect -f '{{index .Config.Labels "dspark.lab.registry"}}' "$c" 2>/dev/null) == 1 ]]; then
      log "detaching the registry $c from $net"
      docker network disconnect -f "$net" "$c"
    fi
  done
}

cmd_down() {
  local purge=${1:-} x who others
  [[ -z $purge || $purge == --purge ]] || die "usage: lab.sh down [--purge] [-i INVENTORY]"
  ensure_engine
  if [[ $purge == --purge ]]; then
    # The image and .lab/ (the ssh key) serve every lab: refuse while another lab still has containers.
    others=$(docker ps -a --filter label=dspark.lab=1 --format '{{.Names}} {{.Label "dspark.lab.name"}}' |
      awk -v lab="$LAB_NAME" '{ if (($2 == "" ? "lab" : $2) != lab) print $1 }' | paste -sd' ' -)
    [[ -z $others ]] || die "--purge removes the image and $STATE, which other labs still use ($others).
  Fix: take those labs down first (lab.sh down -i <inventory>)"
  fi
  while read -r x; do
    who=$(owner container "$x")
    [[ $who == absent ]] && continue
    if [[ $who != "$LAB_NAME" ]]; then log "leaving $x: it belongs to $(describe "$who")"; continue; fi
    log "removing $x"
    docker rm -f "$x" >/dev/null
  done < <(lab_objects container)
  while read -r x; do
    who=$(owner volume "$x")
    # Volumes made by the lab.sh before inventories carry no label: the name says whose they are.
    [[ $who == absent ]] && continue
    if [[ $who != "$LAB_NAME" && $who != foreign ]]; then log "leaving volume $x: it belongs to $(describe "$who")"; continue; fi
    log "removing volume $x"
    docker volume rm "$x" >/dev/null || log "WARNING: volume $x is still in use; left in place"
  done < <(lab_objects volume)
  while read -r x; do
    who=$(owner network "$x")
    [[ $who == absent ]] && continue
    if [[ $who != "$LAB_NAME" ]]; then log "leaving network $x: it belongs to $(describe "$who")"; continue; fi
    detach_registry "$x"
    log "removing network $x"
    docker network rm "$x" >/dev/null
  done < <(lab_objects network)
  if [[ $purge == --purge ]]; then
    for x in "$SERVING_IMAGE" "$IMAGE"; do
      if docker image inspect "$x" >/dev/null 2>&1; then
        log "removing image $x"
        docker rmi "$x" >/dev/null
      fi
    done
    # dockerd keeps logging into .lab/dockerd.log; only the file goes, the engine keeps running.
    log "removing $STATE"
    rm -rf "$STATE"
  fi
  log "lab $LAB_NAME down"
}

# Serialise up/down: several engineers, labs and test runs share this engine and these names (make test brings up
# the pair and the fleet at the same moment). $STATE/lock.holder says who holds the lock, for whoever waits.
lock() {
  mkdir -p "$STATE"
  exec 9>>"$STATE/lock"
  if ! flock -n 9; then
    log "waiting (up to ${LOCK_TIMEOUT}s, LAB_LOCK_TIMEOUT) for $(lock_holder) to finish"
    flock -w "$LOCK_TIMEOUT" 9 ||
      die "$(lock_holder) held $STATE/lock for ${LOCK_TIMEOUT}s (a slower machine: raise LAB_LOCK_TIMEOUT)"
  fi
  printf '%s\n' "lab.sh $* (pid $$, since $(date '+%F %T'))" >"$STATE/lock.holder"
}
lock_holder() {
  local holder
  holder=$(cat "$STATE/lock.holder" 2>/dev/null) || true
  printf '%s' "${holder:-another lab.sh up/down}"
}

usage() { echo "usage: $0 up | down [--purge] | status | image | engine   [-i INVENTORY]   (default $DEFAULT_INVENTORY)" >&2; exit 2; }

main() {
  local cmd=${1:-} purge=
  [[ -n $cmd ]] || usage
  shift
  while (($#)); do
    case $1 in
      -i | --inventory) [[ -n ${2:-} ]] || usage; INVENTORY=$2; shift 2 ;;
      --inventory=*) INVENTORY=${1#*=}; shift ;;
      --purge) [[ $cmd == down ]] || usage; purge=--purge; shift ;;
      *) usage ;;
    esac
  done
  load_timeouts
  case $cmd in
    up) load_spec || die "cannot build the lab from $INVENTORY (see above)"; lock up -i "$INVENTORY"; cmd_up ;;
    down)
      # A broken inventory must not keep its lab from going: then only what carries the lab's label goes.
      if ! load_spec; then
        LAB_NAME=$(python3 "$LAB_DIR/labspec.py" --name "$INVENTORY")
        log "WARNING: $INVENTORY does not describe a lab (see above); removing only what is labelled lab $LAB_NAME"
      fi
      lock down "$purge" -i "$INVENTORY"
      cmd_down "$purge"
      ;;
    status) load_spec || die "cannot read the lab from $INVENTORY (see above)"; cmd_status ;;
    # Only the node image and the SSH key every lab shares (make test builds them before its lanes start).
    image) lock image; ensure_engine; ensure_image; ensure_key ;;
    # Only a Docker engine that answers (lab/engine/build.sh: the real engine's image needs no node image).
    engine) ensure_engine ;;
    *) usage ;;
  esac
}

# Sourced (the unit tests), it only defines its functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
