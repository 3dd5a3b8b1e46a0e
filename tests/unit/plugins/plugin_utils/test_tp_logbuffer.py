# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_tp_logbuffer.py: rank logs merged across polls, key lines kept, one log per node."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_logbuffer as tp_logbuffer
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_plan as tp_plan


def member_vars(*ranks, **extra):
    out = {}
    for index, rank in enumerate(ranks):
        out['n%d' % index] = dict({'dspark_rank': rank, 'dspark_group': 'g', 'dspark_api_port': 8888}, **extra)
    return out


def groups_for(mvars):
    return {'all': sorted(mvars), 'g': sorted(mvars)}


# --------------------------------------------------------------------------- LogBuffer

def ts(sec, frac=''):
    return '2026-11-29T18:40:%02d%sZ' % (sec, frac)


def test_log_buffer_merges_overlapping_tails_without_duplicates():
    buf = tp_logbuffer.LogBuffer()
    assert buf.add('%s a\n%s b\n' % (ts(1), ts(2))) == 2
    # --since is inclusive: the last line comes again, then new ones; identical lines at one instant stay.
    assert buf.add('%s b\n%s c\n%s c\n' % (ts(2), ts(3), ts(3))) == 2
    assert buf.text() == '%s a\n%s b\n%s c\n%s c\n' % (ts(1), ts(2), ts(3), ts(3))
    assert buf.last_ts == ts(3)
    assert buf.add('%s c\n' % ts(3)) == 0


def test_log_buffer_inserts_older_key_lines_in_order():
    buf = tp_logbuffer.LogBuffer()
    buf.add('%s tail-1\n%s tail-2\n' % (ts(50), ts(51)))
    # Docker trims trailing zeros of the fraction: .5 and .500000000 are the same instant.
    assert buf.add('%s world_size=2 rank=0\n%s tail-1\n' % (ts(10, '.5'), ts(50, '.000000000'))) == 1
    assert [line.split(' ', 1)[1] for line in buf.text().splitlines()] == ['world_size=2 rank=0', 'tail-1', 'tail-2']
    assert buf.last_ts == ts(51)


def test_log_buffer_without_timestamps_replaces():
    buf = tp_logbuffer.LogBuffer()
    buf.add('a\nb\n')
    buf.add('c\n')
    assert buf.text() == 'c\n' and buf.last_ts is None


def test_log_buffer_trim_keeps_key_lines_and_tail_strips_ansi():
    buf = tp_logbuffer.LogBuffer(max_lines=3)
    buf.add('%s (Worker pid=1) INFO world_size=2 rank=0 x\n' % ts(1))
    buf.add(''.join('%s \x1b[0;36mnoise %d\x1b[0;0m\r\n' % (ts(2 + i), i) for i in range(5)))
    lines = buf.text().splitlines()
    assert len(lines) == 3 and 'world_size=2' in lines[0]
    assert buf.tail(2) == ['%s noise 3' % ts(5), '%s noise 4' % ts(6)]
    buf.add('%s noise 2\r\n' % ts(4))        # dropped lines may come back (merged again)
    assert len(buf) == 3


def test_logs_by_rank_uses_first_rank_of_each_node():
    mvars = member_vars(0, 1, dspark_tensor_parallel_size=4)
    plan = tp_plan.plan_group('g', groups_for(mvars), mvars)
    buf = tp_logbuffer.LogBuffer()
    buf.add('%s hello\n' % ts(1))
    entries = tp_logbuffer.logs_by_rank(plan, {'n0': {'state': 'running', 'exit_code': 0}}, {'n0': buf})
    assert entries == {0: {'node': 'n0', 'log': '%s hello\n' % ts(1), 'container_state': 'running', 'exit_code': 0},
                       2: {'node': 'n1', 'log': '', 'container_state': None, 'exit_code': None}}
