#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# By hand, not in `make test`: LMCache's multiprocess server and vLLM's LMCacheMPConnector inside one throwaway
# container of the real-engine lab's image (docs/lmcache-findings.md says how to run it and what it showed). Installs
# the wheels mounted at /dl with --no-deps (torch and vLLM untouched), starts `lmcache server $SERVER_ARGS`, then
# `vllm serve $MODEL` with the connector, sends the same long prompt twice ($REP words) and prints the prefix-cache
# counters, the disk tier's files (/tmp/l2) and the logs' LMCache lines.
set -u
python -m ensurepip >/dev/null 2>&1
python -m pip install -q --no-index --no-deps /dl/lmcache-0.5.6-cp311-*.whl /dl/extra/*.whl 2>&1 | tail -2
export LMCACHE_DISABLE_BANNER=1 HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1
read -r -a server_args <<< "${SERVER_ARGS:-}"
echo "### lmcache server ${SERVER_ARGS:-}"
lmcache server "${server_args[@]}" > /tmp/server.log 2>&1 &
server=$!
for i in $(seq 1 60); do
  sleep 1
  kill -0 "$server" 2>/dev/null || break
  grep -qiE "listening|started|ready|Uvicorn running" /tmp/server.log && break
done
sleep 3
if kill -0 "$server" 2>/dev/null; then echo "server alive after ${i}s"; else wait "$server"; echo "server exited: rc=$?"; fi
tail -40 /tmp/server.log
[ "${SERVER_ONLY:-0}" = 1 ] && exit 0

echo "### vllm serve"
read -r -a vllm_extra <<< "${VEXTRA:-}"
timeout 200 vllm serve "$MODEL" --served-model-name tiny-llama --max-model-len "${MAXLEN:-256}" --max-num-seqs 4 \
  --max-num-batched-tokens 512 --dtype float32 --enforce-eager "${vllm_extra[@]}" --port 8000 \
  --kv-transfer-config '{"kv_connector":"LMCacheMPConnector","kv_role":"kv_both"}' > /tmp/vllm.log 2>&1 &
engine=$!
for i in $(seq 1 150); do
  sleep 1
  kill -0 "$engine" 2>/dev/null || break
  grep -q "Application startup complete" /tmp/vllm.log && break
done
if grep -q "Application startup complete" /tmp/vllm.log; then
  echo "vllm up after ${i}s"
  for _ in 1 2; do
    python - <<'PY'
import json, os, urllib.request
body = {"model": "tiny-llama", "prompt": "hello world " * int(os.environ.get("REP", "60")), "max_tokens": 4}
request = urllib.request.Request("http://127.0.0.1:8000/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
try:
    print(urllib.request.urlopen(request, timeout=60).read()[:300])
except Exception as error:  # a probe: print what came back and go on
    print("request failed:", error)
PY
  done
  sleep 3
  python -c 'import urllib.request
print("\n".join(line for line in urllib.request.urlopen("http://127.0.0.1:8000/metrics").read().decode().splitlines()
                if "prefix_cache" in line and not line.startswith("#")))'
  echo "disk tier files: $(find /tmp/l2 -type f 2>/dev/null | wc -l)"
else
  echo "vllm not up after ${i}s"
fi
echo "### vllm log (LMCache, connector, errors)"
grep -n -iE "lmcache|connector|kv_transfer|error|exception|Traceback|startup complete" /tmp/vllm.log | head -80
echo "### vllm log tail"
tail -40 /tmp/vllm.log
echo "### server log tail"
tail -30 /tmp/server.log
kill "$engine" "$server" 2>/dev/null
sleep 2
