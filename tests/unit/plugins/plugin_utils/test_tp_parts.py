# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The seams of the tp_ranks units in plugins/plugin_utils/_tp_*.py (their behaviour is in test_tp_<unit>.py
beside this file, and the real recordings in test_tp_real_output.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_api as tp_api
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_logbuffer as tp_logbuffer
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_loglines as tp_lines
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_plan as tp_plan

UNITS = Path(__file__).resolve().parents[4] / 'plugins' / 'plugin_utils'
PURE = ('_tp_api', '_tp_assess', '_tp_diagnosis', '_tp_docker', '_tp_logbuffer', '_tp_loglines', '_tp_plan',
        '_tp_signatures')


@pytest.mark.parametrize('value, expected', [
    (3, 3), (0, 0), ('2', 2), (' 4 ', 4), ('-1', -1), ('+5', 5), (True, None), (False, None), (None, None),
    ('', None), ('2.0', None), ('N/A', None), (2.0, None), ([1], None), (b'3', None),
])
def test_as_int_is_the_one_integer_reading(value, expected):
    assert tp_plan.as_int(value) == expected


@pytest.mark.parametrize('name', PURE)
def test_pure_units_import_no_ansible_and_no_other_helpers(name):
    tree = ast.parse((UNITS / (name + '.py')).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert not [m for m in imported if m == 'ansible' or m.startswith('ansible.')]
    # One helper per job: integers come from _tp_plan.as_int only.
    defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert not [d for d in defined if d.endswith('as_int') or d == '_int_or_text'] or name == '_tp_plan'


def test_negative_or_text_rank_is_refused_with_its_value():
    mvars = {'n0': {'dspark_rank': 0}, 'n1': {'dspark_rank': '-1'}}
    with pytest.raises(tp_plan.PlanError, match=r"n1: dspark_rank='-1' is not a non-negative integer"):
        tp_plan.plan_group('g', {'g': ['n0', 'n1']}, mvars)
    mvars['n1']['dspark_rank'] = ' 1 '
    assert [m['node'] for m in tp_plan.plan_group('g', {'g': ['n0', 'n1']}, mvars)['members']] == ['n0', 'n1']


def test_assignment_groups_are_numbers_or_text():
    line = ('(Worker pid=94) INFO 11-29 18:40:33 [parallel_state.py:1711] rank 1 in world size 2 is assigned as '
            'DP rank 0, PP rank 0, TP rank 1, EP rank 1, EPLB rank N/A')
    rec = [r for r in tp_lines.parse_rank_lines(line) if r['kind'] == 'assignment'][0]
    assert rec['groups'] == {'DP': 0, 'PP': 0, 'TP': 1, 'EP': 1, 'EPLB': 'N/A'} and rec['tp_rank'] == 1


def test_log_excerpts_strip_escapes_and_split_redraws():
    buf = tp_logbuffer.LogBuffer()
    buf.add('2026-11-29T18:40:01.1Z \x1b[32mINFO\x1b[0m loading  \n2026-11-29T18:40:02.2Z 10%\r50%\r\n')
    assert buf.tail(5) == ['2026-11-29T18:40:01.1Z INFO loading', '2026-11-29T18:40:02.2Z 10%', '50%']


def test_probe_params_carry_the_key_only_when_given():
    params = tp_api.probe_params('8888', 'm', 1, 60)
    assert params == {'port': 8888, 'model': 'm', 'generate': True, 'generation_timeout': 60, 'max_tokens': 16,
                      'prompt': 'Reply with OK.', 'health_timeout': 5, 'models_timeout': 10}
    assert tp_api.probe_params(1, 'm', False, 1, 'k')['api_key'] == 'k'


def test_probe_result_keeps_only_the_probe():
    ok = {'changed': False, 'invocation': {'module_args': {'api_key': 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER'}},
          'health': {'status': 200}, 'models': {'status': 200, 'ids': ['m']}, 'chat': {'status': 200}, 'warnings': []}
    assert tp_api.probe_result(ok) == {'health': {'status': 200}, 'models': {'status': 200, 'ids': ['m']},
                                       'chat': {'status': 200}}


@pytest.mark.parametrize('result, expected', [
    ({'unreachable': True, 'failed': True, 'msg': 'Failed to connect to the host via ssh: no route'},
     {'probe_error': 'Failed to connect to the host via ssh: no route', 'rc': None}),
    ({'failed': True, 'rc': 1, 'module_stdout': '', 'module_stderr': 'Traceback ...\nImportError: x\n',
      'msg': 'MODULE FAILURE'}, {'probe_error': 'ImportError: x', 'rc': 1}),
    ({'failed': True, 'msg': 'port=0 is not a TCP port'}, {'probe_error': 'port=0 is not a TCP port', 'rc': None}),
    (None, {'probe_error': 'no output', 'rc': None}),
])
def test_probe_result_says_why_the_module_did_not_run(result, expected):
    assert tp_api.probe_result(result) == expected
