# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: the serving group's model from plugin_utils._group_model."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: group_model
short_description: The model of a serving group (members by rank, head, workers, peers, fabric addresses)
version_added: 0.1.0
description:
  - Orders the members of a serving group by C(dspark_rank) (the head, rank 0, first) and returns the group's
    model as every role of the collection reads it. The one place the group model is computed.
  - A group the inventory does not hold is modelled as O(host) alone, with C(known) false, so that the role's own
    validation can report it.
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
  group:
    description: The serving group (C(dspark_group)).
    type: str
    required: true
  host:
    description: The host the model is seen from (C(inventory_hostname)); adds C(host), C(rank), C(is_head), C(peers).
    type: str
"""

EXAMPLES = r"""
- name: The group of this host, head first
  ansible.builtin.debug:
    msg: "{{ (hostvars | dspark.cluster.group_model(groups, dspark_group, inventory_hostname)).members }}"
"""

RETURN = r"""
_value:
  description: The group's model.
  type: dict
  contains:
    group: {description: The group's name., type: str}
    known: {description: Whether the inventory holds the group., type: bool}
    members: {description: The members in rank order (head first)., type: list, elements: str}
    size: {description: The number of members., type: int}
    head: {description: The first member (rank 0 in a valid group)., type: str}
    workers: {description: The members after the head., type: list, elements: str}
    ranks: {description: Member -> its rank as an integer (null when not an integer)., type: dict}
    rank_hosts: {description: Rank -> the members that have it., type: dict}
    addresses: {description: Member -> its C(dspark_fabric_address) ('' when unset)., type: dict}
    master_address: {description: The head's fabric address (the rendezvous address)., type: str}
    master_port: {description: The head's C(dspark_master_port) (the rendezvous port; null when not an integer)., type: int}
    api_port: {description: The head's C(dspark_api_port) (null when not an integer)., type: int}
    host: {description: The host the model is seen from., type: str}
    rank: {description: That host's rank (null when not an integer)., type: int}
    is_head: {description: Whether that host has rank 0., type: bool}
    peers: {description: The members other than that host, in rank order., type: list, elements: str}
"""


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def group_model(hostvars, groups, group, host=None):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_model
    return _group_model.group_model(group, groups, hostvars, host)


class FilterModule:
    def filters(self):
        return {"group_model": group_model}
