# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: whether dockerd runs an older configuration than its files (plugin_utils._dockerd_drift)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: dockerd_restart_reason
short_description: Why dockerd must restart to run the configuration its files hold
version_added: 0.1.0
description:
  - Compares C(systemctl show docker --timestamp=us+utc) (C(ActiveState), C(ActiveEnterTimestamp), C(NeedDaemonReload))
    with the modification times of dockerd's configuration files, as the docker_runtime role reads them.
  - A file changed after dockerd last started, or unit files systemd has not reloaded, mean an earlier run wrote them
    and ended before its restart. An inactive engine needs no restart (starting it reads the files).
  - Runs on the controller and never connects to a node. Internal to the docker_runtime role.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The standard output of C(systemctl show) with the three properties, printed with C(--timestamp=us+utc).
    type: str
    required: true
  stat_results:
    description: The C(results) of an C(ansible.builtin.stat) loop over the files (each with C(item), the path).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Note whether dockerd still runs an older configuration
  ansible.builtin.set_fact:
    _stale: "{{ _unit.stdout | dspark.cluster.dockerd_restart_reason(_config_stat.results) }}"
"""

RETURN = r"""
_value:
  description: The reason, naming the files and the start time; empty when dockerd runs what its files hold.
  type: str
"""

from ansible.errors import AnsibleFilterError


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def dockerd_restart_reason(show_text, stat_results):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _dockerd_drift
    try:
        return _dockerd_drift.restart_reason(show_text, _dockerd_drift.from_stat_results(stat_results))
    except ValueError as exc:
        raise AnsibleFilterError("dockerd_restart_reason: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"dockerd_restart_reason": dockerd_restart_reason}
