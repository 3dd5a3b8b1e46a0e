# shellcheck shell=bash
# Sourced by lab/vm/vmlab.sh and lab/model/make.sh: what a lab builds, kept by its recipe's key for every checkout on
# this host (the node, simulator and engine images are shared the same way, in Docker).

# host_cache_dir KIND: the folder of KIND's builds (DSPARK_LAB_CACHE, else ~/.cache/dspark-lab).
host_cache_dir() {
  printf '%s/%s\n' "${DSPARK_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dspark-lab}" "$1"
}

# host_cache_keep_only DIR NAME: removes DIR's other entries (the builds of older recipes).
host_cache_keep_only() {
  find "$1" -mindepth 1 -maxdepth 1 ! -name "$2" -exec rm -rf {} +
}
