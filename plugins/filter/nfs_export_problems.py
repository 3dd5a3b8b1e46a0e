# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: the nfs_export role's network rules from plugin_utils._nfs_plan (preflight runs the same ones)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: nfs_export_problems
short_description: The nfs_export role's network rules, as one-line problems
version_added: 0.1.0
description:
  - Checks that every C(nfs_export_clients) entry is an IPv4 address or network inside the group's fabric network
    (C(dspark_fabric_cidr)); C(0.0.0.0/0), C(*), netgroups, host names, IPv6 and networks wider than or outside the
    fabric network are refused. Checks that the exporting node's fabric address (nfsd's bind address) is an address
    of that network.
  - Internal to the role (C(roles/nfs_export/tasks/validate.yml)); preflight runs the same rules
    (C(plugins/plugin_utils/_nfs_plan.py)).
  - Runs on the controller and never connects to a node.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The exporting node's name (where the problems are reported).
    type: str
    required: true
  clients:
    description: C(nfs_export_clients).
    type: list
    elements: str
    required: true
  cidr:
    description: C(dspark_fabric_cidr).
    type: str
    required: true
  bind_address:
    description: The exporting node's C(dspark_fabric_address).
    type: str
    required: true
  peer_addresses:
    description: The other members' fabric addresses (named in the fix).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Check the clients and the bind address
  ansible.builtin.assert:
    that: _problems | length == 0
    fail_msg: "{{ _problems | join('; ') }}"
  vars:
    _problems: "{{ inventory_hostname | dspark.cluster.nfs_export_problems(nfs_export_clients, dspark_fabric_cidr, dspark_fabric_address) }}"
"""

RETURN = r"""
_value:
  description: "One line per problem, C(where: variable=value problem. Fix: fix); empty when the inputs are valid."
  type: list
  elements: str
"""


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def nfs_export_problems(where, clients, cidr, bind_address, peer_addresses=()):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _findings, _nfs_plan
    return [_findings.message(*found) for found in _nfs_plan.problems(where, clients, cidr, bind_address, peer_addresses or ())]


class FilterModule:
    def filters(self):
        return {"nfs_export_problems": nfs_export_problems}
