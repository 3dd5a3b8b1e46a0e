#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Prove the real engine by hand and record it: a TP=2 pair of the engine image (head --node-rank 0 with the API,
# worker --node-rank 1 --headless; multiprocessing multi-node, no Ray) serving the tiny model from its hub-layout cache
# offline, started as the serve role starts a rank (entrypoint /bin/sh -c 'exec "$@"' dspark-serve, command vllm serve
# ..., the API key only in the head's 0600 env file, the cache read-only at /cache/huggingface, a JIT cache at
# /cache/jit). Then: a chat completion with the key, 401 without it, the memory of each container, a stop of each.
#   bash lab/engine/record_tp2.sh [DIR]   # default lab/engine/recordings/tp2-cpu-<version>; about 2-3 min, ~6 GiB
# The two "nodes" are two containers on a docker network of their own (internal: no route out), each with its own
# address (VLLM_HOST_IP) and interface (GLOO_SOCKET_IFNAME), and each pinned to its own core (VLLM_CPU_OMP_THREADS_BIND
# 0 and 1: the default `auto` put both on core 0 of this 2-core machine). HTTP requests go from inside the head
# container to its own loopback. The key is a sentinel: the recording is grepped for it and refused if it appears.
# DIR gets head.log / worker.log (`docker logs`, stdout and stderr as docker interleaves them), *.timestamps.log
# (`docker logs --timestamps`, what tp_ranks reads), *.stop.log (what each printed after its stop began), responses/,
# manifest.json and README.md (versions, command lines, measurements). Lone carriage returns (progress bars) are
# stored as <CR>: ansible-test sanity rejects any \r in a file (the project's fixture convention).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
IMAGE=${IMAGE:-dspark-lab/vllm-cpu:0.32.0}
MODEL_DIR=${MODEL_DIR:-$REPO/.lab/model}
NET=dspark-engine-tp2
SUBNET=192.168.239.0/24
HEAD_IP=192.168.239.11
WORKER_IP=192.168.239.12
API_PORT=8000
MASTER_PORT=29501
KEY=dspark-sentinel-engine-key-4b1e7f2a
READY_LIMIT=${READY_LIMIT:-600}

log() { printf 'record: %s\n' "$*"; }
die() { printf 'record: ERROR: %s\n' "$*" >&2; exit 1; }
trap 'printf "record: ERROR: line %s: %s failed\n" "$LINENO" "$BASH_COMMAND" >&2' ERR

bash "$REPO/lab/model/make.sh" >&2
REV=$(cat "$MODEL_DIR/revision")
MODEL=$(cat "$MODEL_DIR/repo_id")
VERSION=$(docker run --rm --network none "$IMAGE" vllm --version | tail -n 1)
OUTDIR=${1:-$HERE/recordings/tp2-cpu-${VERSION%%+*}}
work=$(mktemp -d)
cleanup() {
  docker rm -f dspark-tp2-head dspark-tp2-worker >/dev/null 2>&1 || true
  docker network rm "$NET" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
cleanup_containers() { docker rm -f dspark-tp2-head dspark-tp2-worker >/dev/null 2>&1 || true; }
cleanup_containers
docker network rm "$NET" >/dev/null 2>&1 || true
docker network create --internal --subnet "$SUBNET" --label dspark.lab=1 "$NET" >/dev/null
mkdir -p "$work/jit-0" "$work/jit-1" "$work/responses"
# The head's secrets file, as the serve role writes it (0600, VLLM_API_KEY='...'); the worker gets none.
install -m 0600 /dev/null "$work/secrets.env"
printf "VLLM_API_KEY=%s\n" "$KEY" >"$work/secrets.env"

# The serve role's environment (roles/serve/defaults/main.yml serve_env, what applies to a CPU engine) + per node.
common_env=(-e HF_HOME=/cache/huggingface -e HF_HUB_OFFLINE=1 -e TRANSFORMERS_OFFLINE=1 -e HF_HUB_DISABLE_XET=1
  -e VLLM_CACHE_ROOT=/cache/jit/vllm-cache -e TORCHINDUCTOR_CACHE_DIR=/cache/jit/torchinductor
  -e HF_MODULES_CACHE=/cache/jit/hf-modules -e VLLM_CPU_KVCACHE_SPACE=1 -e GLOO_SOCKET_IFNAME=eth0)
args=(vllm serve "$MODEL" --revision "$REV" --served-model-name tiny-llama --host 0.0.0.0 --port "$API_PORT"
  --tensor-parallel-size 2 --pipeline-parallel-size 1 --distributed-executor-backend mp
  --dtype float32 --max-model-len 256 --enforce-eager
  --nnodes 2 --master-addr "$HEAD_IP" --master-port "$MASTER_PORT")
run_rank() { # NAME IP RANK CORE EXTRA_DOCKER_ARGS... -- EXTRA_VLLM_ARGS...
  local name=$1 ip=$2 rank=$3 core=$4 docker_extra=() vllm_extra=()
  shift 4
  while (($#)) && [[ $1 != -- ]]; do docker_extra+=("$1"); shift; done
  (($#)) && shift
  vllm_extra=("$@")
  docker run -d --name "$name" --hostname "$name" --network "$NET" --ip "$ip" --shm-size 2g \
    --label dspark.lab=1 "${common_env[@]}" -e "VLLM_HOST_IP=$ip" -e "VLLM_CPU_OMP_THREADS_BIND=$core" \
    -v "$MODEL_DIR/hf:/cache/huggingface:ro" -v "$work/jit-$rank:/cache/jit" "${docker_extra[@]}" \
    --entrypoint /bin/sh "$IMAGE" -c 'exec "$@"' dspark-serve "${args[@]}" --node-rank "$rank" "${vllm_extra[@]}" >/dev/null
}
# http METHOD PATH [KEY] [BODY]: a request from inside the head container to its own API; prints STATUS then the body
# (status 0: no answer, or the head container is gone).
http() {
  docker exec -i dspark-tp2-head python3 - "$@" <<'PY' || printf '0\nno answer: docker exec failed (is the head still running?)\n'
import sys, urllib.request, urllib.error
method, path = sys.argv[1], sys.argv[2]
key = sys.argv[3] if len(sys.argv) > 3 else ''
body = sys.argv[4].encode() if len(sys.argv) > 4 else None
req = urllib.request.Request('http://127.0.0.1:8000' + path, data=body, method=method)
if key:
    req.add_header('Authorization', 'Bearer ' + key)
if body:
    req.add_header('Content-Type', 'application/json')
try:
    with urllib.request.urlopen(req, timeout=120) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
except Exception as e:
    print(0); print(repr(e))
PY
}
rss() { # container -> "rss_mib peak_mib" from its memory cgroup (v1; v2 has no total_rss: "? peak")
  local id cg
  id=$(docker inspect -f '{{.Id}}' "$1")
  cg=/sys/fs/cgroup/memory/docker/$id
  if [[ -r $cg/memory.stat ]]; then
    echo "$(awk '$1 == "total_rss" {printf "%d", $2 / 1048576}' "$cg/memory.stat") $(($(cat "$cg/memory.max_usage_in_bytes") / 1048576))"
  else
    echo "? $(($(cat "/sys/fs/cgroup/system.slice/docker-$id.scope/memory.peak" 2>/dev/null || echo 0) / 1048576))"
  fi
}

log "starting the head ($HEAD_IP) and the worker ($WORKER_IP): $MODEL@$REV on $IMAGE (vLLM $VERSION)"
t0=$(date +%s.%N)
run_rank dspark-tp2-head "$HEAD_IP" 0 0 --env-file "$work/secrets.env"
run_rank dspark-tp2-worker "$WORKER_IP" 1 1 -- --headless
ready=
while :; do
  el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  [[ $(docker inspect -f '{{.State.Running}}' dspark-tp2-head) == true ]] || break
  [[ $(docker inspect -f '{{.State.Running}}' dspark-tp2-worker) == true ]] || break
  if [[ $(http GET /v1/models "$KEY" | head -n 1) == 200 ]]; then ready=$el; break; fi
  awk -v e="$el" -v l="$READY_LIMIT" 'BEGIN {exit !(e > l)}' && break
  sleep 1
done
[[ -n $ready ]] || {
  docker logs dspark-tp2-head 2>&1 | tail -n 30 >&2
  docker logs dspark-tp2-worker 2>&1 | tail -n 30 >&2
  die "the pair did not serve /v1/models within ${READY_LIMIT}s"
}
log "ready: /v1/models answered 200 ${ready}s after the head started"
read -r head_rss_ready head_peak_ready <<<"$(rss dspark-tp2-head)"
read -r worker_rss_ready worker_peak_ready <<<"$(rss dspark-tp2-worker)"

want=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))["transformers_check"]; print(json.dumps(c["messages"]), c["max_tokens"])' \
  "$MODEL_DIR/model.json")
messages=${want% *}
max_tokens=${want##* }
body=$(printf '{"model": "tiny-llama", "messages": %s, "max_tokens": %s, "temperature": 0}' "$messages" "$max_tokens")
c0=$(date +%s.%N)
http POST /v1/chat/completions "$KEY" "$body" >"$work/responses/chat_with_key.txt"
chat_s=$(awk -v a="$c0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
http GET /v1/models >"$work/responses/models_without_key.txt"
http POST /v1/chat/completions "" "$body" >"$work/responses/chat_without_key.txt"
http POST /v1/chat/completions "wrong-$KEY" "$body" >"$work/responses/chat_wrong_key.txt"
http GET /v1/models "$KEY" >"$work/responses/models_with_key.txt"
chat_status=$(head -n 1 "$work/responses/chat_with_key.txt")
noauth_status=$(head -n 1 "$work/responses/chat_without_key.txt")
models_noauth_status=$(head -n 1 "$work/responses/models_without_key.txt")
wrong_status=$(head -n 1 "$work/responses/chat_wrong_key.txt")
log "chat completion with the key: HTTP $chat_status in ${chat_s}s; without: $noauth_status (/v1/models: $models_noauth_status); wrong key: $wrong_status"
read -r head_rss head_peak <<<"$(rss dspark-tp2-head)"
read -r worker_rss worker_peak <<<"$(rss dspark-tp2-worker)"

# The healthy logs, then a stop of each rank (head first, as a group stop does) with what it printed meanwhile.
for r in head worker; do
  docker logs "dspark-tp2-$r" >"$work/$r.log" 2>&1
  docker logs --timestamps "dspark-tp2-$r" >"$work/$r.timestamps.log" 2>&1
done
for r in head worker; do
  s0=$(date +%s.%N)
  docker stop -t 10 "dspark-tp2-$r" >/dev/null
  printf '%s %s %s\n' "$r" "$(awk -v a="$s0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')" \
    "$(docker inspect -f '{{.State.ExitCode}}' "dspark-tp2-$r")" >>"$work/stops"
  docker logs "dspark-tp2-$r" 2>&1 | tail -n +"$(($(wc -l <"$work/$r.log") + 1))" >"$work/$r.stop.log"
done
log "stops (rank, seconds, exit code): $(paste -sd';' "$work/stops")"

# No key anywhere in what is kept.
if grep -rlF -- "$KEY" "$work"/*.log "$work/responses"; then die "the sentinel key appears in the recording (see above)"; fi

mkdir -p "$OUTDIR/responses"
for f in head.log worker.log head.timestamps.log worker.timestamps.log head.stop.log worker.stop.log responses/chat_with_key.txt \
  responses/chat_without_key.txt responses/chat_wrong_key.txt responses/models_with_key.txt responses/models_without_key.txt; do
  # Lone CRs become <CR> (sanity); nothing else is changed.
  sed 's/\r/<CR>/g' "$work/$f" >"$OUTDIR/$f"
done
printf '%s\n' "${args[@]}" >"$work/args"
export IMAGE VERSION MODEL REV NET SUBNET HEAD_IP WORKER_IP ready chat_s chat_status noauth_status models_noauth_status
export wrong_status head_rss_ready head_peak_ready worker_rss_ready worker_peak_ready head_rss head_peak worker_rss worker_peak
IMAGE_ID=$(docker image inspect -f '{{.Id}}' "$IMAGE") RECORDED=$(date -u +%Y-%m-%dT%H:%M:%SZ) \
  python3 - "$OUTDIR/manifest.json" "$work/args" "$work/stops" "$work/responses/chat_with_key.txt" "$MODEL_DIR/model.json" <<'PY'
import json, os, sys
out, args_file, stops_file, chat_file, model_file = sys.argv[1:]
e = os.environ
args = open(args_file).read().splitlines()
stops = {r: {'seconds': float(s), 'exit_code': int(c)} for r, s, c in (ln.split() for ln in open(stops_file) if ln.strip())}
try:
    answer = json.loads(open(chat_file).read().split('\n', 1)[1])['choices'][0]['message']['content']
except (ValueError, KeyError, IndexError):
    answer = None
greedy = json.load(open(model_file))['transformers_check']['greedy_text']


def mib(v):
    return int(v) if v.isdigit() else None


manifest = {
    'recorded': e['RECORDED'], 'image': e['IMAGE'], 'image_id': e['IMAGE_ID'], 'vllm': e['VERSION'],
    'model': e['MODEL'], 'revision': e['REV'], 'host_cores': os.cpu_count(),
    'network': {'name': e['NET'], 'subnet': e['SUBNET'], 'head': e['HEAD_IP'], 'worker': e['WORKER_IP'], 'interface': 'eth0'},
    'entrypoint': ['/bin/sh', '-c', 'exec "$@"', 'dspark-serve'],
    'command_head': args + ['--node-rank', '0'], 'command_worker': args + ['--node-rank', '1', '--headless'],
    'seconds_start_to_models_200': float(e['ready']), 'seconds_chat_completion': float(e['chat_s']),
    'http_status': {'chat_with_key': int(e['chat_status']), 'chat_without_key': int(e['noauth_status']),
                    'models_without_key': int(e['models_noauth_status']), 'chat_wrong_key': int(e['wrong_status'])},
    'answer': answer, 'transformers_greedy_text': greedy, 'answer_equals_transformers': answer == greedy,
    'memory_mib': {r: {'rss_ready': mib(e[r + '_rss_ready']), 'rss_after_chat': mib(e[r + '_rss']),
                       'max_usage_with_page_cache': mib(e[r + '_peak'])} for r in ('head', 'worker')},
    'stops': stops,
}
with open(out, 'w') as f:
    json.dump(manifest, f, indent=1, sort_keys=True)
    f.write('\n')
m = manifest
with open(os.path.join(os.path.dirname(out), 'README.md'), 'w') as f:
    f.write(f"""# Recording: real vLLM {m['vllm']} (CPU build), TP=2 over two containers

Recorded {m['recorded']} by `bash lab/engine/record_tp2.sh` on a {m['host_cores']}-core x86_64 machine: image `{m['image']}`
(`{m['image_id']}`), model `{m['model']}` at revision `{m['revision']}` (lab/model, random weights), from the hub-layout
cache mounted read-only with `HF_HUB_OFFLINE=1`. THE LOGS ARE VERBATIM (`docker logs`, stdout and stderr as docker
interleaves them), except that every carriage return is stored as `<CR>` (ansible-test sanity rejects `\\r`). The API key
was a sentinel, in the head's 0600 env file only; the script refused to save the recording had it appeared anywhere.

| file | what |
| --- | --- |
| `head.log`, `worker.log` | `docker logs NAME` once the chat completion below had answered (healthy pair) |
| `head.timestamps.log`, `worker.timestamps.log` | the same, `docker logs --timestamps` (what tp_ranks reads) |
| `head.stop.log`, `worker.stop.log` | what each printed after its `docker stop -t 10` began (head first) |
| `responses/` | HTTP status, then body: chat with the key, without it, with a wrong key; /v1/models with and without |
| `manifest.json` | versions, command lines, addresses, timings, memory, stop durations and exit codes |

Both containers: entrypoint `/bin/sh -c 'exec "$@"' dspark-serve` (the serve role's), network `{m['network']['name']}`
({m['network']['subnet']}, internal), interface `eth0`, `--shm-size 2g`, HF cache read-only at `/cache/huggingface`, a JIT
cache at `/cache/jit`; environment `HF_HOME=/cache/huggingface HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_XET=1
VLLM_CACHE_ROOT=/cache/jit/vllm-cache TORCHINDUCTOR_CACHE_DIR=/cache/jit/torchinductor HF_MODULES_CACHE=/cache/jit/hf-modules
VLLM_CPU_KVCACHE_SPACE=1 GLOO_SOCKET_IFNAME=eth0`, plus per node `VLLM_HOST_IP` ({m['network']['head']}, {m['network']['worker']})
and `VLLM_CPU_OMP_THREADS_BIND` (0, 1); the head also `VLLM_API_KEY` from its env file.

- head: `{' '.join(m['command_head'])}`
- worker: `{' '.join(m['command_worker'])}`

Results:

- `/v1/models` answered 200 {m['seconds_start_to_models_200']} s after the head's `docker run` (the worker started right after it).
- HTTP status: chat with the key {m['http_status']['chat_with_key']} ({m['seconds_chat_completion']} s, greedy, the first
  request), without the key {m['http_status']['chat_without_key']}, with a wrong key {m['http_status']['chat_wrong_key']};
  /v1/models without the key {m['http_status']['models_without_key']}.
- The answer equals transformers' greedy text for the same chat (model.json): {m['answer_equals_transformers']}.
- Memory, MiB (memory cgroup total_rss when ready / after the chat; max usage, page cache included):
  head {m['memory_mib']['head']['rss_ready']} / {m['memory_mib']['head']['rss_after_chat']}
  ({m['memory_mib']['head']['max_usage_with_page_cache']}), worker {m['memory_mib']['worker']['rss_ready']} /
  {m['memory_mib']['worker']['rss_after_chat']} ({m['memory_mib']['worker']['max_usage_with_page_cache']}).
- `docker stop -t 10`: head {m['stops']['head']['seconds']} s (exit {m['stops']['head']['exit_code']}), then worker
  {m['stops']['worker']['seconds']} s (exit {m['stops']['worker']['exit_code']}).
""")
PY
log "recorded in $OUTDIR: ready ${ready}s; RSS head ${head_rss} MiB, worker ${worker_rss} MiB"
[[ $chat_status == 200 && $noauth_status == 401 ]] || die "expected HTTP 200 with the key and 401 without"
