#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# The SIMULATOR image (NOT vLLM) as a `docker save` archive, for docker_runtime's tarball path (the fleet lab, the
# docker_runtime scenario). Builds the image first (build.sh; docker build's cache makes a repeat take seconds), then
# writes ARCHIVE through lab/save_image.sh (only when it holds another image, by rename).
#   bash lab/simulator/save.sh .lab/images/vllm-sim.tar    # last line: "save.sh: saved ..." or "save.sh: current ..."
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IMAGE=${IMAGE:-dspark-lab/vllm-sim:latest}
archive=${1:?usage: save.sh ARCHIVE}

IMAGE=$IMAGE bash "$HERE/build.sh"
exec bash "$HERE/../save_image.sh" "$IMAGE" "$archive"
