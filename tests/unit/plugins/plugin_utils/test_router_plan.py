"""The router's plan (plugin_utils._router_plan): serving groups, heads, one backend server per group, the sections of
haproxy.cfg (the edge of issue #26) and what the drain, enable and status playbooks say."""

import pytest

from ansible_collections.dspark.cluster.plugins.filter.router_haproxy import router_haproxy
from ansible_collections.dspark.cluster.plugins.filter.router_message import router_message
from ansible_collections.dspark.cluster.plugins.filter.router_plan import router_plan
from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_plan

from ansible.errors import AnsibleFilterError

GROUPS = {"dspark": ["a0", "a1", "b0", "b1", "x"], "pair_a": ["a0", "a1"], "pair_b": ["b1", "b0"], "dspark_router": ["r"]}
HOSTVARS = {
    "a0": {"dspark_group": "pair_a", "dspark_rank": 0, "dspark_mgmt_address": "10.0.0.1", "ansible_host": "127.0.0.1",
           "serve_api_key": "k-a"},
    "a1": {"dspark_group": "pair_a", "dspark_rank": 1},
    "b0": {"dspark_group": "pair_b", "dspark_rank": "0", "ansible_host": "10.0.0.3", "dspark_api_port": "9000",
           "serve_served_model_name": "other", "serve_api_keys": ["k-b1", "k-b2"]},
    "b1": {"dspark_group": "pair_b", "dspark_rank": 1},
    "x": {"dspark_group": ""},
    "r": {},
}
SETTINGS = {
    "router_admin_socket": "/run/haproxy/admin.sock", "router_admin_socket_mode": "600", "router_maxconn": 4096,
    "router_state_file": "/var/lib/haproxy/server-state", "router_hard_stop_after": 1800, "router_timeout_connect": 5,
    "router_timeout_client": 1800, "router_timeout_server": 1800, "router_timeout_http_request": 30,
    "router_timeout_queue": 60, "router_health_timeout": 2, "router_bind_address": "0.0.0.0", "router_port": 8080,
    "router_tls_port": 8443, "tls": False, "tls_pem": "/etc/haproxy/dspark-tls/router.pem",
    "router_group_header": "X-Dspark-Group", "router_frontend_name": "dspark_api", "router_backend_name": "dspark", "router_balance": "leastconn",
    "router_allowed_paths": ["/v1/chat/completions", "/v1/models"], "router_key_rate_limit": 50,
    "router_key_concurrency_limit": 64, "router_max_body_bytes": 1024, "router_health_path": "/health",
    "router_retries": 3, "router_health_interval": 2, "router_health_fast_interval": 1, "router_health_fall": 2,
    "router_health_rise": 2, "router_stats_port": 0,
}


def test_every_serving_group_and_one_server_per_head():
    found = _router_plan.plan(GROUPS, HOSTVARS)
    assert found["serving_groups"] == ["pair_a", "pair_b"]
    assert found["heads"] == {"pair_a": ["a0"], "pair_b": ["b0"]}
    assert found["servers"] == [
        {"name": "pair_a", "head": "a0", "address": "10.0.0.1", "port": 8888, "model": "deepseek-v4-flash"},
        {"name": "pair_b", "head": "b0", "address": "10.0.0.3", "port": 9000, "model": "other"}]
    assert found["model"] == "deepseek-v4-flash"
    assert "k-a" not in repr(found) and "k-b1" not in repr(found)     # the router never reads a key


def test_router_settings_win():
    found = router_plan(HOSTVARS, GROUPS, ["pair_b"], "served")
    assert [s["name"] for s in found["servers"]] == ["pair_b"] and found["servers"][0]["model"] == "served"
    assert found["model"] == "served"


def test_a_group_without_one_head_has_no_server():
    hostvars = dict(HOSTVARS, a1=dict(HOSTVARS["a1"], dspark_rank=0))
    found = _router_plan.plan(GROUPS, hostvars, ["pair_a", "missing"])
    assert found["heads"] == {"pair_a": ["a0", "a1"], "missing": []}
    assert found["servers"] == [] and found["model"] == "deepseek-v4-flash"


def test_the_inventory_name_is_the_last_address():
    found = _router_plan.plan({"g": ["h"]}, {"h": {"dspark_rank": 0}}, ["g"], "m")
    assert found["servers"][0]["address"] == "h" and found["model"] == "m"


def sections(**overrides):
    return _router_plan.haproxy(dict(SETTINGS, **overrides), _router_plan.plan(GROUPS, HOSTVARS))


def directives(lines):
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def test_the_frontend_forwards_exact_paths_and_limits_each_key():
    front = directives(sections()["frontend"])
    assert front[:2] == ["bind 0.0.0.0:8080", "option forwardfor"]
    assert front[2] == "acl dspark_api_path path -m str /v1/chat/completions /v1/models"
    assert front[3].startswith("http-request return status 404 ") and front[3].endswith(" unless dspark_api_path")
    assert front[4].endswith("if { req.fhdr_cnt(authorization) gt 1 }")
    assert front[5].startswith("http-request return status 413 ") and front[5].endswith("gt 1024 }")
    assert front[6].startswith("http-request return status 411 ")
    assert front[7] == "stick-table " + _router_plan.KEY_TABLE
    assert front[8:10] == ["http-request track-sc0 req.fhdr(authorization),regsub(^bearer\\ +,,i),sha2(256)"
                           " if { req.fhdr(authorization) -m found }",
                           "http-request track-sc0 src,sha2(256) unless { req.fhdr(authorization) -m found }"]
    assert front[10].endswith("hdr Retry-After 1 if { sc0_http_req_rate gt 50 }") and "status 429" in front[10]
    assert front[11].endswith("hdr Retry-After 1 if { sc0_conn_cur gt 64 }") and "status 429" in front[11]
    assert front[12] == "http-response sc-set-gpt0(0) 1 if { status 200:299 }"
    assert front[13:] == ["http-response set-header X-Dspark-Group %[srv_name]", "default_backend dspark"]
    # The raw key is never a sample of any rule: only its hash is tracked, and nothing is captured.
    text = "\n".join(front)
    assert "capture" not in text and text.count("req.fhdr(authorization)") == 3


def test_limits_at_0_are_off():
    front = directives(sections(router_key_rate_limit=0, router_key_concurrency_limit=0, router_max_body_bytes=0)["frontend"])
    assert not [line for line in front if "track-sc0" in line or "stick-table" in line or "status 4" in line
                and "status 404" not in line and "status 400" not in line]
    front = directives(sections(router_key_rate_limit=0)["frontend"])
    assert [line for line in front if "sc0_" in line] == [line for line in front if "sc0_conn_cur gt 64" in line]


def test_the_per_source_cap_counts_the_heads_401s_and_spares_proven_keys():
    found = sections(router_unauthenticated_rate=7)
    front = directives(found["frontend"])
    cap = front.index("http-request track-sc1 src table dspark_sources")
    assert front[cap + 1] == "http-response sc-inc-gpc0(1) if { status 401 }"
    assert front[cap + 2].startswith("http-request return status 429 ")
    assert front[cap + 2].endswith("hdr Retry-After 10 if { sc1_gpc0_rate(dspark_sources) gt 7 } !{ sc0_get_gpt0 eq 1 }")
    assert cap > front.index("http-response sc-set-gpt0(0) 1 if { status 200:299 }")
    assert directives(found["sources"]) == ["backend dspark_sources", "stick-table " + _router_plan.SOURCE_TABLE]
    # Without per-key limits there is no key table: the cap holds for every request of the address.
    front = directives(sections(router_unauthenticated_rate=7, router_key_rate_limit=0,
                                router_key_concurrency_limit=0)["frontend"])
    assert front[-3].endswith("if { sc1_gpc0_rate(dspark_sources) gt 7 }")
    assert sections(router_unauthenticated_rate=0)["sources"] == [] and "sc1" not in "\n".join(
        directives(sections(router_unauthenticated_rate=0)["frontend"]))


def test_the_health_check_sends_no_key():
    back = directives(sections()["backend"])
    assert "http-check send meth GET uri /health ver HTTP/1.1 hdr Host dspark-router" in back
    assert "http-check expect status 200" in back and not [line for line in back if "Authorization" in line]
    assert [line for line in back if line.startswith("server ")] == ["server pair_a 10.0.0.1:8888", "server pair_b 10.0.0.3:9000"]


def test_tls_stats_and_ipv6():
    found = _router_plan.haproxy(dict(SETTINGS, tls=True, router_port=0, router_stats_port=8404, router_group_header=""),
                                 {"servers": [{"name": "g", "head": "h", "address": "fd00::5", "port": 8888}]})
    front = directives(found["frontend"])
    assert front[0] == "bind 0.0.0.0:8443 ssl crt /etc/haproxy/dspark-tls/router.pem alpn h2,http/1.1"
    assert not [line for line in front if line.startswith("http-response set-header")]
    assert [line.strip() for line in found["global"] if "ssl-default-bind-options" in line] == [
        "ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets"]
    assert "server g [fd00::5]:8888" in directives(found["backend"])
    assert found["stats"][2:4] == ["frontend stats", "    bind 127.0.0.1:8404"]
    assert sections()["stats"] == []


def test_under_tls_the_plain_port_refuses_keys_first():
    """Issue #41: TLS with the plain port on - the first rule answers 403 to a key that did not come over TLS."""
    front = directives(sections(tls=True, router_tls_port=9443)["frontend"])
    assert front[:2] == ["bind 0.0.0.0:8080", "bind 0.0.0.0:9443 ssl crt /etc/haproxy/dspark-tls/router.pem alpn h2,http/1.1"]
    refusal = front[4]
    assert refusal.startswith("http-request return status 403 content-type application/json string '")
    assert refusal.endswith("' if !{ ssl_fc } { req.fhdr_cnt(authorization) gt 0 }")
    assert "to port 9443 of this host" in refusal and '"code": 403' in refusal
    assert front[5].startswith("acl dspark_api_path ")                  # before the paths, the limits, everything
    # No refusal without TLS (the plain port is the endpoint) nor without a plain port (nothing to refuse on).
    for overrides in ({}, {"tls": True, "router_port": 0}):
        assert not [line for line in directives(sections(**overrides)["frontend"]) if "status 403" in line], overrides


@pytest.mark.parametrize("overrides", [
    {"router_allowed_paths": ["/v1/models\n    http-request allow"]},
    {"router_allowed_paths": ["/v1/../metrics"]},
    {"router_allowed_paths": ["/v1/models x"]},
    {"router_admin_socket": "/run/a.sock level admin\n    stats socket ipv4@0.0.0.0:9999"},
    {"router_health_path": "/health\r\nX"},
    {"router_port": "8080\n    bind :9999"},
    {"router_frontend_name": "api\n    bind :9999"},
    {"router_bind_address": "0.0.0.0:8080 ssl"},
    {"router_group_header": "X-Group %[req.hdr(authorization)]"},
    {"router_balance": "source"},
    {"router_key_rate_limit": True},
])
def test_nothing_can_add_a_directive(overrides):
    with pytest.raises(ValueError):
        sections(**overrides)
    with pytest.raises(AnsibleFilterError):
        router_haproxy(dict(SETTINGS, **overrides), _router_plan.plan(GROUPS, HOSTVARS))


@pytest.mark.parametrize("path, ok", [
    ("/v1/chat/completions", True), ("/v1/models", True), ("/tokenize", True), ("/openapi.json", True),
    ("/v1/models/deepseek-v4-flash", True), ("/v1/a.b", True), ("/", False), ("", False), ("v1/models", False),
    ("/v1/models/", False), ("//v1/models", False), ("/v1/../metrics", False), ("/v1/./models", False),
    ("/v1/%2e%2e/metrics", False), ("/v1/models?x=1", False), ("/v1/models x", False), ("/v1/models\n", False),
    ("/v1/'models", False), ("/v1/...", False),
])
def test_the_path_pattern(path, ok):
    assert bool(_router_plan.PATH_RE.match(path)) == ok


SERVER = {"name": "pair_a", "status": "UP", "admin": "ready", "in_rotation": True, "sessions": 2, "seconds_since_change": 7,
          "check_status": "L7OK", "last_check": "200"}


def test_what_the_playbooks_say():
    down = dict(SERVER, name="pair_b", status="DOWN", admin="drain", in_rotation=False)
    assert router_message({"ok": True, "servers": [SERVER, down], "service_address": None}, "status", "r", "dspark") == [
        "pair_a: UP, ready, in rotation, 2 open session(s), health changed 7s ago, last check L7OK 200",
        "pair_b: DOWN, drain, OUT of rotation, 2 open session(s), health changed 7s ago, last check L7OK 200"]
    assert router_message({"ok": False, "servers": []}, "status", "r", "dspark") == ["HAProxy on r has no backend dspark"]
    held = {"ok": True, "servers": [SERVER], "service_address": {"address": "10.0.0.200", "holds": True,
                                                                 "check_passes": True}}
    assert router_message(held, "status", "r", "dspark")[0] == (
        "r HOLDS the service address 10.0.0.200; keepalived's check passes (it may take the address)")
    cut_off = dict(held, service_address={"address": "10.0.0.200", "holds": False, "check_passes": False})
    assert router_message(cut_off, "status", "r2", "dspark")[0].startswith(
        "r2 does not hold the service address 10.0.0.200; keepalived's check FAILS")
    assert router_message([SERVER, down], "others", "r", "pair_a") == "pair_b DOWN drain"
    assert router_message([SERVER], "others", "r", "pair_a") == "none"
    drained = {"bound_hit": False, "sessions_left": 0, "waited_seconds": 1.5, "sessions_at_start": 2}
    assert router_message(drained, "drain", "r", "pair_a", False, 300) == (
        "pair_a on r: drained: no new requests, open sessions 0 after 1.5 s (2 at the start).")
    assert router_message(dict(drained, bound_hit=True, sessions_left=1), "drain", "r", "pair_a", False, 2) == (
        "pair_a on r: DRAIN BOUND HIT: still 1 open session(s) after 1.5 s (router_drain_timeout=2); it stays drained "
        "(no new requests), its open requests were not cut.")
    assert router_message(drained, "drain", "r", "pair_a", True, 2) == "pair_a on r: would be drained (check mode)."
    assert router_message({"ok": True, "waited_seconds": 3}, "enable", "r", "pair_a") == (
        "pair_a on r: back in rotation (health check passed after 3 s).")
    assert router_message({"ok": False, "server": dict(SERVER, status="DOWN", check_status="L7STS", last_check="503")},
                          "enable", "r", "pair_a") == "pair_a on r: NOT back in rotation: DOWN, last check L7STS 503."
    assert router_message({}, "enable", "r", "pair_a", True) == (
        "pair_a on r: would be put back in rotation once healthy (check mode).")
    with pytest.raises(AnsibleFilterError):
        router_message({}, "other", "r", "pair_a")
