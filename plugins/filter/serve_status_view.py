# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter shell around plugin_utils/_serve_status.view (the rule and its tests live there)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: serve_status_view
short_description: A serving group's status from its ranks' containers, the rank that failed first leading, and its engine's numbers
version_added: 0.1.0
author: dspark.cluster contributors (@dspark-cluster)
description:
  - Takes each member's container as C(docker inspect) gave it and names the rank whose container failed first, by
    tp_ranks' rule - the one that ended first when docker knows when every ended one finished, else the only one
    killed (exit code 137 or OOMKilled), else the only one that ended while another rank runs - and the other ranks
    as its consequences.
  - With O(metrics), the head's vLLM C(/metrics) text reduced to the numbers C(dspark-fleet status) shows.
options:
  _input:
    description: The group's hosts, in order.
    type: list
    elements: str
    required: true
  ranks:
    description: Their ranks (C(dspark_rank)), in the same order.
    type: list
    elements: int
    required: true
  containers:
    description: Their containers, in the same order, as C(status.yml) notes them (C(state), C(exit_code),
      C(oom_killed), C(finished_at); state C(absent) when there is none).
    type: list
    elements: dict
    required: true
  metrics:
    description:
      - The head's C(GET /metrics) as M(ansible.builtin.uri) registered it (with C(return_content)), parsed here on
        the controller (C(plugin_utils/_vllm_metrics.py)) into the engine's numbers - requests running and waiting,
        KV cache usage and the time to first token p95 since the engine started. Omitted or null when not read.
    type: dict
    required: false
  lmcache:
    description:
      - Per host (same order), its LMCache server's C(state) and C(health) (C(serve_lmcache)), null where it is off.
    type: list
    elements: raw
    required: false
"""

EXAMPLES = r"""
- name: Name the rank that failed first
  ansible.builtin.set_fact:
    _serve_status_view: "{{ _serve_members | dspark.cluster.serve_status_view(ranks, containers, metrics=_metrics_get) }}"
"""

RETURN = r"""
_value:
  description: C(rows) (per rank host, rank, state, ended, running, exit_code, killed, finished, label),
    C(first_failure) (the row of the rank that failed first, or null), C(text) (the failure's lead, or empty),
    C(metrics) (source, window, running, waiting, kv_cache_usage, kv_cache_metric, ttft_p95_s, ttft_requests, models,
    engines; null when the head's /metrics was not read or not vLLM's), C(metrics_reason) (why it is null) and
    C(lmcache_down) (the hosts whose LMCache server does not run or fails its health check).
  type: dict
"""


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def serve_status_view(*args, **kwargs):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_status
    return _serve_status.view(*args, **kwargs)


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
class FilterModule:
    def filters(self):
        return {"serve_status_view": serve_status_view}
