# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the pure parts of the tp_ranks action (plugins/plugin_utils/_tp_*.py), moved from module_utils/tp_probe.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_api as tp_api
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_diagnosis as tp_diagnosis
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_docker as tp_docker
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_logbuffer as tp_logbuffer
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_plan as tp_plan

SERVED = 'deepseek-v4-flash-0731'
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
COLLECTIONS = os.path.join(ROOT, 'collections')
MODULE = os.path.join(ROOT, 'plugins', 'modules', 'tp_api_probe.py')
INIT = 'tcp://10.0.0.1:25000'


def member_vars(*ranks, **extra):
    out = {}
    for index, rank in enumerate(ranks):
        out['n%d' % index] = dict({'dspark_rank': rank, 'dspark_group': 'g', 'dspark_api_port': 8888}, **extra)
    return out


def groups_for(mvars):
    return {'all': sorted(mvars), 'g': sorted(mvars)}


# --------------------------------------------------------------------------- plan_group

def test_plan_two_nodes():
    mvars = member_vars(1, 0)
    plan = tp_plan.plan_group('g', groups_for(mvars), mvars, containers={'n0': 'w-ctr'})
    assert plan['head'] == 'n1' and plan['world_size'] == 2 and plan['ranks_per_node'] == 1
    assert [(m['node'], m['node_rank'], m['ranks'], m['container']) for m in plan['members']] == [
        ('n1', 0, [0], 'dspark-vllm'), ('n0', 1, [1], 'w-ctr')]
    assert plan['rank_nodes'] == {0: 'n1', 1: 'n0'} and plan['api_port'] == 8888


def test_plan_multi_gpu_nodes():
    mvars = member_vars(0, 1, 2, dspark_tensor_parallel_size=6)
    plan = tp_plan.plan_group('g', groups_for(mvars), mvars)
    assert plan['world_size'] == 6 and plan['ranks_per_node'] == 2
    assert [m['ranks'] for m in plan['members']] == [[0, 1], [2, 3], [4, 5]]
    assert plan['rank_nodes'][5] == 'n2'
    assert [tp_plan.log_key(m) for m in plan['members']] == [0, 2, 4]


def test_plan_rank_as_string_and_gpus_per_node():
    mvars = member_vars('0', '1', dspark_gpus_per_node=2)
    assert tp_plan.plan_group('g', groups_for(mvars), mvars)['world_size'] == 4


@pytest.mark.parametrize('group, mvars, expected', [
    (None, member_vars(0, 1), 'No serving group'),
    ('x', member_vars(0, 1), "Serving group 'x' is not an inventory group (known: g)"),
    ('g', {'n0': {'dspark_rank': 0}, 'n1': {}}, 'n1 (member of g) has no dspark_rank'),
    ('g', member_vars(0, -1), 'n1: dspark_rank=-1 is not a non-negative integer'),
    ('g', member_vars(0, 'one'), "n1: dspark_rank='one'"),
    ('g', member_vars(0, True), 'n1: dspark_rank=True'),
    ('g', member_vars(0, 0), 'dspark_rank=0 is used by n0, n1'),
    ('g', member_vars(1, 2), 'they must be 0..1'),
    ('g', member_vars(0, 1, dspark_tensor_parallel_size=3), 'dspark_tensor_parallel_size=3 is not a multiple'),
])
def test_plan_errors(group, mvars, expected):
    with pytest.raises(tp_plan.PlanError) as err:
        tp_plan.plan_group(group, groups_for(mvars), mvars)
    assert expected in str(err.value)


def test_plan_reports_every_problem_and_foreign_group():
    mvars = member_vars(0, 1)
    mvars['n1']['dspark_group'] = 'other'
    with pytest.raises(tp_plan.PlanError) as err:
        tp_plan.plan_group('g', groups_for(mvars), mvars, containers={'zz': 'c', 'n0': ''})
    assert len(err.value.problems) == 3
    assert "n1: dspark_group='other'" in str(err.value)


def test_plan_empty_group():
    with pytest.raises(tp_plan.PlanError, match="has no hosts"):
        tp_plan.plan_group('g', {'g': []}, {})


# --------------------------------------------------------------------------- commands

def test_docker_commands_quote_and_become():
    cmd = tp_docker.inspect_command('dspark-vllm')
    argv = shlex.split(cmd)
    assert argv[:5] == ['docker', 'inspect', '--type', 'container', '--format']
    assert argv[5] == tp_docker.INSPECT_FORMAT and argv[6] == 'dspark-vllm'
    assert shlex.split(tp_docker.logs_command('c 1', 400, None, become=True)) == [
        'sudo', '-n', 'docker', 'logs', '--timestamps', '--tail', '400', 'c 1', '2>&1']
    assert shlex.split(tp_docker.logs_command('c', 40, '2026-11-29T18:40:01.5Z')) == [
        'docker', 'logs', '--timestamps', '--since', '2026-11-29T18:40:01.5Z', '--tail', '40', 'c', '2>&1']
    key = shlex.split(tp_docker.key_lines_command('c'))
    assert key[:6] == ['docker', 'logs', '--timestamps', 'c', '2>&1', '|']
    assert key[-4:] == ['|', 'tail', '-n', str(tp_docker.KEY_LINES_MAX)]
    assert [key[i + 1] for i, tok in enumerate(key) if tok == '-e'] == list(tp_docker.KEY_LINE_NEEDLES)


def test_key_lines_command_runs_in_a_real_shell(tmp_path):
    # A stand-in `docker` proves the pipeline and its quoting work in sh.
    fake = tmp_path / 'docker'
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "T1 world_size=2 rank=0 x" "T2 noise" "T3 Application startup complete."\n')
    fake.chmod(0o755)
    out = subprocess.run(['sh', '-c', tp_docker.key_lines_command('dspark-vllm')], capture_output=True, text=True,
                         env={'PATH': '%s:/usr/bin:/bin' % tmp_path}, check=True).stdout
    assert out.splitlines() == ['T1 world_size=2 rank=0 x', 'T3 Application startup complete.']


# --------------------------------------------------------------------------- parse_inspect

RUNNING_STATE = {'Status': 'running', 'Running': True, 'Paused': False, 'Restarting': False, 'OOMKilled': False,
                 'Dead': False, 'Pid': 4242, 'ExitCode': 0, 'Error': '',
                 'StartedAt': '2026-11-29T18:39:48.5Z', 'FinishedAt': '0001-01-01T00:00:00Z'}


def test_parse_inspect_formatted_output():
    text = json.dumps({'Id': 'abc', 'Name': '/dspark-vllm', 'RestartCount': 0, 'Image': 'img:1',
                       'State': RUNNING_STATE}) + '\n'
    obs = tp_docker.parse_inspect(0, text)
    assert obs['exists'] and obs['running'] and obs['state'] == 'running'
    assert (obs['id'], obs['name'], obs['image'], obs['restart_count'], obs['exit_code']) == (
        'abc', 'dspark-vllm', 'img:1', 0, 0)
    assert obs['started_at'] == '2026-11-29T18:39:48.5Z' and obs['problem'] is None


def test_parse_inspect_full_docker_inspect_list():
    full = [{'Id': 'f' * 64, 'Created': '2026-11-29T18:39:47Z', 'Path': 'vllm', 'Args': ['serve'],
             'State': dict(RUNNING_STATE, Status='exited', Running=False, ExitCode=137, OOMKilled=True, Pid=0),
             'Image': 'sha256:' + 'e' * 64, 'Name': '/dspark-vllm', 'RestartCount': 2,
             'Config': {'Image': 'ghcr.io/anemll/dspark-vllm-gx10:0.1.1', 'Env': ['HF_TOKEN=secret']}}]
    obs = tp_docker.parse_inspect(0, json.dumps(full, indent=4))
    assert obs['state'] == 'exited' and not obs['running'] and obs['exit_code'] == 137
    assert obs['oom_killed'] is True and obs['restart_count'] == 2
    assert obs['image'] == 'ghcr.io/anemll/dspark-vllm-gx10:0.1.1'
    assert 'secret' not in json.dumps(obs)


@pytest.mark.parametrize('rc, out, err, problem, state', [
    (1, '', 'Error: No such container: dspark-vllm', 'missing', 'missing'),
    (1, '', 'Error: No such object: dspark-vllm', 'missing', 'missing'),
    (0, '[]', '', 'missing', 'missing'),
    (1, '', 'permission denied while trying to connect to the Docker daemon socket', 'docker_error', None),
    (127, '', 'sh: 1: docker: not found', 'docker_error', None),
    (1, '', 'sudo: a password is required', 'docker_error', None),
    (0, 'garbage', '', 'docker_error', None),
])
def test_parse_inspect_problems(rc, out, err, problem, state):
    obs = tp_docker.parse_inspect(rc, out, err)
    assert obs['exists'] is False and obs['problem'] == problem and obs['state'] == state
    assert obs['message']


# --------------------------------------------------------------------------- LogBuffer

def ts(sec, frac=''):
    return '2026-11-29T18:40:%02d%sZ' % (sec, frac)


def test_log_buffer_merges_overlapping_tails_without_duplicates():
    buf = tp_logbuffer.LogBuffer()
    assert buf.add('%s a\n%s b\n' % (ts(1), ts(2))) == 2
    # --since is inclusive: the last line comes again, then new ones; identical lines at one instant stay.
    assert buf.add('%s b\n%s c\n%s c\n' % (ts(2), ts(3), ts(3))) == 2
    assert buf.text() == '%s a\n%s b\n%s c\n%s c\n' % (ts(1), ts(2), ts(3), ts(3))
    assert buf.last_ts == ts(3)
    assert buf.add('%s c\n' % ts(3)) == 0


def test_log_buffer_inserts_older_key_lines_in_order():
    buf = tp_logbuffer.LogBuffer()
    buf.add('%s tail-1\n%s tail-2\n' % (ts(50), ts(51)))
    # Docker trims trailing zeros of the fraction: .5 and .500000000 are the same instant.
    assert buf.add('%s world_size=2 rank=0\n%s tail-1\n' % (ts(10, '.5'), ts(50, '.000000000'))) == 1
    assert [line.split(' ', 1)[1] for line in buf.text().splitlines()] == ['world_size=2 rank=0', 'tail-1', 'tail-2']
    assert buf.last_ts == ts(51)


def test_log_buffer_without_timestamps_replaces():
    buf = tp_logbuffer.LogBuffer()
    buf.add('a\nb\n')
    buf.add('c\n')
    assert buf.text() == 'c\n' and buf.last_ts is None


def test_log_buffer_trim_keeps_key_lines_and_tail_strips_ansi():
    buf = tp_logbuffer.LogBuffer(max_lines=3)
    buf.add('%s (Worker pid=1) INFO world_size=2 rank=0 x\n' % ts(1))
    buf.add(''.join('%s \x1b[0;36mnoise %d\x1b[0;0m\r\n' % (ts(2 + i), i) for i in range(5)))
    lines = buf.text().splitlines()
    assert len(lines) == 3 and 'world_size=2' in lines[0]
    assert buf.tail(2) == ['%s noise 3' % ts(5), '%s noise 4' % ts(6)]
    buf.add('%s noise 2\r\n' % ts(4))        # dropped lines may come back (merged again)
    assert len(buf) == 3


def test_logs_by_rank_uses_first_rank_of_each_node():
    mvars = member_vars(0, 1, dspark_tensor_parallel_size=4)
    plan = tp_plan.plan_group('g', groups_for(mvars), mvars)
    buf = tp_logbuffer.LogBuffer()
    buf.add('%s hello\n' % ts(1))
    entries = tp_logbuffer.logs_by_rank(plan, {'n0': {'state': 'running', 'exit_code': 0}}, {'n0': buf})
    assert entries == {0: {'node': 'n0', 'log': '%s hello\n' % ts(1), 'container_state': 'running', 'exit_code': 0},
                       2: {'node': 'n1', 'log': '', 'container_state': None, 'exit_code': None}}


# --------------------------------------------------------------------------- probe script (real HTTP)

class FakeVllm(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    behaviour = {}

    def log_message(self, *args):
        return

    def reply(self, status, obj=None):
        body = json.dumps(obj).encode() if obj is not None else b''
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorized(self):
        key = self.behaviour.get('key')
        if key and self.headers.get('Authorization') != 'Bearer ' + key and self.path.startswith('/v1'):
            self.reply(401, {'error': 'Unauthorized'})
            return False
        return True

    def do_GET(self):
        if not self.authorized():
            return
        if self.path == '/health':
            return self.reply(200)
        if self.path == '/v1/models':
            models = self.behaviour.get('models', [SERVED])
            return self.reply(200, {'object': 'list', 'data': [{'id': m, 'object': 'model'} for m in models]})
        self.reply(404, {'detail': 'Not Found'})

    def do_POST(self):
        if not self.authorized():
            return
        body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        FakeVllm.behaviour.setdefault('requests', []).append(body)
        chat = self.behaviour.get('chat', 'ok')
        if chat == 'hang':
            threading.Event().wait(5)
            return
        if chat == 500:
            return self.reply(500, {'error': {'message': 'EngineCore encountered an issue.'}})
        self.reply(200, {'id': 'chatcmpl-1', 'object': 'chat.completion', 'model': body['model'], 'choices': [
            {'index': 0, 'message': {'role': 'assistant', 'content': 'OK'}, 'finish_reason': 'stop'}]})


@pytest.fixture
def fake_api():
    server = ThreadingHTTPServer(('127.0.0.1', 0), FakeVllm)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeVllm.behaviour = {}
    yield server.server_address[1], FakeVllm.behaviour
    server.shutdown()
    server.server_close()


def run_probe(port, generate=True, generation_timeout=10, api_key=None):
    """The tp_api_probe module run as a program (as on the head), its result read as the action reads it."""
    params = tp_api.probe_params(port, SERVED, generate, generation_timeout, api_key)
    with tempfile.TemporaryDirectory() as tmp:
        args = os.path.join(tmp, 'args.json')
        with open(args, 'w') as handle:
            json.dump({'ANSIBLE_MODULE_ARGS': params}, handle)
        # A proxy in the environment must not capture the loopback requests.
        proc = subprocess.run([sys.executable, MODULE, args], capture_output=True, text=True, timeout=60, check=False,
                              env={'http_proxy': 'http://192.0.2.1:9', 'PYTHONPATH': COLLECTIONS})
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        result = {'failed': True, 'rc': proc.returncode, 'module_stdout': proc.stdout, 'module_stderr': proc.stderr}
    return tp_api.probe_result(result)


def test_probe_script_healthy(fake_api):
    port, behaviour = fake_api
    probe = run_probe(port)
    assert probe['health']['status'] == 200 and probe['models']['ids'] == [SERVED]
    assert probe['chat']['status'] == 200 and probe['chat']['choices'] == 1 and probe['chat']['content'] == 'OK'
    assert behaviour['requests'] == [{'model': SERVED, 'max_tokens': 16,
                                      'messages': [{'role': 'user', 'content': 'Reply with OK.'}]}]
    verdict = tp_api.judge_probe(probe, SERVED, 'h', port, 10)
    assert verdict['models_ok'] and verdict['generation'] == 'ok' and verdict['failure'] is None


def test_probe_script_without_generation(fake_api):
    port, behaviour = fake_api
    probe = run_probe(port, generate=False)
    assert 'chat' not in probe and 'requests' not in behaviour
    assert tp_api.judge_probe(probe, SERVED, 'h', port, 10)['generation'] is None


def test_probe_script_wrong_model(fake_api):
    port, behaviour = fake_api
    behaviour['models'] = ['other-model']
    probe = run_probe(port)
    assert 'chat' not in probe
    verdict = tp_api.judge_probe(probe, SERVED, 'h', port, 10)
    assert verdict['failure']['code'] == 'served_model_mismatch'
    assert "lists 'other-model', not 'deepseek-v4-flash-0731'" in verdict['failure']['cause']


def test_probe_script_api_key(fake_api):
    port, behaviour = fake_api
    behaviour['key'] = 'k1'
    assert tp_api.judge_probe(run_probe(port), SERVED, 'h', port, 10)['failure']['code'] == 'api_unauthorized'
    assert tp_api.judge_probe(run_probe(port, api_key='k1'), SERVED, 'h', port, 10)['generation'] == 'ok'


def test_probe_script_wedge(fake_api):
    port, behaviour = fake_api
    behaviour['chat'] = 'hang'
    probe = run_probe(port, generation_timeout=1)
    assert probe['chat']['timed_out'] is True and probe['health_after']['status'] == 200
    verdict = tp_api.judge_probe(probe, SERVED, 'spark-head', port, 1)
    assert verdict['failure']['code'] == 'wedged' and verdict['failure']['node'] == 'spark-head'
    assert verdict['models_ok'] is True and verdict['generation'] == 'failed'


def test_probe_script_engine_error(fake_api):
    port, behaviour = fake_api
    behaviour['chat'] = 500
    verdict = tp_api.judge_probe(run_probe(port), SERVED, 'h', port, 10)
    assert verdict['failure']['code'] == 'generation_failed'
    assert 'HTTP 500' in verdict['failure']['cause'] and 'EngineCore' in verdict['failure']['evidence']


def test_probe_script_connection_refused():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    probe = run_probe(port)
    assert probe['health']['status'] is None and 'refused' in probe['health']['error'].lower()
    verdict = tp_api.judge_probe(probe, SERVED, 'h', port, 10)
    assert verdict['api_reachable'] is False and verdict['failure'] is None and not verdict['models_ok']


def test_parse_probe_errors():
    assert tp_api.probe_result({'failed': True, 'rc': 127, 'module_stdout': '', 'msg': 'MODULE FAILURE',
                                'module_stderr': 'sh: 1: python3: not found'}) == {
        'probe_error': 'sh: 1: python3: not found', 'rc': 127}
    verdict = tp_api.judge_probe({'probe_error': 'x', 'rc': 127}, SERVED, 'h', 1, 1)
    assert verdict['probe_broken'] and verdict['failure']['code'] == 'probe_failed'
    assert tp_api.judge_probe({'probe_error': 'x', 'rc': 1}, SERVED, 'h', 1, 1)['failure'] is None
    assert tp_api.probe_result({'failed': True, 'rc': 0, 'module_stdout': 'not json'})['probe_error'] == 'not json'


def test_judge_probe_generation_edge_cases():
    base = {'health': {'status': 200}, 'models': {'status': 200, 'ids': [SERVED]}}
    empty = dict(base, chat={'status': 200, 'choices': 0, 'seconds': 0.1})
    assert tp_api.judge_probe(empty, SERVED, 'h', 1, 5)['failure']['code'] == 'generation_empty'
    dead = dict(base, chat={'status': None, 'timed_out': True, 'error': 'timeout'},
                health_after={'status': 503})
    verdict = tp_api.judge_probe(dead, SERVED, 'h', 1, 5)
    assert verdict['failure']['code'] == 'generation_timeout'
    assert tp_api.judge_probe(None, SERVED, 'h', 1, 5)['state'].startswith('API not probed')
    merged = tp_api.merge_generation(tp_api.judge_probe(base, SERVED, 'h', 1, 5),
                                     {'generation': 'ok', 'generation_seconds': 0.3})
    assert merged['generation'] == 'ok' and merged['generation_seconds'] == 0.3


# --------------------------------------------------------------------------- diagnoses and verdicts

def pair_plan():
    mvars = {'spark-head': {'dspark_rank': 0}, 'spark-worker': {'dspark_rank': 1}}
    return tp_plan.plan_group('pair', {'pair': ['spark-head', 'spark-worker']}, mvars)


def assess(head_log, worker_log, head_state='running', head_exit=0, worker_state='running', worker_exit=0):
    return tp_assess.assess_group(2, {
        0: {'node': 'spark-head', 'log': head_log, 'container_state': head_state, 'exit_code': head_exit},
        1: {'node': 'spark-worker', 'log': worker_log, 'container_state': worker_state, 'exit_code': worker_exit}})


HEAD_WAIT = ('(Worker pid=287) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size=2 rank=0 local_rank=0 '
             'distributed_init_method=%s backend=nccl\n' % INIT)
WORKER_WAIT = HEAD_WAIT.replace('rank=0', 'rank=1').replace('pid=287', 'pid=94')
STORE_TIMEOUT = ('(Worker pid=287) ERROR 11-29 19:12:23 [multiproc_executor.py:772] torch.distributed.DistStoreError: '
                 'Timed out after 601 seconds waiting for clients. 1/2 clients joined.\n')
CONNECT_TIMEOUT = ('(Worker pid=94) ERROR 11-29 19:11:58 [multiproc_executor.py:772] torch.distributed.'
                   'DistNetworkError: The client socket has timed out after 600000ms while trying to connect to '
                   '(10.0.0.1, 25000).\n')


def test_assessment_diagnoses_puts_the_culprit_before_the_waiting_head():
    result = assess(HEAD_WAIT + STORE_TIMEOUT, WORKER_WAIT + CONNECT_TIMEOUT, 'exited', 1, 'exited', 1)
    diags = tp_diagnosis.assessment_diagnoses(result)
    assert [(d['code'], d['rank'], d['node']) for d in diags] == [
        ('master_unreachable', 1, 'spark-worker'), ('rendezvous_timeout', 0, 'spark-head'),
        ('container_exited', 0, 'spark-head'), ('container_exited', 1, 'spark-worker')]
    message = tp_diagnosis.failure_message(pair_plan(), diags, 601.0)
    assert message.startswith('TP group pair (2 ranks) is not serving after 601.0 s: rank 1 on spark-worker: '
                              'master_unreachable: This rank could not reach the rendezvous store at 10.0.0.1:25000')
    assert message.endswith('(+2 more in diagnosis)')


def test_evaluate_round_waits_for_a_root_cause_then_gives_up():
    plan = pair_plan()
    result = assess(HEAD_WAIT, WORKER_WAIT, 'exited', 137)
    judgement = tp_api.judge_probe(None, SERVED, 'spark-head', 8888, 60)
    verdict, diags = tp_diagnosis.evaluate_round(plan, result, judgement, [], 0)
    assert verdict == 'waiting' and [d['code'] for d in diags] == ['container_exited']
    assert tp_diagnosis.evaluate_round(plan, result, judgement, [], tp_diagnosis.SETTLE_ROUNDS)[0] == 'failed'


def test_evaluate_round_ready_needs_registration_api_and_generation():
    plan = pair_plan()
    head = HEAD_WAIT + ('(Worker pid=287) INFO 11-29 18:40:33 [parallel_state.py:1711] rank 0 in world size 2 is '
                        'assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 0, EP rank 0, EPLB rank N/A\n')
    worker = WORKER_WAIT + head.splitlines()[1].replace('rank 0 in', 'rank 1 in').replace('TP rank 0', 'TP rank 1')
    result = assess(head, worker)
    ok = {'models_ok': True, 'generation': 'ok', 'failure': None}
    assert tp_diagnosis.evaluate_round(plan, result, ok, [], 0) == ('ready', [])
    assert tp_diagnosis.evaluate_round(plan, result, dict(ok, generation=None), [], 0) == ('waiting', [])
    assert tp_diagnosis.evaluate_round(plan, assess(head, WORKER_WAIT), ok, [], 0) == ('waiting', [])


def test_timeout_diagnoses_order_and_api_not_ready():
    plan = pair_plan()
    result = assess(HEAD_WAIT, '')
    diags = tp_diagnosis.timeout_diagnoses(plan, result, {}, 300, {0: 1, 1: 12})
    assert [(d['code'], d['rank'], d['node']) for d in diags] == [
        ('rendezvous_timeout', 1, 'spark-worker'), ('rendezvous_timeout', 0, 'spark-head')]
    assert 'its log has no "world_size=2 rank=1" line' in diags[0]['cause']
    assert 'opened the rendezvous store on %s and waited 300 s for rank(s) 1' % INIT in diags[1]['cause']
    # Both dialled the store and logged nothing: the worker is the suspect, the head only waited.
    both = tp_diagnosis.timeout_diagnoses(plan, assess(HEAD_WAIT, WORKER_WAIT), {}, 300)
    assert [d['rank'] for d in both] == [1, 0]
    assert 'dialled the rendezvous on %s but never joined within 300 s' % INIT in both[0]['cause']
    silent_head = tp_diagnosis.timeout_diagnoses(plan, assess('', WORKER_WAIT), {}, 300, {0: 0, 1: 1})
    assert [d['rank'] for d in silent_head] == [0, 1]
    assert 'its container printed nothing' in silent_head[0]['cause']


def test_restart_and_access_diagnoses():
    plan = pair_plan()
    result = assess(HEAD_WAIT, WORKER_WAIT)
    running = {'exists': True, 'id': 'x', 'started_at': 'T2', 'restart_count': 0}
    assert tp_diagnosis.restart_diagnoses(plan, {'spark-head': running}, {'spark-head': {'id': 'x', 'started_at': 'T2'}},
                                          result) == []
    moved = tp_diagnosis.restart_diagnoses(plan, {'spark-head': running}, {'spark-head': {'id': 'x', 'started_at': 'T1'}},
                                           result)
    assert [(d['code'], d['rank'], d['node']) for d in moved] == [('container_restarted', 0, 'spark-head')]
    streaks = {'spark-worker': tp_diagnosis.UNREACHABLE_ROUNDS - 1}
    assert tp_diagnosis.access_diagnoses(plan, {}, {'spark-worker': 'no route'}, streaks) == []
    streaks['spark-worker'] += 1
    diags = tp_diagnosis.access_diagnoses(plan, {}, {'spark-worker': 'no route'}, streaks)
    assert [(d['code'], d['rank'], d['node']) for d in diags] == [('node_unreachable', 1, 'spark-worker')]
    sudo = tp_diagnosis.access_diagnoses(plan, {'spark-head': {'problem': 'docker_error',
                                                               'message': 'sudo: a password is required'}}, {}, {})
    assert sudo[0]['code'] == 'docker_unavailable' and 'passwordless sudo' in sudo[0]['fix']


def test_views():
    plan = pair_plan()
    result = assess(HEAD_WAIT, WORKER_WAIT)
    assert tp_diagnosis.missing_view(plan, result) == [{'rank': 0, 'node': 'spark-head'}, {'rank': 1, 'node': 'spark-worker'}]
    assert tp_diagnosis.registered_view(plan, result) == []
    diags = tp_diagnosis.public_diagnoses([dict(tp_diagnosis.timeout_diagnoses(plan, result, {}, 5)[0], extra=1)])
    assert sorted(diags[0]) == ['cause', 'code', 'evidence', 'fix', 'node', 'rank', 'severity']
