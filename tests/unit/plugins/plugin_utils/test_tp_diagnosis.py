# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_tp_diagnosis.py: diagnoses, their order, and the verdict of each polling round."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_api as tp_api
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_diagnosis as tp_diagnosis
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_plan as tp_plan

SERVED = 'deepseek-v4-flash-0731'
INIT = 'tcp://10.0.0.1:25000'


# --------------------------------------------------------------------------- diagnoses and verdicts

def pair_plan():
    mvars = {'spark-head': {'dspark_rank': 0}, 'spark-worker': {'dspark_rank': 1}}
    return tp_plan.plan_group('pair', {'pair': ['spark-head', 'spark-worker']}, mvars)


def assess(head_log, worker_log, head_state='running', head_exit=0, worker_state='running', worker_exit=0):
    return tp_assess.assess_group(2, {
        0: {'node': 'spark-head', 'log': head_log, 'container_state': head_state, 'exit_code': head_exit},
        1: {'node': 'spark-worker', 'log': worker_log, 'container_state': worker_state, 'exit_code': worker_exit}})


HEAD_WAIT = ('(Worker pid=287) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size=2 rank=0 local_rank=0 '
             'distributed_init_method=%s backend=nccl\n' % INIT)
WORKER_WAIT = HEAD_WAIT.replace('rank=0', 'rank=1').replace('pid=287', 'pid=94')
STORE_TIMEOUT = ('(Worker pid=287) ERROR 11-29 19:12:23 [multiproc_executor.py:772] torch.distributed.DistStoreError: '
                 'Timed out after 601 seconds waiting for clients. 1/2 clients joined.\n')
CONNECT_TIMEOUT = ('(Worker pid=94) ERROR 11-29 19:11:58 [multiproc_executor.py:772] torch.distributed.'
                   'DistNetworkError: The client socket has timed out after 600000ms while trying to connect to '
                   '(10.0.0.1, 25000).\n')


def test_assessment_diagnoses_puts_the_culprit_before_the_waiting_head():
    result = assess(HEAD_WAIT + STORE_TIMEOUT, WORKER_WAIT + CONNECT_TIMEOUT, 'exited', 1, 'exited', 1)
    diags = tp_diagnosis.assessment_diagnoses(result)
    assert [(d['code'], d['rank'], d['node']) for d in diags] == [
        ('master_unreachable', 1, 'spark-worker'), ('rendezvous_timeout', 0, 'spark-head'),
        ('container_exited', 0, 'spark-head'), ('container_exited', 1, 'spark-worker')]
    message = tp_diagnosis.failure_message(pair_plan(), diags, 601.0)
    assert message.startswith('TP group pair (2 ranks) is not serving after 601.0 s: rank 1 on spark-worker: '
                              'master_unreachable: This rank could not reach the rendezvous store at 10.0.0.1:25000')
    assert message.endswith('(+2 more in diagnosis)')


def test_evaluate_round_waits_for_a_root_cause_then_gives_up():
    plan = pair_plan()
    result = assess(HEAD_WAIT, WORKER_WAIT, 'exited', 137)
    judgement = tp_api.judge_probe(None, SERVED, 'spark-head', 8888, 60)
    verdict, diags = tp_diagnosis.evaluate_round(plan, result, judgement, [], 0)
    assert verdict == 'waiting' and [d['code'] for d in diags] == ['container_exited']
    assert tp_diagnosis.evaluate_round(plan, result, judgement, [], tp_diagnosis.SETTLE_ROUNDS)[0] == 'failed'


def test_evaluate_round_ready_needs_registration_api_and_generation():
    plan = pair_plan()
    head = HEAD_WAIT + ('(Worker pid=287) INFO 11-29 18:40:33 [parallel_state.py:1711] rank 0 in world size 2 is '
                        'assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 0, EP rank 0, EPLB rank N/A\n')
    worker = WORKER_WAIT + head.splitlines()[1].replace('rank 0 in', 'rank 1 in').replace('TP rank 0', 'TP rank 1')
    result = assess(head, worker)
    ok = {'models_ok': True, 'generation': 'ok', 'failure': None}
    assert tp_diagnosis.evaluate_round(plan, result, ok, [], 0) == ('ready', [])
    assert tp_diagnosis.evaluate_round(plan, result, dict(ok, generation=None), [], 0) == ('waiting', [])
    assert tp_diagnosis.evaluate_round(plan, assess(head, WORKER_WAIT), ok, [], 0) == ('waiting', [])


def test_timeout_diagnoses_order_and_api_not_ready():
    plan = pair_plan()
    result = assess(HEAD_WAIT, '')
    diags = tp_diagnosis.timeout_diagnoses(plan, result, {}, 300, {0: 1, 1: 12})
    assert [(d['code'], d['rank'], d['node']) for d in diags] == [
        ('rendezvous_timeout', 1, 'spark-worker'), ('rendezvous_timeout', 0, 'spark-head')]
    assert 'its log has no "world_size=2 rank=1" line' in diags[0]['cause']
    assert 'opened the rendezvous store on %s and waited 300 s for rank(s) 1' % INIT in diags[1]['cause']
    # Both dialled the store and logged nothing: the worker is the suspect, the head only waited.
    both = tp_diagnosis.timeout_diagnoses(plan, assess(HEAD_WAIT, WORKER_WAIT), {}, 300)
    assert [d['rank'] for d in both] == [1, 0]
    assert 'dialled the rendezvous on %s but never joined within 300 s' % INIT in both[0]['cause']
    silent_head = tp_diagnosis.timeout_diagnoses(plan, assess('', WORKER_WAIT), {}, 300, {0: 0, 1: 1})
    assert [d['rank'] for d in silent_head] == [0, 1]
    assert 'its container printed nothing' in silent_head[0]['cause']


def test_restart_and_access_diagnoses():
    plan = pair_plan()
    result = assess(HEAD_WAIT, WORKER_WAIT)
    running = {'exists': True, 'id': 'x', 'started_at': 'T2', 'restart_count': 0}
    assert tp_diagnosis.restart_diagnoses(plan, {'spark-head': running}, {'spark-head': {'id': 'x', 'started_at': 'T2'}},
                                          result) == []
    moved = tp_diagnosis.restart_diagnoses(plan, {'spark-head': running}, {'spark-head': {'id': 'x', 'started_at': 'T1'}},
                                           result)
    assert [(d['code'], d['rank'], d['node']) for d in moved] == [('container_restarted', 0, 'spark-head')]
    streaks = {'spark-worker': tp_diagnosis.UNREACHABLE_ROUNDS - 1}
    assert tp_diagnosis.access_diagnoses(plan, {}, {'spark-worker': 'no route'}, streaks) == []
    streaks['spark-worker'] += 1
    diags = tp_diagnosis.access_diagnoses(plan, {}, {'spark-worker': 'no route'}, streaks)
    assert [(d['code'], d['rank'], d['node']) for d in diags] == [('node_unreachable', 1, 'spark-worker')]
    sudo = tp_diagnosis.access_diagnoses(plan, {'spark-head': {'problem': 'docker_error',
                                                               'message': 'sudo: a password is required'}}, {}, {})
    assert sudo[0]['code'] == 'docker_unavailable' and 'passwordless sudo' in sudo[0]['fix']


def test_views():
    plan = pair_plan()
    result = assess(HEAD_WAIT, WORKER_WAIT)
    assert tp_diagnosis.missing_view(plan, result) == [{'rank': 0, 'node': 'spark-head'}, {'rank': 1, 'node': 'spark-worker'}]
    assert tp_diagnosis.registered_view(plan, result) == []
    diags = tp_diagnosis.public_diagnoses([dict(tp_diagnosis.timeout_diagnoses(plan, result, {}, 5)[0], extra=1)])
    assert sorted(diags[0]) == ['cause', 'code', 'evidence', 'fix', 'node', 'rank', 'severity']


def test_the_api_is_probed_every_fifth_round_until_every_rank_registered():
    plan = pair_plan()
    waiting = assess(HEAD_WAIT, WORKER_WAIT)
    assert not tp_diagnosis.registration_complete(plan, waiting)
    every = tp_diagnosis.PROBE_EVERY_WHILE_STARTING
    assert tp_diagnosis.probe_due(plan, waiting, None)          # the first round: a serving group in one round
    assert [tp_diagnosis.probe_due(plan, waiting, n) for n in range(every)] == [False] * (every - 1) + [True]
    joined = ('(Worker pid=287) INFO 11-29 18:40:33 [parallel_state.py:1711] rank 0 in world size 2 is assigned as DP '
              'rank 0, PP rank 0, PCP rank 0, TP rank 0, EP rank 0, EPLB rank N/A\n')
    registered = assess(HEAD_WAIT + joined, WORKER_WAIT + joined.replace('rank 0 in', 'rank 1 in')
                        .replace('TP rank 0, EP rank 0', 'TP rank 1, EP rank 1').replace('pid=287', 'pid=94'))
    assert tp_diagnosis.registration_complete(plan, registered)
    assert all(tp_diagnosis.probe_due(plan, registered, n) for n in range(every))
