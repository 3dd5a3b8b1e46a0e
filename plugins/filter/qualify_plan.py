# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: one part of the qualify role's plan from plugin_utils._qualify_plan."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: qualify_plan
short_description: One part of the qualify role's plan and its group checks
version_added: 0.2.0
description:
  - The qualify role's planning in Python (C(plugins/plugin_utils/_qualify_plan.py)), one part per call. Internal to
    the role (its C(tasks/main.yml)); the parts and their inputs may change without notice.
  - Runs on the controller and never connects to a node.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description:
      - The part's inputs (a dict; see each function of C(_qualify_plan)). The role's variables a part reads are
        named as the role names them (C(VARIABLES) in C(_qualify_plan)), as the lookup C(dspark.cluster.role_vars)
        with C(reads=qualify_<part>) gives them.
    type: raw
    required: true
  part:
    description: The part to compute.
    type: str
    required: true
    choices: [disks, links, read_interfaces, ping_interfaces, unaddressed, ports, addressed, peers, fabric_checks,
              group_checks, failures, result, rdma_port, gid_checks, bandwidth_floor, bandwidth_checks, bandwidth_plan,
              bandwidth_peer, rdma_skip, manifest_bytes, gpu_checks, rdma_checks, memory_shares]
"""

EXAMPLES = r"""
- name: The disks this node checks
  ansible.builtin.debug:
    msg: >-
      {{ lookup('dspark.cluster.role_vars', 'qualify', reads='qualify_disks') | combine({'hf_cache': dspark_hf_cache})
         | dspark.cluster.qualify_plan('disks') }}
"""

RETURN = r"""
_value:
  description: The part asked for (see C(plugins/plugin_utils/_qualify_plan.py)).
  type: raw
"""

from ansible.errors import AnsibleFilterError


_PARTS = ("disks", "links", "read_interfaces", "ping_interfaces", "unaddressed", "ports", "addressed", "peers",
          "fabric_checks", "group_checks", "failures", "result", "rdma_port", "gid_checks", "bandwidth_floor",
          "bandwidth_checks", "bandwidth_plan", "bandwidth_peer", "rdma_skip", "manifest_bytes", "gpu_checks",
          "rdma_checks", "memory_shares")


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def qualify_plan(value, part):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _qualify_plan
    if part not in _PARTS:
        raise AnsibleFilterError("dspark.cluster.qualify_plan: unknown part %r" % (part,))
    return getattr(_qualify_plan, part)(value)


class FilterModule:
    def filters(self):
        return {"qualify_plan": qualify_plan}
