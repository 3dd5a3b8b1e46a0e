# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter shell around plugin_utils/_serve_firewall.plan (the rules and their tests live there)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: serve_firewall
short_description: The serve role's nftables ruleset for one member of a serving group
version_added: 0.1.0
author: dspark.cluster contributors (@dspark-cluster)
description:
  - Renders C(table inet dspark_serve) for the host a group model is seen from. Loopback, established traffic and SSH
    are accepted; the group's fabric peers on every port (rendezvous and engine ports); the API port from the allowed
    networks, loopback and the routers; the API and master ports from anyone else are dropped (IPv4 and IPv6), and so
    is any other traffic to the host's fabric address and every new IPv6 packet that arrives on a fabric interface.
  - The group's sidecar engines (O(engine_ports)) are ruled as the main engine is, each on its own ports.
  - Without a fabric interface name only the API and master ports are closed over IPv6, and C(notes) says why.
  - The ruleset replaces the table atomically when given to C(nft -f) and leaves every other table alone.
options:
  _input:
    description: The answer of C(dspark.cluster.group_model) seen from the host.
    type: dict
    required: true
  api_allowed_cidrs:
    description: Networks allowed to reach the API port (C(serve_api_allowed_cidrs)).
    type: list
    elements: str
    default: []
  ssh_ports:
    description: TCP ports that stay open for SSH.
    type: list
    elements: int
    default: [22]
  routers:
    description: Addresses of the fleet's router hosts, allowed to reach the API port.
    type: list
    elements: str
    default: []
  fabric_interfaces:
    description:
      - The host's fabric interfaces by variable (C(dspark_fabric_interface), C(fabric_secondary_interface)), or a list
        of names; empty values are skipped. Every new IPv6 packet arriving on them is dropped (SSH excepted).
    type: raw
  local_ports:
    description:
      - TCP ports no one but loopback may reach, the fabric peers included (the LMCache server's, C(serve_lmcache)).
    type: list
    elements: int
    default: []
  engine_ports:
    description:
      - The group's sidecar engines (C(dspark_sidecars), issue 46), each a mapping with C(name), C(api_port) and
        C(master_port) (other keys are ignored, so the inventory's list will do). Each API port is accepted from the
        same sources as C(dspark_api_port) and dropped for anyone else; each master port is dropped for everyone but
        the group's fabric peers, as C(dspark_master_port) is. A port another rule of the table holds is refused.
      - None or an empty list gives the same ruleset as without sidecars.
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: Plan the firewall of this rank
  ansible.builtin.set_fact:
    _serve_fw: >-
      {{ _serve_group | dspark.cluster.serve_firewall(serve_api_allowed_cidrs, serve_firewall_ssh_ports, [],
                                                     {'dspark_fabric_interface': dspark_fabric_interface}) }}
"""

RETURN = r"""
_value:
  description: C(ruleset) (the nft file), C(digest) (its sha256), C(problems) (lines naming variable, value and fix;
    no ruleset when there are any), C(notes) (what the table cannot cover and why), C(fabric_interfaces), C(peers),
    C(api_v4), C(api_v6), C(ports), C(table).
  type: dict
"""


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def _router_address(router):
    """A router host's vars (as hostvars gives them) -> its management address, as the router role reads it."""
    if isinstance(router, str):
        return router
    return router.get("dspark_mgmt_address") or router.get("ansible_host") or router.get("inventory_hostname")


def serve_firewall(model, api_allowed_cidrs=None, ssh_ports=(22,), routers=(), fabric_interfaces=None, local_ports=(),
                   engine_ports=None):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_firewall
    return _serve_firewall.plan(model, api_allowed_cidrs or [], ssh_ports, [_router_address(r) for r in routers or []],
                                fabric_interfaces=fabric_interfaces, local_ports=local_ports, engine_ports=engine_ports)


class FilterModule:
    def filters(self):
        return {"serve_firewall": serve_firewall}
