# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: a role's variables as one mapping, by its argument spec's names (plugin_utils._role_vars)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: role_vars
short_description: A role's variables as one mapping, named by the role's argument spec
version_added: 0.1.0
description:
  - Returns one mapping of every option that the role's C(meta/argument_specs.yml) declares (all its entry points)
    and that is defined for the host, each templated, so that a role hands its settings to a plan filter without a
    hand-written list of its variables.
  - An option that is not defined (no default, not set) is left out, and so are the options the spec marks C(no_log)
    unless O(secrets) is true.
  - Runs on the controller and never connects to a node. Internal to the collection's roles.
author:
  - dspark.cluster contributors (@dspark)
options:
  _terms:
    description:
      - The role's name, for example C(router).
      - With no role named, returns nothing and reads the argument specs and task files of every role into the
        process's cache (what the roles' input checks read). The first play of the collection's playbooks does so in
        C(ansible-playbook)'s main process, so that the forked workers inherit it.
    type: list
    elements: str
  secrets:
    description:
      - Also the options that the spec marks C(no_log) (keys, tokens, passwords). Left out by default, so that a
        mapping handed to a plan filter holds no secret unless the filter needs one.
    type: bool
    default: false
  reads:
    description:
      - A plan that declares the variables it reads, for example C(serve_command). Only those of the role's options
        are templated.
    type: str
"""

EXAMPLES = r"""
- name: Show the router's settings
  ansible.builtin.debug:
    msg: "{{ lookup('dspark.cluster.role_vars', 'router').router_port }}"
"""

RETURN = r"""
_raw:
  description: One mapping per role named, variable name to its templated value.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

from ansible_collections.dspark.cluster.plugins.plugin_utils import _role_vars


class LookupModule(LookupBase):
    """Templates each of the role's variables that the host has."""

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        secrets, reads = self.get_option("secrets"), self.get_option("reads")
        variables = variables or {}
        result = []
        if not terms:
            # A warm-up in the main process (playbooks/preflight.yml): every forked worker inherits the cache.
            from ansible_collections.dspark.cluster.plugins.plugin_utils import _plan_vars
            _plan_vars.collection_specs()
        for role in terms:
            try:
                picked = _role_vars.pick(role, variables, secrets, reads)
            except ValueError as error:
                raise AnsibleError(str(error)) from None
            result.append({name: self._templar.template(value) for name, value in picked})
        return result
