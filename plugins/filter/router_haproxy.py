# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: the router's haproxy.cfg sections from plugin_utils._router_plan."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: router_haproxy
short_description: The sections of the router's HAProxy configuration
version_added: 0.1.0
description:
  - The lines of each section of the router role's haproxy.cfg (global, defaults, frontend, backend, the exporter and the stats
    page), from the router's settings and its plan (P(dspark.cluster.router_plan#filter)). Internal to the router
    role (its C(templates/haproxy.cfg.j2) prints them); the inputs may change without notice.
  - Fails on a line break or control character in any line (the router's input rules refuse such values first).
  - Runs on the controller.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The router_* variables the configuration reads (names as keys), plus C(tls) and C(tls_pem).
    type: dict
    required: true
  plan:
    description: The router's plan (P(dspark.cluster.router_plan#filter)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The frontend's lines
  ansible.builtin.debug:
    msg: "{{ (_router_settings | dspark.cluster.router_haproxy(_router_plan)).frontend }}"
"""

RETURN = r"""
_value:
  description: Section name (global, defaults, frontend, backend, metrics, stats) -> its lines.
  type: dict
"""

from ansible.errors import AnsibleFilterError


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def router_haproxy(settings, plan):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_plan
    try:
        return _router_plan.haproxy(settings, plan)
    except (KeyError, TypeError, ValueError) as err:
        raise AnsibleFilterError("router_haproxy: %s" % err) from err


class FilterModule:
    def filters(self):
        return {"router_haproxy": router_haproxy}
