"""Filter shell around plugin_utils/_serve_guard.problems (the rules and their tests live there)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: serve_checkpoint_guard
short_description: What keeps one rank of a serving group from starting on its checkpoint
version_added: 0.1.0
author: dspark.cluster contributors (@dspark-cluster)
description:
  - From the node's C(serve_node_info) read, the lines that keep this rank (and so its group) from starting - the NFS
    mount at the cache path missing, the model directory absent, the verified stamp missing, of another model or
    revision or of another manifest than the source's, the verified files changed since they verified - each with
    its fix. Empty when the rank may start.
options:
  _input:
    description: The node's C(serve_node_info) result (snapshot_isdir, cache_mount, stamp, recheck).
    type: dict
    required: true
  facts:
    description:
      - host, group, model, revision, require_stamp, nfs_client, nfs_server, cache_path, snapshot_dir, stamp_path,
        source (the checkpoint's source host).
    type: dict
    required: true
  source_node:
    description: The C(serve_node_info) result of the checkpoint's source host (its stamp), if it has one.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Note what keeps this rank from starting
  ansible.builtin.set_fact:
    _serve_checkpoint_problems: "{{ _serve_node | dspark.cluster.serve_checkpoint_guard(_facts, _source_node) }}"
"""

RETURN = r"""
_value:
  description: One line per problem, naming the node, the path or stamp and the fix.
  type: list
  elements: str
"""


# The logic is imported when the filter runs, not when this file loads (docs/design-fleet.md, controller cost).
def serve_checkpoint_guard(node, facts, source_node=None):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_guard
    return _serve_guard.problems(node, facts, source_node)


class FilterModule:
    def filters(self):
        return {"serve_checkpoint_guard": serve_checkpoint_guard}
