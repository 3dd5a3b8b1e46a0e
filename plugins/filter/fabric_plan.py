# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: one part of the fabric role's plan from plugin_utils._fabric_plan."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: fabric_plan
short_description: One part of the fabric role's validation and plan
version_added: 0.1.0
description:
  - The fabric role's validation and planning in Python (C(plugins/plugin_utils/_fabric_plan.py)), one part per call.
    Internal to the role (its C(tasks/plan_*.yml)); the parts and their inputs may change without notice.
  - Runs on the controller and never connects to a node.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description:
      - The role's inputs (C(_fabric_plan_inputs)) with the group model of P(dspark.cluster.group_model#filter).
      - For C(files) and C(apply_script), the values the role decided before (its C(tasks/plan_files.yml) and C(handlers/main.yml)
        name them).
    type: dict
    required: true
  part:
    description: The part to compute.
    type: str
    required: true
    choices: [input_problems, links, pre_args, post_interfaces, backend, container, backend_problems, live_differs, rings,
              sysctls_differ, sysctl_keys, ipv6_sysctls, rank_env, ping_peers, bw_links, bandwidth, server_timeout, bw_results, bw_low,
              check_problems, check_result, report, summary, files, apply_script]
  hostvars:
    description: The play's C(hostvars), for what the members published (C(ping_peers), C(bandwidth), C(report)).
    type: raw
"""

EXAMPLES = r"""
- name: Stop on invalid fabric inputs
  ansible.builtin.assert:
    that: (_fabric_plan_inputs | dspark.cluster.fabric_plan('input_problems')) | length == 0
"""

RETURN = r"""
_value:
  description: The part asked for (a list, dict, bool or int; see C(plugins/plugin_utils/_fabric_plan.py)).
  type: raw
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dspark.cluster.plugins.plugin_utils import _fabric_plan, _group_model

_PLAIN = ("input_problems", "links", "pre_args", "post_interfaces", "backend", "container", "backend_problems", "live_differs", "rings",
          "sysctls_differ", "sysctl_keys", "ipv6_sysctls", "rank_env", "bw_links", "server_timeout", "bw_results", "bw_low",
          "check_problems", "check_result", "summary", "files", "apply_script")


def _published(hostvars, hosts, name, default=None):
    """What each host published with set_fact (``default`` where it did not)."""
    return {host: _group_model.read(hostvars or {}, host, name, default) for host in hosts}


def fabric_plan(inputs, part, hostvars=None):
    if part in _PLAIN:
        return getattr(_fabric_plan, part)(inputs)
    if part == "ping_peers":
        return _fabric_plan.ping_peers(inputs, _published(hostvars, inputs["model"]["peers"], "fabric_links", []))
    if part == "bandwidth":
        return _fabric_plan.bandwidth(inputs, _published(hostvars, inputs["model"]["members"], "_fabric_bw_plan", []))
    if part == "report":
        return _fabric_plan.report(inputs, _published(hostvars, inputs["model"]["members"], "fabric_check_result"))
    raise AnsibleFilterError("dspark.cluster.fabric_plan: unknown part %r" % (part,))


class FilterModule:
    def filters(self):
        return {"fabric_plan": fabric_plan}
