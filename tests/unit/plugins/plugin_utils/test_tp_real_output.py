# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tp_ranks' parsers against real-origin text only.

fixtures/real/: torch 2.11 c10d / Gloo / NCCL 2.28.9 output recorded on a 2-GPU machine by
record_dist_fixtures.py (each file's first line says how). fixtures/vllm_statements/: the exact vLLM log statements
of the released 0.25.1 and 0.33.0 wheels, extracted by extract_vllm_statements.py; vLLM log lines are rendered from
them with each version's own line layout (0.25.1: stdout prefix "(Worker pid=N) " of decorated processes only;
0.33.0: "(<process name> pid=N) " in the log format itself, "MainProcess" for the headless main process).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
from pathlib import Path

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_diagnosis as tp_diagnosis
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_loglines as tp_lines
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_plan as tp_plan
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_signatures as tp_signatures

HERE = Path(__file__).resolve().parent
REAL = HERE / 'fixtures' / 'real'
STATEMENTS = HERE / 'fixtures' / 'vllm_statements'
VERSIONS = ('0.25.1', '0.33.0')


def real(name, keep_recorder_lines=True):
    """A recorded file without its origin line (and, on request, without the recorder's own progress lines)."""
    first, _nl, body = (REAL / name).read_text().partition('\n')
    assert first.startswith('# origin: recorded ') and 'torch 2.11.0+cu130, NCCL 2.28.9' in first
    if not keep_recorder_lines:
        body = '\n'.join(line for line in body.split('\n') if not line.startswith('[recorder rank '))
    return body


def statements(version):
    data = json.loads((STATEMENTS / ('vllm-%s.json' % version)).read_text())
    assert data['vllm'] == version and data['origin'].startswith('extracted by ')
    return data


_SLOT_RE = re.compile(r'%(?:\.\d+)?[sdf]|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}')
_LEVELS = {'logger.info': 'INFO', 'logger.info_once': 'INFO', 'logger.debug': 'DEBUG', 'logger.error': 'ERROR',
           'logger.exception': 'ERROR', 'logger.warning': 'WARNING'}


def render(version, name, values, proc=None, pid=1, stamp='11-30 14:00:00'):
    """One log line of `version` for statement `name`, its %-slots / {expression} slots filled from `values`.

    proc: the process name (None: an undecorated process, "MainProcess" on 0.33.0). A raised exception is
    rendered as the last line of its traceback inside vLLM's "WorkerProc failed to start." record.
    """
    stmt = statements(version)['statements'][name]
    assert stmt is not None, '%s has no statement %s' % (version, name)
    values = list(values)
    message = _SLOT_RE.sub(lambda m: str(values.pop(0)), stmt['template'])
    assert not values, 'unused values for %s' % name
    if version == '0.33.0':
        prefix = '(%s pid=%d) ' % (proc or 'MainProcess', pid)
    else:
        prefix = '(%s pid=%d) ' % (proc, pid) if proc else ''
    if stmt['call'] in _LEVELS:
        return '%s%s %s [%s:%d] %s' % (prefix, _LEVELS[stmt['call']], stamp, stmt['file'].rsplit('/', 1)[-1],
                                       stmt['lineno'], message)
    return '%s%s: %s' % (prefix if proc else '', stmt['call'], message)


# --------------------------------------------------------------------------- what every rank prints

def test_statement_scopes_per_version():
    """The facts the rank counting rests on, read from the wheels: the assignment line is info_once with the
    default scope, "local" in both versions (only local rank 0 prints it); the world_size INFO line is plain."""
    for version in VERSIONS:
        data = statements(version)
        assert data['info_once_default_scope'] == 'local'
        assert data['statements']['rank_assignment']['call'] == 'logger.info_once'
        assert data['statements']['rank_assignment']['scope'] is None
        assert data['statements']['world_size_line']['call'] == 'logger.info'
        assert data['statements']['nccl_version']['call'] == 'logger.info_once'


def _assignment(version, rank, world, tp, proc, pid):
    values = [rank, world, 0, 0, 0, tp] + (['N/A', 'N/A'] if version == '0.25.1' else [tp, 'N/A', 'N/A'])
    return render(version, 'rank_assignment', values, proc, pid)


def _world(version, rank, world, local, proc, pid, addr='10.0.0.1:25000'):
    return render(version, 'world_size_line', [world, rank, local, 'tcp://' + addr, 'nccl'], proc, pid)


def _kv_ready(version):
    if version == '0.25.1':
        kv = render(version, 'gpu_kv_cache_size', ['2,537,472'], 'EngineCore', 233)
    else:
        kv = render(version, 'gpu_kv_cache_size', ['GPU', '2,537,472', '1,048,576', '2.42'], 'EngineCore', 233)
    # uvicorn's own line (not vLLM's), as the API server process prints it.
    return [kv, '(APIServer pid=1) INFO:     Application startup complete.']


def node_log(version, first_rank, gpus, world, head, assigned=True, skip_world=()):
    """The container log of one node of a TP group as vLLM `version` writes it (all local ranks)."""
    lines = []
    if not head:
        lines.append(render(version, 'headless_launch', ['0.33.0' if version == '0.33.0' else '0.25.1',
                                                         '10.0.0.1:25000'], None, 1))
    for local in range(gpus):
        rank = first_rank + local
        if rank not in skip_world:
            lines.append(_world(version, rank, world, local, 'Worker', 100 + rank))
    if head:
        lines.append(render(version, 'nccl_version', ['2.28.9'], 'Worker', 100))
    if assigned:
        # info_once(scope="local"): local rank 0 only.
        lines.append(_assignment(version, first_rank, world, first_rank, 'Worker', 100 + first_rank))
    if head and assigned:
        lines.extend(_kv_ready(version))
    return '\n'.join(lines) + '\n'


@pytest.mark.parametrize('version', VERSIONS)
def test_tp4_over_two_nodes_with_two_gpus_each_is_ready(version):
    logs = {0: {'node': 'spark-a', 'log': node_log(version, 0, 2, 4, head=True), 'container_state': 'running'},
            2: {'node': 'spark-b', 'log': node_log(version, 2, 2, 4, head=False), 'container_state': 'running'}}
    result = tp_assess.assess_group(4, logs)
    assert result['missing_ranks'] == []
    assert [(r['rank'], r['node'], r.get('via')) for r in result['registered_ranks']] == [
        (0, 'spark-a', None), (1, 'spark-a', 'local_rank0'), (2, 'spark-b', None), (3, 'spark-b', 'local_rank0')]
    assert [r['tp_rank'] for r in result['registered_ranks']] == [0, None, 2, None]
    assert 'world_size=4 rank=3 local_rank=1' in result['registered_ranks'][3]['evidence']
    assert 'rank 2 in world size 4 is assigned' in result['registered_ranks'][3]['proof']
    assert result['init_method'] == 'tcp://10.0.0.1:25000' and result['init_method_consistent']
    assert result['head_ready'] and result['ok'], result['msg']
    assert result['nccl_started']['version'] == '2.28.9'


@pytest.mark.parametrize('version', VERSIONS)
def test_local_rank0_vouches_only_for_its_own_log_and_boot(version):
    # The worker's local rank 0 did not get through the group creation: neither worker rank is proven.
    logs = {0: {'node': 'spark-a', 'log': node_log(version, 0, 2, 4, head=True, assigned=False)},
            2: {'node': 'spark-b', 'log': node_log(version, 2, 2, 4, head=False, assigned=False)}}
    result = tp_assess.assess_group(4, logs)
    assert result['missing_ranks'] == [0, 1, 2, 3] and result['pending_ranks'] == [0, 1, 2, 3]
    assert not result['rendezvous_complete'] and result['store_rendezvous_complete']
    assert not result['ok']
    # A rank whose own world_size line is not in the log is not counted.
    logs = {0: {'node': 'spark-a', 'log': node_log(version, 0, 2, 4, head=True)},
            2: {'node': 'spark-b', 'log': node_log(version, 2, 2, 4, head=False, skip_world=(3,))}}
    result = tp_assess.assess_group(4, logs)
    assert result['missing_ranks'] == [3] and not result['ok']


@pytest.mark.parametrize('version', VERSIONS)
def test_rank_lines_rendered_from_the_wheels(version):
    recs = tp_lines.parse_rank_lines(node_log(version, 2, 2, 4, head=False))
    assert [(r['kind'], r['rank'], r['world_size'], r['process'], r['pid'], r['level']) for r in recs] == [
        ('world_size', 2, 4, 'Worker', 102, 'INFO'), ('world_size', 3, 4, 'Worker', 103, 'INFO'),
        ('assignment', 2, 4, 'Worker', 102, 'INFO')]
    assert recs[0]['init_method'] == 'tcp://10.0.0.1:25000' and recs[1]['local_rank'] == 1
    groups = {'DP': 0, 'PP': 0, 'PCP': 0, 'TP': 2, 'EP': 'N/A', 'EPLB': 'N/A'}
    if version == '0.33.0':
        groups['ETP'] = 2
    assert recs[2]['groups'] == groups


# --------------------------------------------------------------------------- hang after the store rendezvous

def _plan(world=4, gpus=2):
    groups = {'pair': ['spark-a', 'spark-b']}
    member_vars = {'spark-a': {'dspark_rank': 0, 'dspark_gpus_per_node': gpus, 'dspark_api_port': 8888},
                   'spark-b': {'dspark_rank': 1}}
    plan = tp_plan.plan_group('pair', groups, member_vars)
    assert plan['world_size'] == world
    return plan


@pytest.mark.parametrize('version', VERSIONS)
def test_hang_after_store_rendezvous_is_an_nccl_hang_not_a_missing_rank(version):
    plan = _plan()
    logs = {0: {'node': 'spark-a', 'log': node_log(version, 0, 2, 4, head=True, assigned=False),
                'container_state': 'running'},
            2: {'node': 'spark-b', 'log': node_log(version, 2, 2, 4, head=False, assigned=False),
                'container_state': 'running'}}
    assessment = tp_assess.assess_group(4, logs)
    diags = tp_diagnosis.timeout_diagnoses(plan, assessment, {'models_ok': False}, 900, {0: 5, 2: 4})
    assert [(d['code'], d['rank'], d['node']) for d in diags] == [
        ('nccl_init_hang', 0, 'spark-a'), ('nccl_init_hang', 1, 'spark-a'), ('nccl_init_hang', 2, 'spark-b'),
        ('nccl_init_hang', 3, 'spark-b')]
    assert 'passed the rendezvous store' in diags[2]['cause'] and 'vLLM is using nccl==2.28.9' in diags[2]['cause']
    assert 'NCCL_IB_GID_INDEX' in diags[2]['fix'] and 'vLLM is using nccl==2.28.9' in diags[2]['evidence']
    assert not any('never joined' in d['cause'] or 'never reached' in d['cause'] for d in diags)


def test_without_the_nccl_line_a_missing_rank_still_never_joined():
    plan = _plan()
    head = node_log('0.25.1', 0, 2, 4, head=True, assigned=False).replace(
        render('0.25.1', 'nccl_version', ['2.28.9'], 'Worker', 100) + '\n', '')
    assessment = tp_assess.assess_group(4, {0: {'node': 'spark-a', 'log': head}, 2: {'node': 'spark-b', 'log': ''}})
    diags = tp_diagnosis.timeout_diagnoses(plan, assessment, {'models_ok': False}, 900, {0: 3, 2: 0})
    assert [d['code'] for d in diags] == ['rendezvous_timeout'] * 4
    assert 'its container printed nothing' in diags[0]['cause']


# --------------------------------------------------------------------------- vLLM statements -> signatures

STATEMENT_CASES = [
    # version, statement, values, process, (code, signature), details subset
    ('0.25.1', 'worker_died', ['VllmWorker-1'], 'EngineCore', ('worker_died', 'worker_died'),
     {'proc': 'VllmWorker-1'}),
    ('0.33.0', 'worker_died', ['VllmWorker-1', -9], 'EngineCore', ('worker_died', 'worker_died'),
     {'proc': 'VllmWorker-1', 'exit_code': -9}),
    ('0.25.1', 'workerproc_failed_to_start', [], 'Worker', ('startup_failed', 'startup_cascade'), {}),
    ('0.33.0', 'workerproc_failed_to_start', [], 'Worker', ('startup_failed', 'startup_cascade'), {}),
    ('0.25.1', 'workerproc_failed', [], 'Worker_TP1', ('worker_error', 'worker_runtime_error'), {}),
    ('0.33.0', 'workerproc_failed', [], 'Worker_TP1', ('worker_error', 'worker_runtime_error'), {}),
    ('0.25.1', 'engine_core_died', ['EngineCore_DP0'], 'APIServer', ('engine_dead', 'engine_core_died'),
     {'proc': 'EngineCore_DP0'}),
    ('0.33.0', 'engine_core_died', ['EngineCore_DP0'], 'APIServer', ('engine_dead', 'engine_core_died'),
     {'proc': 'EngineCore_DP0'}),
    ('0.25.1', 'free_memory_low', ['cuda:0', '20.1', '119.7', '0.9', '107.73'], 'Worker',
     ('insufficient_free_memory', 'free_memory_low'),
     {'device': 'cuda:0', 'free_gib': '20.1', 'total_gib': '119.7', 'utilization': '0.9'}),
    ('0.33.0', 'free_memory_low', ['cuda:0', '20.1', '119.7', '0.9', '107.73'], 'Worker',
     ('insufficient_free_memory', 'free_memory_low'), {'free_gib': '20.1', 'requested_gib': '107.73'}),
    ('0.33.0', 'free_memory_below_budget', ['cuda:0', '20.1', '119.7', '0.9', '60.0'], 'Worker',
     ('insufficient_free_memory', 'free_memory_below_budget'),
     {'free_gib': '20.1', 'total_gib': '119.7', 'requested_gib': '60.0'}),
    ('0.33.0', 'external_weights_exceed', ['cuda:0', '110.0', '119.7', '0.9', '107.73'], 'Worker',
     ('insufficient_free_memory', 'external_weights_exceed'), {'ext_gib': '110.0', 'utilization': '0.9'}),
    ('0.33.0', 'nnodes_not_divisor', [3, 4], 'MainProcess', ('bad_arguments', 'nnodes_not_divisor'),
     {'nnodes': 3, 'world_size': 4}),
    ('0.33.0', 'node_rank_out_of_range', [1, 2], 'MainProcess', ('bad_arguments', 'node_rank_out_of_range'),
     {'max_rank': 1, 'node_rank': 2}),
]


@pytest.mark.parametrize('version, name, values, proc, expected, details', STATEMENT_CASES)
def test_statement_signatures(version, name, values, proc, expected, details):
    line = render(version, name, values, proc, 211)
    found = tp_signatures.find_failures(line + '\n')
    assert [(d['code'], d['signature']) for d in found] == [expected], line
    diag = found[0]
    assert dict((k, diag['details'].get(k)) for k in details) == details
    assert diag['severity'] == 'fatal' and diag['cause'] and diag['fix'] and '?' not in diag['cause']


def test_0_33_headless_main_process_prefix_and_argument_error_with_rank_and_node():
    worker = '\n'.join([render('0.33.0', 'headless_launch', ['0.33.0', '10.0.0.1:25000'], None, 1),
                        'Traceback (most recent call last):',
                        '  File "/usr/local/bin/vllm", line 10, in <module>',
                        render('0.33.0', 'node_rank_out_of_range', [1, 2], None)]) + '\n'
    assert worker.startswith('(MainProcess pid=1) INFO ')
    result = tp_assess.assess_group(2, {0: {'node': 'spark-a', 'log': ''},
                                        1: {'node': 'spark-b', 'log': worker, 'container_state': 'exited',
                                            'exit_code': 1}})
    first = [f for f in result['failures'] if f['root_cause']][0]
    assert (first['code'], first['rank'], first['node']) == ('bad_arguments', 1, 'spark-b')
    assert '--node-rank 2' in first['cause'] and 'dspark_rank' in first['fix']


# --------------------------------------------------------------------------- recorded torch / NCCL output

REAL_CASES = [
    # file, [(code, signature, severity, root_cause)]
    ('healthy_nccl.rank0.log', []),
    ('healthy_nccl.rank1.log', []),
    ('healthy_nccl_default.rank0.log', []),
    ('client_never_joins.rank0.log', [('rendezvous_timeout', 'store_wait_timeout', 'fatal', True)]),
    ('master_refused.rank1.log', [('master_unreachable', 'client_connect_timeout', 'fatal', True)]),
    ('master_unroutable.rank1.log', [('master_unreachable', 'client_connect_timeout', 'fatal', True)]),
    ('master_wrong_name.rank1.log', [('master_addr_unresolvable', 'master_addr_unresolvable', 'warning', True),
                                     ('master_unreachable', 'client_connect_timeout', 'fatal', True)]),
    ('port_in_use.rank0.log', [('port_in_use', 'master_port_in_use', 'fatal', True)]),
    ('gloo_wrong_iface.rank0.log', [('wrong_interface', 'gloo_no_address', 'fatal', True)]),
    ('nccl_wrong_iface.rank0.log', [('wrong_interface', 'nccl_no_socket_interface', 'fatal', True),
                                    ('nccl_init_error', 'nccl_unhandled_system_error', 'fatal', True)]),
    ('nccl_wrong_iface.rank1.log', [('store_lost', 'store_recv_failed', 'fatal', False)]),
    ('nccl_wrong_iface_default.rank0.log', [('nccl_init_error', 'nccl_unhandled_system_error', 'fatal', True),
                                            ('wrong_interface', 'nccl_no_socket_interface', 'fatal', True)]),
    ('nccl_bootstrap_refused.rank1.log', [('nccl_connect_failed', 'nccl_socket_retries_exhausted', 'fatal', True),
                                          ('nccl_remote_error', 'nccl_remote_error', 'fatal', False)]),
    ('nccl_peer_gone.rank0.log', [('nccl_warning', 'nccl_warn', 'warning', False),
                                  ('nccl_remote_error', 'nccl_remote_error', 'fatal', False),
                                  ('nccl_runtime_error', 'nccl_last_error', 'fatal', False)]),
    ('nccl_peer_gone.rank1.log', []),
    ('nccl_watchdog_timeout.rank0.log', [('collective_timeout', 'collective_timeout', 'fatal', False),
                                         ('nccl_warning', 'nccl_warn', 'warning', False)]),
    ('nccl_watchdog_timeout.rank1.log', []),
    ('nccl_bootstrap_refused_info.rank1.log', [
        ('wrong_gid_or_hca', 'nccl_ib_no_device', 'warning', True),
        ('nccl_connect_refused', 'nccl_connect_retry', 'warning', True),
        ('nccl_connect_failed', 'nccl_socket_retries_exhausted', 'fatal', True),
        ('nccl_remote_error', 'nccl_remote_error', 'fatal', False)]),
    ('nccl_bootstrap_unroutable.rank1.log', [('nccl_connect_failed', 'nccl_socket_retries_exhausted', 'fatal', True),
                                             ('nccl_remote_error', 'nccl_remote_error', 'fatal', False)]),
    ('nccl_unique_id_wait.rank0.log', []),
    ('nccl_unique_id_wait.rank1.log', [('store_wait_timeout', 'store_key_wait_timeout', 'fatal', False)]),
]


@pytest.mark.parametrize('name, expected', REAL_CASES)
def test_recorded_output_signatures(name, expected):
    found = tp_signatures.find_failures(real(name))
    assert [(d['code'], d['signature'], d['severity'], d['root_cause']) for d in found] == expected
    for diag in found:
        assert diag['cause'] and diag['fix'] and '{' not in diag['cause'] and '?' not in diag['cause']
        assert diag['line'] and '\n' not in diag['line']


def _one(name, signature):
    return [d for d in tp_signatures.find_failures(real(name)) if d['signature'] == signature][0]


def test_recorded_details():
    assert _one('client_never_joins.rank0.log', 'store_wait_timeout')['details'] == {
        'seconds': 16, 'joined': 1, 'expected': 2}
    assert _one('port_in_use.rank0.log', 'master_port_in_use')['details'] == {'port_kind': 'master'}
    refused = _one('master_refused.rank1.log', 'client_connect_timeout')
    assert refused['details']['port'] == 60655 and refused['count'] == 5
    assert _one('gloo_wrong_iface.rank0.log', 'gloo_no_address')['details']['iface'] == 'nosuchif0'
    retries = _one('nccl_bootstrap_refused.rank1.log', 'nccl_socket_retries_exhausted')
    assert retries['details'] == {'func': 'socketPollConnect', 'peer': '127.0.0.1<44805>',
                                  'reason': 'Connection refused', 'attempts': 35}
    retry = _one('nccl_bootstrap_refused_info.rank1.log', 'nccl_connect_retry')
    assert retry['count'] == 4 and retry['details'] == {'peer': '127.0.0.1<37589>', 'reason': 'Connection refused',
                                                        'attempt': 1, 'attempts': 4}
    assert _one('nccl_unique_id_wait.rank1.log', 'store_key_wait_timeout')['details'] == {
        'timeout_ms': 15000, 'keys': '/default_pg/0//cuda//0'}
    watchdog = _one('nccl_watchdog_timeout.rank0.log', 'collective_timeout')
    assert watchdog['details'] == {'seq': 2, 'op': 'ALLREDUCE', 'timeout_ms': 15000, 'ran_ms': 15077}


def test_recorded_last_error_on_its_own_line_keeps_the_cause():
    # "[rank0]: Last error:" then "[rank0]: Bootstrap : no socket interface found" (torch 2.11 / NCCL 2.28.9).
    text = real('nccl_wrong_iface.rank0.log')
    assert '[rank0]: Last error:\n[rank0]: Bootstrap : no socket interface found' in text
    iface = _one('nccl_wrong_iface.rank0.log', 'nccl_no_socket_interface')
    assert iface['count'] == 3 and 'NCCL_SOCKET_IFNAME' in iface['fix']
    # Without the NCCL WARN line (NCCL_DEBUG unset) the joined "Last error:" line carries the cause alone.
    default = real('nccl_wrong_iface_default.rank0.log')
    assert 'NCCL WARN' not in default
    found = [d for d in tp_signatures.find_failures(default) if d['code'] == 'wrong_interface']
    assert len(found) == 1 and found[0]['line'] == '[rank0]: Last error: Bootstrap : no socket interface found'
    # The peer-gone case: "Last error:" alone, detail on the next line, without any prefix.
    peer = _one('nccl_peer_gone.rank0.log', 'nccl_last_error')
    assert peer['details']['detail'] == 'socketProgress: Connection closed by remote peer localhost<59320>'


def test_remote_error_names_the_peer_only_when_the_peer_went_away():
    gone = _one('nccl_peer_gone.rank0.log', 'nccl_remote_error')
    assert gone['details']['peer_gone'] is True and gone['root_cause'] is False
    assert 'remote rank exited' in gone['cause'] and "other ranks' logs" in gone['fix']
    own = _one('nccl_bootstrap_refused.rank1.log', 'nccl_remote_error')
    assert own['details']['peer_gone'] is False
    assert own['cause'].startswith('NCCL failed on this rank with a network error: socketPollConnect: connect to')
    assert "other ranks' logs" not in own['fix'] and 'NCCL_SOCKET_IFNAME' in own['fix']


# NCCL text that needs RDMA hardware (not on the recording machine): the WARN format strings of NCCL's
# src/misc/ibvwrap.cc (wrap_ibv_modify_qp / ibvModifyQpLog) and src/transport/net_ib (completion error), filled in,
# placed in torch's recorded "Last error:" layout of nccl_peer_gone.rank0.log.
MODIFY_QP = ('Call to ibv_modify_qp failed with 110 Connection timed out, on dev rocep1s0f1:1, curr state INIT, '
             'next state RTR, local GID index 3, local GID ::ffff:10.0.0.2, remote GID ::ffff:10.0.0.1')
RETRY_EXC = ('NET/IB: Got completion from peer 10.0.0.1<52713> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=SEND(0) '
             'vendor_err=129  localGid ::ffff:10.0.0.2 remoteGids ::ffff:10.0.0.1 hca rocep1s0f1')


def _torch_error_block(detail):
    lines = real('nccl_peer_gone.rank0.log').split('\n')
    start = [i for i, line in enumerate(lines) if 'raised the following async exception' in line][0]
    block = lines[start:start + 4]
    assert block[2] == 'Last error:'
    block[3] = detail
    return '\n'.join(block) + '\n'


@pytest.mark.parametrize('detail, fields', [
    (MODIFY_QP, {'hca': 'rocep1s0f1', 'ib_port': 1, 'gid_index': 3, 'local_gid': '::ffff:10.0.0.2',
                 'remote_gid': '::ffff:10.0.0.1', 'state': 'INIT', 'next_state': 'RTR'}),
    (RETRY_EXC, {'peer': '10.0.0.1<52713>', 'local_gid': '::ffff:10.0.0.2', 'remote_gid': '::ffff:10.0.0.1',
                 'hca': 'rocep1s0f1'}),
])
def test_wrong_gid_or_hca_is_its_own_root_cause(detail, fields):
    found = tp_signatures.find_failures(_torch_error_block(detail))
    by_sig = dict((d['signature'], d) for d in found)
    gid = [d for d in found if d['code'] == 'wrong_gid_or_hca']
    assert len(gid) == 1 and gid[0]['root_cause'] is True
    assert dict((k, gid[0]['details'].get(k)) for k in fields) == fields
    assert 'NCCL_IB_GID_INDEX' in gid[0]['fix'] and 'NCCL_IB_HCA' in gid[0]['fix']
    # The remote error is not blamed on a peer: the detail is this rank's own RDMA failure.
    remote = by_sig['nccl_remote_error']
    assert remote['details']['peer_gone'] is False and remote['root_cause'] is False
    assert remote['fix'] == gid[0]['fix'] and detail in remote['cause']


NCCL_230_LINES = [
    # NCCL 2.29+ src/misc/socket.cc (socketConnectCheck with __func__, ncclOsSocketPollConnect), in the recorded
    # 2.28.9 WARN layout "[date] host:pid:tid [dev] file:line NCCL WARN ...".
    ('[2026-11-30 14:43:41] vm:897:897 [0] misc/socket.cc:583 NCCL WARN ncclOsSocketStartConnect: connect to '
     '10.0.0.2<45311> failed : Software caused connection abort', 'nccl_socket_connect', 'fatal'),
    ('[2026-11-30 14:43:41] vm:897:897 [0] misc/socket.cc:583 NCCL WARN ncclOsSocketPollConnect: connect to '
     '10.0.0.2<45311> returned Connection refused, exceeded error retry count after 35 attempts',
     'nccl_socket_retries_exhausted', 'fatal'),
    ('vm:897:897 [0] NCCL INFO ncclOsSocketPollConnect: connect to 10.0.0.2<45311> returned Connection refused, '
     'retrying (3/34) after sleep for 300 msec', 'nccl_connect_retry', 'warning'),
    ('[2026-11-30 14:43:41] vm:897:897 [0] misc/socket.cc:601 NCCL WARN ncclOsSocketPollConnect to 10.0.0.2<45311> '
     'failed with error Connection reset by peer', 'nccl_poll_connect', 'fatal'),
]


@pytest.mark.parametrize('line, signature, severity', NCCL_230_LINES)
def test_nccl_2_29_plus_socket_wording(line, signature, severity):
    found = tp_signatures.find_failures(line + '\n')
    assert [(d['signature'], d['severity']) for d in found] == [(signature, severity)]
    assert found[0]['details']['peer'] == '10.0.0.2<45311>'


# --------------------------------------------------------------------------- recorded output inside a group

def test_recorded_client_timeout_in_a_worker_log_names_rank_node_cause_and_fix():
    head = node_log('0.25.1', 0, 1, 2, head=True, assigned=False).replace(
        render('0.25.1', 'nccl_version', ['2.28.9'], 'Worker', 100) + '\n', '')
    head += real('client_never_joins.rank0.log', keep_recorder_lines=False)
    worker = (render('0.25.1', 'headless_launch', ['0.25.1', '10.0.0.9:25000'], None, 1) + '\n'
              + _world('0.25.1', 1, 2, 0, 'Worker', 94, addr='10.0.0.9:25000') + '\n'
              + real('master_refused.rank1.log', keep_recorder_lines=False))
    result = tp_assess.assess_group(2, {0: {'node': 'spark-a', 'log': head, 'container_state': 'exited', 'exit_code': 1},
                                        1: {'node': 'spark-b', 'log': worker, 'container_state': 'exited',
                                            'exit_code': 1}})
    assert not result['ok'] and result['missing_ranks'] == [0, 1]
    roots = [(f['code'], f['rank'], f['node']) for f in result['failures'] if f['root_cause']]
    assert ('rendezvous_timeout', 0, 'spark-a') in roots and ('master_unreachable', 1, 'spark-b') in roots
    assert {'init_method_mismatch'} <= set(f['code'] for f in result['failures'])
    diags = tp_diagnosis.assessment_diagnoses(result)
    # The head only waited for the worker: the worker's own causes come first, the endpoint it dialled (its world_size
    # line, the earlier evidence) before the timeout it met there.
    assert [(d['code'], d['rank']) for d in diags[:2]] == [('init_method_mismatch', 1), ('master_unreachable', 1)]
    assert 'rank 1 on spark-b dials tcp://10.0.0.9:25000 (--master-addr 10.0.0.9, not 10.0.0.1)' in diags[0]['cause']
