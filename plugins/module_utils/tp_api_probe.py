# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HTTP side of the ``tp_api_probe`` module: one look at a vLLM API on the host's own loopback.

``GET /health``, ``GET /v1/models`` and, when asked and the model is listed,
one ``POST /v1/chat/completions``; after a chat completion that timed out,
``/health`` once more. Standard library only, proxies ignored (the API is on
the loopback). Every call is reported as {status, error, timed_out, seconds}
(plus what its answer says); nothing raises. Python 3.8 syntax (sanity
compiles module_utils for 3.8+).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import socket
import time

from urllib import error as urllib_error
from urllib import request as urllib_request

# The largest answer read (a /v1/models list is small; a chat answer of 16 tokens too).
MAX_BODY = 4194304
MAX_ERROR_BODY = 65536
# Characters of an unexpected answer kept as its text.
TEXT_CHARS = 400
CONTENT_CHARS = 200
# The serve role's API edge (plugin_utils/_serve_edge.py) marks its own 503 while nothing listens behind it: for the
# probe that is the engine's port refusing the connection (not started yet), never vLLM's 503 of a dead engine.
EDGE_HEADER = 'X-Dspark-Edge'
EDGE_UNREACHABLE = 'engine-unreachable'


def build_opener():
    """An opener that never goes through a proxy."""
    return urllib_request.build_opener(urllib_request.ProxyHandler({}))


def call(opener, base, method, path, body, timeout, api_key=None):
    """One HTTP call: {status, error, timed_out, seconds, json} (and text when the answer is not JSON)."""
    headers = {'Accept': 'application/json'}
    if api_key:
        headers['Authorization'] = 'Bearer ' + api_key
    data = None
    if body is not None:
        data = json.dumps(body).encode('utf-8')
        headers['Content-Type'] = 'application/json'
    req = urllib_request.Request(base + path, data=data, headers=headers, method=method)
    out = {'status': None, 'error': None, 'timed_out': False}
    start = time.time()
    raw = b''
    try:
        resp = opener.open(req, timeout=timeout)
        out['status'] = resp.getcode()
        raw = resp.read(MAX_BODY)
    except urllib_error.HTTPError as exc:
        out['status'] = exc.code
        try:
            raw = exc.read(MAX_ERROR_BODY)
        except Exception:  # pylint: disable=broad-except
            raw = b''
        if exc.code == 503 and (exc.headers or {}).get(EDGE_HEADER) == EDGE_UNREACHABLE:
            out['status'] = None
            out['error'] = 'ConnectionRefusedError: the API edge answers, the engine behind it does not listen yet'
            raw = b''
    except Exception as exc:  # pylint: disable=broad-except
        reason = getattr(exc, 'reason', exc)
        out['timed_out'] = isinstance(reason, socket.timeout) or 'timed out' in str(reason)
        out['error'] = '%s: %s' % (type(reason).__name__, reason)
    out['seconds'] = round(time.time() - start, 3)
    text = raw.decode('utf-8', 'replace')
    try:
        out['json'] = json.loads(text) if text.strip() else None
    except ValueError:
        out['json'] = None
        out['text'] = text[:TEXT_CHARS]
    return out


def _models(call_result):
    """The /v1/models call with its model ids (``ids`` None when the answer has no model list)."""
    body = call_result.pop('json', None)
    ids = None
    if isinstance(body, dict) and isinstance(body.get('data'), list):
        ids = [m.get('id') for m in body['data'] if isinstance(m, dict)]
    elif body is not None:
        call_result['text'] = json.dumps(body)[:TEXT_CHARS]
    call_result['ids'] = ids
    return call_result


def _chat(call_result):
    """The chat completion call with the number of choices and the first one's content and finish reason."""
    body = call_result.pop('json', None)
    choices = body.get('choices') if isinstance(body, dict) else None
    call_result['choices'] = len(choices) if isinstance(choices, list) else None
    if choices:
        first = choices[0] if isinstance(choices[0], dict) else {}
        msg = first.get('message') or {}
        call_result['content'] = str(msg.get('content') or msg.get('reasoning_content') or first.get('text')
                                     or '')[:CONTENT_CHARS]
        call_result['finish_reason'] = first.get('finish_reason')
    elif body is not None:
        call_result['text'] = json.dumps(body)[:TEXT_CHARS]
    return call_result


def probe(params, opener=None):
    """One look at the API on 127.0.0.1:``port``: {health, models[, chat[, health_after]]}.

    params: port, model, generate, generation_timeout, max_tokens, prompt,
    health_timeout, models_timeout, api_key (optional).
    """
    opener = opener or build_opener()
    base = 'http://127.0.0.1:%d' % int(params['port'])
    key = params.get('api_key')
    res = {'health': call(opener, base, 'GET', '/health', None, params['health_timeout'], key)}
    models = _models(call(opener, base, 'GET', '/v1/models', None, params['models_timeout'], key))
    res['models'] = models
    ids = models['ids']
    if params.get('generate') and ids and params['model'] in ids:
        body = {'model': params['model'], 'max_tokens': params['max_tokens'],
                'messages': [{'role': 'user', 'content': params['prompt']}]}
        chat = _chat(call(opener, base, 'POST', '/v1/chat/completions', body, params['generation_timeout'], key))
        res['chat'] = chat
        if chat['timed_out']:
            res['health_after'] = call(opener, base, 'GET', '/health', None, params['health_timeout'], key)
            res['health_after'].pop('json', None)
    res['health'].pop('json', None)
    return res
