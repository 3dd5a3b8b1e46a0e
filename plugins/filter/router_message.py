# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: what the router's drain, enable and status playbooks say, from plugin_utils._router_plan."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: router_message
short_description: What the router's drain, enable and status playbooks say
version_added: 0.1.0
description:
  - Internal to the router role (its C(tasks/drain.yml), C(enable.yml) and C(status.yml)); the kinds and their inputs
    may change without notice.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The router's status result (status), the result (drain, enable) or the servers (others).
    type: raw
    required: true
  kind:
    description: What to say.
    type: str
    required: true
    choices: [status, drain, enable, others]
  host:
    description: The router host.
    type: str
    required: true
  name:
    description: The target group (drain, enable, others) or the backend (status).
    type: str
    required: true
  check_mode:
    description: Whether the run is in check mode (drain, enable).
    type: bool
    default: false
  timeout:
    description: C(router_drain_timeout) (drain).
    type: int
"""

EXAMPLES = r"""
- name: Report every server
  ansible.builtin.debug:
    msg: "{{ _router_result | dspark.cluster.router_message('status', inventory_hostname, router_backend_name) }}"
"""

RETURN = r"""
_value:
  description: One line per server (status), else one line.
  type: raw
"""

from ansible.errors import AnsibleFilterError


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def router_message(value, kind, host, name, check_mode=False, timeout=None):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_plan
    if kind == "status":
        return _router_plan.status_lines(value, host, name)
    if kind == "drain":
        return _router_plan.drain_message(value, host, name, bool(check_mode), timeout)
    if kind == "enable":
        return _router_plan.enable_message(value, host, name, bool(check_mode))
    if kind == "others":
        return _router_plan.others(value, name)
    raise AnsibleFilterError("router_message: unknown kind %r" % (kind,))


class FilterModule:
    def filters(self):
        return {"router_message": router_message}
