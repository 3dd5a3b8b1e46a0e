# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_tp_api.py and the tp_api_probe module: the API probe against a fake vLLM over real HTTP."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_api as tp_api

SERVED = 'deepseek-v4-flash-0731'
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
COLLECTIONS = os.path.join(ROOT, 'collections')
MODULE = os.path.join(ROOT, 'plugins', 'modules', 'tp_api_probe.py')


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
