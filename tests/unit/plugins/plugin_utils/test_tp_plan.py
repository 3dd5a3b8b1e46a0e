# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_tp_plan.py: a TP group's members, ranks and world from the inventory, and every problem at once."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_plan as tp_plan


def member_vars(*ranks, **extra):
    out = {}
    for index, rank in enumerate(ranks):
        out['n%d' % index] = dict({'dspark_rank': rank, 'dspark_group': 'g', 'dspark_api_port': 8888}, **extra)
    return out


def groups_for(mvars):
    return {'all': sorted(mvars), 'g': sorted(mvars)}


# --------------------------------------------------------------------------- plan_group

def test_plan_two_nodes():
    mvars = member_vars(1, 0)
    plan = tp_plan.plan_group('g', groups_for(mvars), mvars, containers={'n0': 'w-ctr'})
    assert plan['head'] == 'n1' and plan['world_size'] == 2 and plan['ranks_per_node'] == 1
    assert [(m['node'], m['node_rank'], m['ranks'], m['container']) for m in plan['members']] == [
        ('n1', 0, [0], 'dspark-vllm'), ('n0', 1, [1], 'w-ctr')]
    assert plan['rank_nodes'] == {0: 'n1', 1: 'n0'} and plan['api_port'] == 8888


def test_plan_multi_gpu_nodes():
    mvars = member_vars(0, 1, 2, dspark_tensor_parallel_size=6)
    plan = tp_plan.plan_group('g', groups_for(mvars), mvars)
    assert plan['world_size'] == 6 and plan['ranks_per_node'] == 2
    assert [m['ranks'] for m in plan['members']] == [[0, 1], [2, 3], [4, 5]]
    assert plan['rank_nodes'][5] == 'n2'
    assert [tp_plan.log_key(m) for m in plan['members']] == [0, 2, 4]


def test_plan_rank_as_string_and_gpus_per_node():
    mvars = member_vars('0', '1', dspark_gpus_per_node=2)
    assert tp_plan.plan_group('g', groups_for(mvars), mvars)['world_size'] == 4


@pytest.mark.parametrize('group, mvars, expected', [
    (None, member_vars(0, 1), 'No serving group'),
    ('x', member_vars(0, 1), "Serving group 'x' is not an inventory group (known: g)"),
    ('g', {'n0': {'dspark_rank': 0}, 'n1': {}}, 'n1 (member of g) has no dspark_rank'),
    ('g', member_vars(0, -1), 'n1: dspark_rank=-1 is not a non-negative integer'),
    ('g', member_vars(0, 'one'), "n1: dspark_rank='one'"),
    ('g', member_vars(0, True), 'n1: dspark_rank=True'),
    ('g', member_vars(0, 0), 'dspark_rank=0 is used by n0, n1'),
    ('g', member_vars(1, 2), 'they must be 0..1'),
    ('g', member_vars(0, 1, dspark_tensor_parallel_size=3), 'dspark_tensor_parallel_size=3 is not a multiple'),
])
def test_plan_errors(group, mvars, expected):
    with pytest.raises(tp_plan.PlanError) as err:
        tp_plan.plan_group(group, groups_for(mvars), mvars)
    assert expected in str(err.value)


def test_plan_reports_every_problem_and_foreign_group():
    mvars = member_vars(0, 1)
    mvars['n1']['dspark_group'] = 'other'
    with pytest.raises(tp_plan.PlanError) as err:
        tp_plan.plan_group('g', groups_for(mvars), mvars, containers={'zz': 'c', 'n0': ''})
    assert len(err.value.problems) == 3
    assert "n1: dspark_group='other'" in str(err.value)


def test_plan_empty_group():
    with pytest.raises(tp_plan.PlanError, match="has no hosts"):
        tp_plan.plan_group('g', {'g': []}, {})
