#!/usr/bin/env bash
# The lab's image registry (issue #15 point 2): Debian's own `docker-registry` package (lab/registry/Dockerfile, built
# on the lab node image, nothing pulled from a registry) in a container named dspark-lab-registry. It sits on the
# default bridge with port 5000 published on 127.0.0.1:$REGISTRY_HOST_PORT (this host puts the image there, over
# plain HTTP) and joins the lab's management network at the subnet's .250 (the nodes pull from there: they list it
# in docker_runtime_insecure_registries). `up` puts the SIMULATOR image dspark-lab/vllm-sim:latest into it with
# uncompressed layers (registry_push.py, not `docker push`: nothing gzipped on push) and writes,
# under .lab/registry/:
#   address     ADDRESS:5000, the registry as the nodes reach it
#   image       ADDRESS:5000/dspark-lab/vllm-sim@sha256:..., the pinned reference (dspark_image)
#   vars.yml    the three variables that switch a lab run to the registry path:
#               ansible-playbook -i inventories/lab/hosts.yml site.yml -e @.lab/registry/vars.yml
# Every step checks first; `up` again finds the image there (nothing uploaded: seconds) and rewrites the same files.
# A rebuilt simulator gets a new digest: run `up` again. `lab.sh down` detaches the registry from the lab's
# network (it keeps running on the bridge); `down` here removes it and .lab/registry.
# Usage: registry.sh up | down [--purge] | status   [-i INVENTORY]   (default: inventories/lab/hosts.yml)
# Env (tests, other names): REGISTRY_NAME, REGISTRY_IMAGE, REGISTRY_HOST_PORT, REGISTRY_NETWORK (default: the lab's
# management network), REGISTRY_STATE, REGISTRY_BASE_IMAGE, REGISTRY_PUSH_IMAGE; REGISTRY_READY_TIMEOUT (seconds the
# started registry may take to answer, default 120).
set -euo pipefail

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$LAB_DIR")
NAME=${REGISTRY_NAME:-dspark-lab-registry}
IMAGE=${REGISTRY_IMAGE:-dspark-lab/registry:trixie}
BASE_IMAGE=${REGISTRY_BASE_IMAGE:-dspark-lab/node:trixie}
PUSH_IMAGE=${REGISTRY_PUSH_IMAGE:-dspark-lab/vllm-sim:latest}
HOST_PORT=${REGISTRY_HOST_PORT:-5998}
STATE=${REGISTRY_STATE:-$REPO/.lab/registry}
INVENTORY=$REPO/inventories/lab/hosts.yml
# The registry's address on the lab network: this host number of the management subnet (nodes are .11 up,
# routers .201 up: lab/labspec.py).
HOST_NUMBER=250
PORT=5000
# The repository inside the registry: the image's own name without its tag.
REPO_PATH=${PUSH_IMAGE%:*}

log() { printf 'registry: %s\n' "$*"; }
die() { printf 'registry: ERROR: %s\n' "$*" >&2; exit 1; }

# The network the nodes are on: REGISTRY_NETWORK, or the lab's management network (labspec.py's `mgmt` line).
lab_network() {
  if [[ -n ${REGISTRY_NETWORK:-} ]]; then echo "$REGISTRY_NETWORK"; return 0; fi
  local spec
  spec=$(python3 "$LAB_DIR/labspec.py" "$INVENTORY") || die "cannot read the lab from $INVENTORY (see above)"
  awk '$1 == "mgmt" {print $2; exit}' <<<"$spec"
}

# ADDRESS of the registry on NETWORK: host $HOST_NUMBER of the network's IPv4 subnet, and no lab node's address.
registry_address() {
  local net=$1 subnet
  subnet=$(docker network inspect -f '{{range .IPAM.Config}}{{.Subnet}} {{end}}' "$net" 2>/dev/null) ||
    die "network $net does not exist: bring the lab up first (bash lab/lab.sh up${INVENTORY_ARG:+ -i $INVENTORY})"
  python3 - "$subnet" "$HOST_NUMBER" <<'PY'
import ipaddress, sys
nets = [ipaddress.ip_network(s) for s in sys.argv[1].split() if ':' not in s]
if not nets or nets[0].num_addresses < 256:
    sys.exit("registry: ERROR: the network needs an IPv4 subnet of at least /24, it has %r" % sys.argv[1])
print(nets[0].network_address + int(sys.argv[2]))
PY
}

state_of() {
  local s
  s=$(docker container inspect -f '{{.State.Status}}' "$NAME" 2>/dev/null) || true
  echo "${s:-absent}"
}

# Rebuilt when absent or built from another Dockerfile, config or base image (label dspark.lab.registry.build).
ensure_image() {
  local want have base
  base=$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE" 2>/dev/null) ||
    die "base image $BASE_IMAGE is missing: bring the lab up first (bash lab/lab.sh up builds it)"
  want=$({ cat "$LAB_DIR/registry/Dockerfile" "$LAB_DIR/registry/config.yml"; echo "$base"; } | sha256sum | cut -c1-12)
  have=$(docker image inspect -f '{{index .Config.Labels "dspark.lab.registry.build"}}' "$IMAGE" 2>/dev/null) || true
  [[ $have == "$want" ]] && return 0
  log "building $IMAGE (Debian's docker-registry on $BASE_IMAGE${have:+; outdated})"
  docker build -q --build-arg "BASE_IMAGE=$BASE_IMAGE" --label "dspark.lab.registry.build=$want" -t "$IMAGE" \
    "$LAB_DIR/registry" >/dev/null || die "building $IMAGE failed"
}

# The container runs the current image with the published port; anything else is re-created (blobs are lost:
# the push below restores them).
ensure_container() {
  local have want
  if [[ $(state_of) != absent ]]; then
    [[ $(docker container inspect -f '{{index .Config.Labels "dspark.lab.registry"}}' "$NAME") == 1 ]] ||
      die "container $NAME exists but was not made by registry.sh. Fix: remove or rename it (REGISTRY_NAME)"
    have=$(docker container inspect -f '{{.Image}} {{with index .HostConfig.PortBindings "5000/tcp"}}{{(index . 0).HostIp}}:{{(index . 0).HostPort}}{{end}}' "$NAME")
    want="$(docker image inspect -f '{{.Id}}' "$IMAGE") 127.0.0.1:$HOST_PORT"
    if [[ $have != "$want" ]]; then
      log "$NAME runs '$have', wanted '$want': re-creating it"
      docker rm -f "$NAME" >/dev/null
    fi
  fi
  if [[ $(state_of) == absent ]]; then
    if timeout 3 bash -c ": <'/dev/tcp/127.0.0.1/$HOST_PORT'" 2>/dev/null; then
      die "127.0.0.1:$HOST_PORT is already in use. Fix: stop that program, or set REGISTRY_HOST_PORT"
    fi
    log "creating $NAME (127.0.0.1:$HOST_PORT -> 5000)"
    docker create --name "$NAME" --label dspark.lab.registry=1 --restart unless-stopped \
      -p "127.0.0.1:$HOST_PORT:$PORT" "$IMAGE" >/dev/null
  fi
  if [[ $(state_of) != running ]]; then
    log "starting $NAME"
    docker start "$NAME" >/dev/null
  fi
}

# Joined to NETWORK at ADDRESS (a stale address is replaced).
ensure_attached() {
  local net=$1 address=$2 have
  have=$(docker container inspect -f "{{with index .NetworkSettings.Networks \"$net\"}}{{with .IPAMConfig}}{{.IPv4Address}}{{end}}|{{end}}" "$NAME")
  [[ $have == "$address|" ]] && return 0
  if [[ -n $have ]]; then docker network disconnect -f "$net" "$NAME"; fi
  log "joining $NAME to $net at $address"
  docker network connect --ip "$address" "$net" "$NAME" || die "cannot join $NAME to $net at $address"
}

# http_status URL [HEAD]: the HTTP status of a GET (or HEAD) of URL, asking for image manifests; 000 when none came.
# python3, not curl: the lab's prerequisites (tests/ci/prereqs.sh) have no curl.
http_status() {
  python3 - "$@" <<'PY'
import sys, urllib.error, urllib.request
accept = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
request = urllib.request.Request(sys.argv[1], method=sys.argv[2] if len(sys.argv) > 2 else "GET", headers={"Accept": accept})
try:
    with urllib.request.urlopen(request, timeout=5) as answer:
        print(answer.status)
except urllib.error.HTTPError as error:
    print(error.code)
except OSError:
    print("000")
PY
}

v2_answers() { [[ $(http_status "http://127.0.0.1:$HOST_PORT/v2/") == 200 ]]; }

# Until the registry answers: REGISTRY_READY_TIMEOUT seconds at most (generous: on a loaded machine the container
# may take long to start), but a container that stopped (or keeps restarting: it crashed) fails at once.
wait_ready() {
  local limit=${REGISTRY_READY_TIMEOUT:-120} deadline state
  [[ $limit =~ ^[0-9]+$ ]] || die "REGISTRY_READY_TIMEOUT must be a number of seconds, not '$limit'"
  deadline=$((SECONDS + limit))
  until v2_answers 2>/dev/null; do
    state=$(state_of)
    if [[ $state != running ]]; then
      docker logs --tail 20 "$NAME" >&2 || true
      die "$NAME is $state ($(docker container inspect -f 'exit code {{.State.ExitCode}}{{with .State.Error}}, {{.}}{{end}}' "$NAME" 2>/dev/null || echo gone)) instead of answering on http://127.0.0.1:$HOST_PORT/v2/ (its log above)"
    fi
    if ((SECONDS >= deadline)); then
      docker logs --tail 20 "$NAME" >&2 || true
      die "$NAME does not answer on http://127.0.0.1:$HOST_PORT/v2/ after ${limit}s (a slower machine: raise REGISTRY_READY_TIMEOUT)"
    fi
    sleep 1
  done
}

# Put the image into the registry and print its digest (the manifest's, checked against the registry itself).
# registry_push.py, not `docker push`: it uploads the layers UNCOMPRESSED through the registry's HTTP API (dockerd
# gzips every layer on push: 119 machine CPU-s for the 2.8 GB real-engine image on 2 cores, 45 this way); the image
# ID of a pull stays the host's. Layers already there are not sent again.
push() {
  local digest answer
  docker image inspect "$PUSH_IMAGE" >/dev/null 2>&1 ||
    die "$PUSH_IMAGE is missing: build it first (bash lab/simulator/build.sh)"
  digest=$(python3 "$LAB_DIR/registry_push.py" "$PUSH_IMAGE" "127.0.0.1:$HOST_PORT" "$REPO_PATH" latest) ||
    die "putting $PUSH_IMAGE into the registry as $REPO_PATH:latest failed (see above)"
  [[ $digest == sha256:* ]] || die "registry_push.py printed no digest for $REPO_PATH:latest: '$digest'"
  answer=$(http_status "http://127.0.0.1:$HOST_PORT/v2/$REPO_PATH/manifests/$digest" HEAD)
  [[ $answer == 200 ]] || die "the registry does not serve $REPO_PATH@$digest after the push (HTTP $answer)"
  echo "$digest"
}

write_state() {
  local address=$1 digest=$2 ref
  ref="$address:$PORT/$REPO_PATH@$digest"
  mkdir -p "$STATE"
  printf '%s\n' "$address:$PORT" >"$STATE/address.tmp"
  printf '%s\n' "$ref" >"$STATE/image.tmp"
  cat >"$STATE/vars.yml.tmp" <<VARS
---
# Written by lab/registry.sh up: the lab registry path of docker_runtime (pull by digest over plain HTTP).
# ansible-playbook -i inventories/lab/hosts.yml site.yml -e @.lab/registry/vars.yml
docker_runtime_image_source: registry
docker_runtime_insecure_registries: ["$address:$PORT"]
dspark_image: "$ref"
VARS
  mv "$STATE/address.tmp" "$STATE/address"
  mv "$STATE/image.tmp" "$STATE/image"
  mv "$STATE/vars.yml.tmp" "$STATE/vars.yml"
  log "$PUSH_IMAGE is $ref (put with uncompressed layers: 127.0.0.1:$HOST_PORT/$REPO_PATH@$digest)"
  log "dspark_image: $ref"
}

cmd_up() {
  local net address digest t0=$SECONDS
  docker info >/dev/null 2>&1 || die "no Docker engine answers (bash lab/lab.sh up starts one)"
  net=$(lab_network)
  [[ -n $net ]] || die "no management network in $INVENTORY"
  address=$(registry_address "$net")
  ensure_image
  ensure_container
  ensure_attached "$net" "$address"
  wait_ready
  digest=$(push)
  write_state "$address" "$digest"
  log "up in $((SECONDS - t0))s: $NAME at $address:$PORT on $net, 127.0.0.1:$HOST_PORT on this host"
}

cmd_down() {
  local purge=${1:-}
  if [[ $(state_of) != absent ]]; then
    [[ $(docker container inspect -f '{{index .Config.Labels "dspark.lab.registry"}}' "$NAME") == 1 ]] ||
      die "container $NAME was not made by registry.sh: left in place"
    log "removing $NAME"
    docker rm -f "$NAME" >/dev/null
  fi
  rm -rf "$STATE"
  if [[ $purge == --purge ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "removing image $IMAGE"
    docker rmi "$IMAGE" >/dev/null
  fi
  log "down"
}

cmd_status() {
  local state
  state=$(state_of)
  printf '%s %s' "$NAME" "$state"
  if [[ $state == running ]]; then
    printf ' networks %s' "$(docker container inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}={{$v.IPAddress}} {{end}}' "$NAME")"
    v2_answers 2>/dev/null && printf ' v2 ok' || printf ' v2 FAIL'
  fi
  printf '\n'
  [[ -s $STATE/image ]] && printf 'dspark_image: %s\n' "$(cat "$STATE/image")"
  [[ $state == running ]]
}

usage() { echo "usage: $0 up | down [--purge] | status   [-i INVENTORY]" >&2; exit 2; }

main() {
  local cmd=${1:-} purge=
  [[ -n $cmd ]] || usage
  shift
  while (($#)); do
    case $1 in
      -i | --inventory) [[ -n ${2:-} ]] || usage; INVENTORY=$2; INVENTORY_ARG=1; shift 2 ;;
      --purge) [[ $cmd == down ]] || usage; purge=--purge; shift ;;
      *) usage ;;
    esac
  done
  case $cmd in
    up) cmd_up ;;
    down) cmd_down "$purge" ;;
    status) cmd_status ;;
    *) usage ;;
  esac
}

INVENTORY_ARG=
# Sourced (the unit tests), it only defines its functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
