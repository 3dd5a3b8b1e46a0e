"""Filter shell around plugin_utils/_serve_edge.plan (the configuration and its tests live there)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: serve_edge
short_description: The head's API edge (HAProxy) of a serving group
version_added: 0.1.0
author: dspark.cluster contributors (@dspark-cluster)
description:
  - Renders the HAProxy configuration, the file of the keys' SHA-256 hashes and the systemd unit of the edge that
    answers on the API port of a group's head, in front of vLLM on loopback (docs/design-serve-edge.md).
  - Only the API paths pass, and only with a valid key (the scheme C(bearer) in any case, as vLLM reads it); GET
    C(/health) and C(/metrics) pass without a key from loopback, the routers, the monitors and the trusted networks;
    everything else is 404. Requests without a valid key are capped per source address.
options:
  _input:
    description:
      - group, bind, api_port, engine_port, paths, keys (plain; only their hashes are returned), trusted_cidrs,
        unauthenticated_rate, maxconn, timeout_client, timeout_server, keys_path, config_path.
    type: dict
    required: true
  routers:
    description: The vars of the hosts of C(dspark_router) (their management addresses are trusted).
    type: list
    elements: raw
    default: []
  monitors:
    description: The vars of the hosts of C(dspark_monitor) (their management addresses are trusted).
    type: list
    elements: raw
    default: []
"""

EXAMPLES = r"""
- name: Write the edge's configuration
  ansible.builtin.copy:
    dest: /etc/dspark/serve/edge.cfg
    content: "{{ (_serve_edge_settings | dspark.cluster.serve_edge(groups['dspark_router'] | map('extract', hostvars) | list)).config }}"
    mode: "0644"
"""

RETURN = r"""
_value:
  description: C(config) (haproxy.cfg text), C(key_hashes) (one SHA-256 hex per line), C(unit) (the systemd unit),
    C(sources) (the trusted networks), C(problems) (lines naming variable, value and fix; nothing rendered then).
  type: dict
"""


# The logic is imported when the filter runs, not when this file loads (docs/design-fleet.md, controller cost).
def serve_edge(settings, routers=(), monitors=()):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_edge
    values = dict(settings)
    values["trusted"] = (_serve_edge.trusted_hosts("dspark_router", routers)
                         + _serve_edge.trusted_hosts("dspark_monitor", monitors)
                         + [("serve_edge_trusted_cidrs", c) for c in settings.get("trusted_cidrs") or []])
    return _serve_edge.plan(values)


class FilterModule:
    def filters(self):
        return {"serve_edge": serve_edge}
