# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: where each sidecar engine's checkpoint lies in the Hugging Face cache, from plugin_utils._serve_sidecars."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: serve_sidecar_snapshots
short_description: The snapshot directory of each sidecar engine's checkpoint
version_added: 0.1.0
description:
  - From the group's C(dspark_sidecars), each sidecar's C(name), C(model), C(revision) and C(snapshot_dir) (its
    checkpoint's directory in the Hugging Face cache); an empty list when the list is refused (preflight names why).
  - Internal to the serve role (the checkpoint guard); the inputs may change without notice. Runs on the controller.
author:
  - dspark.cluster contributors (@dspark)
options:
  _input:
    description: C(dspark_sidecars).
    type: raw
    required: true
  image:
    description: The group's serving image (every sidecar's default).
    type: str
    required: true
  cache_path:
    description: The Hugging Face cache (C(dspark_hf_cache)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Where the sidecars' checkpoints must be
  ansible.builtin.debug:
    msg: "{{ dspark_sidecars | dspark.cluster.serve_sidecar_snapshots(serve_image, dspark_hf_cache) | map(attribute='snapshot_dir') }}"
"""

RETURN = r"""
_value:
  description: One mapping per sidecar (name, model, revision, snapshot_dir).
  type: list
  elements: dict
"""


def serve_sidecar_snapshots(sidecars, image, cache_path):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_sidecars
    return _serve_sidecars.snapshots(sidecars, image, cache_path)


class FilterModule:
    def filters(self):
        return {"serve_sidecar_snapshots": serve_sidecar_snapshots}
