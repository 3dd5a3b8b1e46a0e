# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure validation rules for a dspark.cluster inventory (controller side, no Ansible imports).

A serving group is one inventory group: a head (dspark_rank 0) and workers (ranks 1..N-1). Every
rule returns findings that name the host or group, the variable, the bad value and the fix, so that
the preflight role can stop a run before anything on a node changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ansible_collections.dspark.cluster.plugins.plugin_utils import _findings, _group_engines, _group_model, _inputs, _role_rules

CHECKPOINT_MODES = _role_rules.CHECKPOINT_MODES

# Values every member of a serving group must agree on: they describe the group, not the node.
GROUP_WIDE_VARS = (
    "dspark_fabric_cidr",
    "dspark_fabric_mtu",
    "dspark_gpus_per_node",
    "dspark_tensor_parallel_size",
    "dspark_api_port",
    "dspark_master_port",
    "dspark_image",
    "dspark_model",
    "dspark_model_revision",
    "dspark_checkpoint_mode",
)

# Optional group facts: left out on every member is fine; set, every member must agree as on GROUP_WIDE_VARS.
# dspark_sidecars: the group's sidecar engines (issue #46; the serve rule serve.sidecars reads them).
OPTIONAL_GROUP_VARS = (_group_engines.VAR,)

# Every dspark_ variable of the inventory contract (README "Inventory"): per node, group-wide and optional.
NODE_VARS = ("dspark_group", "dspark_rank", "dspark_fabric_address", "dspark_fabric_interface")
OPTIONAL_VARS = ("dspark_fabric_hca", "dspark_has_gpu", "dspark_hf_cache", "dspark_mgmt_address") + OPTIONAL_GROUP_VARS
CONTRACT_VARS = NODE_VARS + GROUP_WIDE_VARS + OPTIONAL_VARS

# Docker reference grammar (distribution/reference), reduced to what an operator writes.
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?"
_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_IMAGE_RE = re.compile(
    r"^(?P<name>" + _DOMAIN + _COMPONENT + r"(?:/" + _COMPONENT + r")*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
_MODEL_RE = _group_engines.MODEL_RE


@dataclass
class Settings:
    """Limits that come from the preflight role's variables."""

    mtu_min: int = 1500
    mtu_max: int = 9216
    port_min: int = 1024
    port_max: int = 65535
    require_image_digest: bool = False
    require_pinned_revision: bool = False


@dataclass
class Findings:
    errors: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    def error(self, where, var, value, problem, fix):
        self.errors.append(_message(where, var, value, problem, fix))

    def warn(self, where, var, value, problem, fix):
        self.warnings.append(_message(where, var, value, problem, fix))


_message = message = _findings.message


def _as_int(value):
    """The collection's one integer reading (plugin_utils._inputs.as_int)."""
    return _inputs.as_int(value)


def check_image(ref, settings, findings, where):
    var = "dspark_image"
    if not isinstance(ref, str) or not ref.strip():
        findings.error(where, var, ref, "is empty", "set the serving image, e.g. ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:<64 hex>")
        return
    match = _IMAGE_RE.match(ref)
    if not match:
        findings.error(where, var, ref, "is not a valid image reference",
                       "write it as registry/name[:tag][@sha256:<64 lower-case hex>]")
        return
    if not match.group("digest"):
        report = findings.error if settings.require_image_digest else findings.warn
        report(where, var, ref, "is not pinned by digest, so nodes may run different builds",
               "append @sha256:<digest> (docker buildx imagetools inspect <ref> prints it)")


def check_model(model, findings, where):
    """The Hugging Face id (its revision is the checkpoint role's rule, plugin_utils._role_rules revision_problem)."""
    if not isinstance(model, str) or not _MODEL_RE.match(model):
        findings.error(where, "dspark_model", model, "is not a Hugging Face model id",
                       "write it as organisation/name, e.g. deepseek-ai/DeepSeek-V4-Flash-0731")


def check_port(var, value, settings, findings, where):
    port = _as_int(value)
    if port is None or not settings.port_min <= port <= settings.port_max:
        findings.error(where, var, value, "is not a port in %d-%d" % (settings.port_min, settings.port_max),
                       "choose a free TCP port in %d-%d" % (settings.port_min, settings.port_max))
        return None
    return port


def check_group_values(name, values, settings, findings):
    """Rules on the group-wide values (already checked to agree across members)."""
    where = "group %s" % name
    api = check_port("dspark_api_port", values.get("dspark_api_port"), settings, findings, where)
    master = check_port("dspark_master_port", values.get("dspark_master_port"), settings, findings, where)
    if api is not None and api == master:
        findings.error(where, "dspark_master_port", master, "equals dspark_api_port; both listen on the head",
                       "give the rendezvous (master) port and the API port different values, e.g. 25000 and 8888")
    check_image(values.get("dspark_image"), settings, findings, where)
    check_model(values.get("dspark_model"), findings, where)


def check_tensor_parallel(name, values, size, findings):
    where = "group %s" % name
    gpus = _as_int(values.get("dspark_gpus_per_node"))
    if gpus is None or gpus < 1:
        findings.error(where, "dspark_gpus_per_node", values.get("dspark_gpus_per_node"), "is not a positive integer",
                       "set the number of GPUs per node (1 on a DGX Spark)")
        return
    tp = _as_int(values.get("dspark_tensor_parallel_size"))
    if tp != size * gpus:
        findings.error(where, "dspark_tensor_parallel_size", values.get("dspark_tensor_parallel_size"),
                       "does not equal nodes x GPUs per node (%d x %d = %d)" % (size, gpus, size * gpus),
                       "set dspark_tensor_parallel_size: %d, or add/remove nodes in the group" % (size * gpus))


def check_fabric(name, members, findings, settings):
    """The fabric role's input rules (plugin_utils._role_rules fabric.*, the ones the role runs at its start through
    role_inputs) for preflight: with preflight's MTU limits, and a finding on every member said once, for the group."""
    values = {node["host"]: dict(node, preflight_mtu_min=settings.mtu_min, preflight_mtu_max=settings.mtu_max) for node in members}
    hosts_of, order = {}, []
    for host, var, value, problem, fix in _role_rules.check_group(name, list(values), values.get, {}, roles=["fabric"]):
        key = (var, repr(value), problem, fix)
        if key not in hosts_of:
            hosts_of[key] = (value, [])
            order.append(key)
        hosts_of[key][1].append(host)
    for key in order:
        var, dummy, problem, fix = key
        value, hosts = hosts_of[key]
        if len(members) > 1 and len(hosts) == len(members):  # the same on every member: a group value, said once
            findings.error("group %s" % name, var, value, problem, fix)
        else:
            for host in hosts:
                findings.error(host, var, value, problem, fix)


def check_ranks(name, members, findings):
    """One head (rank 0), contiguous ranks 0..N-1, at least one worker."""
    where = "group %s" % name
    ranks = {}
    for node in members:
        rank = _as_int(node.get("dspark_rank"))
        if rank is None or rank < 0:
            findings.error(node["host"], "dspark_rank", node.get("dspark_rank"), "is not a non-negative integer",
                           "set 0 on the head and 1..N-1 on the workers")
            continue
        ranks.setdefault(rank, []).append(node["host"])
    heads = ranks.get(0, [])
    if len(heads) > 1:
        findings.error(where, "dspark_rank", 0, "is set on %d hosts (%s): a group has exactly one head"
                       % (len(heads), ", ".join(sorted(heads))), "keep dspark_rank: 0 on one host only")
    elif not heads and ranks:
        findings.error(where, "dspark_rank", sorted(ranks), "has no head", "set dspark_rank: 0 on the head node")
    for rank, hosts in sorted(ranks.items()):
        if rank and len(hosts) > 1:
            findings.error(where, "dspark_rank", rank, "is set on %s" % ", ".join(sorted(hosts)),
                           "give every worker its own rank")
    if len(members) < 2:
        findings.error(where, "members", [n["host"] for n in members],
                       "has no worker: a serving group needs a head and at least one worker",
                       "add the worker host(s) to inventory group %s with dspark_rank 1..N-1" % name)
    expected = list(range(len(members)))
    if ranks and sorted(ranks) != expected and all(len(h) == 1 for h in ranks.values()):
        findings.error(where, "dspark_rank", sorted(ranks), "is not contiguous from 0",
                       "number the %d nodes 0..%d" % (len(members), len(members) - 1))


def _agreed(var, value):
    """What members must agree on: an optional group fact left out reads as its empty value (no sidecars: unset or [])."""
    return [] if value is None and var in OPTIONAL_GROUP_VARS else value


def group_values(name, members, findings):
    """The group-wide values (and the optional group facts), after checking that every member sees the same one."""
    values = {}
    for var in GROUP_WIDE_VARS + OPTIONAL_GROUP_VARS:
        seen = {}
        for node in members:
            seen.setdefault(repr(_agreed(var, node.get(var))), []).append(node["host"])
        if len(seen) > 1:
            detail = "; ".join("%s on %s" % (v, ", ".join(h)) for v, h in sorted(seen.items()))
            findings.error("group %s" % name, var, "differs", "between members (%s)" % detail,
                           "set %s once in the group's vars, not per host" % var)
        values[var] = members[0].get(var) if members else None
    return values


PARENT = "dspark"


# The facts that belong to one serving group or one member, never to the fleet (the group model reads them:
# plugin_utils._group_model): set in the vars of the parent group dspark, every node reads the same value. The
# group-wide values (GROUP_WIDE_VARS) are fleet defaults there, legitimately (README "Inventory contract").
# dspark_mgmt_address: where the router reaches a head; the same on every node sends each group's traffic to one host.
NOT_FLEET_WIDE = (_group_model.GROUP_VAR,) + _group_model.MEMBER_VARS + ("dspark_mgmt_address",)
_PARENT_FIXES = {
    "dspark_group": "remove it there and set dspark_group in each serving group's own vars (group_vars/<group>.yml, or "
                    "vars: of the group in hosts.yml) to that group's name",
    "dspark_rank": "remove it there and set dspark_rank on each host (0 on the head, 1..N-1 on the workers): host_vars/<host>.yml "
                   "or the host's line in hosts.yml",
    "dspark_fabric_address": "remove it there and set each node's own dspark_fabric_address, inside its group's "
                             "dspark_fabric_cidr: host_vars/<host>.yml or the host's line in hosts.yml",
    "dspark_mgmt_address": "remove it there and set each node's own management address (where the router reaches its "
                           "head): host_vars/<host>.yml or the host's line in hosts.yml",
}


def parent_group_problem(nodes, groups, findings):
    """A fact that belongs to a serving group or a member (NOT_FLEET_WIDE) set in the vars of the parent group dspark:
    one message for each such variable, naming that mistake (True), instead of one about every rank and address of the
    groups it breaks."""
    parent = [host for host in groups.get(PARENT) or [] if host in nodes]
    if len(parent) < 2:
        return False
    found = False
    for var in NOT_FLEET_WIDE:
        values = {repr(nodes[host].get(var)) for host in parent}
        value = nodes[parent[0]].get(var)
        if len(values) != 1 or value is None:
            continue
        if var == _group_model.GROUP_VAR:
            if not isinstance(value, str):
                continue
            outside = [host for host in parent if host not in (groups.get(value) or [])]
            if value != PARENT and not outside:
                continue  # one serving group, named once for all of it: harmless
            detail = "names the parent group itself" if value == PARENT else \
                "is the same on every host of %s, also on %s outside group %s" % (PARENT, ", ".join(sorted(outside)), value)
        elif not (found or len({repr(nodes[host].get(_group_model.GROUP_VAR)) for host in parent}) > 1):
            continue  # the parent holds one serving group: its own rank rules say what is wrong
        else:
            detail = "is the same on all %d hosts of %s, but each member of a serving group has its own" % (len(parent), PARENT)
        findings.error("group %s" % PARENT, var, value, "%s: it is set in the vars of the parent group %s "
                       "(group_vars/%s/), so every node reads it" % (detail, PARENT, PARENT), _PARENT_FIXES[var])
        found = True
    return found


def validate(nodes, groups, play_hosts, settings=None):
    """Validate every serving group that a host of the play belongs to.

    nodes: host -> dict of that host's dspark_* variables plus 'group_names'.
    groups: inventory group -> list of hosts (Ansible's `groups`).
    play_hosts: the hosts this run targets.
    Returns Findings plus, for the action plugin, a summary of the groups.
    """
    settings = settings or Settings()
    findings = Findings()
    if parent_group_problem(nodes, groups, findings):
        return findings, {}
    group_names = {}
    for host in play_hosts:
        name = nodes.get(host, {}).get("dspark_group")
        known = isinstance(name, str) and name in groups
        found = _group_model.membership_problem(name, known, known and host in groups[name])
        if found:
            findings.error(host, "dspark_group", name, *found)
        else:
            group_names.setdefault(name, None)
    known = {n.get("dspark_group") for n in nodes.values() if isinstance(n.get("dspark_group"), str)}
    for host in sorted(set(play_hosts)):
        mine = sorted(g for g in nodes.get(host, {}).get("group_names", []) if g in known)
        if len(mine) > 1:
            findings.error(host, "group_names", mine, "puts the host in %d serving groups" % len(mine),
                           "a node serves in exactly one group: remove it from all but one of %s" % ", ".join(mine))
    summary = {}
    for name in sorted(group_names):
        members = [dict(nodes.get(h, {}), host=h) for h in groups[name]]
        outside = sorted(h for h in groups[name] if h not in play_hosts)
        if outside:
            findings.error("group %s" % name, "limit", sorted(set(play_hosts) & set(groups[name])),
                           "leaves out %s; a serving group changes as one unit" % ", ".join(outside),
                           "run on the whole group (e.g. --limit %s) or fix the inventory" % name)
        check_ranks(name, members, findings)
        values = group_values(name, members, findings)
        check_group_values(name, values, settings, findings)
        check_tensor_parallel(name, values, len(members), findings)
        check_fabric(name, members, findings, settings)
        ordered = _group_model.members_by_rank(groups[name], lambda host: nodes.get(host, {}).get("dspark_rank"))
        summary[name] = {
            "head": ordered[0] if ordered else None,
            "members": ordered,
            "world_size": len(members),
        }
    return findings, summary


_EXAMPLE = "(see inventories/example/hosts.yml)"


def run_gate(groups, play_hosts, limit="", sources=()):
    """Why the run has no serving node to work on, as message lines ([] when it has one).

    Ansible only warns when an inventory does not parse, and skips a play whose pattern matches nothing with
    exit 0: without this gate such a run would do nothing and "succeed".
    groups: Ansible's `groups`; play_hosts: the hosts of the run (ansible_play_hosts_all); limit: ansible_limit;
    sources: ansible_inventory_sources.
    """
    where = "inventory %s" % ", ".join(str(source) for source in sources or ())
    if not groups.get("all"):
        return ["%s: hosts=[] has no host: it did not parse (see the warnings above) or is empty. Fix: correct the error "
                "the warnings name, or pass the inventory file with -i %s" % (where, _EXAMPLE)]
    if "dspark" not in groups:
        names = sorted(name for name in groups if name not in ("all", "ungrouped"))
        return ["%s: groups=%s has no group dspark. Fix: put every serving group under all: children: dspark: children: %s"
                % (where, names, _EXAMPLE)]
    serving = list(groups["dspark"])
    if not serving:
        return ["group dspark: hosts=[] is empty, so there is nothing to provision. Fix: add the serving groups and their "
                "hosts under dspark: children: %s" % _EXAMPLE]
    if not set(serving) & set(play_hosts):
        return ["limit: --limit %s matches no host of group dspark (it matches %s). Fix: limit the run to serving groups "
                "or their hosts, e.g. --limit %s" % (limit or "", ", ".join(play_hosts), serving[0])]
    return []
