# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: the serve role's vLLM command line from plugin_utils._serve_command."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: serve_command
short_description: The vLLM command line of one member of a serving group
version_added: 0.1.0
description:
  - The argv of C(vllm serve) for one member, the flags every vLLM build takes (the multi-node mp launch) and, unless
    C(serve_recipe_args) is false, the recipe's DeepSeek-V4/GB10 flags in the recipe's order, then C(serve_extra_args).
  - Runs on the controller.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The member's variables, by name (C(dspark_model), C(dspark_model_revision), C(dspark_api_port),
      C(dspark_tensor_parallel_size), C(dspark_rank) and the serve role's C(serve_*) inputs of the command).
    type: dict
    required: true
  group:
    description: The serving group's model from the filter P(dspark.cluster.group_model#filter), seen from the member.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The command line of this member
  ansible.builtin.debug:
    msg: "{{ {'dspark_model': dspark_model, 'serve_extra_args': serve_extra_args} | dspark.cluster.serve_command(_serve_group) }}"
"""

RETURN = r"""
_value:
  description: The argv of C(vllm serve).
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def serve_command(values, group):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_command
    try:
        return _serve_command.command(values, group)
    except _serve_command.CommandError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"serve_command": serve_command}
