# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: the supervisor unit's checked and quoted values from plugin_utils._supervisor_unit."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: supervisor_unit
short_description: The checked and quoted values of the supervisor's systemd unit
version_added: 0.1.0
author: dspark.cluster contributors (@dspark-cluster)
description:
  - Checks every C(supervisor_*) variable of C(playbooks/supervisor.yml) that reaches
    C(dspark-fleet-watch.service) and returns one problem per bad value, naming the variable, the value and the fix.
  - Paths must be absolute, normalised and made of letters, digits and C(_ . / + @ , -) only; the state directory
    must be a directory of its own, apart from the checkout, the venv, the inventory and the vault password file;
    the user must not be root; group patterns use letters, digits and C(_ . - * ? [ ] !) only; numbers must be whole
    and in range.
  - Without problems it returns the C(ExecStart) command line with every argument quoted by systemd's rules, the
    C(Environment) assignments, and the paths of the SSH key and known hosts file in the state directory.
  - It also checks C(supervisor_node_key_from) (IP addresses or CIDR networks, never every address) and returns the
    authorized_keys line that limits the supervisor's key on the nodes to those addresses (C(from=), C(restrict,pty));
    empty, the list is this host's address when that is an IP address other than loopback.
options:
  _input:
    description: The playbook's variables, C(supervisor_user), C(supervisor_project_dir), C(supervisor_venv),
      C(supervisor_inventory), C(supervisor_state_dir), C(supervisor_groups), C(supervisor_interval) and the other
      numbers, C(supervisor_vault_password_file), C(supervisor_ssh_private_key), C(supervisor_ssh_known_hosts),
      C(supervisor_node_key_from) and C(supervisor_service_enabled), as a mapping of their names to their values.
    type: dict
    required: true
  host_address:
    description: The supervisor host's address (its C(dspark_mgmt_address), else C(ansible_host)), the default of
      C(supervisor_node_key_from).
    type: str
    default: ""
  public_key:
    description: The text of the public key beside C(supervisor_ssh_private_key) (its C(.pub)), for the printed line;
      empty gives a placeholder.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Stop on a bad value before anything changes
  ansible.builtin.assert:
    that: _supervisor.problems | length == 0
    fail_msg: "{{ _supervisor.problems | join('; ') }}"
  vars:
    _supervisor: "{{ {'supervisor_user': supervisor_user, 'supervisor_inventory': supervisor_inventory} | dspark.cluster.supervisor_unit }}"
"""

RETURN = r"""
_value:
  description: The problems and, when there are none, the unit's values.
  type: dict
  contains:
    problems:
      description: One line per bad value; empty when every value is good.
      type: list
      elements: str
    exec_start:
      description: The C(ExecStart) value, each argument quoted for systemd.
      type: str
    environment:
      description: The C(Environment) value, quoted assignments separated by spaces.
      type: str
    key_path:
      description: Where the SSH key is installed, empty without C(supervisor_ssh_private_key).
      type: str
    known_hosts_path:
      description: The service user's known hosts file.
      type: str
    node_key_line:
      description: The authorized_keys line of the supervisor's key on the nodes, with C(from=) its addresses.
      type: str
    node_key_message:
      description: What the playbook prints about that line, one item per line.
      type: list
      elements: str
"""


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def supervisor_unit(*args, **kwargs):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _supervisor_unit
    return _supervisor_unit.unit(*args, **kwargs)


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
class FilterModule:
    """dspark.cluster.supervisor_unit."""

    def filters(self):
        return {"supervisor_unit": supervisor_unit}
