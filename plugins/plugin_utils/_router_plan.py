# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The router's view of the fleet and its HAProxy configuration (private; issues #25, #26).

The one copy of what roles/router computed in Jinja: the filters ``dspark.cluster.router_plan``,
``dspark.cluster.router_haproxy`` and ``dspark.cluster.router_message`` hand it to the role, and the router's input
rules (plugin_utils._role_rules, role ``router``) read the same plan. A group's head is its member of dspark_rank 0
(plugin_utils._group_model's integer reading). Pure Python, no Ansible imports: ``hostvars`` is any mapping of
host -> mapping of variables.

The edge (issue #26, docs/design-router-edge.md): only the paths of ``router_allowed_paths`` reach a head, compared
byte for byte with the request's path; per-key limits on requests per second and concurrent requests, keyed by the
SHA-256 of the Authorization header (the client's address without one), never the key itself; a bounded, declared
request body; a health check (GET /health) that carries no key; and, with TLS on, no key taken on the plain port
(issue #41: 403 before anything is forwarded).
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_model

DEFAULT_MODEL = "deepseek-v4-flash"
DEFAULT_API_PORT = 8888
# The heads' edge answers a router 425 (Too Early) while its engine does not listen: the request reached no engine, so
# the router retries it on another group. vLLM never answers 425, HAProxy only for TLS early data (not taken there).
EDGE_RETRY_STATUS = 425
# The peers section of several routers (plugin_utils._router_vrrp).
PEERS_NAME = "dspark_routers"

# An allowed path: one or more segments of letters, digits and _ . -, no segment of dots only (so no `..`), no `%`,
# no `//`, no white space or quotes: safe to write into haproxy.cfg, and the request must equal it byte for byte.
PATH_RE = re.compile(r"^(/(?!\.+(/|$))[A-Za-z0-9_.-]+)+\Z")
# Values written into haproxy.cfg or the systemd drop-in: names, file paths and the bind address.
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+\Z")
FILE_RE = re.compile(r"^/[A-Za-z0-9_./-]+\Z")
BIND_RE = re.compile(r"^[A-Za-z0-9_.:*-]*\Z")
HEADER_RE = re.compile(r"^[A-Za-z0-9-]*\Z")
CIDR_RE = re.compile(r"^[0-9A-Fa-f.:]+(/[0-9]{1,3})?\Z")
# setting -> the shape its value must have to be written into haproxy.cfg (one word; the input rules say the same).
WORDS = {
    "router_frontend_name": NAME_RE, "router_backend_name": NAME_RE, "router_bind_address": BIND_RE,
    "router_admin_socket": FILE_RE, "router_state_file": FILE_RE, "tls_pem": FILE_RE, "router_group_header": HEADER_RE,
    "router_health_path": PATH_RE, "router_admin_socket_mode": re.compile(r"^6[06]0\Z"),
    "router_balance": re.compile(r"^(leastconn|roundrobin|random|first)\Z"),
    "router_metrics_address": re.compile(r"^[A-Za-z0-9_.:-]+\Z"),
}
_UNSAFE_RE = re.compile(r"[\x00-\x1f\x7f]")

# The stick table of the per-key limits: entries (SHA-256 of a key, or of a client address) kept 60 s after their
# last request; HAProxy drops the oldest when it is full.
# gpt0: set to 1 once a request of that key got a 2xx from a head (a key proven valid; see the per-source cap).
KEY_TABLE = "type binary len 32 size 100k expire 60s store http_req_rate(1s),conn_cur,gpt0"
# The per-source cap of requests without a valid key: per client address, the rate of the heads' 401s over 10 s.
SOURCE_TABLE_NAME = "dspark_sources"
SOURCE_TABLE = "type ipv6 size 100k expire 60s store gpc0_rate(10s)"
# The per-key limits' sample: the Authorization header without its scheme, whatever its case, hashed.
KEY_SAMPLE = "req.fhdr(authorization),regsub(^bearer\\ +,,i),sha2(256)"
# A refused request gets a JSON error the way OpenAI's clients read it. Single-quoted in haproxy.cfg: no ' inside.
_ERRORS = {
    400: ("invalid_request_error", "one Authorization header at most"),
    403: ("invalid_request_error", "this port is plain HTTP and takes no API key: send it over HTTPS, to port %d of this "
                                   "host (a key sent here crossed the network in clear)"),
    404: ("not_found_error", "not found: this endpoint serves the OpenAI API paths only"),
    411: ("invalid_request_error", "a request body needs a Content-Length (no chunked bodies)"),
    413: ("invalid_request_error", "request body larger than %d bytes"),
    429: ("rate_limit_error", "too many %s, retry later"),
}
TLS_GLOBAL = [
    "ssl-default-bind-ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305",
    "ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256",
    "ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets",
]


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


def server(group, head, hvars, served_model_name=""):
    """The backend server of ``group``: its head's management address (dspark_mgmt_address, else ansible_host, else
    the inventory name), API port and served model name. No API key: the router never needs one (issue #26)."""
    address = _group_model.get(hvars, "dspark_mgmt_address", _group_model.get(hvars, "ansible_host", head))
    port = _group_model.as_int(_group_model.get(hvars, "dspark_api_port", DEFAULT_API_PORT))
    return {
        "name": group,
        "head": head,
        "address": str(address),
        "port": 0 if port is None else port,
        "model": served_model_name or _group_model.get(hvars, "serve_served_model_name", DEFAULT_MODEL),
    }


def plan(groups, hostvars, router_groups=None, served_model_name=""):
    """The router's plan: serving_groups, heads (group -> rank-0 members), servers (one per routed group with exactly
    one head) and model (the first server's, else served_model_name or the serve role's default). router_groups None:
    every serving group."""
    every = serving_groups(groups, hostvars)
    routed = every if router_groups is None else list(router_groups)
    found = heads(routed, groups, hostvars)
    servers = [server(group, found[group][0], _group_model.host_vars(hostvars, found[group][0]), served_model_name)
               for group in routed if len(found[group]) == 1]
    model = servers[0]["model"] if servers else (served_model_name or DEFAULT_MODEL)
    return {"serving_groups": every, "heads": found, "servers": servers, "model": model}


# -- haproxy.cfg -------------------------------------------------------------------------------------------------

def wrap(address):
    """An address as HAProxy's `server` line takes it before `:port`: an IPv6 address in brackets."""
    try:
        return "[%s]" % address if ipaddress.ip_address(address).version == 6 else address
    except ValueError:
        return address


def _number(settings, name):
    value = settings[name]
    if isinstance(value, bool):
        raise ValueError("%s=%r is not a number" % (name, value))
    return int(value)


def _error(status, detail=None):
    """`http-request return` arguments of a JSON error answered by the router itself."""
    kind, message = _ERRORS[status]
    body = '{"error": {"message": "%s", "type": "%s", "code": %d}}' % (message % detail if detail else message, kind, status)
    return "return status %d content-type application/json string '%s'" % (status, body)


def edge(settings):
    """The frontend's rules of the edge, in order: keys on the plain port under TLS, paths, Authorization headers, body
    size, per-key limits."""
    paths = list(settings["router_allowed_paths"] or [])
    for path in paths:
        if not isinstance(path, str) or not PATH_RE.match(path):
            raise ValueError("router_allowed_paths has %r, which is not a plain absolute path" % (path,))
    rate, concurrency = _number(settings, "router_key_rate_limit"), _number(settings, "router_key_concurrency_limit")
    body = _number(settings, "router_max_body_bytes")
    lines = []
    if settings.get("tls") and _number(settings, "router_port") > 0:
        lines += [
            "# TLS is on, and the plain port too: a request with an Authorization header there is refused before anything",
            "# else (nothing forwarded, nothing tracked), so a client that sends its key in clear fails at once instead of",
            "# working on. Requests without a key pass as on the TLS port.",
            "http-request %s if !{ ssl_fc } { req.fhdr_cnt(authorization) gt 0 }"
            % _error(403, _number(settings, "router_tls_port")),
        ]
    lines += [
        "# The OpenAI API only (router_allowed_paths): the request's path must equal one of these byte for byte.",
        "# HAProxy does not normalise it, so /v1/models/../metrics, //v1/models, /v1/%6Dodels or /v1/models/ equal none",
        "# and are answered here with 404, never forwarded (vLLM serves /metrics, /tokenize, /docs... without a key).",
        "acl dspark_api_path path -m str %s" % " ".join(paths) if paths else "acl dspark_api_path always_false",
        "http-request %s unless dspark_api_path" % _error(404),
        "# Two Authorization headers could name one key to vLLM and another to the per-key limits.",
        "http-request %s if { req.fhdr_cnt(authorization) gt 1 }" % _error(400),
    ]
    if body > 0:
        lines += [
            "# Bodies: a declared length (Content-Length, which HAProxy holds the body to) of at most router_max_body_bytes;",
            "# a body without one (chunked) could grow past any bound, so it is refused before it is read.",
            "http-request %s if { req.hdr_val(content-length) gt %d }" % (_error(413, body), body),
            "http-request %s if { req.hdr(transfer-encoding) -m found } or !{ req.hdr(content-length) -m found } !METH_GET"
            % _error(411),
        ]
    if rate > 0 or concurrency > 0:
        limit = "hdr Retry-After 1"
        lines += [
            "# Per-key limits: one entry per SHA-256 of the key (the client's address without a header), never the key",
            "# itself; over a limit the router answers 429 with Retry-After. vLLM takes the scheme in any case, so the",
            "# scheme is cut off before the hash (any case, any spaces): every spelling of it shares one entry.",
            "stick-table %s" % KEY_TABLE,
            "http-request track-sc0 %s if { req.fhdr(authorization) -m found }" % KEY_SAMPLE,
            "http-request track-sc0 src,sha2(256) unless { req.fhdr(authorization) -m found }",
        ]
        if rate > 0:
            lines.append("http-request %s %s if { sc0_http_req_rate gt %d }"
                         % (_error(429, "requests per second for this API key"), limit, rate))
        if concurrency > 0:
            lines.append("http-request %s %s if { sc0_conn_cur gt %d }"
                         % (_error(429, "concurrent requests for this API key"), limit, concurrency))
        lines.append("http-response sc-set-gpt0(0) 1 if { status 200:299 }")
    unauthenticated = _number(settings, "router_unauthenticated_rate") if "router_unauthenticated_rate" in settings else 0
    if unauthenticated > 0:
        proven = " !{ sc0_get_gpt0 eq 1 }" if rate > 0 or concurrency > 0 else ""
        lines += [
            "# Requests without a valid key, per client address: the heads' 401s counted over 10 s; over",
            "# router_unauthenticated_rate, that address gets 429 (Retry-After 10) for every request whose key has not",
            "# been answered 2xx here in the last minute. Random keys cannot escape it by filling the per-key table.",
            "http-request track-sc1 src table %s" % SOURCE_TABLE_NAME,
            "http-response sc-inc-gpc0(1) if { status 401 }",
            "http-request %s hdr Retry-After 10 if { sc1_gpc0_rate(%s) gt %d }%s"
            % (_error(429, "requests without a valid API key from this address"), SOURCE_TABLE_NAME, unauthenticated,
               proven),
        ]
    return lines


def sources(settings):
    """The stick table of the per-source cap (a table of its own: a frontend holds one), when the cap is on."""
    unauthenticated = _number(settings, "router_unauthenticated_rate") if "router_unauthenticated_rate" in settings else 0
    if unauthenticated <= 0:
        return []
    return ["", "# Per client address: the heads' 401s (router_unauthenticated_rate).",
            "backend %s" % SOURCE_TABLE_NAME, "    stick-table %s" % SOURCE_TABLE]


def metrics(settings):
    """HAProxy's built-in Prometheus exporter (USE_PROMEX, in Debian's and Ubuntu's builds) on its own frontend: only
    GET /metrics, nothing forwarded, nothing logged; from loopback and router_metrics_allowed_cidrs only (the monitor
    on the router host, the default, needs no CIDR). router_metrics_port 0: none."""
    port = _number(settings, "router_metrics_port") if "router_metrics_port" in settings else 0
    if port <= 0:
        return []
    sources = ["127.0.0.0/8", "::1"] + [str(c) for c in settings.get("router_metrics_allowed_cidrs") or []]
    for cidr in sources:
        if not CIDR_RE.match(cidr):
            raise ValueError("router_metrics_allowed_cidrs holds %r, not an address or network" % cidr)
    return [
        "",
        "# HAProxy's Prometheus exporter (playbooks/monitoring.yml scrapes it): /metrics only, for the monitor only.",
        "frontend dspark_metrics",
        "    bind %s:%d" % (settings["router_metrics_address"], port),
        "    no log",
        "    http-request deny deny_status 403 unless { src %s }" % " ".join(sources),
        "    http-request use-service prometheus-exporter if { path /metrics } METH_GET",
        "    http-request deny deny_status 404",
    ]


def haproxy(settings, router_plan):
    """The sections of haproxy.cfg (global, defaults, frontend, backend, stats), each a list of indented lines.

    ``settings``: the router_* variables the configuration reads (their names as keys), plus ``tls`` (bool) and
    ``tls_pem`` (the certificate+key file). Raises ValueError on a name, path or address of another shape than WORDS
    says, and on a line break or control character in any line: the input rules refuse those values first, this keeps
    a value that got past them out of the file.
    """
    for name, pattern in WORDS.items():
        if name in settings and not (isinstance(settings[name], str) and pattern.match(settings[name])):
            raise ValueError("%s=%r cannot be written into haproxy.cfg safely" % (name, settings[name]))
    tls = bool(settings["tls"])
    port = _number(settings, "router_port")
    stats_port = _number(settings, "router_stats_port")
    bind = settings["router_bind_address"]
    # Several routers (plugin_utils._router_vrrp): the API on the service address only, present or not (transparent:
    # a backup binds it before it holds it), and the limit tables copied between the routers.
    ha = settings.get("ha") or {}
    peers = list(ha.get("peers") or [])
    for name, address, peer_port in peers:
        if not (NAME_RE.match(str(name)) and CIDR_RE.match(str(address)) and isinstance(peer_port, int)):
            raise ValueError("the peer %r at %r:%r cannot be written into haproxy.cfg safely" % (name, address, peer_port))
    if ha.get("vip"):
        bind, nonlocal_bind = ha["vip"], " transparent"
    else:
        nonlocal_bind = ""
    table_peers = " peers %s" % PEERS_NAME if peers else ""
    edge_lines = [line + table_peers if line.startswith("stick-table ") else line for line in edge(settings)]
    sections = {
        "global": [
            "log /dev/log local0",
            "log /dev/log local1 notice",
            "chroot /var/lib/haproxy",
            "# Runtime API: a unix socket only, never TCP. The playbooks drain/enable servers through it.",
            "stats socket %s mode %s level admin expose-fd listeners"
            % (settings["router_admin_socket"], settings["router_admin_socket_mode"]),
            "stats timeout 30s",
            "user haproxy",
            "group haproxy",
            "maxconn %d" % _number(settings, "router_maxconn"),
            "# Saved by the reload hook (systemd drop-in) just before each reload, so drained servers stay drained.",
            "server-state-file %s" % settings["router_state_file"],
            "# A reload leaves the old process to finish its streams, for at most this long.",
            "hard-stop-after %ds" % _number(settings, "router_hard_stop_after"),
        ] + (["# This router's name among the peers that share the limit tables.",
              "localpeer %s" % ha["localpeer"]] if peers else []) + (TLS_GLOBAL if tls else []),
        "defaults": [
            "log global",
            "mode http",
            "# The request line, status, timings; no request header (no Authorization) is ever captured or logged.",
            "option httplog",
            "option dontlognull",
            "timeout connect %ds" % _number(settings, "router_timeout_connect"),
            "# Streamed completions: long inactivity timeouts on both sides (a long prefill sends nothing for minutes).",
            "timeout client %ds" % _number(settings, "router_timeout_client"),
            "timeout server %ds" % _number(settings, "router_timeout_server"),
            "timeout http-request %ds" % _number(settings, "router_timeout_http_request"),
            "timeout http-keep-alive 10s",
            "timeout queue %ds" % _number(settings, "router_timeout_queue"),
            "timeout check %ds" % _number(settings, "router_health_timeout"),
            "load-server-state-from-file global",
        ],
        "frontend": ([] if port <= 0 else ["bind %s:%d%s" % (bind, port, nonlocal_bind)]) + ([
            "bind %s:%d ssl crt %s alpn h2,http/1.1%s" % (bind, _number(settings, "router_tls_port"), settings["tls_pem"],
                                                          nonlocal_bind),
            "http-request set-header X-Forwarded-Proto https if { ssl_fc }",
        ] if tls else []) + ["option forwardfor"] + edge_lines + ([
            "# Which serving group answered (the HAProxy server's name).",
            "http-response set-header %s %%[srv_name]" % settings["router_group_header"],
        ] if settings["router_group_header"] else []) + ["default_backend %s" % settings["router_backend_name"]],
        "backend": [
            "balance %s" % settings["router_balance"],
            "# vLLM's /health: 200 while the API server and its engine live, 503 once the engine core is dead; the API",
            "# listens only once every rank has joined. It needs no key, so the check sends none (a captured check cannot",
            "# serve a completion); it does not prove the served model's name (docs/design-router-edge.md).",
            "option httpchk",
            "http-check send meth GET uri %s ver HTTP/1.1 hdr Host dspark-router" % settings["router_health_path"],
            "http-check expect status 200",
            "# Retries only where the request never reached a backend. conn-failure: the TCP connection to the",
            "# server could not be established (refused, timed out), so nothing was sent. Deliberately NOT",
            "# empty-response, junk-response, response-timeout or 5xx: in those cases the request was sent and the",
            "# group may have started (or finished) generating it, and a completion must never run twice.",
            "# A retry goes to another server (redispatch on every retry), so a group that just died costs no request.",
            "# Also %d, the heads' edge's answer to a router while its engine does not listen (a group that just" % EDGE_RETRY_STATUS,
            "# died or restarts): that request never reached an engine. A last %d (no group took it) is answered 503."
            % EDGE_RETRY_STATUS,
            "# A request body over tune.bufsize cannot be kept for a retry: it gets that 503 at once.",
            "# HAProxy keeps its retries on a status only for a request it had whole before it began sending it, so",
            "# the body is waited for (up to the buffer) before a group is picked.",
            "option http-buffer-request",
            "retries %d" % _number(settings, "router_retries"),
            "retry-on conn-failure %d" % EDGE_RETRY_STATUS,
            "http-response set-status 503 if { status %d }" % EDGE_RETRY_STATUS,
            "option redispatch 1",
            "default-server check inter {i}s fastinter {f}s downinter {i}s fall {fall} rise {rise} observe layer4 error-limit 1 "
            "on-error fastinter".format(i=_number(settings, "router_health_interval"),
                                        f=_number(settings, "router_health_fast_interval"),
                                        fall=_number(settings, "router_health_fall"),
                                        rise=_number(settings, "router_health_rise")),
        ],
        "metrics": metrics(settings),
        "sources": [line + table_peers if line.lstrip().startswith("stick-table ") else line
                    for line in sources(settings)],
        "peers": [] if not peers else [
            "",
            "# The routers copy their limit tables to each other (the service address's holder takes the requests).",
            "peers %s" % PEERS_NAME,
        ] + ["    peer %s %s:%d" % (name, wrap(address), peer_port) for name, address, peer_port in peers],
        "stats": [] if stats_port <= 0 else [
            "",
            "# Read-only stats page, on loopback only.",
            "frontend stats",
            "    bind 127.0.0.1:%d" % stats_port,
            "    stats enable",
            "    stats uri /",
            "    stats refresh 5s",
        ],
    }
    for item in router_plan["servers"]:
        sections["backend"] += ["# group %s: head %s" % (item["name"], item["head"]),
                                "server %s %s:%d" % (item["name"], wrap(item["address"]), item["port"])]
    for name in ("global", "defaults", "frontend", "backend"):
        sections[name] = ["    " + line for line in sections[name]]
    for name, lines in sections.items():
        for line in lines:
            if _UNSAFE_RE.search(line):
                raise ValueError("the HAProxy configuration's %s section would get a line break or control character: %r"
                                 % (name, line))
    return sections


# -- what the drain, enable and status playbooks say -----------------------------------------------------------

def others(servers, group):
    """The servers other than ``group``: 'name status admin', comma-separated, or 'none'."""
    return ", ".join("%s %s %s" % (s["name"], s["status"], s["admin"]) for s in servers if s["name"] != group) or "none"


def status_lines(status, host, backend):
    """One line per server of a status read (the role's _router_result: ok, servers, service_address), or the line that
    HAProxy has no such backend; with several routers, first where the service address is."""
    lines = []
    held = status.get("service_address")
    if held:
        lines.append("%s %s the service address %s; keepalived's check %s" % (
            host, "HOLDS" if held["holds"] else "does not hold", held["address"],
            "passes (it may take the address)" if held["check_passes"]
            else "FAILS (it cannot take the address: HAProxy does not answer or sees no group up)"))
    if not status.get("ok"):
        return lines + ["HAProxy on %s has no backend %s" % (host, backend)]
    return lines + ["%s: %s, %s, %s, %s open session(s), health changed %ss ago, last check %s %s"
                    % (s["name"], s["status"], s["admin"], "in rotation" if s["in_rotation"] else "OUT of rotation",
                       s["sessions"], s["seconds_since_change"], s["check_status"], s["last_check"])
                    for s in status.get("servers") or []]


def drain_message(result, host, group, check_mode, timeout):
    """What a drain did."""
    if check_mode:
        done = "would be drained (check mode)."
    elif result["bound_hit"]:
        done = ("DRAIN BOUND HIT: still %s open session(s) after %s s (router_drain_timeout=%s); it stays drained (no new "
                "requests), its open requests were not cut." % (result["sessions_left"], result["waited_seconds"], timeout))
    else:
        done = "drained: no new requests, open sessions 0 after %s s (%s at the start)." % (
            result["waited_seconds"], result["sessions_at_start"])
    return "%s on %s: %s" % (group, host, done)


def enable_message(result, host, group, check_mode):
    """What an enable did."""
    if check_mode:
        done = "would be put back in rotation once healthy (check mode)."
    elif result["ok"]:
        done = "back in rotation (health check passed after %s s)." % result["waited_seconds"]
    else:
        server_now = result["server"]
        done = "NOT back in rotation: %s, last check %s %s." % (
            server_now["status"], server_now["check_status"], server_now["last_check"])
    return "%s on %s: %s" % (group, host, done)
