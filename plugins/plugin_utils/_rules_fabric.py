# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric role's input rules (private; registered in _rules_base.RULES, run through plugin_utils._role_rules).

Rules over plugin_utils._fabric_plan's findings; preflight says them through inventory_rules.check_fabric. Pure
Python, no Ansible imports.
"""

from __future__ import annotations

from ansible_collections.dspark.cluster.plugins.plugin_utils import _fabric_plan, _group_model, _inputs
from ansible_collections.dspark.cluster.plugins.plugin_utils._rules_base import rule

# Preflight runs these rules through inventory_rules.check_fabric (with its MTU limits; a finding on every member said
# once, for the group): covered_by keeps them out of its run of every role's rules.
FABRIC_COVERED = "inventory: fabric"


def fabric_inputs(member):
    """The fabric plan's inputs (plugin_utils._fabric_plan) of one member, as roles/fabric/tasks/plan_inputs.yml builds
    them: the inventory's values, the role's defaults, and the group model."""
    group = member.group
    views = {host: other.values for host, other in group.members.items()}
    model = _group_model.group_model(group.name, {group.name: list(group.members)}, views, member.host)
    inputs = {key: member[var] for key, var in _fabric_plan.INPUT_VARS.items()}
    for key in ("secondary_interface", "secondary_cidr", "secondary_address"):
        inputs[key] = inputs[key] if inputs[key] is not None else ""
    inputs["mtu"] = 9000 if inputs["mtu"] is None else inputs["mtu"]
    inputs.update(host=member.host, group=group.name, model=model)
    return inputs


@rule("fabric.group", ["dspark_fabric_mtu", "dspark_fabric_cidr", "dspark_fabric_address", "preflight_mtu_min",
                       "preflight_mtu_max"], covered_by=FABRIC_COVERED)
def _fabric_group(member):
    """The group's fabric: dspark_fabric_mtu within preflight_mtu_min..preflight_mtu_max, dspark_fabric_cidr an IPv4
    network, this member's dspark_fabric_address an address of it, its own in the group (_fabric_plan.group_findings)."""
    low = _inputs.as_int(member["preflight_mtu_min"])
    high = _inputs.as_int(member["preflight_mtu_max"])
    found = _fabric_plan.group_findings(fabric_inputs(member), _fabric_plan.MTU_MIN if low is None else low,
                                        _fabric_plan.MTU_MAX if high is None else high)
    return [finding[1:] for finding in found if finding[0] == member.host or str(finding[0]).startswith("group ")]


@rule("fabric.node", list(_fabric_plan.INPUT_VARS.values()), covered_by=FABRIC_COVERED)
def _fabric_node(member):
    """This node's fabric port: dspark_fabric_interface a Linux interface name, dspark_fabric_hca in NCCL_IB_HCA syntax,
    the optional second interface in its own subnet (_fabric_plan.node_findings)."""
    return [finding[1:] for finding in _fabric_plan.node_findings(fabric_inputs(member))]


@rule("fabric.management", ["dspark_fabric_address", "dspark_mgmt_address", "ansible_host"], covered_by=FABRIC_COVERED)
def _fabric_management(member):
    """dspark_fabric_address is not the management address (dspark_mgmt_address, else ansible_host, else the host's
    name): the fabric is the ConnectX link's own network."""
    return [finding[1:] for finding in management_findings(member.host, member.raw("dspark_fabric_address"),
                                                           member.raw("dspark_mgmt_address"), member.raw("ansible_host"))]


def management_findings(host, address, mgmt_address, ansible_host):
    """[(host, variable, value, problem, fix)] when the fabric address equals the management address."""
    mgmt = mgmt_address or ansible_host or host
    if address is None or not str(address).strip() or str(mgmt).strip() != str(address).strip():
        return []
    var = "dspark_mgmt_address" if mgmt_address else "ansible_host"
    return [(host, "dspark_fabric_address", address, "equals the management address (%s=%s)" % (var, mgmt),
             "the fabric address is the ConnectX link's own address; Ansible and the router use the management network")]
