#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# The REAL engine image (vLLM CPU build) as a `docker save` archive, for docker_runtime's tarball path, as
# lab/simulator/save.sh does for the simulator. Builds the image first (build.sh: a no-op when current), then writes
# ARCHIVE only when it holds another image (its manifest names the config blob, whose hash is the image ID), and by
# rename: another lab may be copying the old archive to its nodes meanwhile. The archive is about as large as the
# image (docs/lab.md, "Real engine").
#   bash lab/engine/save.sh [.lab/images/vllm-cpu.tar]    # last line: "save.sh: saved ..." or "save.sh: current ..."
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
IMAGE=${IMAGE:-dspark-lab/vllm-cpu:0.32.0}
archive=${1:-$REPO/.lab/images/vllm-cpu.tar}

IMAGE=$IMAGE bash "$HERE/build.sh"
exec bash "$HERE/../save_image.sh" "$IMAGE" "$archive"
