#!/usr/bin/env bash
# Install the lab's module bytecode cache (dspark_lab_ansiballz_cache.py) into a Python site directory: a lab node's
# dist-packages (build.sh, lab/vm/vmlab.sh) or the test venvs' (the Makefile: modules the tests run on the
# controller). Never on a real node, never in the collection.
# Usage: install_ansiballz_cache.sh SITE_DIR
set -euo pipefail
dest=${1:?usage: install_ansiballz_cache.sh SITE_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# site.py runs the import line of every .pth file in a site directory at each interpreter start.
install -d -m 0755 "$dest"
install -m 0644 "$here/dspark_lab_ansiballz_cache.py" "$dest/dspark_lab_ansiballz_cache.py"
echo 'import dspark_lab_ansiballz_cache' >"$dest/dspark-lab-ansiballz-cache.pth"
chmod 0644 "$dest/dspark-lab-ansiballz-cache.pth"
