# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: several routers behind one service address, from plugin_utils._router_vrrp."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: router_vrrp
short_description: What several routers behind one service address need - HAProxy's peers, keepalived's configuration
version_added: 0.1.0
description:
  - With O(what=haproxy), what the router's haproxy.cfg needs of the service address (C(router_vip)) - the address the
    API listens on, the peers that share the limit tables, this router's peer name.
  - With O(what=keepalived), the lines of this router's keepalived.conf (VRRP, unicast to the other hosts of group
    C(dspark_router), the local HAProxy's health tracked). They hold C(router_vrrp_auth_pass) - never show them.
  - With O(what=interface), the interface that holds this router's management address, from the input C(ip -o -4 addr
    show) output.
  - With O(what=holds), whether the input C(ip -o -4 addr show) output holds O(address), the service address as
    C(router_vip) gives it (ADDRESS/PREFIX).
  - With O(what=firewall), this router's nftables table (HAProxy's peers port and VRRP from the routers only) and its
    boot unit; the input holds C(router_peers_port) and C(ruleset_path), the file the boot unit loads.
  - Internal to the router role; the inputs may change without notice. Runs on the controller.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The router_* settings (names as keys); for O(what=interface), C(ip -o -4 addr show) output.
    type: raw
    required: true
  what:
    description: What to return.
    type: str
    choices: [haproxy, keepalived, interface, holds, firewall]
    required: true
  host:
    description: This router (C(inventory_hostname)).
    type: str
  groups:
    description: The inventory's C(groups).
    type: dict
  hostvars:
    description: The play's C(hostvars).
    type: raw
  interface:
    description: For O(what=keepalived), the interface of the service address.
    type: str
  address:
    description: For O(what=interface), the management address to look for; for O(what=holds), C(router_vip).
    type: str
"""

EXAMPLES = r"""
- name: The interface that holds the management address
  ansible.builtin.set_fact:
    _iface: "{{ ip_addr.stdout | dspark.cluster.router_vrrp('interface', address=dspark_mgmt_address) }}"
"""

RETURN = r"""
_value:
  description: "haproxy: {vip, peers (name, address, port), localpeer}; keepalived: a list of lines; interface: a name or
    null; holds: a bool; firewall: {ruleset, digest, routers, table, unit, unit_name}."
  type: raw
"""

from ansible.errors import AnsibleFilterError


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def router_vrrp(data, what, host=None, groups=None, hostvars=None, interface=None, address=None):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_vrrp
    try:
        if what == "haproxy":
            return _router_vrrp.haproxy_settings(data, host, groups, hostvars)
        if what == "keepalived":
            return _router_vrrp.keepalived(data, host, groups, hostvars, interface)
        if what == "interface":
            return _router_vrrp.interface_of(data, address)
        if what == "holds":
            return _router_vrrp.holds(data, address)
        if what == "firewall":
            from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_firewall
            return _router_firewall.firewall(groups, hostvars, host, data["router_peers_port"], data["ruleset_path"])
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        # No value in the message: the settings hold the VRRP password.
        raise AnsibleFilterError("router_vrrp(%s): %s" % (what, type(err).__name__)) from None
    raise AnsibleFilterError("router_vrrp: what=%r is not haproxy, keepalived, interface, holds or firewall" % (what,))


class FilterModule:
    def filters(self):
        return {"router_vrrp": router_vrrp}
