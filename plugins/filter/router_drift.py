# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: whether HAProxy runs an older configuration than its files hold (plugin_utils._router_drift)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: router_drift
short_description: Why HAProxy must reload to run the configuration its files hold
version_added: 0.1.0
description:
  - Compares the record of what HAProxy last loaded (the SHA-256 of C(haproxy.cfg) and of the TLS file, written by the
    router role after each run) with the files as they are now, when C(systemctl show haproxy) says HAProxy runs.
  - A file that differs from the record, or no readable record, means an earlier run wrote it and ended before its
    reload. An inactive HAProxy needs no reload (starting it reads the files).
  - Also says whether systemd still holds C(haproxy.service) as it was before its unit files or drop-ins changed
    (C(NeedDaemonReload)).
  - Runs on the controller and never connects to a node. Internal to the router role.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The standard output of C(systemctl show haproxy.service --property=ActiveState,NeedDaemonReload).
    type: str
    required: true
  loaded:
    description: The result of C(ansible.builtin.slurp) of the record (without C(content) when there is none).
    type: dict
    required: true
  stat_results:
    description: The C(results) of an C(ansible.builtin.stat) loop over the files (each with C(item), the path), read
      with C(get_checksum) and C(checksum_algorithm=sha256).
    type: list
    elements: dict
    required: true
  stamp_path:
    description: The record's path, as the reason names it.
    type: str
    default: the record
"""

EXAMPLES = r"""
- name: Note whether HAProxy runs an older configuration than its files hold
  ansible.builtin.set_fact:
    _drift: "{{ _unit.stdout | dspark.cluster.router_drift(_loaded, _config_stat.results, router_loaded_stamp) }}"
"""

RETURN = r"""
_value:
  description: C(reload) (the reason, naming the files and their checksums; empty when HAProxy runs what its files
    hold or is not running) and C(daemon_reload) (bool).
  type: dict
"""

from ansible.errors import AnsibleFilterError


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def router_drift(show_text, loaded, stat_results, stamp_path="the record"):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_drift
    try:
        return _router_drift.drift(show_text, loaded, stat_results, stamp_path)
    except ValueError as exc:
        raise AnsibleFilterError("router_drift: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"router_drift": router_drift}
