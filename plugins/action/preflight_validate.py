# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: gathers the dspark_* variables of every node and hands them to inventory_rules."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.dspark.cluster.plugins.plugin_utils import inventory_rules

NODE_VARS = ("dspark_group", "dspark_rank", "dspark_fabric_address", "dspark_fabric_interface") + inventory_rules.GROUP_WIDE_VARS

ARGUMENT_SPEC = {
    "play_hosts": {"type": "list", "elements": "str"},
    "mtu_min": {"type": "int", "default": 1500},
    "mtu_max": {"type": "int", "default": 9216},
    "port_min": {"type": "int", "default": 1024},
    "port_max": {"type": "int", "default": 65535},
    "require_image_digest": {"type": "bool", "default": False},
    "require_pinned_revision": {"type": "bool", "default": False},
}


def collect_nodes(hostvars, hosts):
    """host -> {var: value} for the variables the rules read (templated by HostVars on access)."""
    nodes = {}
    for host in hosts:
        hv = hostvars.get(host) or {}
        node = {var: hv.get(var) for var in NODE_VARS}
        node["group_names"] = list(hv.get("group_names") or [])
        nodes[host] = node
    return nodes


class ActionModule(ActionBase):
    """Runs on the controller only; never contacts a node."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        play_hosts = args["play_hosts"] or list(task_vars.get("ansible_play_hosts_all") or [])
        groups = task_vars.get("groups") or {}
        hostvars = task_vars.get("hostvars") or {}

        # First pass finds the serving groups; their members (even outside --limit) are read too.
        first = collect_nodes(hostvars, play_hosts)
        wanted = set(play_hosts)
        for node in first.values():
            name = node.get("dspark_group")
            if isinstance(name, str):
                wanted.update(groups.get(name) or [])
        nodes = collect_nodes(hostvars, sorted(wanted))

        settings = inventory_rules.Settings(
            mtu_min=args["mtu_min"], mtu_max=args["mtu_max"], port_min=args["port_min"], port_max=args["port_max"],
            require_image_digest=args["require_image_digest"], require_pinned_revision=args["require_pinned_revision"],
        )
        findings, summary = inventory_rules.validate(nodes, groups, play_hosts, settings)
        result.update(changed=False, groups=summary, errors=findings.errors)
        if findings.warnings:
            result["warnings"] = findings.warnings
        if findings.errors:
            result["failed"] = True
            result["msg"] = "Inventory validation failed (%d problem%s), nothing was changed:\n- %s" % (
                len(findings.errors), "" if len(findings.errors) == 1 else "s", "\n- ".join(findings.errors))
        else:
            result["msg"] = "%d serving group(s) valid: %s" % (len(summary), ", ".join(sorted(summary)))
        return result
