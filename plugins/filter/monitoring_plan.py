# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: the monitoring role's plan from plugin_utils._monitoring_plan."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: monitoring_plan
short_description: The monitoring role's plan - scrape targets, alert rules, each node's collector and firewall
version_added: 0.1.0
description:
  - The monitor hosts (group C(dspark_monitor), else C(dspark_router)), the hosts that run node_exporter, every
    serving group's head to scrape (its management address and C(dspark_api_port)), and the problems of the
    monitoring_* values and of the fleet, each naming the variable, its value and the fix.
  - For the host given, its prometheus.yml (as a monitor), the alert rules, its textfile collector's configuration,
    its node_exporter arguments, its nftables table (node_exporter reachable from the monitor hosts only) with its
    boot unit, and Prometheus' and Alertmanager's command lines and web config files.
  - Runs on the controller; reads only the inventory.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The play's C(hostvars).
    type: raw
    required: true
  groups:
    description: The inventory's C(groups).
    type: dict
    required: true
  settings:
    description: The role's monitoring_* variables by name.
    type: dict
    required: true
  host:
    description: The host the plan is for (C(inventory_hostname)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The heads the monitor scrapes
  ansible.builtin.debug:
    msg: "{{ (hostvars | dspark.cluster.monitoring_plan(groups, settings, inventory_hostname)).heads }}"
"""

RETURN = r"""
_value:
  description: The monitoring plan seen from the host.
  type: dict
  contains:
    problems:
      description: Every problem of the inputs and the fleet (empty when the plan can be applied).
      type: list
      elements: str
    monitors:
      description: The monitor hosts.
      type: list
      elements: str
    exporter_hosts:
      description: The hosts that run node_exporter and the textfile collector.
      type: list
      elements: str
    heads:
      description: "One per serving group with one head - group, host, address, port, size."
      type: list
      elements: dict
    prometheus:
      description: prometheus.yml as a mapping (for the host as a monitor); empty while there are problems.
      type: dict
    rules:
      description: The alert rules file as a mapping; empty while there are problems.
      type: dict
    collector:
      description: The textfile collector's configuration on the host.
      type: dict
    firewall:
      description: "The host's nftables table - ruleset, digest, allowed, table - and the boot unit that loads it
        before node_exporter (unit, unit_name)."
      type: dict
    server_args:
      description: "ARGS of /etc/default/prometheus and /etc/default/prometheus-alertmanager (prometheus, alertmanager)."
      type: dict
    web:
      description: "The web config's files (config_file, password_file), whether it is on, serves TLS and asks for basic
        auth (on, tls, basic_auth), and the servers' readiness URLs as Prometheus reaches them (urls). Never the
        hashes or the password."
      type: dict
    node_exporter_args:
      description: ARGS of /etc/default/prometheus-node-exporter on the host.
      type: str
    router_exporter_address:
      description: Where a router's HAProxy exporter must listen - 127.0.0.1 when the monitor is the router host.
      type: str
"""


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def monitoring_plan(hostvars, groups, settings, host):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _monitoring_plan
    return _monitoring_plan.host_plan(groups, hostvars, settings, host)


class FilterModule:
    def filters(self):
        return {"monitoring_plan": monitoring_plan}
