# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan of a tp_ranks poll: a serving group's members, their global ranks and containers, the expected world.

Built from inventory variables only; no Ansible imports, no I/O. The members' order comes from the group
model the roles share (``_group_model``).
"""

from __future__ import annotations

from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_model

DEFAULT_CONTAINER = 'dspark-vllm'


class PlanError(ValueError):
    """The inventory does not describe a usable serving group (all problems in ``problems``)."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__('; '.join(self.problems))


def as_int(value):
    """The integer an inventory value, a log field or a docker field stands for, else None.

    An int (never a bool), or a string of digits with an optional sign and blanks around them. The one integer
    reading of every tp_ranks unit.
    """
    return _group_model.as_int(value)


def plan_group(group, groups, member_vars, container=DEFAULT_CONTAINER, containers=None):
    """Members, ranks and containers of one serving group, or PlanError.

    groups: the inventory's ``groups`` mapping; member_vars: host -> dict with
    at least dspark_rank (optional: dspark_group, dspark_tensor_parallel_size,
    dspark_gpus_per_node, dspark_api_port). Node r runs global ranks
    r*L .. r*L+L-1 where L = world size / number of nodes.
    """
    problems = []
    if not group or not isinstance(group, str):
        raise PlanError(['No serving group: pass group= or set dspark_group on the task host.'])
    if group not in (groups or {}):
        raise PlanError(['Serving group %r is not an inventory group (known: %s).'
                         % (group, ', '.join(sorted(g for g in (groups or {}) if g not in ('all', 'ungrouped')))
                            or 'none')])
    hosts = list(groups[group] or [])
    if not hosts:
        raise PlanError(['Serving group %r has no hosts.' % group])
    containers = dict(containers or {})
    for host in sorted(containers):
        if host not in hosts:
            problems.append('containers names %r, which is not a member of %s (members: %s).'
                            % (host, group, ', '.join(hosts)))
        elif not isinstance(containers[host], str) or not containers[host].strip():
            problems.append('containers[%r] must be a non-empty container name.' % host)

    by_rank = {}
    for host in hosts:
        hvars = member_vars.get(host) or {}
        raw = hvars.get('dspark_rank')
        rank = as_int(raw)
        if raw is None:
            problems.append('%s (member of %s) has no dspark_rank: set 0 on the head and 1..N-1 on the workers.'
                            % (host, group))
            continue
        if rank is None or rank < 0:
            problems.append('%s: dspark_rank=%r is not a non-negative integer.' % (host, raw))
            continue
        member_group = hvars.get('dspark_group')
        if member_group is not None and member_group != group:
            problems.append('%s: dspark_group=%r but the host is checked as a member of %r.'
                            % (host, member_group, group))
        by_rank.setdefault(rank, []).append(host)
    for rank in sorted(by_rank):
        if len(by_rank[rank]) > 1:
            problems.append('dspark_rank=%d is used by %s: every member needs its own rank.'
                            % (rank, ', '.join(sorted(by_rank[rank]))))
    if by_rank and not problems:
        expected = list(range(len(hosts)))
        if sorted(by_rank) != expected:
            problems.append('The ranks of %s are %s; they must be 0..%d (0 = head).'
                            % (group, ', '.join(str(r) for r in sorted(by_rank)), len(hosts) - 1))
    if problems:
        raise PlanError(problems)

    nnodes = len(hosts)
    ordered = _group_model.members_by_rank(hosts, lambda host: (member_vars.get(host) or {}).get('dspark_rank'))
    head = ordered[0]
    head_vars = member_vars.get(head) or {}
    world = as_int(head_vars.get('dspark_tensor_parallel_size'))
    if world is None:
        gpus = as_int(head_vars.get('dspark_gpus_per_node'))
        world = nnodes * (gpus if gpus else 1)
    if world < nnodes or world % nnodes:
        raise PlanError(['%s: dspark_tensor_parallel_size=%d is not a multiple of its %d nodes.'
                         % (group, world, nnodes)])
    per_node = world // nnodes
    members = []
    rank_nodes = {}
    for node_rank in range(nnodes):
        node = ordered[node_rank]
        ranks = list(range(node_rank * per_node, (node_rank + 1) * per_node))
        for rank in ranks:
            rank_nodes[rank] = node
        members.append({'node': node, 'node_rank': node_rank, 'ranks': ranks,
                        'container': containers.get(node) or container})
    return {
        'group': group,
        'head': head,
        'members': members,
        'world_size': world,
        'ranks_per_node': per_node,
        'expected_ranks': list(range(world)),
        'rank_nodes': rank_nodes,
        'api_port': _group_model.group_model(group, groups, member_vars)['api_port'],
    }


def log_key(member):
    """The logs_by_rank key of a member: its first global rank."""
    return member['ranks'][0]
