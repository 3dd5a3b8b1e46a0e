# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: the checkpoint role's record paths and source ranks from plugin_utils._checkpoint_paths."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: checkpoint_paths
short_description: Where the checkpoint role keeps the records of a model revision, and which ranks it comes from
version_added: 0.1.0
description:
  - The manifest, state, verified stamp and per-file record of O(_input)@O(revision) under O(manifest_dir), and the
    source and NFS-exporting ranks. The checkpoint role, the serve role's checkpoint guard and the monitoring plan
    all read them here, so that no role rebuilds the names or repeats another role's defaults.
  - Runs on the controller; pure string work.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: The model (C(dspark_model), C(ORG/NAME)).
    type: str
    required: true
  revision:
    description: The pinned revision (C(dspark_model_revision)).
    type: str
    required: true
  manifest_dir:
    description: C(checkpoint_manifest_dir); null or empty takes the checkpoint role's default.
    type: str
  source_rank:
    description: C(checkpoint_source_rank); null takes the checkpoint role's default (1).
    type: raw
  nfs_export_rank:
    description: C(nfs_export_rank); null takes the source rank.
    type: raw
"""

EXAMPLES = r"""
- name: The verified stamp of this node's checkpoint
  ansible.builtin.debug:
    msg: "{{ (dspark_model | dspark.cluster.checkpoint_paths(dspark_model_revision, checkpoint_manifest_dir | default(none))).stamp }}"
"""

RETURN = r"""
_value:
  description: The paths and ranks.
  type: dict
  contains:
    repo_folder: {description: The model's folder in the Hugging Face cache (C(models--ORG--NAME))., type: str}
    manifest_dir: {description: The directory of the records., type: str}
    manifest: {description: The manifest of the revision., type: str}
    state: {description: The resumable copy's state., type: str}
    stamp: {description: The verified stamp (written after this node's check passed)., type: str}
    files: {description: The per-file record beside the stamp., type: str}
    known_hosts: {description: The copy's pinned host keys., type: str}
    source_rank: {description: The rank that holds the checkpoint first., type: int}
    nfs_export_rank: {description: The rank that exports it over NFS., type: int}
"""


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def checkpoint_paths(model, revision, manifest_dir=None, source_rank=None, nfs_export_rank=None):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _checkpoint_paths
    return _checkpoint_paths.paths(model, revision, manifest_dir, source_rank, nfs_export_rank)


class FilterModule:
    def filters(self):
        return {"checkpoint_paths": checkpoint_paths}
