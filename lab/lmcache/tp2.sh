#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# By hand, not in `make test` (issue #45, docs/lmcache-findings.md "TP=2, a server per node, restart"): a TP=2 vLLM
# group of the engine image with LMCache's multiprocess server beside each rank, in throwaway containers on this
# machine's Docker. Each of the two "nodes" is three containers:
#   lmc-node-N    holds the node's network (its own address on the internal network lmc-tp2) and IPC namespace
#                 (--ipc shareable, --shm-size $SHM): what the lab's DinD node container is to compose's
#                 `network_mode: host` + `ipc: host`; it outlives restarts of the group, as a node's /dev/shm does;
#   lmc-srv-N     `lmcache server ...` (--network container:lmc-node-N --ipc container:lmc-node-N), its disk tier
#                 (L2) on the host directory $WORK/l2-N mounted at /l2;
#   lmc-vllm-N    vLLM rank N (0 the head with the API, 1 --headless), joined to the same two namespaces.
#   bash lab/lmcache/tp2.sh run           # the whole measurement (about 5 min on 2 cores); or step by step:
#   bash lab/lmcache/tp2.sh up|stop|start|ask [LABEL]|metrics|logs|down
# Env: MODE (urls: lmcache.mp.server_urls with both nodes' servers, the servers on the node address; local: each
# rank's own 127.0.0.1 server via lmcache.mp.host/port; none: no LMCache at all, the baseline), L2 (fs, fs_native or
# none), L2_GB (fs_native's max_capacity_gb), L1_GB, CHUNK, MAXLEN, PROMPT_TOKENS (the long prompt, cut to that many
# tokens or fewer), PROMPT_SEED (another value, another prompt), KV_EXTRA (more kv_connector_extra_config keys, e.g.
# '"lmcache.mp.mq_timeout":60'), IMAGE (an engine image WITH LMCache: bash lab/engine/build.sh), WORK (kept between
# calls: the L2 directories, the JIT caches, the logs, results.txt), SHM (each node's /dev/shm).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
IMAGE=${IMAGE:-dspark-lab/vllm-cpu:0.32.0}
MODEL_DIR=${MODEL_DIR:-$REPO/.lab/model}
WORK=${WORK:-/tmp/lmc-tp2}
MODE=${MODE:-urls}
L2=${L2:-fs}
L2_GB=${L2_GB:-1}
L1_GB=${L1_GB:-1}
CHUNK=${CHUNK:-128}
MAXLEN=${MAXLEN:-2048}
PROMPT_TOKENS=${PROMPT_TOKENS:-1900}
PROMPT_SEED=${PROMPT_SEED:-7}
KV_EXTRA=${KV_EXTRA:-}
SHM=${SHM:-3g}
NET=lmc-tp2
SUBNET=192.168.237.0/24
IPS=(192.168.237.11 192.168.237.12)
ZMQ_PORT=5555
HTTP_PORT=8080
PROM_PORT=9090
API_PORT=8000
MASTER_PORT=29501
READY_LIMIT=${READY_LIMIT:-600}

log() { printf 'tp2: %s\n' "$*"; }
die() { printf 'tp2: ERROR: %s\n' "$*" >&2; exit 1; }

REV=$(cat "$MODEL_DIR/revision")
MODEL=$(cat "$MODEL_DIR/repo_id")
mkdir -p "$WORK"

server_cmd() { # NODE -> the lmcache server command line
  local n=$1 host=127.0.0.1 l2=()
  [[ $MODE == urls ]] && host=${IPS[n]}
  case $L2 in
    fs) l2=(--l2-adapter '{"type":"fs","base_path":"/l2"}') ;;
    fs_native) l2=(--l2-adapter "{\"type\":\"fs_native\",\"base_path\":\"/l2\",\"max_capacity_gb\":$L2_GB,\"eviction\":{\"eviction_policy\":\"LRU\"}}") ;;
    none) ;;
    *) die "L2=$L2: fs, fs_native or none" ;;
  esac
  printf '%s\0' lmcache server --host "$host" --port "$ZMQ_PORT" --http-host 127.0.0.1 --http-port "$HTTP_PORT" \
    --prometheus-port "$PROM_PORT" --l1-size-gb "$L1_GB" --eviction-policy LRU --supported-transfer-mode auto \
    --shm-name "lmc_tp2_node$n" --chunk-size "$CHUNK" "${l2[@]}"
}

kv_config() {
  case $MODE in
    urls) printf '{"kv_connector":"LMCacheMPConnector","kv_role":"kv_both","kv_connector_extra_config":{"lmcache.mp.server_urls":"tcp://%s:%s,tcp://%s:%s"%s}}' \
      "${IPS[0]}" "$ZMQ_PORT" "${IPS[1]}" "$ZMQ_PORT" "${KV_EXTRA:+,$KV_EXTRA}" ;;
    local) printf '{"kv_connector":"LMCacheMPConnector","kv_role":"kv_both","kv_connector_extra_config":{"lmcache.mp.host":"tcp://127.0.0.1","lmcache.mp.port":%s%s}}' "$ZMQ_PORT" "${KV_EXTRA:+,$KV_EXTRA}" ;;
  esac
}

vllm_cmd() { # NODE -> the vLLM command line of that rank
  local n=$1 extra=()
  [[ $MODE != none ]] && extra+=(--kv-transfer-config "$(kv_config)")
  ((n == 1)) && extra+=(--headless)
  printf '%s\0' vllm serve "$MODEL" --revision "$REV" --served-model-name tiny-llama --host 0.0.0.0 --port "$API_PORT" \
    --tensor-parallel-size 2 --pipeline-parallel-size 1 --distributed-executor-backend mp \
    --dtype float32 --max-model-len "$MAXLEN" --max-num-seqs 4 --enforce-eager \
    --nnodes 2 --master-addr "${IPS[0]}" --master-port "$MASTER_PORT" --node-rank "$n" "${extra[@]}"
}

env_of() { # NODE
  printf '%s\0' -e HF_HOME=/cache/huggingface -e HF_HUB_OFFLINE=1 -e TRANSFORMERS_OFFLINE=1 -e HF_HUB_DISABLE_XET=1 \
    -e VLLM_CACHE_ROOT=/cache/jit/vllm-cache -e TORCHINDUCTOR_CACHE_DIR=/cache/jit/torchinductor \
    -e HF_MODULES_CACHE=/cache/jit/hf-modules -e VLLM_CPU_KVCACHE_SPACE=1 -e GLOO_SOCKET_IFNAME=eth0 \
    -e "VLLM_HOST_IP=${IPS[$1]}" -e "VLLM_CPU_OMP_THREADS_BIND=$1" -e LMCACHE_DISABLE_BANNER=1 -e LMCACHE_TRACK_USAGE=false
}

# py NODE: python3 from stdin inside the node's namespaces (a server or vLLM container of it, whichever runs).
py() {
  local n=$1 c
  shift
  for c in "lmc-srv-$n" "lmc-vllm-$n"; do
    if [[ $(docker inspect -f '{{.State.Running}}' "$c" 2>/dev/null) == true ]]; then
      docker exec -i "$c" python3 - "$@"
      return
    fi
  done
  echo "no running container on node $n" >&2
  return 1
}

http_get() { # NODE URL -> STATUS BODY
  py "$1" "$2" <<'PY'
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except Exception as e:
    print(0, repr(e))
PY
}

up_nodes() {
  docker network inspect "$NET" >/dev/null 2>&1 ||
    docker network create --internal --subnet "$SUBNET" --label dspark.lab=1 "$NET" >/dev/null
  local n
  for n in 0 1; do
    mkdir -p "$WORK/l2-$n" "$WORK/jit-$n"
    docker inspect "lmc-node-$n" >/dev/null 2>&1 && continue
    docker run -d --name "lmc-node-$n" --hostname "lmc-node-$n" --network "$NET" --ip "${IPS[n]}" \
      --ipc shareable --shm-size "$SHM" --label dspark.lab=1 --entrypoint sleep "$IMAGE" infinity >/dev/null
  done
}

start_servers() {
  local n cmd t0
  [[ $MODE == none ]] && return 0
  for n in 0 1; do
    mapfile -d '' cmd < <(server_cmd "$n")
    docker rm -f "lmc-srv-$n" >/dev/null 2>&1 || true
    docker run -d --name "lmc-srv-$n" --network "container:lmc-node-$n" --ipc "container:lmc-node-$n" \
      --label dspark.lab=1 -e LMCACHE_DISABLE_BANNER=1 -e LMCACHE_TRACK_USAGE=false -v "$WORK/l2-$n:/l2" --entrypoint /bin/sh "$IMAGE" \
      -c 'exec "$@"' lmcache-server "${cmd[@]}" >/dev/null
  done
  t0=$SECONDS
  for n in 0 1; do
    until [[ $(http_get "$n" "http://127.0.0.1:$HTTP_PORT/healthcheck" 2>/dev/null | cut -d' ' -f1) == 200 ]]; do
      [[ $(docker inspect -f '{{.State.Running}}' "lmc-srv-$n") == true ]] || { docker logs "lmc-srv-$n" | tail -30; die "server $n exited"; }
      ((SECONDS - t0 < 120)) || die "server $n not healthy in 120 s"
      sleep 1
    done
  done
  log "servers healthy $((SECONDS - t0)) s after their start"
}

start_vllm() {
  local n cmd env t0 el
  for n in 0 1; do
    mapfile -d '' cmd < <(vllm_cmd "$n")
    mapfile -d '' env < <(env_of "$n")
    docker rm -f "lmc-vllm-$n" >/dev/null 2>&1 || true
    docker run -d --name "lmc-vllm-$n" --network "container:lmc-node-$n" --ipc "container:lmc-node-$n" \
      --label dspark.lab=1 "${env[@]}" -v "$MODEL_DIR/hf:/cache/huggingface:ro" -v "$WORK/jit-$n:/cache/jit" \
      --entrypoint /bin/sh "$IMAGE" -c 'exec "$@"' dspark-serve "${cmd[@]}" >/dev/null
  done
  t0=$(date +%s.%N)
  while :; do
    el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    for n in 0 1; do
      [[ $(docker inspect -f '{{.State.Running}}' "lmc-vllm-$n") == true ]] ||
        { docker logs "lmc-vllm-$n" 2>&1 | tail -40; die "vllm rank $n exited"; }
    done
    [[ $(http_get 0 "http://127.0.0.1:$API_PORT/v1/models" 2>/dev/null | cut -d' ' -f1) == 200 ]] && break
    awk -v e="$el" -v l="$READY_LIMIT" 'BEGIN {exit !(e > l)}' && die "the group did not serve within ${READY_LIMIT}s"
    sleep 2
  done
  log "group ready: /v1/models 200 ${el} s after the vLLM containers started"
}

# ask LABEL: a short warm-up request, then the long prompt, streamed: TTFT, total, prompt tokens, text.
ask() {
  local label=${1:-ask}
  py 0 "$PROMPT_TOKENS" "$API_PORT" "$PROMPT_SEED" <<'PY' | tee -a "$WORK/results.txt" | sed "s/^/tp2: [$label] /"
import json, sys, time, urllib.error, urllib.request
tokens, port, seed = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
vocab = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec "
         "romeo sierra tango uniform victor whiskey xray yankee zulu").split()
def text(words):
    return " ".join(vocab[(i * seed + i // 26) % 26] for i in range(words))
def count(t):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/tokenize", data=json.dumps({"model": "tiny-llama", "prompt": t}).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=60).read())["count"]
words = tokens  # the same words every time: the longest prefix of the sequence within `tokens` tokens
while count(text(words)) > tokens:
    words -= max(1, (count(text(words)) - tokens) // 4)
prompt = text(words)
def stream(text, max_tokens):
    body = {"model": "tiny-llama", "prompt": text, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic(); ttft = None; out = []; usage = None
    try:
        r = urllib.request.urlopen(req, timeout=600)
    except urllib.error.HTTPError as e:
        sys.exit("HTTP %s: %s" % (e.code, e.read().decode()[:500]))
    with r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk.get("choices", []):
                if c.get("text"):
                    if ttft is None:
                        ttft = time.monotonic() - t0
                    out.append(c["text"])
    return ttft, time.monotonic() - t0, usage, "".join(out)
w = stream("warm up", 2)
print("warm-up: ttft %.3f s" % w[0])
ttft, total, usage, text = stream(prompt, 8)
print("long prompt: prompt_tokens %s, ttft %.3f s, total %.3f s, text %r" % (usage and usage["prompt_tokens"], ttft, total, text))
PY
}

metrics() {
  local n
  log "vLLM head /metrics (prefix cache):"
  py 0 "http://127.0.0.1:$API_PORT/metrics" <<'PY' | sed 's/^/  /'
import sys, urllib.request
for line in urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().splitlines():
    if (("prefix_cache" in line or "lmcache" in line.lower()) and not line.startswith("#") and "_bucket{" not in line
            and "_created{" not in line):
        print(line)
PY
  [[ $MODE == none ]] && return 0
  for n in 0 1; do
    log "server $n :$HTTP_PORT/metrics (non-zero lmcache samples; --prometheus-port is not served while the HTTP server runs):"
    py "$n" "http://127.0.0.1:$HTTP_PORT/metrics" <<'PY' | sed 's/^/  /' || true
import re, sys, urllib.request
for line in urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().splitlines():
    line = re.sub(r',?otel_scope_[a-z_]+="[^"]*"', "", re.sub(r'model_name="[^"]*"', 'model_name="…"', line)).replace("{,", "{")
    if line.startswith("#") or "lmcache" not in line.lower() or "_bucket{" in line or "_created{" in line:
        continue
    try:
        if float(line.rsplit(" ", 1)[1]) == 0:
            continue
    except ValueError:
        pass
    print(line)
PY
    log "node $n: L2 files $(find "$WORK/l2-$n" -type f | wc -l), $(du -sk "$WORK/l2-$n" | cut -f1) KiB"
  done
}

mem() { # per container: the sum of its processes' RSS and of their shared-memory pages (/proc: docker stats shows 0 B
  # on this host's cgroup v1 setup); then each node's /dev/shm use
  local c n
  for c in lmc-srv-0 lmc-srv-1 lmc-vllm-0 lmc-vllm-1; do
    [[ $(docker inspect -f '{{.State.Running}}' "$c" 2>/dev/null) == true ]] || continue
    docker exec "$c" sh -c 'cat /proc/[0-9]*/status 2>/dev/null' |
      awk -v c="$c" '/^VmRSS/ {r += $2} /^RssShmem/ {s += $2} END {printf "tp2: mem %s RSS %d MiB (of it shmem %d MiB)\n", c, r / 1024, s / 1024}'
  done
  for n in 0 1; do
    log "node $n /dev/shm: $(docker exec "lmc-node-$n" sh -c 'df -m /dev/shm | tail -1 | awk "{print \$3\" MiB used of \"\$2}"; ls -l /dev/shm | tail -n +2 | awk "{print \$9, \$5}"' | paste -sd' ' -)"
  done
}

stop_group() {
  local c t0
  for c in lmc-vllm-0 lmc-vllm-1 lmc-srv-0 lmc-srv-1; do
    docker inspect "$c" >/dev/null 2>&1 || continue
    t0=$SECONDS
    docker stop -t 10 "$c" >/dev/null
    log "stopped $c in $((SECONDS - t0)) s, exit $(docker inspect -f '{{.State.ExitCode}}' "$c")"
  done
}

logs() {
  local c
  for c in lmc-srv-0 lmc-srv-1 lmc-vllm-0 lmc-vllm-1; do
    docker inspect "$c" >/dev/null 2>&1 || continue
    docker logs "$c" >"$WORK/$c.log" 2>&1
    log "$c: $WORK/$c.log ($(wc -l <"$WORK/$c.log") lines)"
  done
}

down() {
  docker rm -f lmc-vllm-0 lmc-vllm-1 lmc-srv-0 lmc-srv-1 lmc-node-0 lmc-node-1 >/dev/null 2>&1 || true
  docker network rm "$NET" >/dev/null 2>&1 || true
}

case ${1:-run} in
  up) up_nodes; start_servers; start_vllm ;;
  servers) up_nodes; start_servers ;;
  vllm) start_vllm ;;
  ask) ask "${2:-ask}" ;;
  metrics) metrics ;;
  mem) mem ;;
  stop) logs; stop_group ;;
  start) start_servers; start_vllm ;;
  logs) logs ;;
  down) down ;;
  run)
    down; rm -rf "$WORK"; mkdir -p "$WORK"
    log "MODE=$MODE L2=$L2 image $IMAGE; server 0: $(server_cmd 0 | tr '\0' ' ')"
    log "vLLM rank 0: $(vllm_cmd 0 | tr '\0' ' ')"
    up_nodes; start_servers; start_vllm; mem
    ask first; ask repeat; metrics
    logs; stop_group
    start_servers; start_vllm
    ask after-restart; metrics; mem; logs
    ;;
  *) die "usage: tp2.sh run|up|servers|vllm|ask [LABEL]|metrics|mem|stop|start|logs|down" ;;
esac
