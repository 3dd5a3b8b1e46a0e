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

A group's sidecar engines (issue #46, ``dspark_sidecars``) each answer on their own API port of the same edge: one more
``bind`` of the one frontend, so every rule above holds on every port alike (and the cap of requests without a valid
key counts a source's requests on all of them together), and a backend of their own to their vLLM on loopback, chosen
by the port the request came in on.

Pure Python, no Ansible imports.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_engines, _inputs, _router_plan

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
# A group's sidecars (issue #46) as _group_engines reads them: the list's variable, a sidecar's name (it becomes part of
# a backend's name here) and its engine port's default.
SIDECARS_VAR = _group_engines.VAR
SIDECAR_NAME_RE = _group_engines.NAME_RE
MAIN_ENGINE = _group_engines.MAIN
ENGINE_PORT_OFFSET = _group_engines.ENGINE_PORT_OFFSET
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


def _engines(value, owners, problems):
    """The sidecars the edge fronts: [(name, api_port, engine_port)] from ``settings["engines"]`` (None or [] for
    none; each a mapping with name, api_port and engine_port, which defaults to api_port + 10000; other keys are
    ignored, so _group_engines' engines and the inventory's dspark_sidecars both do). ``owners`` maps each port the
    edge already uses to its variable. Every port is the edge's once: HAProxy cannot bind a port twice, and an API
    port that is also an engine port would send requests back into the edge or to another engine."""
    if value is None or value == []:
        return []
    if not isinstance(value, list):
        problems.append("%s=%r is not a list of engines; fix: give each sidecar as a mapping with its name, api_port "
                        "and engine_port, or none" % (SIDECARS_VAR, value))
        return []
    engines, names = [], set()
    for index, entry in enumerate(value):
        field = "%s[%d]" % (SIDECARS_VAR, index)
        if not isinstance(entry, dict):
            problems.append("%s=%r is not a mapping; fix: give the sidecar's name, api_port and engine_port" % (field, entry))
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not SIDECAR_NAME_RE.match(name) or name == MAIN_ENGINE:
            problems.append("%s.name=%r is not a sidecar name; fix: lower-case letters, digits and '-', at most 16, "
                            "starting with a letter, not %r (the main engine's), e.g. vl" % (field, name, MAIN_ENGINE))
        elif name in names:
            problems.append("%s.name=%r is also another sidecar's; fix: give every sidecar its own name" % (field, name))
        names.add(name)
        ports = []
        for key in ("api_port", "engine_port"):
            raw = entry.get(key)
            if key == "engine_port" and raw is None:
                if ports[0] is None:
                    ports.append(None)   # no default without an API port (named above)
                    continue
                raw = ports[0] + ENGINE_PORT_OFFSET
            port = _inputs.as_port(raw)
            if port is None:
                problems.append("%s.%s=%r is not a TCP port (1-65535); fix: set it to a free port number that no other "
                                "engine of the group uses" % (field, key, raw))
            elif port in owners:
                problems.append("%s.%s=%d is also %s: the edge binds every API port once and sends each engine's "
                                "requests to its own loopback port; fix: give %s.%s a free port that no other engine "
                                "of the group uses%s" % (field, key, port, owners[port], field, key,
                                                         " (unset, it is api_port + %d)" % ENGINE_PORT_OFFSET
                                                         if key == "engine_port" and entry.get(key) is None else ""))
            else:
                owners[port] = "%s.%s" % (field, key)
            ports.append(port)
        engines.append((name, ports[0], ports[1]))
    return engines


def _backend(engine_port):
    """A backend's lines after its comment: vLLM on loopback, the marked 503 while nothing listens there."""
    return [
        "retries 0",
        "http-error %s hdr %s %s" % (_answer(503), UNREACHABLE_HEADER, UNREACHABLE_VALUE),
        "server engine 127.0.0.1:%d" % engine_port,
    ]


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
    (variable, address or network): routers, monitors, serve_edge_trusted_cidrs), keys_path, config_path; optional
    engines: the group's sidecars (dspark_sidecars; name, api_port, engine_port each), fronted as the main engine is.
    Without engines the configuration is the same text as before they existed: a changed one reloads every edge.
    """
    problems = []
    api_port = _port(settings["api_port"], "dspark_api_port", problems)
    engine_port = _port(settings["serve_engine_port"], "serve_engine_port", problems)
    if api_port and api_port == engine_port:
        problems.append("serve_engine_port=%d equals dspark_api_port: the engine listens on loopback behind the edge, "
                        "which takes dspark_api_port; fix: give serve_engine_port another free port" % engine_port)
    owners = {port: var for port, var in ((api_port, "dspark_api_port"), (engine_port, "serve_engine_port")) if port}
    engines = _engines(settings.get("engines"), owners, problems)
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
    frontend = ["bind %s:%d" % (bind_text or "*", api_port)]
    if engines:
        frontend.append("# The sidecars' API ports (dspark_sidecars): every rule below holds on each, the port picks the engine.")
        frontend += ["bind %s:%d" % (bind_text or "*", port) for dummy, port, dummy2 in engines]
    frontend += [
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
    if engines:
        # After every http-request rule (HAProxy runs those first whatever the order, and warns otherwise).
        frontend.append("# Each sidecar's API port to its own engine; the main engine's to the default.")
        frontend += ["use_backend dspark_engine_%s if { dst_port %d }" % (name, port) for name, port, dummy in engines]
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
        ] + _backend(engine_port)),
    ]
    sections += [("backend dspark_engine_%s" % name, ["# The sidecar %s's vLLM on loopback only, as dspark_engine." % name]
                  + _backend(port)) for name, dummy, port in engines]
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
