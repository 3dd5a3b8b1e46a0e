# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: the problems of router_target_group for the drain and enable playbooks (plugin_utils._rules_router)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: router_target_problems
short_description: What is wrong with the group that a drain or an enable names
version_added: 0.1.0
description:
  - The rules of C(router_target_group) for C(playbooks/router_drain.yml) and C(playbooks/router_enable.yml), one
    sentence each with its fix; an empty list when the request is valid.
  - Before any router is touched (O(routers) given) a router must exist and a group be named; on a router (O(router)
    and O(routed) given) the group must be one it routes.
  - Runs on the controller and never connects to a node. Internal to the collection's playbooks and the router role.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The value of C(router_target_group) (null when unset).
    type: raw
    required: true
  routers:
    description: The hosts of group C(dspark_router).
    type: list
    elements: str
  routed:
    description: The serving groups this router routes (C(router_groups)).
    type: list
    elements: str
  router:
    description: This router's inventory name.
    type: str
  action:
    description: What the playbook does, for the wording.
    type: str
    choices: [drain, enable]
    default: drain
"""

EXAMPLES = r"""
- name: Check the request before any router is touched
  ansible.builtin.assert:
    that: _problems | length == 0
    fail_msg: "{{ _problems | join(' ') }} Nothing changed."
  vars:
    _problems: "{{ router_target_group | default(none) | dspark.cluster.router_target_problems(routers=groups['dspark_router'] | default([])) }}"
"""

RETURN = r"""
_value:
  description: The problems, one sentence each with its fix; empty when the request is valid.
  type: list
  elements: str
"""


# The logic is imported when the filter runs, not when this file loads (docs/design-fleet.md, controller cost).
def router_target_problems(target, routers=None, routed=None, router=None, action="drain"):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _rules_router
    return _rules_router.target_problems(target, routers, routed, router, action)


class FilterModule:
    def filters(self):
        return {"router_target_problems": router_target_problems}
