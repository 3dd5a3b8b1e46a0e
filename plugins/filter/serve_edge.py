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
  - A group's sidecar engines (C(engines) in the input) answer on their own API ports of the same edge, under the same
    rules.
options:
  _input:
    description:
      - The serve role's variables the edge reads, by their names (C(VARIABLES) in C(plugins/plugin_utils/_serve_edge.py),
        that is serve_host, serve_engine_port, serve_edge_allowed_paths, serve_edge_trusted_cidrs and the other serve_edge_*
        settings, as the lookup C(dspark.cluster.role_vars) with C(reads=serve_edge) gives them), and group, api_port,
        keys (plain; only their hashes are returned), keys_path, config_path.
      - Optional, default none, C(engines) - the group's sidecar engines (C(dspark_sidecars), issue 46), each a mapping
        with C(name), C(api_port) and C(engine_port) (by default api_port + 10000; other keys are ignored, so the
        inventory's list will do). The edge also answers on each sidecar's API port, with the same key check, paths,
        probe rule, rate limit (counted per source over all the edge's ports) and 503/425, and sends those requests to
        the sidecar's vLLM on 127.0.0.1:engine_port. A port the edge already uses is refused. None or an empty list
        gives the same configuration as without sidecars.
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

from ansible.errors import AnsibleFilterError


# The logic is imported when the filter runs, not when this file loads (docs/design-fleet.md, controller cost).
def serve_edge(settings, routers=(), monitors=()):
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_edge
    missing = [name for name in _serve_edge.VARIABLES if name not in settings]
    if missing:
        raise AnsibleFilterError("dspark.cluster.serve_edge: %s not given. Fix: pass every variable of "
                                 "_serve_edge.VARIABLES (lookup('dspark.cluster.role_vars', 'serve', reads='serve_edge'))"
                                 % ", ".join(missing))
    values = dict(settings)
    values["trusted"] = (_serve_edge.trusted_hosts("dspark_router", routers)
                         + _serve_edge.trusted_hosts("dspark_monitor", monitors)
                         + [("serve_edge_trusted_cidrs", c) for c in settings["serve_edge_trusted_cidrs"] or []])
    return _serve_edge.plan(values)


class FilterModule:
    def filters(self):
        return {"serve_edge": serve_edge}
