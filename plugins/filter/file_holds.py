# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: whether a recorded file already holds a write's content and mode (plugin_utils._file_holds)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: file_holds
short_description: Whether a file, as a reading module recorded it, already holds what a write would put there
version_added: 0.1.0
description:
  - Compares the record a reading module returned for a file (its content's sha256, octal mode, and uid and gid where
    recorded) with the text and mode a role's C(copy) would write, so that a converged node skips the write.
  - Runs on the controller and never connects to a node. Internal to the collection's roles.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The file's record (C(sha256), C(mode), optionally C(uid) and C(gid)); null when the file is absent.
    type: dict
    required: true
  text:
    description: The content the write would put there.
    type: str
    required: true
  mode:
    description: The octal mode the write sets, for example C("0644").
    type: str
    required: true
  uid:
    description: The owner's uid the write sets (not compared when omitted).
    type: int
  gid:
    description: The group's gid the write sets (not compared when omitted).
    type: int
"""

EXAMPLES = r"""
- name: Write the compose file only where it differs
  ansible.builtin.copy:
    dest: /etc/dspark/serve/compose.yaml
    content: "{{ text }}"
    mode: "0644"
  when: not (_node.digests['/etc/dspark/serve/compose.yaml'] | dspark.cluster.file_holds(text, '0644'))
"""

RETURN = r"""
_value:
  description: Whether the write would change nothing.
  type: bool
"""


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def file_holds(record, text, mode, uid=None, gid=None):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _file_holds
    return _file_holds.holds(record, text, mode, uid, gid)


class FilterModule:
    def filters(self):
        return {"file_holds": file_holds}
