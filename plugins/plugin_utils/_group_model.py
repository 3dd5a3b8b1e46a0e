# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The model of a serving group, computed once for every role: members in rank order, head, workers, peers.

A serving group is one inventory group: the head (dspark_rank 0) and the workers (ranks 1..N-1). The roles
(fabric, nfs_export, checkpoint, serve), tp_ranks' plan and the preflight rules all order a group the same
way through ``members_by_rank``; the filter ``dspark.cluster.group_model`` hands the whole model to the roles.
Pure Python, no Ansible imports: ``hostvars`` is any mapping of host -> mapping of variables.
"""

from __future__ import annotations

from ansible_collections.dspark.cluster.plugins.plugin_utils import _inputs


# The group's name and the values that tell its members apart (each member's own): what group_model reads of every
# member. Written once in the vars of the parent group dspark, every node of the fleet reads the same value.
GROUP_VAR = "dspark_group"
MEMBER_VARS = ("dspark_rank", "dspark_fabric_address")


def as_int(value):
    """The integer an inventory value stands for (the collection's one reading: plugin_utils._inputs.as_int)."""
    return _inputs.as_int(value)


def membership_problem(name, known, member):
    """(problem, fix) when dspark_group ``name`` does not name an inventory group (``known``) that holds the host
    (``member``), else None. Preflight and the roles run alone both ask this."""
    if not isinstance(name, str) or not name:
        return ("is not set", "put the host in a serving group whose vars set dspark_group to that group's name")
    if not known:
        return ("names no inventory group", "set dspark_group to the name of the inventory group that holds this host's serving group")
    if not member:
        return ("names a group this host is not in", "add the host to group %s or correct dspark_group" % name)
    return None


def host_vars(hostvars, host):
    """The variables of one host ({} when hostvars lacks it). Each ``hostvars[host]`` costs Ansible a whole
    get_vars for that host: take it once per host and read every variable from it."""
    try:
        return hostvars[host] or {}
    except KeyError:
        return {}


def get(hvars, name, default=None):
    """One variable from a host's variables; missing or null is ``default`` (template errors propagate)."""
    try:
        value = hvars[name]
    except KeyError:
        return default
    return default if value is None else value


def read(hostvars, host, name, default=None):
    """One variable of one host; a missing host or variable is ``default``."""
    return get(host_vars(hostvars, host), name, default)


def rank_key(rank, index):
    """Sort key of a member: integer ranks in order, then members without a usable rank in inventory order."""
    number = as_int(rank)
    return (number is None, number if number is not None else 0, index)


def members_by_rank(hosts, rank_of):
    """The hosts in rank order (head first); ``rank_of(host)`` gives a host's dspark_rank as the inventory has it.

    The sort is stable: members with equal or unusable ranks keep their inventory order (the validators report them).
    """
    keyed = [(rank_key(rank_of(host), i), host) for i, host in enumerate(hosts or [])]
    return [host for dummy, host in sorted(keyed, key=lambda pair: pair[0])]


def group_model(group, groups, hostvars, host=None):
    """The model of serving group ``group`` (from the inventory's ``groups`` and ``hostvars``), seen from ``host``.

    A group the inventory does not hold is modelled as ``host`` alone (``known`` is false), so that a role's own
    validation can say what is wrong instead of failing on a missing key.
    """
    groups = groups or {}
    known = isinstance(group, str) and bool(group) and group in groups
    hosts = list(groups[group] or []) if known else ([host] if host is not None else [])
    views = {h: host_vars(hostvars, h) for h in hosts}
    ranks = {h: get(views[h], "dspark_rank") for h in hosts}
    members = members_by_rank(hosts, ranks.get)
    rank_hosts = {}
    for member in members:
        number = as_int(ranks[member])
        if number is not None:
            rank_hosts.setdefault(number, []).append(member)
    addresses = {m: str(get(views[m], "dspark_fabric_address", "")) for m in members}
    head = members[0] if members else None
    head_vars = views[head] if head is not None else {}
    model = {
        "group": group,
        "known": known,
        "members": members,
        "size": len(members),
        "head": head,
        "workers": members[1:],
        "ranks": {m: as_int(ranks[m]) for m in members},
        "rank_hosts": rank_hosts,
        "addresses": addresses,
        "master_address": addresses.get(head, "") if head is not None else "",
        # Group-wide values (preflight checks that the members agree), as the head has them.
        "master_port": as_int(get(head_vars, "dspark_master_port")),
        "api_port": as_int(get(head_vars, "dspark_api_port")),
    }
    if host is not None:
        rank = as_int(ranks[host] if host in ranks else read(hostvars, host, "dspark_rank"))
        model.update({
            "host": host,
            "rank": rank,
            "is_head": rank == 0,
            "peers": [m for m in members if m != host],
        })
    return model
