#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Build the dspark-lab vLLM SIMULATOR image (NOT vLLM) on the local Docker engine.
#   bash lab/simulator/build.sh            # -> dspark-lab/vllm-sim:latest
# Env: BASE_IMAGE (default dspark-lab/node:trixie), IMAGE (default dspark-lab/vllm-sim:latest).
# Exit: 0 built and smoke-tested, 1 docker/build failure, 2 base image missing.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BASE_IMAGE=${BASE_IMAGE:-dspark-lab/node:trixie}
IMAGE=${IMAGE:-dspark-lab/vllm-sim:latest}

die() { echo "build.sh: ERROR: $1" >&2; exit "${2:-1}"; }

command -v docker >/dev/null 2>&1 || die "the docker CLI is not installed"
docker info >/dev/null 2>&1 || die "cannot reach the Docker daemon (start dockerd, e.g. via 'bash lab/lab.sh up')"
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    die "base image '$BASE_IMAGE' does not exist on this Docker engine. Build the lab node image first
       ('bash lab/lab.sh up' builds it), or point BASE_IMAGE at a local image with python3 >= 3.11.
       There is no registry in the lab, so it cannot be pulled." 2
fi
if command -v python3 >/dev/null 2>&1; then
    # Catch a syntax error before spending a docker build on it.
    python3 - "$HERE/dspark_vllm_sim.py" <<'PY' || die "dspark_vllm_sim.py does not compile"
import sys
compile(open(sys.argv[1]).read(), sys.argv[1], "exec")
PY
fi

echo "build.sh: building $IMAGE (vLLM SIMULATOR, not vLLM) from $BASE_IMAGE"
docker build --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$IMAGE" "$HERE" || die "docker build failed"

# Smoke test: the image answers like `vllm --version` and labels itself a simulator.
version=$(docker run --rm "$IMAGE" vllm --version 2>/dev/null) || die "the built image does not run 'vllm --version'"
label=$(docker image inspect -f '{{ index .Config.Labels "dspark.lab.simulator" }}' "$IMAGE")
[ "$label" = "true" ] || die "label dspark.lab.simulator=true is missing on $IMAGE"
echo "build.sh: OK: $IMAGE reports vLLM $version (SIMULATOR)"
