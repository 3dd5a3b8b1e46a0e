# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_tp_assess.py: a group's ranks, registration and mismatches assessed from its logs and containers."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_loglines as tp_lines

from tp_fixtures import CPU_HEAD, CPU_WORKER, fixture  # noqa: E402


# --------------------------------------------------------------------------- assess_group

def head_log(world_size, init='tcp://10.0.0.1:25000', ready=True):
    lines = [
        '(APIServer pid=1) INFO 11-29 18:40:01 [arg_utils.py:1788] Inferred data_parallel_rank 0 from node_rank 0',
        '(Worker pid=287) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size={0} rank=0 local_rank=0 '
        'distributed_init_method={1} backend=nccl'.format(world_size, init),
    ]
    if ready:
        lines += [
            '(Worker pid=287) INFO 11-29 18:40:33 [parallel_state.py:1711] rank 0 in world size {0} is assigned as '
            'DP rank 0, PP rank 0, PCP rank 0, TP rank 0, EP rank 0, EPLB rank N/A'.format(world_size),
            '(Worker_TP0 pid=287) INFO 11-29 18:44:02 [gpu_worker.py:412] Available KV cache memory: 18.08 GiB',
            '(EngineCore pid=211) INFO 11-29 18:44:03 [kv_cache_utils.py:1306] GPU KV cache size: 2,493,464 tokens',
            '(APIServer pid=1) INFO 11-29 18:44:43 [api_server.py:2018] Starting vLLM server on http://0.0.0.0:8888',
            '(APIServer pid=1) INFO:     Application startup complete.',
        ]
    return '\n'.join(lines) + '\n'


def worker_log(rank, world_size, init='tcp://10.0.0.1:25000', joined=True):
    lines = [
        'INFO 11-29 18:39:50 [arg_utils.py:1788] Inferred data_parallel_rank 0 from node_rank {0}'.format(rank),
        '(Worker pid=94) INFO 11-29 18:39:58 [parallel_state.py:1402] world_size={0} rank={1} local_rank=0 '
        'distributed_init_method={2} backend=nccl'.format(world_size, rank, init),
    ]
    if joined:
        lines += [
            '(Worker pid=94) INFO 11-29 18:40:33 [parallel_state.py:1711] rank {0} in world size {1} is assigned as '
            'DP rank 0, PP rank 0, PCP rank 0, TP rank {0}, EP rank {0}, EPLB rank N/A'.format(rank, world_size),
            '(Worker_TP{0} pid=94) INFO 11-29 18:44:02 [gpu_worker.py:412] Available KV cache memory: 18.1 GiB'.format(
                rank),
        ]
    return '\n'.join(lines) + '\n'


def entry(node, log, state='running', exit_code=0):
    return {'node': node, 'log': log, 'container_state': state, 'exit_code': exit_code}


def failure_tuples(result, key='failures'):
    return sorted((f['code'], f['rank'], f['node']) for f in result[key])


def test_assess_group_healthy_fixtures_with_string_keys():
    result = tp_assess.assess_group('2', {
        '0': entry('spark-head', fixture('head_healthy_v0251.log')),
        '1': entry('spark-worker', fixture('worker_healthy_v0251.log')),
    })
    assert result['ok'] is True
    assert result['expected_ranks'] == [0, 1]
    assert [(r['rank'], r['node'], r['tp_rank']) for r in result['registered_ranks']] == [
        (0, 'spark-head', 0), (1, 'spark-worker', 1)]
    assert result['registered_ranks'][1]['evidence'].endswith('TP rank 1, EP rank 1, EPLB rank N/A')
    assert result['missing_ranks'] == [] and result['pending_ranks'] == []
    assert result['world_size'] == 2 and result['world_sizes_seen'] == [2]
    assert result['init_method'] == 'tcp://10.0.0.1:25000' and result['init_method_consistent'] is True
    assert result['head_ready'] is True and result['rendezvous_complete'] is True
    assert result['failures'] == [] and result['warnings'] == []
    assert result['msg'] == '2/2 TP ranks registered via tcp://10.0.0.1:25000; head ready'


@pytest.mark.parametrize('head_name, worker_name, init', [
    ('head_v010_old_format.log', 'worker_v010_old_format.log', 'tcp://192.168.50.1:29501'),
    (CPU_HEAD, CPU_WORKER, 'tcp://127.0.0.1:29511'),
    ('head_ansi_v0151.log', 'worker_ansi_v0151.log', 'tcp://10.0.0.1:25000'),
])
def test_assess_group_format_variants(head_name, worker_name, init):
    result = tp_assess.assess_group(2, {0: entry('h', fixture(head_name)), 1: entry('w', fixture(worker_name))})
    assert [r['rank'] for r in result['registered_ranks']] == [0, 1]
    assert result['init_method'] == init and result['init_method_consistent'] is True
    assert result['missing_ranks'] == []


def test_assess_group_worker_never_joined():
    result = tp_assess.assess_group(2, {
        0: entry('spark-head', fixture('head_worker_never_joined.log'), 'exited', 1),
        1: entry('spark-worker', fixture('worker_dist_network_error.log'), 'exited', 1),
    })
    assert result['ok'] is False
    assert result['registered_ranks'] == []
    assert result['missing_ranks'] == [0, 1] and result['pending_ranks'] == [0, 1]
    assert result['rendezvous_complete'] is False and result['head_ready'] is False
    assert failure_tuples(result) == sorted([
        ('startup_failed', 0, 'spark-head'), ('rendezvous_timeout', 0, 'spark-head'),
        ('container_exited', 0, 'spark-head'),
        ('master_unreachable', 1, 'spark-worker'), ('startup_failed', 1, 'spark-worker'),
        ('container_exited', 1, 'spark-worker'),
        # The worker dialled 10.0.0.9, the head listens on 10.0.0.1: the worker is named.
        ('init_method_mismatch', 1, 'spark-worker'),
    ])
    # torch 2.11 prints no separate "will retry" warning: its retry line already quotes the timeout (fatal).
    assert failure_tuples(result, 'warnings') == []
    assert result['init_method_consistent'] is False and result['init_method'] is None
    assert 'rank 0 (spark-head): rendezvous_timeout' in result['msg']
    exited = [f for f in result['failures'] if f['code'] == 'container_exited' and f['rank'] == 1][0]
    assert 'rank 1 on spark-worker exited with code 1' in exited['cause']


def test_assess_group_three_ranks_healthy():
    logs = {0: entry('n0', head_log(3)), 1: entry('n1', worker_log(1, 3)), 2: entry('n2', worker_log(2, 3))}
    result = tp_assess.assess_group(3, logs)
    assert result['ok'] is True
    assert [(r['rank'], r['node']) for r in result['registered_ranks']] == [(0, 'n0'), (1, 'n1'), (2, 'n2')]
    assert result['expected_ranks'] == [0, 1, 2] and result['world_size'] == 3
    assert result['msg'].startswith('3/3 TP ranks registered')


def test_assess_group_three_ranks_one_pending_one_absent():
    logs = {0: entry('n0', head_log(3, ready=False)), 1: entry('n1', worker_log(1, 3, joined=False))}
    result = tp_assess.assess_group(3, logs)
    assert result['ok'] is False
    assert result['registered_ranks'] == []
    assert result['missing_ranks'] == [0, 1, 2]
    assert result['pending_ranks'] == [0, 1]
    assert result['init_method_consistent'] is False      # rank 2 shows no init method yet
    assert result['init_method'] == 'tcp://10.0.0.1:25000'
    assert result['failures'] == []
    assert 'rank 2 (unknown node)' in result['msg']


def test_assess_group_four_ranks_partial_registration():
    logs = dict((r, entry('n%d' % r, worker_log(r, 4))) for r in (1, 2, 3))
    logs[0] = entry('n0', head_log(4))
    logs[3] = entry('n3', worker_log(3, 4, joined=False), 'exited', 137)
    result = tp_assess.assess_group(4, logs)
    assert [r['rank'] for r in result['registered_ranks']] == [0, 1, 2]
    assert result['missing_ranks'] == [3] and result['pending_ranks'] == [3]
    assert failure_tuples(result) == [('container_exited', 3, 'n3')]
    assert result['head_ready'] is True and result['ok'] is False


def test_assess_group_init_method_mismatch():
    result = tp_assess.assess_group(2, {0: entry('h', head_log(2)),
                                        1: entry('w', worker_log(1, 2, init='tcp://10.0.0.1:25001'))})
    assert failure_tuples(result) == [('init_method_mismatch', 1, 'w')]
    assert result['init_method_consistent'] is False and result['ok'] is False
    failure = result['failures'][0]
    assert '--master-port' in failure['fix']
    assert ('rank 1 on w dials tcp://10.0.0.1:25001 (--master-port 25001, not 25000), but rank 0 on h hosts the '
            'rendezvous store on tcp://10.0.0.1:25000') in failure['cause']
    assert failure['details']['differs'] == ['port'] and failure['details']['odd_ranks'] == [1]
    assert failure['details']['by_rank'] == {0: 'tcp://10.0.0.1:25000', 1: 'tcp://10.0.0.1:25001'}
    assert failure['line'].endswith('distributed_init_method=tcp://10.0.0.1:25001 backend=nccl')


def test_assess_group_init_method_mismatch_without_rank_0_names_no_culprit_on_a_tie():
    result = tp_assess.assess_group(3, {1: entry('w1', worker_log(1, 3, init='tcp://10.0.0.1:25001')),
                                        2: entry('w2', worker_log(2, 3, init='tcp://10.0.0.1:25000'))})
    failure = [f for f in result['failures'] if f['code'] == 'init_method_mismatch'][0]
    assert (failure['rank'], failure['node']) == (None, None)
    assert "no log shows rank 0's store yet" in failure['cause']
    # With a majority the odd one out is named.
    result = tp_assess.assess_group(4, {1: entry('w1', worker_log(1, 4, init='tcp://10.0.0.9:25000')),
                                        2: entry('w2', worker_log(2, 4)), 3: entry('w3', worker_log(3, 4))})
    failure = [f for f in result['failures'] if f['code'] == 'init_method_mismatch'][0]
    assert (failure['rank'], failure['node']) == (1, 'w1') and failure['details']['differs'] == ['address']
    assert 'most ranks dial tcp://10.0.0.1:25000' in failure['cause']


def test_assess_group_world_size_mismatch():
    result = tp_assess.assess_group(2, {0: entry('h', head_log(2)), 1: entry('w', worker_log(1, 3))})
    assert ('world_size_mismatch', None, None) in failure_tuples(result)
    assert result['world_size'] is None and result['world_sizes_seen'] == [2, 3]


def test_assess_group_expected_differs_from_logs():
    result = tp_assess.assess_group(3, {0: entry('h', head_log(2)), 1: entry('w', worker_log(1, 2))})
    assert failure_tuples(result) == [('world_size_mismatch', None, None)]
    assert result['missing_ranks'] == [2]


def test_assess_group_duplicate_node_rank():
    # Two workers both started with --node-rank 1; rank 2 never shows up.
    result = tp_assess.assess_group(3, {0: entry('n0', head_log(3, ready=False)),
                                        1: entry('n1', worker_log(1, 3, joined=False)),
                                        2: entry('n2', worker_log(1, 3, joined=False))})
    assert failure_tuples(result) == [('duplicate_rank', 1, 'n2'), ('rank_mismatch', 2, 'n2')]
    assert result['missing_ranks'] == [0, 1, 2] and result['pending_ranks'] == [0, 1]
    dup = [f for f in result['failures'] if f['code'] == 'duplicate_rank'][0]
    assert dup['details']['nodes'] == ['n1', 'n2']


def test_assess_group_engine_dead_after_ready():
    # The real pair: ready, then its worker killed (a container gone), the head's next request failed.
    result = tp_assess.assess_group(2, {0: entry('h', fixture(CPU_HEAD)),
                                        1: entry('w', fixture(CPU_WORKER), 'exited', 137)})
    assert result['head_markers']['ready'] is True
    assert result['head_ready'] is False
    assert failure_tuples(result) == [('container_exited', 1, 'w'), ('engine_dead', 0, 'h'), ('peer_lost', 0, 'h'),
                                      ('worker_error', 0, 'h')]
    assert 'rank 0 (h): peer_lost' in result['msg']


@pytest.mark.parametrize('state, exit_code, expected', [
    ('running', 0, None),
    ('running', 1, None),               # stale ExitCode of an earlier run
    ('exited', 1, ('container_exited', 'fatal')),
    ('exited', '137', ('container_exited', 'fatal')),
    (None, 1, ('container_exited', 'fatal')),
    ('restarting', 1, ('container_exited', 'fatal')),
    ('exited', 0, ('container_stopped', 'fatal')),
    ('dead', None, ('container_stopped', 'fatal')),
    ('missing', None, ('container_missing', 'fatal')),
    ('created', 0, ('container_not_running', 'warning')),
    ('paused', None, ('container_not_running', 'warning')),
    (None, None, None),
])
def test_assess_group_container_states(state, exit_code, expected):
    result = tp_assess.assess_group(2, {0: entry('h', head_log(2)),
                                        1: entry('w', worker_log(1, 2), state, exit_code)})
    found = [(f['code'], f['severity']) for f in result['failures'] + result['warnings'] if f['rank'] == 1]
    assert found == ([expected] if expected else [])
    if expected:
        assert result['ok'] is (expected[1] == 'warning')


def test_assess_group_head_container_exited_means_not_ready():
    result = tp_assess.assess_group(2, {0: entry('h', head_log(2), 'exited', 0), 1: entry('w', worker_log(1, 2))})
    assert result['head_markers']['ready'] is True and result['head_ready'] is False


def test_assess_group_restarted_worker_uses_last_boot():
    log = fixture('worker_dist_network_error.log') + fixture('worker_healthy_v0251.log')
    result = tp_assess.assess_group(2, {0: entry('h', fixture('head_healthy_v0251.log')), 1: entry('w', log)})
    assert result['ok'] is True
    assert result['ranks'][1]['boots'] == 2
    old = [(w['code'], w['previous_boot'], w['severity']) for w in result['warnings']]
    assert ('master_unreachable', 1, 'warning') in old
    # The same log, judged as a whole, is a failure.
    whole = tp_assess.assess_group(2, {0: entry('h', fixture('head_healthy_v0251.log')), 1: entry('w', log)},
                                   last_boot_only=False)
    assert whole['ok'] is False and ('master_unreachable', 1, 'w') in failure_tuples(whole)


def test_assess_group_plain_string_logs_and_missing_head():
    result = tp_assess.assess_group(2, {1: worker_log(1, 2)})
    assert [r['rank'] for r in result['registered_ranks']] == [1]
    assert result['registered_ranks'][0]['node'] == 'rank1'
    assert result['head_ready'] is False and result['head_markers'] is None
    assert result['missing_ranks'] == [0]


def test_split_boots():
    log = fixture('worker_dist_network_error.log') + fixture('worker_healthy_v0251.log')
    boots = tp_lines.split_boots(log)
    assert len(boots) == 2
    assert 'node_rank 1' in boots[1][0][1]
    assert len(tp_lines.split_boots('no markers here\n')) == 1


@pytest.mark.parametrize('bad', [0, -1, 'two', None])
def test_assess_group_rejects_bad_world_size(bad):
    with pytest.raises(ValueError):
        tp_assess.assess_group(bad, {})


def test_assess_group_rejects_bad_rank_key():
    with pytest.raises(ValueError):
        tp_assess.assess_group(2, {'head': 'x'})


def test_assess_group_prefers_info_init_line_over_debug():
    info = ('(Worker pid=9) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size=2 rank=1 local_rank=0 '
            'distributed_init_method=tcp://10.0.0.1:25000 backend=nccl\n')
    debug = ('(Worker pid=9) DEBUG 11-29 18:40:23 [distributed/parallel_state.py:1380] world_size=2 rank=1 '
             'local_rank=0 distributed_init_method=tcp://127.0.0.1:41999 backend=nccl\n')
    result = tp_assess.assess_group(2, {0: entry('h', head_log(2)), 1: entry('w', info + debug)})
    assert [i['init_method'] for i in result['init_methods']] == ['tcp://10.0.0.1:25000'] * 2
    assert result['init_method_consistent'] is True
    # A build that logs only at DEBUG still yields an init method.
    only_debug = tp_assess.assess_group(2, {1: entry('w', debug)})
    assert only_debug['init_methods'][0]['init_method'] == 'tcp://127.0.0.1:41999'
