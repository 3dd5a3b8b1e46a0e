# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/status.yml's view of a group (roles/serve/tasks/status.yml): each rank's container as `docker inspect`
gave it, the rank that failed first by tp_ranks' own rule (_tp_assess.first_failure) and the text of the group's
failure, which leads with that rank and marks the others as its consequences, and the engine's numbers from the head's
/metrics (_vllm_metrics). Pure: no Ansible imports, no I/O."""

from __future__ import annotations

from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_assess import (
    container_killed, docker_time, first_failure)
from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_plan import as_int
from ansible_collections.dspark.cluster.plugins.plugin_utils import _vllm_metrics

ENDED = ('exited', 'dead')


def _padded(finished_at):
    """docker's FinishedAt without its zone, the fraction padded to nanoseconds ('' when it never finished).

    '2026-12-01T16:07:19.2048Z' -> '2026-12-01T16:07:19.204800000' (the report appends the Z)."""
    text = str(finished_at or '').strip()
    if docker_time(text) is None:
        return ''
    text = text[:-1] if text.endswith('Z') else text
    base, dummy, frac = text.partition('.')
    return '%s.%s' % (base, (frac + '0' * 9)[:9])


def _oom(container):
    return str(container.get('oom_killed', '')).strip().lower() == 'true'


def row(host, rank, container):
    """One rank's row: host, rank, state, ended, running, exit_code, killed, finished, label ('exited (137, killed)')."""
    container = container if isinstance(container, dict) else {}
    state = str(container.get('state') or 'unknown')
    ended = state in ENDED
    killed = ended and container_killed(container.get('exit_code'), True if _oom(container) else None)
    label = state
    if ended:
        label = '%s (%s%s)' % (state, container.get('exit_code', '?'), ', killed' if killed else '')
    return {'host': host, 'rank': as_int(rank), 'state': state, 'ended': ended, 'running': state == 'running',
            'exit_code': container.get('exit_code'), 'killed': killed,
            'finished': _padded(container.get('finished_at')) if ended else '', 'label': label}


def lmcache_down(hosts, lmcache):
    """The hosts whose LMCache server (serve_lmcache; {state, health} per host, None where it is off) does not run or
    fails its health check."""
    return [host for host, server in zip(hosts, lmcache or []) if isinstance(server, dict)
            and (server.get('state') != 'running' or server.get('health') == 'unhealthy')]


def view(hosts, ranks, containers, metrics=None, lmcache=None):
    """The group's hosts, their ranks and containers (same order) -> {rows, first_failure (a row or None), text,
    metrics, metrics_reason, lmcache_down (lmcache_down() of ``lmcache``, the hosts' LMCache servers)}.

    metrics: the head's GET /metrics as ansible.builtin.uri registered it (None: not read) -> `metrics` the engine's
    numbers (_vllm_metrics.summary) or None, `metrics_reason` why they are None.

    text: 'rank R on H failed first: its container LABEL at T; rank Q on G: lost its peer rank R (consequence); '
    ('' when the containers cannot tell which failed first: the logs decide then, see tp_ranks)."""
    containers = [c if isinstance(c, dict) else {} for c in containers]
    rows = [row(h, r, c) for h, r, c in zip(hosts, ranks, containers)]
    per_rank = [{'rank': r['rank'], 'node': r['host'], 'container_state': r['state'], 'exit_code': r['exit_code'],
                 'oom_killed': True if _oom(c) else None, 'finished_at': c.get('finished_at')}
                for r, c in zip(rows, containers)]
    pick = first_failure(per_rank)
    first = next((r for r in rows if pick and r['host'] == pick['node']), None)
    text = ''
    if first:
        text = 'rank %s on %s failed first: its container %s%s;' % (
            first['rank'], first['host'], first['label'], ' at %sZ' % first['finished'] if first['finished'] else '')
        text += ''.join(' rank %s on %s: lost its peer rank %s (consequence);' % (r['rank'], r['host'], first['rank'])
                        for r in rows if r['host'] != first['host'])
        text += ' '
    numbers, reason = _vllm_metrics.from_response(metrics)
    return {'rows': rows, 'first_failure': first, 'text': text, 'metrics': numbers, 'metrics_reason': reason,
            'lmcache_down': lmcache_down(hosts, lmcache)}
