#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# A lab image as a `docker save` archive, for docker_runtime's tarball path (lab/simulator/save.sh, lab/engine/save.sh
# build their image first, then call this). ARCHIVE is written only when it holds another image (its manifest names
# the config blob, whose hash is the image ID), and by rename: another lab of `make test` may be copying the old
# archive to its nodes meanwhile; an interrupted save leaves no partial file (the images are up to several GB).
#   bash lab/save_image.sh IMAGE ARCHIVE    # last line: "save.sh: saved ..." or "save.sh: current ..."
set -euo pipefail

image=${1:?usage: save_image.sh IMAGE ARCHIVE}
archive=${2:?usage: save_image.sh IMAGE ARCHIVE}
id=$(docker image inspect -f '{{.Id}}' "$image")
if [[ -s $archive ]] && tar -xOf "$archive" manifest.json | grep -q "${id#sha256:}"; then
  touch "$archive" # newer than the sources again, for make's rule
  echo "save.sh: current $archive ($id)"
  exit 0
fi
mkdir -p "$(dirname "$archive")"
trap 'rm -f "$archive.tmp.$$"' EXIT
docker save -o "$archive.tmp.$$" "$image"
mv -f "$archive.tmp.$$" "$archive"
echo "save.sh: saved $archive ($id)"
