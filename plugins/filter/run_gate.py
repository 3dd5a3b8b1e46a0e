# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter shell around inventory_rules.run_gate (the rules and their tests live there)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: run_gate
short_description: Why a run has no serving node to work on
version_added: 0.1.0
author: dspark.cluster contributors (@dspark-cluster)
description:
  - Returns one message per reason the run would do nothing. The reasons are no host in the inventory (it did not
    parse or is empty), no group C(dspark), an empty C(dspark) group, or a C(--limit) that matches no host of
    C(dspark).
  - Each message names where, what and the fix. An empty list means the run has serving nodes.
  - Used by the first play of C(playbooks/preflight.yml).
options:
  _input:
    description: Ansible's C(groups).
    type: dict
    required: true
  play_hosts:
    description: The hosts of the run (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  limit:
    description: The run's C(--limit) (C(ansible_limit)).
    type: str
    default: ""
  sources:
    description: The inventory sources (C(ansible_inventory_sources)).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Stop when the run has no serving node
  ansible.builtin.fail:
    msg: "{{ problems | join('\n') }}"
  vars:
    problems: "{{ groups | dspark.cluster.run_gate(ansible_play_hosts_all, ansible_limit | default(''), ansible_inventory_sources) }}"
  when: problems | length > 0
"""

RETURN = r"""
_value:
  description: The problems, one line each; empty when the run has serving nodes.
  type: list
  elements: str
"""


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def run_gate(*args, **kwargs):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import inventory_rules
    return inventory_rules.run_gate(*args, **kwargs)


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
class FilterModule:
    """dspark.cluster.run_gate."""

    def filters(self):
        return {"run_gate": run_gate}
