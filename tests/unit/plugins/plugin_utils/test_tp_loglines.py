# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_tp_loglines.py: ANSI stripping, rank assignment and world-size lines, the head's ready markers."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_loglines as tp_lines

from tp_fixtures import CPU_HEAD, CPU_WORKER, fixture  # noqa: E402


# --------------------------------------------------------------------------- strip_ansi

@pytest.mark.parametrize('raw, expected', [
    ('\x1b[0;36m(Worker pid=1)\x1b[0;0m INFO x', '(Worker pid=1) INFO x'),
    ('\x1b[1;36m(VllmWorker rank=0 pid=2)\x1b[0m \x1b[32mINFO\x1b[0m y', '(VllmWorker rank=0 pid=2) INFO y'),
    ('a\r\nb\r\n', 'a\nb\n'),
    ('bar 10%\rbar 50%\rbar 100%\n', 'bar 10%\nbar 50%\nbar 100%\n'),
    ('\x1b]0;title\x07text', 'text'),
    (b'\x1b[0;36m(Worker pid=3)\x1b[0;0m ok\r\n', '(Worker pid=3) ok\n'),
    (None, ''),
    ('', ''),
])
def test_strip_ansi(raw, expected):
    assert tp_lines.strip_ansi(raw) == expected


# --------------------------------------------------------------------------- parse_rank_lines

INIT_10 = 'tcp://10.0.0.1:25000'


@pytest.mark.parametrize('name, expected', [
    ('head_healthy_v0251.log', [('world_size', 0, 2, INIT_10, 'INFO', 'Worker', 287),
                                ('assignment', 0, 2, 0, 'INFO', 'Worker', 287)]),
    ('worker_healthy_v0251.log', [('world_size', 1, 2, INIT_10, 'INFO', 'Worker', 94),
                                  ('assignment', 1, 2, 1, 'INFO', 'Worker', 94)]),
    ('head_worker_never_joined.log', [('world_size', 0, 2, INIT_10, 'INFO', 'Worker', 287)]),
    ('worker_dist_network_error.log', [('world_size', 1, 2, 'tcp://10.0.0.9:25000', 'INFO', 'Worker', 94)]),
    ('head_v010_old_format.log', [('world_size', 0, 2, 'tcp://192.168.50.1:29501', 'DEBUG', None, None),
                                  ('assignment', 0, 2, 0, 'INFO', 'VllmWorker', 4157)]),
    ('worker_v010_old_format.log', [('world_size', 1, 2, 'tcp://192.168.50.1:29501', 'DEBUG', None, None),
                                    ('assignment', 1, 2, 1, 'INFO', 'RayWorkerWrapper', 912)]),
    (CPU_HEAD, [('world_size', 0, 2, 'tcp://127.0.0.1:29511', 'INFO', 'Worker', 6032),
                ('assignment', 0, 2, 0, 'INFO', 'Worker', 6032)]),
    (CPU_WORKER, [('world_size', 1, 2, 'tcp://127.0.0.1:29511', 'INFO', 'Worker', 5684),
                  ('assignment', 1, 2, 1, 'INFO', 'Worker', 5684)]),
    ('head_ansi_v0151.log', [('world_size', 0, 2, INIT_10, 'INFO', 'Worker', 171),
                             ('assignment', 0, 2, 0, 'INFO', 'Worker', 171)]),
    ('worker_ansi_v0151.log', [('world_size', 1, 2, INIT_10, 'INFO', 'Worker', 88),
                               ('assignment', 1, 2, 1, 'INFO', 'Worker', 88)]),
])
def test_parse_rank_lines_fixtures(name, expected):
    got = []
    for rec in tp_lines.parse_rank_lines(fixture(name)):
        fourth = rec['init_method'] if rec['kind'] == 'world_size' else rec['tp_rank']
        got.append((rec['kind'], rec['rank'], rec['world_size'], fourth, rec['level'], rec['process'], rec['pid']))
        assert rec['line'] and '\x1b' not in rec['line'] and '\r' not in rec['line']
    assert got == expected


@pytest.mark.parametrize('line, groups', [
    # ~v0.10 and earlier
    ('(VllmWorker rank=1 pid=9) INFO 05-06 10:00:00 [parallel_state.py:1004] rank 1 in world size 2 is assigned '
     'as DP rank 0, PP rank 0, TP rank 1, EP rank 1', {'DP': 0, 'PP': 0, 'TP': 1, 'EP': 1}),
    # v0.15.1
    ('(Worker pid=9) INFO 02-11 07:15:21 [parallel_state.py:1411] rank 1 in world size 2 is assigned as DP rank 0, '
     'PP rank 0, PCP rank 0, TP rank 1, EP rank N/A', {'DP': 0, 'PP': 0, 'PCP': 0, 'TP': 1, 'EP': 'N/A'}),
    # v0.20.0 - v0.25.1
    ('(Worker pid=9) INFO 11-29 18:40:33 [parallel_state.py:1711] rank 1 in world size 2 is assigned as DP rank 0, '
     'PP rank 0, PCP rank 0, TP rank 1, EP rank N/A, EPLB rank N/A',
     {'DP': 0, 'PP': 0, 'PCP': 0, 'TP': 1, 'EP': 'N/A', 'EPLB': 'N/A'}),
    # v0.33.0
    ('(Worker pid=9) INFO 11-20 10:00:30 [parallel_state.py:1760] rank 3 in world size 4 is assigned as DP rank 0, '
     'PP rank 1, PCP rank 0, TP rank 1, ETP rank 1, EP rank 3, EPLB rank N/A',
     {'DP': 0, 'PP': 1, 'PCP': 0, 'TP': 1, 'ETP': 1, 'EP': 3, 'EPLB': 'N/A'}),
    # DEBUG level, package-relative file path, docker logs -t timestamp
    ('2026-11-29T18:40:33.123456789Z (Worker pid=9) DEBUG 11-29 18:40:33 [distributed/parallel_state.py:1711] '
     'rank 1 in world size 2 is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 1, EP rank 0, EPLB rank N/A',
     {'DP': 0, 'PP': 0, 'PCP': 0, 'TP': 1, 'EP': 0, 'EPLB': 'N/A'}),
])
def test_parse_assignment_variants(line, groups):
    recs = tp_lines.parse_rank_lines(line)
    assert len(recs) == 1
    assert recs[0]['kind'] == 'assignment'
    assert recs[0]['groups'] == groups
    assert recs[0]['tp_rank'] == groups['TP']
    assert recs[0]['process'] == ('VllmWorker' if 'VllmWorker' in line else 'Worker')


@pytest.mark.parametrize('line, expected', [
    ('(Worker_TP1 pid=4) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size=4 rank=3 local_rank=1 '
     'distributed_init_method=tcp://10.0.0.2:25000 backend=nccl',
     {'rank': 3, 'world_size': 4, 'local_rank': 1, 'master_addr': '10.0.0.2', 'master_port': 25000,
      'backend': 'nccl', 'process': 'Worker_TP1', 'level': 'INFO'}),
    ('(EngineCore pid=5) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size=2 rank=0 local_rank=0 '
     'distributed_init_method=tcp://[fd00::1]:29501 backend=nccl',
     {'rank': 0, 'world_size': 2, 'master_addr': 'fd00::1', 'master_port': 29501, 'process': 'EngineCore'}),
    ('DEBUG 08-02 08:50:03 parallel_state.py:803] world_size=16 rank=0 local_rank=0 '
     'distributed_init_method=tcp://10.10.0.1:29500 backend=nccl',
     {'rank': 0, 'world_size': 16, 'level': 'DEBUG', 'process': None, 'master_port': 29500}),
    # A newer field list: extra key=value pairs are kept, not rejected.
    ('(Worker pid=6) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size=2 rank=1 local_rank=0 '
     'distributed_init_method=tcp://10.0.0.1:25000 backend=nccl timeout=0:10:00',
     {'rank': 1, 'backend': 'nccl', 'init_method': 'tcp://10.0.0.1:25000'}),
])
def test_parse_world_size_variants(line, expected):
    recs = tp_lines.parse_rank_lines(line)
    assert len(recs) == 1 and recs[0]['kind'] == 'world_size'
    for key, value in expected.items():
        assert recs[0][key] == value, key


@pytest.mark.parametrize('line', [
    '(EngineCore pid=211) INFO 11-29 18:40:14 [multiproc_executor.py:134] DP group leader: node_rank=0, '
    'node_rank_within_dp=0, master_addr=10.0.0.1, mq_connect_ip=10.0.0.1 (local), world_size=2, local_world_size=1',
    "(APIServer pid=1) INFO 11-29 18:40:01 [utils.py:253] non-default args: {'tensor_parallel_size': 2}",
    '(Worker pid=1) INFO 11-29 18:40:22 [x.py:1] world_size=2 rank=0 is not a parallel_state line',
    'rank 0 in world size two is assigned as nothing',
])
def test_parse_rank_lines_ignores_lookalikes(line):
    assert tp_lines.parse_rank_lines(line) == []


# --------------------------------------------------------------------------- head_ready_markers

@pytest.mark.parametrize('name, ready, kv_tokens, api_url, version', [
    ('head_healthy_v0251.log', True, 2493464, 'http://0.0.0.0:8888', '0.25.2.dev0+g752a3a504.d20260714'),
    ('head_v010_old_format.log', True, 341808, 'http://0.0.0.0:8000', '0.10.0'),
    (CPU_HEAD, True, 1048576, 'http://0.0.0.0:8011', '0.32.0'),
    ('head_ansi_v0151.log', True, 2468864, 'http://0.0.0.0:8888', '0.15.1'),
    ('head_worker_never_joined.log', False, None, None, '0.25.2.dev0+g752a3a504.d20260714'),
    ('head_oom.log', False, None, None, None),
    ('worker_healthy_v0251.log', False, None, None, '0.25.2.dev0+g752a3a504.d20260714'),
])
def test_head_ready_markers(name, ready, kv_tokens, api_url, version):
    markers = tp_lines.head_ready_markers(fixture(name))
    assert markers['ready'] is ready
    assert (markers['kv_cache_size'] or {}).get('tokens') == kv_tokens
    assert (markers['api_server_start'] or {}).get('url') == api_url
    assert (markers['version'] or {}).get('version') == version


def test_head_ready_markers_values():
    markers = tp_lines.head_ready_markers(fixture('head_healthy_v0251.log'))
    assert markers['available_kv_cache']['gib'] == 18.08
    assert markers['max_concurrency']['tokens_per_request'] == 1048576
    assert markers['max_concurrency']['factor'] == 2.38
    assert markers['init_engine']['seconds'] == 243.61
    assert markers['startup_complete']['line'].endswith('INFO:     Application startup complete.')
    # From v0.32 both KV values are on one line (recorded from the CPU build).
    v032 = tp_lines.head_ready_markers(fixture(CPU_HEAD))
    assert v032['max_concurrency']['factor'] == 4096.0 and v032['max_concurrency']['tokens_per_request'] == 256
    assert v032['max_concurrency']['lineno'] == v032['kv_cache_size']['lineno']
    assert v032['kv_cache_size']['device'] == 'CPU'


def test_head_not_ready_when_startup_line_precedes_kv():
    text = ('INFO:     Application startup complete.\n'
            '(EngineCore pid=1) INFO 11-29 18:44:03 [kv_cache_utils.py:1306] GPU KV cache size: 10 tokens\n')
    assert tp_lines.head_ready_markers(text)['ready'] is False
