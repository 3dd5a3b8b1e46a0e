# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The head's authenticating edge (issue #41, docs/design-serve-edge.md): HAProxy on the API port in front of vLLM,
which listens on loopback only (serve_engine_port).

vLLM's own key check guards only its `/v1`-style prefixes: `/invocations`, `/tokenize`, `/metrics`, `/load`... answer
without a key (vllm#58144). The edge decides for every path, before anything reaches the engine:

- GET /health and GET /metrics pass without a key, from the trusted sources only (loopback: the proof, status and
  the supervisor run there; the fleet's routers and monitors; serve_edge_trusted_cidrs);
- the API paths (serve_edge_allowed_paths, compared byte for byte) pass with a valid key; everything else is 404;
- a valid key: `Authorization: <scheme> <key>`, the scheme `bearer` in any case and one space, as vLLM reads it
  (``partition(' ')``); the rest is hashed (SHA-256) and looked up in a file of the keys' hashes (0600, read by
  HAProxy as root at start): the keys themselves are nowhere in the edge's files, and the lookup's time depends on
  the hash, not on how much of a key was right;
- requests without a valid key are counted per source address, and over serve_edge_unauthenticated_rate per 10 s a
  source gets 429 (a guessing client, or a flood of junk keys);
- while nothing listens on the engine's port, the edge's 503 carries ``X-Dspark-Edge: engine-unreachable``: the
  readiness proof reads it as "not listening yet", never as vLLM's own 503 of a dead engine. To the fleet's routers
  the same answer is 425 (ROUTER_RETRY_STATUS): the one status the router retries on another group, because it means
  the request never reached an engine (a group that just died costs no request; docs/design-router-edge.md).

Pure Python, no Ansible imports.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_plan

UNIT = "dspark-edge.service"
# The readiness probe (module_utils/tp_api_probe.py) reads this header on a 503 as "the engine does not listen".
UNREACHABLE_HEADER = "X-Dspark-Edge"
UNREACHABLE_VALUE = "engine-unreachable"
# What the routers get instead of the marked 503 (the router's side: _router_plan.EDGE_RETRY_STATUS).
ROUTER_RETRY_STATUS = _router_plan.EDGE_RETRY_STATUS
# vLLM 0.32's AuthenticationMiddleware: scheme, _, key = header.partition(' '); scheme.lower() == 'bearer'.
SCHEME_ACL = 'req.fhdr(authorization) -m beg -i "bearer "'
KEY_SAMPLE = "req.fhdr(authorization),regsub(^bearer\\ ,,i),sha2(256),hex,lower"
PROBE_PATHS = ("/health", "/metrics")
LOOPBACK = ("127.0.0.0/8", "::1")
# The serve role's variables the edge reads, by their names (the lookup dspark.cluster.role_vars hands them over:
# reads='serve_edge', registered in _role_vars.READS); serve_edge_trusted_cidrs goes into `trusted` in the filter.
VARIABLES = (
    "serve_host", "serve_engine_port", "serve_edge_allowed_paths", "serve_edge_trusted_cidrs",
    "serve_edge_unauthenticated_rate", "serve_edge_maxconn", "serve_edge_timeout_client", "serve_edge_timeout_server",
)
_NUMBERS = ("serve_edge_unauthenticated_rate", "serve_edge_maxconn", "serve_edge_timeout_client",
            "serve_edge_timeout_server")

_ERRORS = {
    400: ("invalid_request_error", "one Authorization header at most"),
    401: ("authentication_error", "a valid API key is required (Authorization: Bearer <key>)"),
    404: ("not_found_error", "not found: this endpoint serves the OpenAI API paths only"),
    429: ("rate_limit_error", "too many requests without a valid API key from this address, retry later"),
    503: ("service_unavailable", "the engine behind the API edge does not answer (starting, or stopped)"),
}


def _answer(status):
    kind, message = _ERRORS[status]
    return "status %d content-type application/json string '%s'" % (
        status, json.dumps({"error": {"message": message, "type": kind, "code": status}}))


def key_hash(key):
    """The SHA-256 hex of a key, as the edge's sample computes it from `Bearer <key>`."""
    return hashlib.sha256(str(key).encode("utf-8")).hexdigest()


def _port(value, var, problems):
    try:
        port = int(value)
        if isinstance(value, bool) or not 0 < port < 65536:
            raise ValueError
        return port
    except (TypeError, ValueError):
        problems.append("%s=%r is not a TCP port (1-65535); fix: set it to a free port number" % (var, value))
        return 0


def _sources(values, problems):
    """Networks as HAProxy's `src` takes them. A router or monitor known only by name is a problem: the edge would
    answer its health checks or scrapes 404, and the router would take every head out of rotation."""
    out = []
    for var, value in values:
        text = str(value).strip()
        try:
            out.append(str(ipaddress.ip_network(text, strict=False)))
        except ValueError:
            if var == "serve_edge_trusted_cidrs":
                problems.append("serve_edge_trusted_cidrs holds %r, which is not an address or network; fix: list "
                                "addresses or CIDRs (e.g. 10.0.0.5 or 10.0.0.0/24)" % (value,))
            else:
                problems.append("%s has the address %r, which is not an IP address: the edge on the heads lets its "
                                "/health and /metrics requests pass by address; fix: set its dspark_mgmt_address to "
                                "its IP address" % (var, value))
    return sorted(set(out), key=out.index)


def trusted_hosts(kind, hosts):
    """(label, address) of the hosts of a group (dspark_router, dspark_monitor) from their vars, as the router role
    reads a host's management address: dspark_mgmt_address, else ansible_host, else its name."""
    out = []
    for host in hosts or []:
        if isinstance(host, str):
            out.append(("%s host %s" % (kind, host), host))
            continue
        name = host.get("inventory_hostname", "?")
        out.append(("%s host %s" % (kind, name),
                    host.get("dspark_mgmt_address") or host.get("ansible_host") or name))
    return out


def plan(settings):
    """The edge of one head: {config, key_hashes, unit, problems, sources}.

    settings: the role's VARIABLES by their names (serve_edge_trusted_cidrs is read through ``trusted``), and group,
    api_port (dspark_api_port), keys (the group's API keys, plain; only their hashes are returned), trusted (list of
    (variable, address or network): routers, monitors, serve_edge_trusted_cidrs), keys_path, config_path.
    """
    problems = []
    api_port = _port(settings["api_port"], "dspark_api_port", problems)
    engine_port = _port(settings["serve_engine_port"], "serve_engine_port", problems)
    if api_port and api_port == engine_port:
        problems.append("serve_engine_port=%d equals dspark_api_port: the engine listens on loopback behind the edge, "
                        "which takes dspark_api_port; fix: give serve_engine_port another free port" % engine_port)
    paths = list(settings["serve_edge_allowed_paths"] or [])
    for path in paths:
        if not isinstance(path, str) or not _router_plan.PATH_RE.match(path):
            problems.append("serve_edge_allowed_paths holds %r, which is not a plain absolute path; fix: list paths "
                            "like /v1/chat/completions" % (path,))
    bind = str(settings["serve_host"]).strip()
    if not _router_plan.BIND_RE.match(bind):
        problems.append("serve_host=%r cannot be a bind address of the edge; fix: an address, e.g. 0.0.0.0" % bind)
    for var in ("keys_path", "config_path"):
        if not _router_plan.FILE_RE.match(str(settings[var])):
            problems.append("the edge's %s %r is not a plain absolute path" % (var, settings[var]))
    trusted = list(settings["trusted"] or [])
    sources = _sources([("loopback", s) for s in LOOPBACK] + trusted, problems)
    routers = _sources([t for t in trusted if str(t[0]).startswith("dspark_router ")], [])
    keys = [str(k) for k in settings["keys"] or []]
    numbers = {}
    for name in _NUMBERS:
        value = settings[name]
        least = 0 if name == "serve_edge_unauthenticated_rate" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            problems.append("%s=%r is not a whole number%s" % (name, value, " >= 0" if least == 0 else " > 0"))
            value = 1
        numbers[name] = value
    if problems:
        return {"config": "", "key_hashes": "", "unit": "", "problems": problems, "sources": sources}

    hashes = "".join(key_hash(k) + "\n" for k in sorted(set(keys)))
    bind_text = "[%s]" % bind if ":" in bind and not bind.startswith("[") else bind
    guarded = bool(keys)
    rate = numbers["serve_edge_unauthenticated_rate"]
    frontend = [
        "bind %s:%d" % (bind_text or "*", api_port),
        "option forwardfor",
        "# Two Authorization headers could name one key here and another to vLLM.",
        "http-request return %s if { req.fhdr_cnt(authorization) gt 1 }" % _answer(400),
        "acl dspark_trusted src %s" % " ".join(sources),
        "acl dspark_probe_path path -m str %s" % " ".join(PROBE_PATHS),
        "acl dspark_api_path path -m str %s" % " ".join(paths) if paths else "acl dspark_api_path always_false",
        "# The routers' health checks and the monitor's scrape: no key, from their addresses only.",
        "http-request allow if dspark_probe_path METH_GET dspark_trusted",
    ]
    if routers:
        frontend += [
            "# To a router, the engine unreachable is %d, which it retries on another group: nothing reached an engine."
            % ROUTER_RETRY_STATUS,
            "acl dspark_router src %s" % " ".join(routers),
            "http-after-response set-status %d if { status 503 } { res.hdr(%s) -m str %s } dspark_router"
            % (ROUTER_RETRY_STATUS, UNREACHABLE_HEADER, UNREACHABLE_VALUE),
        ]
    if guarded:
        frontend += [
            "# A valid key: the scheme `bearer` in any case and one space (as vLLM splits it), the rest hashed and",
            "# looked up among the group's keys' hashes (%s, 0600): no key is in any file of the edge." % settings["keys_path"],
            "acl dspark_bearer %s" % SCHEME_ACL,
            "acl dspark_key_ok %s -m str -f %s" % (KEY_SAMPLE, settings["keys_path"]),
        ]
        if rate > 0:
            frontend += [
                "# Requests without a valid key (any path), per source address: over %d in 10 s, 429." % rate,
                "stick-table type ipv6 size 100k expire 60s store http_req_rate(10s)",
                "http-request track-sc0 src unless dspark_bearer dspark_key_ok",
                "http-request return %s hdr Retry-After 10 if { sc0_http_req_rate gt %d }" % (_answer(429), rate),
            ]
    frontend += [
        "# Only the API paths, byte for byte (HAProxy does not normalise: /v1/models/../metrics matches none).",
        "http-request return %s unless dspark_api_path" % _answer(404),
    ]
    if guarded:
        frontend.append("http-request return %s hdr WWW-Authenticate Bearer unless dspark_bearer dspark_key_ok"
                        % _answer(401))
    frontend.append("default_backend dspark_engine")
    sections = [
        ("global", [
            "log /dev/log local0 notice",
            "chroot /var/lib/haproxy",
            "user haproxy",
            "group haproxy",
            "maxconn %d" % numbers["serve_edge_maxconn"],
            "# A reload leaves the old process to finish its streams, for at most this long.",
            "hard-stop-after %ds" % numbers["serve_edge_timeout_server"],
        ]),
        ("defaults", [
            "log global",
            "mode http",
            "# Errors only (a refused request, the engine unreachable); no header is ever logged.",
            "option httplog",
            "option dontlog-normal",
            "option dontlognull",
            "timeout connect 2s",
            "# Streamed completions: long inactivity timeouts (a long prefill sends nothing for minutes).",
            "timeout client %ds" % numbers["serve_edge_timeout_client"],
            "timeout server %ds" % numbers["serve_edge_timeout_server"],
            "timeout http-request 30s",
            "timeout http-keep-alive 10s",
        ]),
        ("frontend dspark_edge", frontend),
        ("backend dspark_engine", [
            "# vLLM on loopback only. A request that cannot connect is answered 503 at once (no retry: HAProxy waits a",
            "# second before each, and the routers' checks would time out instead of reading the 503), with the header",
            "# the readiness proof reads as `not listening`; the engine's own 503 (a dead engine) has none.",
            "retries 0",
            "http-error %s hdr %s %s" % (_answer(503), UNREACHABLE_HEADER, UNREACHABLE_VALUE),
            "server engine 127.0.0.1:%d" % engine_port,
        ]),
    ]
    lines = ["# Written by dspark.cluster's serve role: the API edge of group %s (docs/design-serve-edge.md)."
             % settings["group"]]
    for name, body in sections:
        lines += ["", name] + ["    " + line for line in body]
    config = "\n".join(lines) + "\n"
    for line in lines:
        if re.search(r"[\x00-\x1f\x7f]", line):
            raise ValueError("the edge's configuration would get a control character: %r" % line)
    return {"config": config, "key_hashes": hashes, "unit": unit(settings["config_path"], settings["group"]),
            "problems": [], "sources": sources}


def unit(config_path, group):
    """The systemd unit: HAProxy in master-worker mode, checked before each start and reload (a reload keeps the
    streams of the old process)."""
    return "\n".join([
        "# Written by dspark.cluster's serve role: the API edge of group %s." % group,
        "[Unit]",
        "Description=dspark.cluster API edge of group %s (HAProxy: keys checked on every path)" % group,
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=notify",
        "ExecStartPre=/usr/sbin/haproxy -c -q -f %s" % config_path,
        "ExecStart=/usr/sbin/haproxy -Ws -f %s -p /run/dspark-edge.pid" % config_path,
        "ExecReload=/usr/sbin/haproxy -c -q -f %s" % config_path,
        "ExecReload=/bin/kill -USR2 $MAINPID",
        "KillMode=mixed",
        "Restart=always",
        "RestartSec=2s",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])
