#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# The REAL-ENGINE pair (issue #24): inventories/lab-real's two node containers, the real engine image (vLLM's CPU build,
# lab/engine) in a registry of this lab's own, pinned by digest, and the lab's Hugging Face endpoint (lab/hf_endpoint)
# serving the lab's tiny model (lab/model) behind a sentinel token: site.yml's checkpoint phase downloads it on the
# checkpoint source, then copies and verifies it.
#   bash lab/real.sh up       # make lab-real; then: make site-real (site.yml on it)
#   bash lab/real.sh down     # the nodes and this lab's registry (the images and the model stay cached under .lab/)
#   bash lab/real.sh status
# Every step is a no-op when current: the engine image and the model are rebuilt only when their recipes change.
# It shares the container lab's key and node image (lab/lab.sh) and runs beside the other labs (own ports, networks,
# registry name and port).
set -euo pipefail

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$LAB_DIR")
INVENTORY=$REPO/inventories/lab-real/hosts.yml
ENGINE_IMAGE=${ENGINE_IMAGE:-dspark-lab/vllm-cpu:0.32.0}
# This lab's registry: its own container, host port and state directory (the pair lab's is dspark-lab-registry, 5998).
export REGISTRY_NAME=dspark-lab-registry-real REGISTRY_HOST_PORT=5997 REGISTRY_STATE=$REPO/.lab/registry-real
export REGISTRY_PUSH_IMAGE=$ENGINE_IMAGE

log() { printf 'lab-real: %s\n' "$*"; }

cmd_up() {
  local t0=$SECONDS
  bash "$LAB_DIR/lab.sh" up -i "$INVENTORY"
  IMAGE=$ENGINE_IMAGE bash "$LAB_DIR/model/make.sh"
  bash "$LAB_DIR/registry.sh" up -i "$INVENTORY"
  bash "$LAB_DIR/hf_endpoint/hf_endpoint.sh" up -i "$INVENTORY"
  log "up in $((SECONDS - t0))s: $(cat "$REGISTRY_STATE/image"), model $(cat "$REPO/.lab/model/repo_id")@$(cat "$REPO/.lab/model/revision")"
}

cmd_down() {
  bash "$LAB_DIR/hf_endpoint/hf_endpoint.sh" down -i "$INVENTORY"
  bash "$LAB_DIR/registry.sh" down -i "$INVENTORY"
  bash "$LAB_DIR/lab.sh" down -i "$INVENTORY"
}

cmd_status() {
  local rc=0
  bash "$LAB_DIR/lab.sh" status -i "$INVENTORY" || rc=1
  bash "$LAB_DIR/registry.sh" status -i "$INVENTORY" || rc=1
  bash "$LAB_DIR/hf_endpoint/hf_endpoint.sh" status -i "$INVENTORY" || rc=1
  return "$rc"
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: $0 up | down | status" >&2; exit 2 ;;
esac
