# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: the record of what HAProxy loaded (plugin_utils._router_drift.stamp)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: router_loaded_stamp
short_description: The record of the configuration HAProxy runs, for the router role's next run
version_added: 0.1.0
description:
  - JSON with the SHA-256 of each of HAProxy's configuration files (null for a missing one), written by the router role
    once HAProxy runs them; P(dspark.cluster.router_drift#filter) compares it with the files on the next run.
  - Runs on the controller and never connects to a node. Internal to the router role.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The C(results) of an C(ansible.builtin.stat) loop over the files (each with C(item), the path), read
      with C(get_checksum) and C(checksum_algorithm=sha256); or a dictionary of each path to the text the role writes
      there (null for no file), for the record a converged router holds.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Record what HAProxy loaded
  ansible.builtin.copy:
    dest: /var/lib/haproxy/dspark-router-loaded.json
    content: "{{ _config_stat.results | dspark.cluster.router_loaded_stamp }}"
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The record's text (JSON, sorted keys, a final newline).
  type: str
"""

from ansible.errors import AnsibleFilterError


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def router_loaded_stamp(stat_results):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_drift
    try:
        return _router_drift.stamp(stat_results)
    except ValueError as exc:
        raise AnsibleFilterError("router_loaded_stamp: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"router_loaded_stamp": router_loaded_stamp}
