# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure decision logic of the ``tp_ranks`` action plugin.

The action plugin only runs commands (``docker inspect``, ``docker logs``, a
small HTTP client on the head) and sleeps; everything that parses their output
or decides something lives here: the group plan from inventory variables, the
docker command lines, ``docker inspect`` parsing, a timestamp-merging log
buffer, the ``logs_by_rank`` input of ``vllm_log.assess_group``, the API probe
script and its judgement, and the diagnoses with the rank, node, cause and fix.
No Ansible imports, no I/O. Python 3.8 syntax (sanity compiles module_utils
for 3.8+).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import bisect
import json
import re
import shlex

DEFAULT_CONTAINER = 'dspark-vllm'
# Last lines of each rank's log put into a failed result.
EXCERPT_LINES = 40
# Rounds a fatal-but-secondary failure (peer exited, container stopped) may
# wait for the root cause to show up in another rank's log.
SETTLE_ROUNDS = 3
# Consecutive rounds a node may be unreachable (or the probe broken) before failing.
UNREACHABLE_ROUNDS = 3
GENERATION_PROMPT = 'Reply with OK.'
GENERATION_MAX_TOKENS = 16
HEALTH_TIMEOUT = 5
MODELS_TIMEOUT = 10

# Lines kept from the whole container log on the first look at a container,
# so that an already running group whose start-up scrolled out of the tail
# still shows its registration and readiness lines. Fixed strings (grep -F).
KEY_LINE_NEEDLES = (
    'world_size=',
    ' in world size ',
    'Inferred data_parallel_rank',
    'non-default args: ',
    'headless multiproc executor',
    'server version ',
    'Available KV cache memory',
    'GPU KV cache size',
    'Maximum concurrency for',
    'init engine (profile',
    'Starting vLLM',
    'Application startup complete.',
    'vLLM is using nccl==',
)
KEY_LINES_MAX = 2000

_FIX_RENDEZVOUS = ('Start every node with the same --nnodes, --master-addr (the head\'s fabric IP, reachable from every '
                   'node) and --master-port, a distinct --node-rank and --headless on ranks > 0; open the master port '
                   'on the head and check the fabric link; start all ranks within the distributed timeout.')
_FIX_NCCL_HANG = ('NCCL connects the ranks over the fabric after the store rendezvous; a silent hang there is usually a '
                  'RoCE mismatch on one node: a wrong or shared literal NCCL_IB_GID_INDEX (use NCCL_IB_GID_AUTO=1 or a '
                  'per-node WORKER_NCCL_IB_GID_INDEX), NCCL_IB_HCA naming the wrong port, or NCCL_SOCKET_IFNAME not '
                  'selecting the fabric interface; rerun with NCCL_DEBUG=INFO to see the stalled connection.')
_FIX_RESTART = ('A restarted rank cannot rejoin a running TP group: find the previous boot\'s error, then restart the '
                'head and all workers together (workers first).')


class PlanError(ValueError):
    """The inventory does not describe a usable serving group (all problems in ``problems``)."""

    def __init__(self, problems):
        self.problems = list(problems)
        super(PlanError, self).__init__('; '.join(self.problems))


def _as_int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.match(r'^\s*\d+\s*$', value):
        return int(value)
    return None


# --------------------------------------------------------------------------- plan

def plan_group(group, groups, member_vars, container=DEFAULT_CONTAINER, containers=None):
    """Members, ranks and containers of one serving group, or PlanError.

    groups: the inventory's ``groups`` mapping; member_vars: host -> dict with
    at least dspark_rank (optional: dspark_group, dspark_tensor_parallel_size,
    dspark_gpus_per_node, dspark_api_port). Node r runs global ranks
    r*L .. r*L+L-1 where L = world size / number of nodes.
    """
    problems = []
    if not group or not isinstance(group, str):
        raise PlanError(['No serving group: pass group= or set dspark_group on the task host.'])
    if group not in (groups or {}):
        raise PlanError(['Serving group %r is not an inventory group (known: %s).'
                         % (group, ', '.join(sorted(g for g in (groups or {}) if g not in ('all', 'ungrouped')))
                            or 'none')])
    hosts = list(groups[group] or [])
    if not hosts:
        raise PlanError(['Serving group %r has no hosts.' % group])
    containers = dict(containers or {})
    for host in sorted(containers):
        if host not in hosts:
            problems.append('containers names %r, which is not a member of %s (members: %s).'
                            % (host, group, ', '.join(hosts)))
        elif not isinstance(containers[host], str) or not containers[host].strip():
            problems.append('containers[%r] must be a non-empty container name.' % host)

    by_rank = {}
    for host in hosts:
        hvars = member_vars.get(host) or {}
        raw = hvars.get('dspark_rank')
        rank = _as_int(raw)
        if raw is None:
            problems.append('%s (member of %s) has no dspark_rank: set 0 on the head and 1..N-1 on the workers.'
                            % (host, group))
            continue
        if rank is None or rank < 0:
            problems.append('%s: dspark_rank=%r is not a non-negative integer.' % (host, raw))
            continue
        member_group = hvars.get('dspark_group')
        if member_group is not None and member_group != group:
            problems.append('%s: dspark_group=%r but the host is checked as a member of %r.'
                            % (host, member_group, group))
        by_rank.setdefault(rank, []).append(host)
    for rank in sorted(by_rank):
        if len(by_rank[rank]) > 1:
            problems.append('dspark_rank=%d is used by %s: every member needs its own rank.'
                            % (rank, ', '.join(sorted(by_rank[rank]))))
    if by_rank and not problems:
        expected = list(range(len(hosts)))
        if sorted(by_rank) != expected:
            problems.append('The ranks of %s are %s; they must be 0..%d (0 = head).'
                            % (group, ', '.join(str(r) for r in sorted(by_rank)), len(hosts) - 1))
    if problems:
        raise PlanError(problems)

    nnodes = len(hosts)
    head = by_rank[0][0]
    head_vars = member_vars.get(head) or {}
    world = _as_int(head_vars.get('dspark_tensor_parallel_size'))
    if world is None:
        gpus = _as_int(head_vars.get('dspark_gpus_per_node'))
        world = nnodes * (gpus if gpus else 1)
    if world < nnodes or world % nnodes:
        raise PlanError(['%s: dspark_tensor_parallel_size=%d is not a multiple of its %d nodes.'
                         % (group, world, nnodes)])
    per_node = world // nnodes
    members = []
    rank_nodes = {}
    for node_rank in range(nnodes):
        node = by_rank[node_rank][0]
        ranks = list(range(node_rank * per_node, (node_rank + 1) * per_node))
        for rank in ranks:
            rank_nodes[rank] = node
        members.append({'node': node, 'node_rank': node_rank, 'ranks': ranks,
                        'container': containers.get(node) or container})
    return {
        'group': group,
        'head': head,
        'members': members,
        'world_size': world,
        'ranks_per_node': per_node,
        'expected_ranks': list(range(world)),
        'rank_nodes': rank_nodes,
        'api_port': _as_int(head_vars.get('dspark_api_port')),
    }


def log_key(member):
    """The logs_by_rank key of a member: its first global rank."""
    return member['ranks'][0]


# --------------------------------------------------------------------------- docker commands

def _docker(become):
    return 'sudo -n docker' if become else 'docker'


INSPECT_FORMAT = ('{"Id":{{json .Id}},"Name":{{json .Name}},"RestartCount":{{json .RestartCount}},'
                  '"Image":{{json .Config.Image}},"State":{{json .State}}}')


def inspect_command(container, become=False):
    """docker inspect limited to identity and state (the full output carries the environment, secrets included)."""
    return '%s inspect --type container --format %s %s' % (
        _docker(become), shlex.quote(INSPECT_FORMAT), shlex.quote(container))


def logs_command(container, lines, since=None, become=False):
    """Timestamped stdout+stderr of the container: the last `lines`, only those at or after `since` if given."""
    parts = [_docker(become), 'logs', '--timestamps']
    if since:
        parts += ['--since', shlex.quote(since)]
    parts += ['--tail', str(int(lines)), shlex.quote(container), '2>&1']
    return ' '.join(parts)


def key_lines_command(container, become=False):
    """The registration/readiness lines of the whole log (first look at a container)."""
    needles = ' '.join('-e %s' % shlex.quote(n) for n in KEY_LINE_NEEDLES)
    return '%s logs --timestamps %s 2>&1 | grep -a -F %s | tail -n %d' % (
        _docker(become), shlex.quote(container), needles, KEY_LINES_MAX)


def parse_inspect(rc, stdout, stderr=''):
    """Container facts from `inspect_command` output, or from a plain ``docker inspect`` JSON list.

    Returns {exists, state, running, exit_code, restart_count, started_at,
    finished_at, oom_killed, error, id, name, image, problem}; problem is None,
    'missing' or 'docker_error' (docker unusable: not installed, no permission,
    sudo needs a password).
    """
    out = {'exists': False, 'state': None, 'running': False, 'exit_code': None, 'restart_count': None,
           'started_at': None, 'finished_at': None, 'oom_killed': None, 'error': None, 'id': None, 'name': None,
           'image': None, 'problem': None, 'message': None}
    text = (stdout or '').strip()
    err = (stderr or '').strip()
    if rc != 0 or not text:
        message = (err or text or 'docker inspect exited with %s' % rc).splitlines()
        message = message[-1] if message else ''
        low = (err + '\n' + text).lower()
        if 'no such object' in low or 'no such container' in low:
            out.update(state='missing', problem='missing', message=message)
        else:
            out.update(problem='docker_error', message=message)
        return out
    try:
        data = json.loads(text)
    except ValueError:
        first = text.splitlines()[0] if text else ''
        out.update(problem='docker_error', message='unexpected docker inspect output: %s' % first[:200])
        return out
    if isinstance(data, list):
        if not data:
            out.update(state='missing', problem='missing', message='docker inspect returned no container')
            return out
        data = data[0]
    state = data.get('State') or {}
    status = state.get('Status')
    if not status:
        status = 'running' if state.get('Running') else ('restarting' if state.get('Restarting') else 'exited')
    out.update(
        exists=True, state=status, running=status == 'running', exit_code=state.get('ExitCode'),
        restart_count=data.get('RestartCount'), started_at=state.get('StartedAt'),
        finished_at=state.get('FinishedAt'), oom_killed=state.get('OOMKilled'), error=state.get('Error') or None,
        id=data.get('Id'), name=(data.get('Name') or '').lstrip('/') or None,
        # Full `docker inspect`: Image is the image id and Config.Image the reference.
        image=(data.get('Config') or {}).get('Image') or data.get('Image'))
    return out


# --------------------------------------------------------------------------- log buffer

_TS_RE = re.compile(r'^(?P<ts>(?P<base>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d{1,9}))?'
                    r'(?:Z|[+-]\d{2}:\d{2}))\s?')


def _ts_key(line):
    """(sortable instant, raw timestamp, message) of a ``docker logs --timestamps`` line."""
    match = _TS_RE.match(line)
    if not match:
        return None, None, line
    key = match.group('base') + '.' + (match.group('frac') or '').ljust(9, '0')
    return key, match.group('ts'), line[match.end():]


class LogBuffer:
    """One container's log, merged across polls.

    ``docker logs --timestamps`` lines are merged by timestamp without
    duplicates, so a registration line that scrolled out of ``--tail`` stays
    known. Output without timestamps replaces the buffer. The oldest lines
    are dropped beyond ``max_lines``, except those with a key needle.
    """

    def __init__(self, max_lines=20000):
        self.max_lines = max_lines
        self.reset()

    def reset(self):
        self._keys = []
        self._lines = []
        self._counts = {}
        self.last_ts = None

    def __len__(self):
        return len(self._lines)

    def add(self, text):
        """Merge a chunk of output; returns the number of new lines."""
        if not text:
            return 0
        lines = text.split('\n')
        if lines and lines[-1] == '':
            lines.pop()
        if not lines:
            return 0
        parsed = [_ts_key(line) for line in lines]
        if not any(key for key, _raw, _msg in parsed):
            self.reset()
            self._lines = list(lines)
            self._keys = [''] * len(lines)
            return len(lines)
        added = 0
        seen_now = {}
        key = raw = None
        for line, (line_key, line_raw, message) in zip(lines, parsed):
            if line_key is not None:
                key, raw = line_key, line_raw
            elif key is None:
                continue            # untimestamped head of a chunk: nothing to anchor it to
            # Docker trims trailing zeros of the fraction: compare instants, not their spelling.
            ident = (key, message)
            seen_now[ident] = seen_now.get(ident, 0) + 1
            if seen_now[ident] <= self._counts.get(ident, 0):
                continue
            self._counts[ident] = self._counts.get(ident, 0) + 1
            if not self._keys or key >= self._keys[-1]:
                self._keys.append(key)
                self._lines.append(line)
                self.last_ts = raw
            else:
                pos = bisect.bisect_right(self._keys, key)
                self._keys.insert(pos, key)
                self._lines.insert(pos, line)
            added += 1
        self._trim()
        return added

    def _trim(self):
        excess = len(self._lines) - self.max_lines
        if excess <= 0:
            return
        keep_keys = []
        keep_lines = []
        for key, line in zip(self._keys, self._lines):
            if excess > 0 and not any(needle in line for needle in KEY_LINE_NEEDLES):
                ident = (key, _ts_key(line)[2])
                self._counts[ident] -= 1
                if not self._counts[ident]:
                    del self._counts[ident]
                excess -= 1
                continue
            keep_keys.append(key)
            keep_lines.append(line)
        self._keys = keep_keys
        self._lines = keep_lines

    def text(self):
        return '\n'.join(self._lines) + ('\n' if self._lines else '')

    def tail(self, count=EXCERPT_LINES):
        lines = []
        for line in self._lines[-count:] if count else []:
            lines.extend(part for part in _clean(line).split('\n') if part.strip())
        return lines[-count:] if count else []


_ANSI_RE = re.compile(r'\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]')


def _clean(line):
    return _ANSI_RE.sub('', line).replace('\r\n', '\n').replace('\r', '\n').rstrip()


def logs_by_rank(plan, observations, buffers):
    """The ``assess_group`` input: {first rank of node: {node, log, container_state, exit_code}}.

    observations: node -> parse_inspect() result (or None when the node could
    not be reached this round); buffers: node -> LogBuffer.
    """
    out = {}
    for member in plan['members']:
        node = member['node']
        obs = observations.get(node) or {}
        buf = buffers.get(node)
        out[log_key(member)] = {
            'node': node,
            'log': buf.text() if buf is not None else '',
            'container_state': obs.get('state'),
            'exit_code': obs.get('exit_code'),
        }
    return out


# --------------------------------------------------------------------------- API probe (runs on the head)

# Runs with the head's python3 (3.6+), stdlib only, parameters as JSON on stdin
# (the API key never appears on a command line). Proxies are ignored: the API
# is on the head's own loopback.
PROBE_SCRIPT = r'''
import json, socket, sys, time
from urllib import request as rq, error as er
p = json.loads(sys.stdin.read() or "{}")
opener = rq.build_opener(rq.ProxyHandler({}))
base = "http://127.0.0.1:%d" % int(p["port"])
def call(method, path, body, timeout):
    headers = {"Accept": "application/json"}
    if p.get("api_key"):
        headers["Authorization"] = "Bearer " + p["api_key"]
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    req = rq.Request(base + path, data=data, headers=headers)
    req.get_method = lambda: method
    out = {"status": None, "error": None, "timed_out": False}
    start = time.time()
    raw = b""
    try:
        resp = opener.open(req, timeout=timeout)
        out["status"] = resp.getcode()
        raw = resp.read(4194304)
    except er.HTTPError as exc:
        out["status"] = exc.code
        try:
            raw = exc.read(65536)
        except Exception:
            raw = b""
    except Exception as exc:
        reason = getattr(exc, "reason", exc)
        out["timed_out"] = isinstance(reason, socket.timeout) or "timed out" in str(reason)
        out["error"] = "%s: %s" % (type(reason).__name__, reason)
    out["seconds"] = round(time.time() - start, 3)
    text = raw.decode("utf-8", "replace")
    try:
        out["json"] = json.loads(text) if text.strip() else None
    except ValueError:
        out["json"] = None
        out["text"] = text[:400]
    return out
res = {"health": call("GET", "/health", None, p.get("health_timeout", 5))}
models = call("GET", "/v1/models", None, p.get("models_timeout", 10))
body = models.pop("json", None)
ids = None
if isinstance(body, dict) and isinstance(body.get("data"), list):
    ids = [m.get("id") for m in body["data"] if isinstance(m, dict)]
elif body is not None:
    models["text"] = json.dumps(body)[:400]
models["ids"] = ids
res["models"] = models
if p.get("generate") and ids and p["model"] in ids:
    chat = call("POST", "/v1/chat/completions", {"model": p["model"], "max_tokens": p["max_tokens"],
                "messages": [{"role": "user", "content": p["prompt"]}]}, p["generation_timeout"])
    body = chat.pop("json", None)
    choices = body.get("choices") if isinstance(body, dict) else None
    chat["choices"] = len(choices) if isinstance(choices, list) else None
    if choices:
        first = choices[0] if isinstance(choices[0], dict) else {}
        msg = first.get("message") or {}
        chat["content"] = str(msg.get("content") or msg.get("reasoning_content") or first.get("text") or "")[:200]
        chat["finish_reason"] = first.get("finish_reason")
    elif body is not None:
        chat["text"] = json.dumps(body)[:400]
    res["chat"] = chat
    if chat["timed_out"]:
        res["health_after"] = call("GET", "/health", None, p.get("health_timeout", 5))
        res["health_after"].pop("json", None)
res["health"].pop("json", None)
sys.stdout.write(json.dumps(res))
'''


def probe_command(python='python3'):
    return '%s -c %s' % (shlex.quote(python or 'python3'), shlex.quote(PROBE_SCRIPT))


def probe_input(port, served_model_name, generate, generation_timeout, api_key=None):
    """The probe's stdin (JSON)."""
    params = {'port': int(port), 'model': served_model_name, 'generate': bool(generate),
              'generation_timeout': generation_timeout, 'max_tokens': GENERATION_MAX_TOKENS,
              'prompt': GENERATION_PROMPT, 'health_timeout': HEALTH_TIMEOUT, 'models_timeout': MODELS_TIMEOUT}
    if api_key:
        params['api_key'] = api_key
    return json.dumps(params)


def parse_probe(rc, stdout, stderr=''):
    """The probe's JSON result, or {'probe_error': text, 'rc': rc} when it did not run."""
    text = (stdout or '').strip()
    if rc == 0 and text:
        try:
            data = json.loads(text.splitlines()[-1])
            if isinstance(data, dict):
                return data
        except ValueError:
            pass
    detail = ((stderr or '').strip() or text or 'no output').splitlines()
    return {'probe_error': (detail[-1] if detail else '')[:300], 'rc': rc}


def _describe_call(name, call):
    if not call:
        return '%s not tried' % name
    if call.get('status') is not None:
        return '%s HTTP %s' % (name, call['status'])
    return '%s %s' % (name, call.get('error') or 'no answer')


def judge_probe(probe, served_model_name, head, port, generation_timeout):
    """Verdict on one probe result.

    Returns {api_reachable, health_ok, models_ok, models, generation
    (None|'ok'|'failed'), generation_seconds, failure (a diagnosis that fails
    the task at once, or None), probe_broken (the script did not run), state}.
    """
    out = {'api_reachable': False, 'health_ok': False, 'models_ok': False, 'models': None, 'generation': None,
           'generation_seconds': None, 'failure': None, 'probe_broken': False, 'state': ''}
    where = '127.0.0.1:%s on %s' % (port, head)
    if probe is None:
        out['state'] = 'API not probed (the head container is not running)'
        return out
    if 'probe_error' in probe:
        out['probe_broken'] = True
        out['state'] = 'the API probe did not run on %s: %s' % (head, probe['probe_error'])
        if probe.get('rc') == 127:
            out['failure'] = _diag('probe_failed', 0, head, 'The API probe could not start on %s: %s.'
                                   % (head, probe['probe_error']),
                                   'Install python3 on the head or set ansible_python_interpreter for it.', None)
        return out
    health = probe.get('health') or {}
    models = probe.get('models') or {}
    chat = probe.get('chat')
    out['health_ok'] = health.get('status') == 200
    out['api_reachable'] = health.get('status') is not None or models.get('status') is not None
    ids = models.get('ids')
    out['models'] = ids
    out['models_ok'] = models.get('status') == 200 and isinstance(ids, list) and served_model_name in ids
    out['state'] = '%s, %s' % (_describe_call('/health', health), _describe_call('/v1/models', models))
    if models.get('status') in (401, 403):
        out['failure'] = _diag(
            'api_unauthorized', 0, head,
            'The API on %s refused /v1/models with HTTP %s: it requires an API key.' % (where, models['status']),
            'Pass api_key= with the head\'s --api-key / VLLM_API_KEY value.', models.get('text'))
        return out
    if models.get('status') == 200 and isinstance(ids, list) and served_model_name not in ids:
        out['failure'] = _diag(
            'served_model_mismatch', 0, head,
            'The API on %s answers (/health HTTP %s) but /v1/models lists %s, not %r.'
            % (where, health.get('status'), ', '.join(repr(i) for i in ids) or 'no model', served_model_name),
            'Start the head with --served-model-name %s, or pass the name it serves as served_model_name.'
            % served_model_name, json.dumps({'data': [{'id': i} for i in ids]}))
        return out
    if chat is None:
        return out
    out['generation_seconds'] = chat.get('seconds')
    if chat.get('status') == 200 and chat.get('choices'):
        out['generation'] = 'ok'
        out['state'] += ', chat completion OK in %ss' % chat.get('seconds')
        return out
    out['generation'] = 'failed'
    if chat.get('timed_out'):
        after = probe.get('health_after') or {}
        health_alive = after.get('status') == 200 if after else out['health_ok']
        if health_alive:
            out['failure'] = _diag(
                'wedged', 0, head,
                'The TP group is wedged: the API on %s lists %r and /health answers 200, but a %d-token chat '
                'completion got no answer within %s s (a rank hangs in a collective).'
                % (where, served_model_name, GENERATION_MAX_TOKENS, generation_timeout),
                'Read every rank\'s log (shared memory broadcast stalls, NCCL warnings) and restart the head and '
                'all workers together; /health alone does not show a wedged group.', None)
        else:
            out['failure'] = _diag(
                'generation_timeout', 0, head,
                'A chat completion on %s got no answer within %s s and /health no longer answers 200 (%s).'
                % (where, generation_timeout, _describe_call('/health', after)),
                'Read the head\'s log for the engine error; restart the head and all workers together.', None)
        out['state'] += ', chat completion timed out'
        return out
    if chat.get('status') == 200:
        cause = 'A chat completion on %s answered HTTP 200 without choices.' % where
        code = 'generation_empty'
    else:
        cause = 'A chat completion on %s failed: %s.' % (where, _describe_call('POST /v1/chat/completions', chat))
        code = 'generation_failed'
    out['failure'] = _diag(code, 0, head, cause,
                           'Read the head\'s log (engine errors, NCCL); restart the head and all workers together.',
                           chat.get('text'))
    out['state'] += ', chat completion failed'
    return out


def merge_generation(judgement, previous):
    """Carry the one generation probe's verdict into later rounds (it is never repeated)."""
    out = dict(judgement)
    if out.get('generation') is None and previous:
        out['generation'] = previous.get('generation')
        out['generation_seconds'] = previous.get('generation_seconds')
    return out


def probe_broken_diagnosis(plan, judgement):
    return _diag('probe_failed', 0, plan['head'],
                 'The API probe keeps failing on %s: %s.' % (plan['head'], judgement.get('state')),
                 'Check python3 on the head (or its ansible_python_interpreter) and the head\'s connection.', None)


# --------------------------------------------------------------------------- diagnoses

def _diag(code, rank, node, cause, fix, evidence, severity='fatal', root_cause=True):
    return {'code': code, 'rank': rank, 'node': node, 'cause': cause, 'fix': fix, 'evidence': evidence,
            'severity': severity, 'root_cause': root_cause}


def _from_failure(failure):
    return _diag(failure['code'], failure.get('rank'), failure.get('node'), failure.get('cause'),
                 failure.get('fix'), failure.get('line'), failure.get('severity', 'fatal'),
                 bool(failure.get('root_cause')))


def access_diagnoses(plan, observations, unreachable, streaks):
    """Fatal diagnoses for nodes where docker cannot be used or that stay unreachable.

    observations: node -> parse_inspect() result; unreachable: node -> error
    text for this round; streaks: node -> consecutive unreachable rounds.
    """
    out = []
    for member in plan['members']:
        node = member['node']
        rank = log_key(member)
        if node in unreachable:
            if streaks.get(node, 0) >= UNREACHABLE_ROUNDS:
                out.append(_diag('node_unreachable', rank, node,
                                 'Rank %d\'s node %s could not be reached in %d polls in a row: %s'
                                 % (rank, node, streaks[node], unreachable[node]),
                                 'Check the node is up and reachable with its inventory connection settings.', None))
            continue
        obs = observations.get(node) or {}
        if obs.get('problem') == 'docker_error':
            message = obs.get('message') or ''
            if 'password is required' in message or 'sudo' in message:
                fix = 'Allow the operator user passwordless sudo for docker, or drop become and add it to the docker group.'
            elif 'permission denied' in message.lower():
                fix = 'Add the operator user to the docker group on %s, or pass become: true.' % node
            else:
                fix = 'Install and start Docker on %s and make it usable by the operator user.' % node
            out.append(_diag('docker_unavailable', rank, node,
                             'docker inspect %s on %s failed: %s' % (member['container'], node, message), fix, message))
    return out


def restart_diagnoses(plan, observations, baselines, assessment):
    """A container that restarted (restart policy, or a new start while polling) breaks the group."""
    previous = {}
    for warning in assessment.get('warnings') or []:
        if warning.get('previous_boot') and warning.get('root_cause'):
            previous.setdefault(warning.get('rank'), warning)
    out = []
    for member in plan['members']:
        node = member['node']
        obs = observations.get(node) or {}
        if not obs.get('exists'):
            continue
        rank = log_key(member)
        base = baselines.get(node) or {}
        count = _as_int(obs.get('restart_count')) or 0
        restarted = count > 0
        if base.get('id') == obs.get('id') and base.get('started_at') and obs.get('started_at') != base['started_at']:
            restarted = True
        if not restarted:
            continue
        cause = ('The container %s of rank %d on %s restarted (RestartCount %d, started %s).'
                 % (member['container'], rank, node, count, obs.get('started_at')))
        evidence = None
        earlier = previous.get(rank)
        if earlier:
            cause += ' Its previous boot failed with %s: %s' % (earlier['code'], earlier['cause'])
            evidence = earlier.get('line')
        out.append(_diag('container_restarted', rank, node, cause, _FIX_RESTART, evidence))
    return out


def assessment_diagnoses(assessment):
    """assess_group failures as diagnoses, the most useful first.

    Root causes before consequences; the head's store-wait timeout goes after
    another rank's root cause (the head only waited for that rank).
    """
    diags = [_from_failure(f) for f in assessment.get('failures') or [] if f.get('severity') == 'fatal']
    roots = [d for d in diags if d['root_cause']]
    others_root = any(d['rank'] not in (0, None) for d in roots)

    def order(diag):
        demoted = diag['code'] == 'rendezvous_timeout' and diag['rank'] == 0 and others_root
        return (not diag['root_cause'], demoted, diag['rank'] is None,
                diag['rank'] if diag['rank'] is not None else 0)
    return sorted(diags, key=order)


def timeout_diagnoses(plan, assessment, judgement, timeout, log_sizes=None):
    """Why the group was not ready when the overall timeout ran out.

    log_sizes: {first rank of node: number of log lines seen} (tells a silent
    container from one that logs but never reached the rendezvous).
    """
    log_sizes = log_sizes or {}
    missing = assessment.get('missing_ranks') or []
    nodes = plan['rank_nodes']
    init_by_rank = dict((i['rank'], i) for i in assessment.get('init_methods') or [])
    warn_by_rank = {}
    for warning in assessment.get('warnings') or []:
        if warning.get('category') in ('rendezvous', 'network', 'fabric') and not warning.get('previous_boot'):
            warn_by_rank.setdefault(warning.get('rank'), warning)
    diags = []
    started = assessment.get('nccl_started')
    if missing and started:
        return _nccl_hang_diagnoses(plan, missing, started, warn_by_rank, timeout)
    if missing:
        # Culprits first: ranks that never dialled the store, then ranks that dialled it and logged
        # trouble, then ranks that dialled it silently; rank 0 hosts the store and only waits for them.
        for rank in missing:
            node = nodes.get(rank)
            init = init_by_rank.get(rank)
            warning = warn_by_rank.get(rank) or warn_by_rank.get(rank - rank % plan['ranks_per_node'])
            if warning:
                cause = ('Rank %d on %s did not join the rendezvous%s within %s s; its log says: %s'
                         % (rank, node, ' on %s' % init['init_method'] if init and init.get('init_method') else '',
                            timeout, warning['cause']))
                evidence, prio = warning.get('line'), 1
            elif init and rank == 0:
                others = [r for r in missing if r != 0]
                cause = ('Rank 0 on %s opened the rendezvous store on %s and waited %s s for %s.'
                         % (node, init.get('init_method'), timeout,
                            'rank(s) %s' % ', '.join(str(r) for r in others) if others else 'the group to complete'))
                evidence, prio = init.get('evidence'), 3
            elif init:
                cause = ('Rank %d on %s dialled the rendezvous on %s but never joined within %s s and logged no '
                         'error (packets dropped on the way to the master port, or the store is not reachable from '
                         'this node).' % (rank, node, init.get('init_method'), timeout))
                evidence, prio = init.get('evidence'), 2
            else:
                silent = log_sizes.get(rank - rank % plan['ranks_per_node']) == 0
                cause = ('Rank %d on %s never reached the rendezvous within %s s: %s (hung, still starting, wrong '
                         '--node-rank, or not started).'
                         % (rank, node, timeout, 'its container printed nothing' if silent else
                            'its log has no "world_size=%d rank=%d" line' % (plan['world_size'], rank)))
                evidence, prio = None, 0
            diag = _diag('rendezvous_timeout', rank, node, cause, _FIX_RENDEZVOUS, evidence)
            diag['_prio'] = prio
            diags.append(diag)
        diags.sort(key=lambda d: (d['_prio'], d['rank']))
        for diag in diags:
            diag.pop('_prio')
        return diags
    head = plan['head']
    if not judgement.get('models_ok'):
        markers = assessment.get('head_markers') or {}
        progress = [name for name in ('available_kv_cache', 'gpu_kv_cache_size', 'init_engine', 'api_server_start',
                                      'startup_complete') if markers.get(name)]
        cause = ('All %d ranks registered, but the API on %s did not list the model within %s s (last probe: %s; '
                 'last start-up step in the head log: %s).'
                 % (plan['world_size'], head, timeout, judgement.get('state') or 'none',
                    progress[-1] if progress else 'none after the rank assignment'))
        last = None
        for name in ('startup_complete', 'api_server_start', 'init_engine', 'gpu_kv_cache_size', 'available_kv_cache'):
            if markers.get(name):
                last = markers[name].get('line')
                break
        return [_diag('api_not_ready', 0, head, cause,
                      'Model load, profiling and graph capture can take 25 minutes: raise timeout, or read the head\'s '
                      'log for a hang.', last)]
    problems = []
    if not assessment.get('init_method_consistent'):
        problems.append('the ranks\' init methods are not all known or not equal')
    if assessment.get('world_size') != plan['world_size']:
        problems.append('the logs show world size %s, expected %d' % (assessment.get('world_size'), plan['world_size']))
    return [_diag('registration_incomplete', None, None,
                  'The API serves, but the logs never proved the group: %s.' % ('; '.join(problems) or 'unknown'),
                  'Compare the ranks\' "world_size=... rank=..." lines; every node needs the same --master-addr/'
                  '--master-port and --nnodes.', None)]


def _nccl_hang_diagnoses(plan, missing, started, warn_by_rank, timeout):
    """Missing ranks after rank 0 created its NCCL communicator: NCCL setup hangs, the rendezvous did not."""
    nodes = plan['rank_nodes']
    diags = []
    for rank in missing:
        node = nodes.get(rank)
        warning = warn_by_rank.get(rank) or warn_by_rank.get(rank - rank % plan['ranks_per_node'])
        cause = ('Rank %d on %s passed the rendezvous store (rank 0 on %s logged "vLLM is using nccl==%s", which needs '
                 'every rank in the store) but the NCCL communicator setup did not finish within %s s: %s'
                 % (rank, node, started.get('node'), started.get('version'), timeout,
                    'its log says: %s' % warning['cause'] if warning else
                    'no error was logged, NCCL waits for a connection that never completes.'))
        diags.append(_diag('nccl_init_hang', rank, node, cause, _FIX_NCCL_HANG,
                           warning.get('line') if warning else started.get('line')))
    return diags


def where(diag, group=None):
    if diag.get('rank') is None:
        return 'group %s' % group if group else 'group'
    return 'rank %s on %s' % (diag['rank'], diag.get('node') or 'unknown node')


def failure_message(plan, diagnoses, elapsed, limit=3):
    """One-paragraph reason naming rank, node, cause and fix of the first (root-cause) diagnoses."""
    roots = [d for d in diagnoses if d.get('root_cause')] or list(diagnoses)
    parts = ['%s: %s: %s Fix: %s' % (where(d, plan['group']), d['code'], d['cause'], d['fix']) for d in roots[:limit]]
    more = len(diagnoses) - min(len(roots), limit)
    text = 'TP group %s (%d ranks) is not serving after %.1f s: %s' % (
        plan['group'], plan['world_size'], elapsed, ' | '.join(parts) if parts else 'unknown reason')
    if more > 0:
        text += ' (+%d more in diagnosis)' % more
    return text


def success_message(plan, assessment, judgement, served_model_name, elapsed):
    ranks = ', '.join('rank %d on %s' % (r['rank'], r['node']) for r in assessment['registered_ranks'])
    return ('TP group %s ready after %.1f s: %d/%d ranks registered via %s (%s); /v1/models on %s lists %s; '
            'generation probe answered in %ss.' % (
                plan['group'], elapsed, len(assessment['registered_ranks']), plan['world_size'],
                assessment.get('init_method'), ranks, plan['head'], served_model_name,
                judgement.get('generation_seconds')))


def registration_complete(plan, assessment):
    return (not assessment.get('missing_ranks') and bool(assessment.get('init_method_consistent'))
            and assessment.get('world_size') == plan['world_size'])


def _with_stall_evidence(failure, assessment):
    """A wedge diagnosis gains the head log's shared-memory broadcast stall line, when there is one."""
    if failure.get('code') != 'wedged' or failure.get('evidence'):
        return failure
    stalls = [w for w in assessment.get('warnings') or [] if w.get('code') == 'rank_stalled']
    if not stalls:
        return failure
    stall = stalls[0]
    out = dict(failure)
    out['evidence'] = stall.get('line')
    out['cause'] += ' Rank %s\'s log on %s shows: %s' % (stall.get('rank'), stall.get('node'), stall.get('cause'))
    return out


def evaluate_round(plan, assessment, judgement, extra, settle):
    """('ready' | 'failed' | 'waiting', diagnoses) for one poll round.

    extra: diagnoses found outside the logs (access, restarts, probe); settle:
    rounds already spent waiting for the root cause of a secondary failure.
    """
    diags = list(extra) + assessment_diagnoses(assessment)
    if judgement.get('failure'):
        diags.append(_with_stall_evidence(judgement['failure'], assessment))
    fatal = [d for d in diags if d['severity'] == 'fatal']
    if fatal:
        fatal.sort(key=lambda d: not d['root_cause'])
        if any(d['root_cause'] for d in fatal) or settle >= SETTLE_ROUNDS:
            return 'failed', fatal
        return 'waiting', fatal
    if registration_complete(plan, assessment) and judgement.get('models_ok') and judgement.get('generation') == 'ok':
        return 'ready', []
    return 'waiting', []


# --------------------------------------------------------------------------- result pieces

def registered_view(plan, assessment):
    init_by_rank = dict((i['rank'], i.get('init_method')) for i in assessment.get('init_methods') or [])
    # The node whose log holds the line (the plan's node unless a --node-rank is wrong).
    return [{'rank': r['rank'], 'node': r.get('node') or plan['rank_nodes'].get(r['rank']),
             'evidence': r.get('evidence'), 'world_size': r.get('world_size'), 'tp_rank': r.get('tp_rank'),
             'init_method': init_by_rank.get(r['rank']), 'via': r.get('via')}
            for r in assessment.get('registered_ranks') or []]


def missing_view(plan, assessment):
    return [{'rank': r, 'node': plan['rank_nodes'].get(r)} for r in assessment.get('missing_ranks') or []]


def public_diagnoses(diagnoses):
    keys = ('code', 'rank', 'node', 'cause', 'fix', 'evidence', 'severity')
    return [dict((k, d.get(k)) for k in keys) for d in diagnoses]


def warning_view(assessment, limit=20):
    out = []
    for warning in (assessment.get('warnings') or [])[:limit]:
        out.append({'code': warning.get('code'), 'rank': warning.get('rank'), 'node': warning.get('node'),
                    'cause': warning.get('cause'), 'evidence': warning.get('line')})
    return out


def log_excerpts(plan, buffers, count=EXCERPT_LINES):
    """{first rank of each node: last `count` lines (ANSI-stripped)}."""
    out = {}
    for member in plan['members']:
        buf = buffers.get(member['node'])
        out[log_key(member)] = buf.tail(count) if buf is not None else []
    return out
