# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: one part of the fabric role's plan from plugin_utils._fabric_plan."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: fabric_plan
short_description: One phase of the fabric role's plan
version_added: 0.1.0
description:
  - The fabric role's planning in Python (C(plugins/plugin_utils/_fabric_plan.py)), one structure per phase of the role
    (its C(tasks/plan_<phase>.yml) set it as C(_fabric_phase_<phase>), or its C(vars/main.yml) renders it where it is
    used). Internal to the role; the phases and their keys may change without notice.
  - Runs on the controller and never connects to a node.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description:
      - The role's inputs (C(_fabric_plan_inputs)) with the group model of P(dspark.cluster.group_model#filter) and the
        node reads made by then.
      - For C(files) and C(apply_script), the values the role decided before (its C(vars/main.yml) and
        C(handlers/main.yml) name them).
    type: dict
    required: true
  phase:
    description:
      - C(inputs) (links, pre_args, sysctl_keys), C(read) (backend, container, backend_problems, live_differs, rings,
        sysctls_differ), C(gid) (rank_env, bw_links), C(checks) (post_interfaces, ping_peers, bandwidth,
        server_timeout), C(result) (bw_results, bw_low, check_problems, check_result), C(report) (report, summary);
        C(input_problems), C(files) and C(apply_script) return one value each.
    type: str
    required: true
    choices: [inputs, read, gid, checks, result, report, input_problems, files, apply_script]
  hostvars:
    description: The play's C(hostvars), for what the members published (C(checks), C(report)).
    type: raw
"""

EXAMPLES = r"""
- name: Plan from what the node reads
  ansible.builtin.set_fact:
    _fabric_phase_read: "{{ _fabric_plan_inputs | combine({'pre': _fabric_pre}) | dspark.cluster.fabric_plan('read') }}"
"""

RETURN = r"""
_value:
  description: The phase's structure (a dict), or the one value of C(input_problems), C(files) and C(apply_script).
  type: raw
"""

from ansible.errors import AnsibleFilterError


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def _published(hostvars, inputs, wanted):
    """{fact: {host: its value}} of what the peers or members published with set_fact (None where they did not)."""
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_model
    out = {}
    for name, whose in wanted:
        hosts = inputs["model"]["peers"] if whose == "peers" else inputs["model"]["members"]
        out[name] = {host: _group_model.read(hostvars or {}, host, name) for host in hosts}
    return out


def fabric_plan(inputs, phase, hostvars=None):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _fabric_plan
    if phase not in _fabric_plan.PHASES:
        raise AnsibleFilterError("dspark.cluster.fabric_plan: unknown phase %r (one of %s)" % (
            phase, ", ".join(sorted(_fabric_plan.PHASES))))
    function, wanted = _fabric_plan.PHASES[phase]
    return function(inputs, _published(hostvars, inputs, wanted))


class FilterModule:
    def filters(self):
        return {"fabric_plan": fabric_plan}
