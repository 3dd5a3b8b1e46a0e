# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The machinery of the roles' input rules (private; issue #25): the registry, a member's effective values, running them.

The rules themselves live per role (plugin_utils._rules_<role>), each registered in ``RULES`` with ``@rule``;
plugin_utils._role_rules imports them all and is the one entry point its callers use. A rule reads one member's
effective values (what the inventory, group_vars, host_vars or -e set, else the role's default) and those of its
group, and returns ``(variable, value, problem, fix)`` tuples about that member; the callers add the host and word
them as one line (``_findings.message``). A secret's value is never part of a result. A rule may read the node's
facts (``NODE_FACTS``: the role's play gathers them, preflight has them only from a fact cache) and, on the
controller, a file an input names (docker_runtime's image archive). Pure Python, no Ansible imports.
"""

from __future__ import annotations

import os
import re
from collections import namedtuple

import yaml

from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_model, _inputs, _router_plan, _spec_ranges

# libyaml's safe loader where PyYAML has it (about 8 times faster: the specs are read by every forked worker).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Rule = namedtuple("Rule", "name role variables check doc covered_by")
RULES = []
# Roles whose rules read a host outside the serving groups (the router, group dspark_router): check_router runs them.
ROUTER_ROLES = ("router",)
# Variables a rule may read beside the role variables and the inventory contract: Ansible's own, of the node.
NODE_FACTS = ("ansible_facts", "ansible_host")
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SECRET_NAME_RE = re.compile(r"api_?keys?|token|passw|secret|proxy", re.IGNORECASE)


class Hidden:
    """Stands for a secret's value in a message (issue #13): the problem is named, the value is not."""

    def __repr__(self):
        return "<not shown: secret>"

    __str__ = __repr__


HIDDEN = Hidden()


class TemplateFailure:
    """A variable whose value could not be templated: its raw text and the error."""

    def __init__(self, raw, error):
        self.raw = raw
        self.error = error

    def __repr__(self):
        return "TemplateFailure(%r, %r)" % (self.raw, self.error)


def is_secret(name, spec=None):
    """no_log in the option's spec, or a name that says key, token, password, secret or proxy."""
    return bool((spec or {}).get("no_log")) or bool(_SECRET_NAME_RE.search(name))


def rule(name, variables, covered_by=None):
    """Register a rule of role ``name.split('.')[0]`` over ``variables`` (skipped when one failed to template).

    covered_by: in preflight another rule (the inventory contract's or the fabric's) reports the same input already:
    the rule then runs only in the role's own check, so that preflight says every mistake once.
    """
    def register(check):
        RULES.append(Rule(name, name.split(".")[0], tuple(variables), check, (check.__doc__ or "").strip(), covered_by))
        return check
    return register


# -- a member's effective values ---------------------------------------------------------------------------------

class Member:
    """One member of a serving group: its effective inputs and the group's other members."""

    def __init__(self, host, group, values, specs):
        self.host = host
        self.group = group
        self.values = values
        self.specs = specs

    def raw(self, var):
        return self.values.get(var)

    def __getitem__(self, var):
        value = self.values.get(var)
        if value is not None:
            return value
        if var in _DERIVED:
            return _DERIVED[var](self)
        return (self.specs.get(var) or {}).get("default")

    def failed(self, var):
        return isinstance(self.values.get(var), TemplateFailure)

    def member(self, host):
        return self.group.members[host]


class Group:
    """A serving group: its name, its hosts in rank order and each one's Member view."""

    def __init__(self, name, hosts, values_of, specs, running=None):
        self.name = name
        self.running = running
        self.members = {host: Member(host, self, values_of(host), specs) for host in hosts}
        self.ordered = _group_model.members_by_rank(list(hosts), lambda h: self.members[h].raw("dspark_rank"))
        self.rank_hosts = {}
        for host in hosts:
            rank = _inputs.as_int(self.members[host].raw("dspark_rank"))
            if rank is not None:
                self.rank_hosts.setdefault(rank, []).append(host)

    def host_of_rank(self, value):
        """The one member whose dspark_rank is ``value``, else None (none or several)."""
        rank = _inputs.as_int(value)
        hosts = self.rank_hosts.get(rank, []) if rank is not None else []
        return hosts[0] if len(hosts) == 1 else None

    def ranks_text(self):
        ranks = sorted(self.rank_hosts)
        if ranks and ranks == list(range(len(ranks))):
            return "ranks 0..%d" % ranks[-1]
        return "ranks %s" % ", ".join(str(r) for r in ranks)

    def address(self, host):
        value = self.members[host].raw("dspark_fabric_address")
        return "" if value is None or isinstance(value, TemplateFailure) else str(value).strip()


def _export_rank(member):
    value = member["checkpoint_source_rank"]
    return 1 if value is None else value


def _export_clients(member):
    server = member.group.host_of_rank(member["nfs_export_rank"])
    return [member.group.address(h) for h in member.group.ordered if h != server and member.group.address(h)]


def _controller_trust_dir(dummy_member):
    # The controller's configuration, read only when the default is asked for.
    from ansible import constants  # pylint: disable=import-outside-toplevel
    return "%s/dspark/checkpoint-trust" % constants.config.get_config_value("ANSIBLE_HOME")


# Role defaults that are templates (roles/*/defaults/main.yml): what they render to, in Python.
_DERIVED = {
    "checkpoint_trust_dir": _controller_trust_dir,
    "nfs_export_rank": _export_rank,
    "nfs_export_clients": _export_clients,
    "serve_image": lambda member: member["dspark_image"],
}


# -- running them ------------------------------------------------------------------------------------------------

def check_member(member, roles=None, preflight=False):
    """[(host, variable, value, problem, fix)] of every rule of ``roles`` (all when None) on one member."""
    out = []
    router = isinstance(member, RouterHost)
    for item in RULES:
        if roles is not None and item.role not in roles:
            continue
        if (item.role in ROUTER_ROLES) != router:
            continue
        if preflight and item.covered_by:
            continue
        if any(member.failed(var) for var in item.variables):
            continue  # reported as a variable that cannot be templated
        for var, value, problem, fix in item.check(member) or ():
            shown = HIDDEN if value is not None and is_secret(var, member.specs.get(var)) else value
            out.append((member.host, var, shown, problem, fix))
    return out


def check_group(name, hosts, values_of, specs, roles=None, preflight=False, only=None, running=None):
    """Every rule on every member of a serving group (``only``: the members to report on; ``running``: the role that
    asks at its start, whose rules then apply whatever the group's mode)."""
    group = Group(name, hosts, values_of, specs, running)
    out = []
    for host in group.ordered:
        if only is None or host in only:
            out.extend(check_member(group.members[host], roles, preflight))
    return out


def check_router(host, values, specs, groups, hostvars):
    """[(host, variable, value, problem, fix)] of the router's rules on one host of group dspark_router: its own
    values (``values``) and the heads of the serving groups it routes to (read from ``hostvars``)."""
    return check_member(RouterHost(host, values, specs, groups, hostvars))


# -- shared input classes ----------------------------------------------------------------------------------------

# A path serve bind-mounts (`source:target`) or names a file by: absolute, no colon, no white space or control.
MOUNT_PATH_RE = re.compile(r"^/[^:\s\x00-\x1f\x7f]*\Z")


# -- ranges (plugin_utils._spec_ranges) --------------------------------------------------------------------------

def ranges(member, variables):
    """(var, value, problem, fix) for each of ``variables`` outside its range in _spec_ranges.RANGES (a variable
    without one is skipped); a value that is no number is the type rule's to report."""
    out = []
    for var in variables:
        if var not in _spec_ranges.RANGES:
            continue
        low, high, low_open = _spec_ranges.RANGES[var]
        number = _inputs.as_float if _spec_ranges.is_float(var) else _inputs.as_int
        value = member[var]
        found = _inputs.range_problem(value, low, high, low_open, (member.specs.get(var) or {}).get("default"), number)
        if found:
            out.append((var, value) + found)
    return out


# -- router hosts (group dspark_router, outside the serving groups) ----------------------------------------------

class RouterHost:
    """A router host: its effective inputs, and the fleet as the router sees it (plugin_utils._router_plan)."""

    def __init__(self, host, values, specs, groups, hostvars):
        self.host = host
        self.values = values
        self.specs = specs
        self.groups = groups or {}
        self.hostvars = hostvars
        self._plan = None

    def raw(self, var):
        return self.values.get(var)

    def __getitem__(self, var):
        value = self.values.get(var)
        if value is not None or var == "router_groups":  # router_groups unset: every serving group
            return value
        return (self.specs.get(var) or {}).get("default")

    def failed(self, var):
        return isinstance(self.values.get(var), TemplateFailure)

    @property
    def plan(self):
        if self._plan is None:
            routed = self["router_groups"]
            self._plan = _router_plan.plan(self.groups, self.hostvars, routed if isinstance(routed, (list, tuple)) else None,
                                           str(self["router_served_model_name"] or ""))
        return self._plan
