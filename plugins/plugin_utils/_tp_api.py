# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API probe of a tp_ranks poll, controller side: the ``tp_api_probe`` module's arguments and the verdict.

The probe itself is the module ``dspark.cluster.tp_api_probe``, run on the head through the head's connection
(module_utils/tp_api_probe.py holds its HTTP client). Here: its arguments, its result or why it did not run, and the
judgement (API reachable, model listed, the one generation request, a wedged group). No Ansible imports, no I/O.
"""

from __future__ import annotations

import json

from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_diagnosis import make_diag

PROBE_MODULE = 'dspark.cluster.tp_api_probe'
GENERATION_PROMPT = 'Reply with OK.'
GENERATION_MAX_TOKENS = 16
HEALTH_TIMEOUT = 5
MODELS_TIMEOUT = 10
# The parts of the module's result that are the probe (the rest is Ansible's: changed, invocation, ...).
PROBE_KEYS = ('health', 'models', 'chat', 'health_after')


def probe_params(port, served_model_name, generate, generation_timeout, api_key=None):
    """The ``tp_api_probe`` module's arguments (the API key is a no_log module argument, never on a command line)."""
    params = {'port': int(port), 'model': served_model_name, 'generate': bool(generate),
              'generation_timeout': generation_timeout, 'max_tokens': GENERATION_MAX_TOKENS,
              'prompt': GENERATION_PROMPT, 'health_timeout': HEALTH_TIMEOUT, 'models_timeout': MODELS_TIMEOUT}
    if api_key:
        params['api_key'] = api_key
    return params


def probe_result(result):
    """The probe from the module's result, or {'probe_error': text, 'rc': rc} when the module did not run.

    rc is the module's exit status (127: no interpreter on the head), None when the head could not be reached.
    """
    result = result or {}
    if not result.get('failed') and isinstance(result.get('health'), dict) and isinstance(result.get('models'), dict):
        return dict((key, result[key]) for key in PROBE_KEYS if key in result)
    if result.get('unreachable'):
        return {'probe_error': result.get('msg') or 'unreachable', 'rc': None}
    detail = ((result.get('module_stderr') or '').strip() or (result.get('module_stdout') or '').strip()
              or result.get('msg') or 'no output').splitlines()
    return {'probe_error': (detail[-1] if detail else '')[:300], 'rc': result.get('rc')}


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
            out['failure'] = make_diag('probe_failed', 0, head, 'The API probe could not start on %s: %s.'
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
        out['failure'] = make_diag(
            'api_unauthorized', 0, head,
            'The API on %s refused /v1/models with HTTP %s: it requires an API key.' % (where, models['status']),
            'Pass api_key= with the head\'s --api-key / VLLM_API_KEY value.', models.get('text'))
        return out
    if models.get('status') == 200 and isinstance(ids, list) and served_model_name not in ids:
        out['failure'] = make_diag(
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
            out['failure'] = make_diag(
                'wedged', 0, head,
                'The TP group is wedged: the API on %s lists %r and /health answers 200, but a %d-token chat '
                'completion got no answer within %s s (a rank hangs in a collective).'
                % (where, served_model_name, GENERATION_MAX_TOKENS, generation_timeout),
                'Read every rank\'s log (shared memory broadcast stalls, NCCL warnings) and restart the head and '
                'all workers together; /health alone does not show a wedged group.', None)
        else:
            out['failure'] = make_diag(
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
    out['failure'] = make_diag(code, 0, head, cause,
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
    return make_diag('probe_failed', 0, plan['head'],
                     'The API probe keeps failing on %s: %s.' % (plan['head'], judgement.get('state')),
                     'Check python3 on the head (or its ansible_python_interpreter) and the head\'s connection.', None)
