# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: a serving group's sidecar engines on one member, from plugin_utils._serve_sidecars."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: serve_sidecars
short_description: The sidecar engines of one member of a serving group (compose files, containers, fingerprints)
version_added: 0.1.0
description:
  - Reads the group's C(dspark_sidecars) and returns, for one member, each sidecar engine's compose project, container,
    compose file (its lines from C(name) on) and fingerprint, or the problems of a list it refuses.
  - Internal to the serve role (its C(vars/main.yml) C(_serve_sidecar_plan)); the inputs may change without notice.
  - Runs on the controller.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The main engine's compose values and the sidecar inputs by name (C(VALUES) in C(plugins/plugin_utils/_serve_sidecars.py)).
    type: dict
    required: true
  group:
    description: The group model seen from this member (the filter C(dspark.cluster.group_model)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The sidecars of this member
  ansible.builtin.debug:
    msg: "{{ _serve_sidecar_plan.engines | map(attribute='container') | list }}"
"""

RETURN = r"""
_value:
  description: C(problems) (messages naming the variable, the value and the fix) and C(engines) (one mapping per sidecar).
  type: dict
"""

from ansible.errors import AnsibleFilterError


# The logic is imported when the filter runs, not when this file loads (docs/design-fleet.md, controller cost).
def serve_sidecars(values, group):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_command, _serve_sidecars
    try:
        return _serve_sidecars.plan(values, group)
    except _serve_command.CommandError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"serve_sidecars": serve_sidecars}
