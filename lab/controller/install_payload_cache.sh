#!/usr/bin/env bash
# Install the lab controllers' payload cache (dspark_lab_payload_cache.py) into a test venv's site directory (the
# Makefile: .venv and .venv-newest). It acts only when DSPARK_LAB_PAYLOAD_CACHE names a directory (the Makefile sets
# it). Never on a node, never in the collection.
# Usage: install_payload_cache.sh SITE_DIR
set -euo pipefail
dest=${1:?usage: install_payload_cache.sh SITE_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# site.py runs the import line of every .pth file in a site directory at each interpreter start. A link, not a copy:
# the venvs live in the checkout and follow its changes.
ln -sfn "$here/dspark_lab_payload_cache.py" "$dest/dspark_lab_payload_cache.py"
echo 'import dspark_lab_payload_cache' >"$dest/dspark-lab-payload-cache.pth"
chmod 0644 "$dest/dspark-lab-payload-cache.pth"
