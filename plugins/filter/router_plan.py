# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: the router's plan from plugin_utils._router_plan."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: router_plan
short_description: The router's serving groups, their heads and one backend server per group
version_added: 0.1.0
description:
  - The serving groups of the inventory (the C(dspark_group) of each host of group C(dspark)), the heads
    (C(dspark_rank) 0) of the routed groups, and one backend server per routed group that has exactly one head
    (the head's management address, API port and served model name).
  - P(dspark.cluster.router_haproxy#filter) turns it into the router's haproxy.cfg.
  - Runs on the controller; reads only the inventory.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The play's C(hostvars).
    type: raw
    required: true
  groups:
    description: The inventory's C(groups).
    type: dict
    required: true
  router_groups:
    description: The routed groups (C(router_groups)); null for every serving group.
    type: list
    elements: str
  served_model_name:
    description: C(router_served_model_name); empty for each head's C(serve_served_model_name).
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: The routed groups' servers
  ansible.builtin.debug:
    msg: "{{ (hostvars | dspark.cluster.router_plan(groups, router_groups)).servers | map(attribute='name') }}"
"""

RETURN = r"""
_value:
  description: The router's plan.
  type: dict
  contains:
    serving_groups:
      description: Every serving group of the inventory, sorted.
      type: list
      elements: str
    heads:
      description: Routed group -> its members of dspark_rank 0.
      type: dict
    servers:
      description: "One per routed group with one head: name, head, address, port, model."
      type: list
      elements: dict
    model:
      description: The served model name of the routed groups.
      type: str
"""


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def router_plan(hostvars, groups, router_groups=None, served_model_name=""):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_plan
    return _router_plan.plan(groups, hostvars, router_groups, served_model_name or "")


class FilterModule:
    def filters(self):
        return {"router_plan": router_plan}
