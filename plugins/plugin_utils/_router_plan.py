# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The router's view of the fleet (private; issue #25): the serving groups, their heads and one backend server each.

The one copy of what roles/router/vars/main.yml computed in Jinja: the filter ``dspark.cluster.router_plan`` hands it
to the role, and the router's input rules (plugin_utils._role_rules, role ``router``) read the same plan. A group's
head is its member of dspark_rank 0 (plugin_utils._group_model's integer reading). Pure Python, no Ansible imports:
``hostvars`` is any mapping of host -> mapping of variables.
"""

from __future__ import annotations

from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_model

DEFAULT_MODEL = "deepseek-v4-flash"
DEFAULT_API_PORT = 8888


def serving_groups(groups, hostvars):
    """Every serving group of the inventory: the dspark_group of each host of group dspark, sorted, once each."""
    names = set()
    for host in (groups or {}).get("dspark") or []:
        name = _group_model.read(hostvars, host, "dspark_group", "")
        if isinstance(name, str) and name:
            names.add(name)
    return sorted(names)


def heads(router_groups, groups, hostvars):
    """Group -> its members of dspark_rank 0, in inventory order (a valid group has exactly one)."""
    out = {}
    for group in router_groups or []:
        out[group] = [host for host in (groups or {}).get(group) or []
                      if _group_model.as_int(_group_model.read(hostvars, host, "dspark_rank")) == 0]
    return out


def api_keys(hvars):
    """A head's API keys: serve_api_key (when set), then serve_api_keys."""
    key = _group_model.get(hvars, "serve_api_key", "")
    keys = _group_model.get(hvars, "serve_api_keys", [])
    return ([key] if key else []) + list(keys or [])


def server(group, head, hvars, served_model_name=""):
    """The backend server of ``group``: its head's management address (dspark_mgmt_address, else ansible_host, else
    the inventory name), API port, served model name and API keys."""
    address = _group_model.get(hvars, "dspark_mgmt_address", _group_model.get(hvars, "ansible_host", head))
    port = _group_model.as_int(_group_model.get(hvars, "dspark_api_port", DEFAULT_API_PORT))
    return {
        "name": group,
        "head": head,
        "address": str(address),
        "port": 0 if port is None else port,
        "model": served_model_name or _group_model.get(hvars, "serve_served_model_name", DEFAULT_MODEL),
        "keys": api_keys(hvars),
    }


def plan(groups, hostvars, router_groups=None, served_model_name="", api_key=""):
    """The router's plan: serving_groups, heads (group -> rank-0 members), servers (one per routed group with exactly
    one head), health_key (api_key, else the first key of the first group that has one) and model (the first
    server's, else served_model_name or the serve role's default). router_groups None: every serving group."""
    every = serving_groups(groups, hostvars)
    routed = every if router_groups is None else list(router_groups)
    found = heads(routed, groups, hostvars)
    servers = [server(group, found[group][0], _group_model.host_vars(hostvars, found[group][0]), served_model_name)
               for group in routed if len(found[group]) == 1]
    health_key = api_key or next((s["keys"][0] for s in servers if s["keys"]), "")
    model = servers[0]["model"] if servers else (served_model_name or DEFAULT_MODEL)
    return {"serving_groups": every, "heads": found, "servers": servers, "health_key": health_key, "model": model}
