# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The router's input rules (private; role router, the hosts of group dspark_router outside the serving groups).

Registered in _rules_base.RULES and run through plugin_utils._role_rules.check_router on a _rules_base.RouterHost:
its own values and the heads of the groups it routes to (plugin_utils._router_plan). Pure Python, no Ansible imports.
"""

from __future__ import annotations

import ipaddress
import json
import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _inputs, _router_plan, _router_vrrp
from ansible_collections.dspark.cluster.plugins.plugin_utils._rules_base import HIDDEN, ranges, rule

_SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+\Z")
_ADDRESS_RE = re.compile(r"^[A-Za-z0-9_.:-]+\Z")
_LOOPBACK_ADDRESS_RE = re.compile(r"^(127\.|localhost$|::1$|$)")
_MODEL_RE = re.compile(r"^[A-Za-z0-9_.:/@+-]+\Z")
_HEADER_RE = re.compile(r"^[A-Za-z0-9-]+\Z")
ROUTER_PORTS = ("router_port", "router_tls_port", "router_stats_port", "router_metrics_port")
ROUTER_HEALTH = ("router_health_interval", "router_health_fast_interval", "router_health_timeout", "router_health_fall",
                 "router_health_rise", "router_retries")
ROUTER_LIMITS = ("router_key_rate_limit", "router_key_concurrency_limit", "router_max_body_bytes",
                 "router_unauthenticated_rate")
# Strings written into haproxy.cfg or the systemd drop-in: each must be one word of a strict shape (no line break, space
# or quote can start another directive).
ROUTER_WORDS = {
    "router_metrics_address": (_router_plan.WORDS["router_metrics_address"], "an IP address or host name",
                               "an IPv4 or IPv6 address or a host name, e.g. 127.0.0.1"),
    "router_frontend_name": (_router_plan.NAME_RE, "a name", "letters, digits and _ . - only"),
    "router_backend_name": (_router_plan.NAME_RE, "a name", "letters, digits and _ . - only"),
    "router_bind_address": (_router_plan.BIND_RE, "an address to bind to", "an IPv4 or IPv6 address, a host name, * or \"\""),
    "router_admin_socket": (_router_plan.FILE_RE, "an absolute path", "an absolute path of letters, digits and _ . / - only"),
    "router_state_file": (_router_plan.FILE_RE, "an absolute path", "an absolute path of letters, digits and _ . / - only"),
    "router_tls_dir": (_router_plan.FILE_RE, "an absolute path", "an absolute path of letters, digits and _ . / - only"),
}


def _tls(router):
    return bool(router["router_tls_certificate"]) and bool(router["router_tls_key"])


@rule("router.groups", ["router_groups"])
def _router_groups(router):
    """Every routed group is a group of the inventory with exactly one head (dspark_rank 0), and its name is usable as
    an HAProxy server name."""
    out = []
    shown = list(router.plan["heads"])  # router_groups, or every serving group when it is unset
    for group, heads in router.plan["heads"].items():
        if group not in router.groups:
            out.append(("router_groups", shown, "names %s, which is not a group of the inventory" % group,
                        "name serving groups (children of dspark) only, or leave router_groups unset for all of them"))
        elif len(heads) != 1:
            out.append(("router_groups", shown, "names group %s, which has %d hosts with dspark_rank 0 (%s)"
                        % (group, len(heads), ", ".join(heads) or "none"), "give group %s exactly one head (dspark_rank: 0)" % group))
        if not _SERVER_NAME_RE.match(str(group)):
            out.append(("router_groups", shown, "names %r, which is not usable as an HAProxy server name" % group,
                        "rename the group: letters, digits, _ . - only"))
    return out


@rule("router.heads", ["router_groups"])
def _router_heads(router):
    """Each routed head's management address (dspark_mgmt_address, else ansible_host) is a host name or an address the
    router can reach (not loopback), and its dspark_api_port is a port."""
    out = []
    for server in router.plan["servers"]:
        address = server["address"]
        var = "dspark_mgmt_address"
        if _LOOPBACK_ADDRESS_RE.match(address):
            out.append((var, address, "of %s (head of %s) is not reachable from a router (dspark_mgmt_address, else ansible_host)"
                        % (server["head"], server["name"]), "set dspark_mgmt_address on %s to the address the router reaches "
                        "its API on" % server["head"]))
        elif not _ADDRESS_RE.match(address):
            out.append((var, address, "of %s (head of %s) is not a host name or an address" % (server["head"], server["name"]),
                        "set dspark_mgmt_address on %s to its management address" % server["head"]))
        if not 1 <= server["port"] <= 65535:
            out.append(("dspark_api_port", server["port"], "of %s (head of %s) is not a port" % (server["head"], server["name"]),
                        "set the API port of group %s (1-65535)" % server["name"]))
    return out


@rule("router.model", ["router_groups", "router_served_model_name"])
def _router_model(router):
    """The routed groups serve one model name (one endpoint serves one model), and it is a plain model name."""
    out = []
    servers = router.plan["servers"]
    if len({s["model"] for s in servers}) > 1:
        out.append(("serve_served_model_name", ", ".join("%s=%s" % (s["name"], s["model"]) for s in servers),
                    "differs between the routed groups: one endpoint serves one model",
                    "serve the same name everywhere, or route a subset with router_groups"))
    model = router.plan["model"]
    if not _MODEL_RE.match(str(model)):
        var = "router_served_model_name" if router["router_served_model_name"] else "serve_served_model_name"
        out.append((var, model, "is not a plain served model name", "letters, digits and _ . : / @ + - only"))
    return out


@rule("router.tls", ["router_tls_certificate", "router_tls_key"])
def _router_tls_pair(router):
    """router_tls_certificate and router_tls_key are both set (TLS) or both empty."""
    certificate, key = bool(router["router_tls_certificate"]), bool(router["router_tls_key"])
    if certificate == key:
        return []
    missing = "router_tls_key" if certificate else "router_tls_certificate"
    return [(missing, None, "%s is set without it" % ("router_tls_certificate" if certificate else "router_tls_key"),
             "set both (PEM) for TLS, or neither")]


@rule("router.listeners", list(ROUTER_PORTS) + ["router_tls_certificate", "router_tls_key"])
def _router_listeners(router):
    """The listener ports are ports (0-65535), something listens (router_port, or TLS), TLS and the stats page have
    their own ports."""
    out = ranges(router, ROUTER_PORTS)
    if out:
        return out
    port, tls_port, stats_port, metrics_port = (_inputs.as_int(router[var]) for var in ROUTER_PORTS)
    if None in (port, tls_port, stats_port, metrics_port):
        return []  # the type rule says so
    if port == 0 and not _tls(router):
        out.append(("router_port", 0, "turns plain HTTP off, and TLS is not configured: nothing would listen",
                    "set router_port, or router_tls_certificate and router_tls_key"))
    if _tls(router) and port == tls_port:
        out.append(("router_tls_port", tls_port, "is router_port too", "give TLS its own port"))
    if stats_port > 0 and stats_port in (port, tls_port):
        out.append(("router_stats_port", stats_port, "is also a listener port (router_port or router_tls_port)",
                    "give the stats page its own port, or 0 for none"))
    if metrics_port > 0 and metrics_port in (port, tls_port, stats_port):
        out.append(("router_metrics_port", metrics_port, "is also another listener's port (router_port, router_tls_port "
                    "or router_stats_port)", "give the exporter its own port, or 0 for none"))
    return out


@rule("router.metrics_sources", ["router_metrics_allowed_cidrs", "router_metrics_address"])
def _router_metrics_sources(router):
    """router_metrics_allowed_cidrs is a list of IP addresses or networks (HAProxy's ACL reads them); a list on a
    loopback-only exporter lets nobody in."""
    cidrs = router["router_metrics_allowed_cidrs"]
    if cidrs is None:
        return []
    if not isinstance(cidrs, (list, tuple)):
        return [("router_metrics_allowed_cidrs", cidrs, "is not a list", "give a list of addresses or networks, "
                 "e.g. [\"10.0.0.5/32\"]")]
    out = []
    for cidr in cidrs:
        try:
            ipaddress.ip_network(str(cidr), strict=False)
        except ValueError:
            out.append(("router_metrics_allowed_cidrs", cidr, "is not an IP address or network",
                        "give addresses or networks such as 10.0.0.5/32 or fd00::/64"))
    address = router["router_metrics_address"]
    if cidrs and not out and isinstance(address, str) and _LOOPBACK_ADDRESS_RE.match(address):
        out.append(("router_metrics_allowed_cidrs", list(cidrs), "lets hosts read the exporter, but "
                    "router_metrics_address=%s is loopback: they cannot reach it" % address,
                    "set router_metrics_address to the router's management address, or remove the CIDRs"))
    return out


@rule("router.health", list(ROUTER_HEALTH))
def _router_health(router):
    """The health check's intervals, timeout, fall and rise, and router_retries, are at least 1."""
    return ranges(router, ROUTER_HEALTH)


@rule("router.group_header", ["router_group_header"])
def _router_group_header(router):
    """router_group_header is a header name (letters, digits, -) or empty."""
    value = router["router_group_header"]
    if not value or _HEADER_RE.match(str(value)):
        return []
    return [("router_group_header", value, "is not a header name", "letters, digits and - only, or \"\" for none")]


@rule("router.health_path", ["router_health_path"])
def _router_health_path(router):
    """router_health_path is a plain absolute path (safe in haproxy.cfg) outside /v1: the check sends no key, and vLLM
    asks one for every /v1 path of a group with keys."""
    value = router["router_health_path"]
    if not isinstance(value, str) or not _router_plan.PATH_RE.match(value):
        return [("router_health_path", value, "is not a plain absolute path (letters, digits and _ . - in its segments)",
                 "use vLLM's /health")]
    if value == "/v1" or value.startswith("/v1/"):
        return [("router_health_path", value, "is under /v1: the health check sends no API key, and a group with keys "
                 "answers 401 there", "use vLLM's /health (no key; 503 once the engine core is dead)")]
    return []


@rule("router.api_key", ["router_api_key"])
def _router_api_key(router):
    """router_api_key is retired (issue #26): the health check sends no key, so the router needs none."""
    if not router["router_api_key"]:
        return []
    return [("router_api_key", HIDDEN, "is set, but the router no longer uses it: its health check (GET "
             "router_health_path, vLLM's /health) sends no API key",
             "remove router_api_key from the router's inventory (and the key from the router host's vault)")]


@rule("router.allowed_paths", ["router_allowed_paths"])
def _router_allowed_paths(router):
    """router_allowed_paths is a non-empty list of plain absolute paths (letters, digits and _ . - segments, no empty or
    dot-only segment, no %, space or quote): each is written into haproxy.cfg and compared byte for byte."""
    value = router["router_allowed_paths"]
    if not isinstance(value, (list, tuple)):
        return []  # the type rule says so
    if not value:
        return [("router_allowed_paths", [], "is empty: the router would forward no request",
                 "list the API paths to forward, e.g. /v1/chat/completions, or leave it unset for the OpenAI API paths")]
    bad = [path for path in value if not isinstance(path, str) or not _router_plan.PATH_RE.match(path)]
    if bad:
        return [("router_allowed_paths", list(value), "holds %s, which %s not a plain absolute path"
                 % (", ".join(repr(path) for path in bad), "is" if len(bad) == 1 else "are"),
                 "exact paths such as /v1/chat/completions: segments of letters, digits and _ . -, no //, .., %, "
                 "space or quote (the request's path must equal an entry byte for byte)")]
    return []


@rule("router.limits", list(ROUTER_LIMITS))
def _router_limits(router):
    """The per-key limits and the body bound are whole numbers, at least 0 (0: no limit)."""
    return ranges(router, ROUTER_LIMITS)


@rule("router.config_words", list(ROUTER_WORDS))
def _router_config_words(router):
    """The names, paths and bind address written into haproxy.cfg and the systemd drop-in are one word each, of a
    strict shape: no line break, space or quote can add a directive."""
    out = []
    for var, (pattern, what, fix) in ROUTER_WORDS.items():
        value = router[var]
        if value is None:
            continue
        if not isinstance(value, str) or not pattern.match(value):
            out.append((var, value, "is not %s that can be written into haproxy.cfg safely" % what, fix))
    return out


ROUTER_VRRP = ("router_vip", "router_vrrp_interface", "router_vrrp_router_id", "router_vrrp_auth_pass",
               "router_vrrp_advert_interval", "router_vrrp_priority", "router_peers_port", "router_bind_address")


@rule("router.vrrp", list(ROUTER_VRRP))
def _router_vrrp_rules(router):
    """Several routers need one service address (router_vip, else each counts the per-key limits on its own): an IPv4
    address with its prefix, in the network of every router's management address and nobody's own; a VRRP router id
    1-255, a simple password of 1-8 characters, an advert interval 1-255, priorities 1-254 each its own, a peers port;
    the API listens on the service address, so router_bind_address is left at its default."""
    settings = dict((var, router[var]) for var in ROUTER_VRRP)
    out = []
    for var, value, problem, fix in _router_vrrp.problems(settings, router.host, router.groups, router.hostvars):
        out.append((var, HIDDEN if var == "router_vrrp_auth_pass" and value else value, problem, fix))
    return out


def target_problems(target, routers=None, routed=None, router=None, action="drain"):
    """The rules of router_target_group, the group that playbooks/router_drain.yml and router_enable.yml act on, as
    sentences (each with its fix; the caller adds that nothing changed). Before any router is touched (``routers``:
    the hosts of group dspark_router): a router exists and a group is named. On each router (``router``, the groups
    it routes, ``routed``): the group is one of them."""
    out = []
    if routers is not None and not routers:
        out.append("The inventory has no host in group dspark_router: there is no router%s."
                   % (" to drain at" if action == "drain" else ""))
    named = target is not None and str(target).strip() != ""
    if not named:
        out.append("Name the group: -e router_target_group=<group>.")
    elif router is not None and str(target) not in [str(group) for group in routed or []]:
        out.append("router_target_group=%s is not a serving group behind %s (routed: %s)."
                   % (json.dumps(target), router, ", ".join(str(group) for group in routed or []) or "none"))
    return out
