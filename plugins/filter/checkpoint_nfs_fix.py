# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: what a failed NFS test mount or verification of the checkpoint role means (plugin_utils._nfs_plan)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: checkpoint_nfs_fix
short_description: The fix for a failed NFS mount or verification of the checkpoint role
version_added: 0.1.0
description:
  - From the registered result of the checkpoint role's timed test mount (O(kind=mount)) or of its verification through
    the mount (O(kind=verify)), the fix its failure message names.
  - A mount the server refuses or an export that is missing, a checkpoint missing on the source (the probe's exit status
    2), else a server or link that is down; for the verification, files the squashed clients cannot read, else a
    snapshot that changed since its manifest was built.
  - Internal to the role (C(roles/checkpoint/tasks/nfs.yml)). Runs on the controller and never connects to a node.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The registered result (C(stdout) and C(rc) of the probe, or C(msg) of the verification).
    type: dict
    required: true
  kind:
    description: Which step failed.
    type: str
    choices: [mount, verify]
    required: true
  source:
    description: The checkpoint's source node.
    type: str
    required: true
  export_dir:
    description: The exported directory on the source (O(kind=mount)).
    type: str
    default: ""
  group:
    description: The serving group (O(kind=mount)).
    type: str
    default: ""
  address:
    description: This node's fabric address (O(kind=mount)).
    type: str
    default: ""
  source_address:
    description: The source's fabric address (O(kind=mount)).
    type: str
    default: ""
  model_dir:
    description: The model's directory in the cache (O(kind=verify)).
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Stop with a diagnosis when the export cannot be mounted
  ansible.builtin.fail:
    msg: >-
      cannot mount the export. Fix: {{ _checkpoint_probe | dspark.cluster.checkpoint_nfs_fix('mount', source=_checkpoint_source,
      export_dir='/var/lib/dspark/hf', group=dspark_group, address=dspark_fabric_address, source_address='10.77.77.2') }}
"""

RETURN = r"""
_value:
  description: The fix, one sentence (without the leading C(Fix:)).
  type: str
"""

from ansible.errors import AnsibleFilterError


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def checkpoint_nfs_fix(result, kind, source, export_dir="", group="", address="", source_address="", model_dir=""):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _nfs_plan
    result = result if isinstance(result, dict) else {}
    if kind == "mount":
        return _nfs_plan.mount_fix(result.get("stdout"), result.get("rc", 0), source, export_dir, group, address, source_address)
    if kind == "verify":
        return _nfs_plan.verify_fix(result.get("msg"), source, model_dir)
    raise AnsibleFilterError("checkpoint_nfs_fix: kind must be mount or verify, not %r" % (kind,))


class FilterModule:
    def filters(self):
        return {"checkpoint_nfs_fix": checkpoint_nfs_fix}
