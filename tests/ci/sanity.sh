#!/usr/bin/env bash
# ansible-test sanity needs the collection at .../ansible_collections/dspark/cluster inside a git work
# tree: copy the tracked and untracked (not ignored) files there, then run it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${VENV:-$root/.venv}
# The bootstrap version follows the ansible-core release (24.2 for 2.19); link the stand-in for any version asked.
cache=~/.ansible/test/cache
mkdir -p "$cache"
grep -ho "pip='[0-9.]*'" "$venv"/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py \
  | grep -o "[0-9.]*[0-9]" | while read -r v; do
  cp "$root/tests/ci/get_pip_standin.py" "$cache/get_pip_${v//./_}.py"
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/dspark/cluster
mkdir -p "$dest"
(cd "$root" && git ls-files -co --exclude-standard -z | grep -zv '^collections/' | rsync -a --from0 --files-from=- ./ "$dest/")
(cd "$dest" && git init -q && git add -A)
cd "$dest"
PATH="$venv/bin:$PATH" ansible-test sanity --requirements --python "$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" "$@"
