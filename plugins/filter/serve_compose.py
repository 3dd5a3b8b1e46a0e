# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: the serve role's compose file lines from plugin_utils._serve_command."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: serve_compose
short_description: The compose file of one rank of a serving group, line by line
version_added: 0.1.0
description:
  - The lines of the serve role's C(compose.yaml) from C(name) on (the template prints them under its header), every value
    a JSON string with C($) doubled, so that a value can add no key and compose substitutes nothing.
  - Internal to the serve role (its C(vars/main.yml) C(_serve_compose_lines)); the inputs may change without notice.
  - Runs on the controller.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The rank's values by name (see C(COMPOSE_VALUES) in C(plugins/plugin_utils/_serve_command.py)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The compose file of this rank
  ansible.builtin.debug:
    msg: "{{ _serve_compose_lines | join('\n') }}"
"""

RETURN = r"""
_value:
  description: The lines of the compose file from C(name) on.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def serve_compose(values):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_command
    try:
        return _serve_command.compose_lines(values)
    except _serve_command.CommandError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"serve_compose": serve_compose}
