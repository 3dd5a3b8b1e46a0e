"""The filter dspark.cluster.serve_edge: the serve role's variables by their names (_serve_edge.VARIABLES, handed over
by the lookup role_vars with reads='serve_edge'), a missing one named, and the trusted sources gathered from the
routers, the monitors and serve_edge_trusted_cidrs; a sidecar's lines (issue #46), and the text without sidecars as it was
before them. The configuration itself: tests/unit/playbooks/test_serve_edge_haproxy.py."""

import hashlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dspark.cluster.plugins.filter.serve_edge import serve_edge
from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_engines, _serve_edge

SETTINGS = {"serve_host": "0.0.0.0", "serve_engine_port": 18888, "serve_edge_allowed_paths": ["/v1/models"],
            "serve_edge_trusted_cidrs": ["10.9.0.0/16"], "serve_edge_unauthenticated_rate": 5,
            "serve_edge_maxconn": 100, "serve_edge_timeout_client": 600, "serve_edge_timeout_server": 601,
            "group": "pair_a", "api_port": 8888, "keys": ["k"], "keys_path": "/etc/dspark/serve/edge-keys.sha256",
            "config_path": "/etc/dspark/serve/edge.cfg"}


def test_the_role_variables_by_their_names_reach_the_configuration():
    plan = serve_edge(SETTINGS, [{"inventory_hostname": "r", "dspark_mgmt_address": "10.1.0.5"}])
    assert plan["problems"] == []
    assert plan["sources"] == ["127.0.0.0/8", "::1/128", "10.1.0.5/32", "10.9.0.0/16"]
    for line in ("bind 0.0.0.0:8888", "maxconn 100", "timeout client 600s", "timeout server 601s",
                 "hard-stop-after 601s", "server engine 127.0.0.1:18888", "acl dspark_api_path path -m str /v1/models",
                 "over 5 in 10 s"):
        assert line in plan["config"], line
    assert set(SETTINGS) >= set(_serve_edge.VARIABLES)


def test_a_missing_variable_is_named():
    settings = {k: v for k, v in SETTINGS.items() if k not in ("serve_edge_maxconn", "serve_host")}
    with pytest.raises(AnsibleFilterError, match="serve_host, serve_edge_maxconn not given"):
        serve_edge(settings)


def test_only_the_routers_get_the_retry_status():
    """425 for the engine unreachable goes to the routers' addresses alone (they retry it on another group); the
    monitors, the trusted CIDRs and the proof on loopback keep the marked 503."""
    plan = serve_edge(SETTINGS, [{"inventory_hostname": "r", "dspark_mgmt_address": "10.1.0.5"}],
                      [{"inventory_hostname": "m", "dspark_mgmt_address": "10.1.0.6"}])
    assert "    acl dspark_router src 10.1.0.5/32\n" in plan["config"]
    assert ("http-after-response set-status 425 if { status 503 } { res.hdr(X-Dspark-Edge) -m str engine-unreachable }"
            " dspark_router") in plan["config"]
    alone = serve_edge(SETTINGS, [], [{"inventory_hostname": "m", "dspark_mgmt_address": "10.1.0.6"}])
    assert alone["problems"] == [] and "dspark_router" not in alone["config"] and "425" not in alone["config"]


# --------------------------------------------------------------------------- sidecar engines (issue #46)

ROUTER = [{"inventory_hostname": "r", "dspark_mgmt_address": "10.1.0.5"}]
MONITOR = [{"inventory_hostname": "m", "dspark_mgmt_address": "10.1.0.6"}]
# The configuration of SETTINGS with ROUTER and MONITOR as the module wrote it before sidecars existed (git 2524433):
# running heads compare digests, and a changed text reloads every edge of a fleet; without sidecars it stays this one.
BEFORE_SIDECARS = "b4ef964df3e19038cd99b227ca713ea4fc22c11e4e5da874d0bce29e51c41c09"
# A sidecar as the inventory writes it (dspark_sidecars): the edge reads name, api_port and engine_port alone.
VL = {"name": "vl", "model": "cyankiwi/Qwen3-VL-4B-Instruct-AWQ-4bit", "revision": "0" * 40, "api_port": 8889,
      "master_port": 25100, "gpu_memory_utilization": 0.12}


def test_without_sidecars_the_configuration_is_the_one_before_them():
    plans = [serve_edge(dict(SETTINGS, **extra), ROUTER, MONITOR) for extra in ({}, {"engines": None}, {"engines": []})]
    assert hashlib.sha256(plans[0]["config"].encode("utf-8")).hexdigest() == BEFORE_SIDECARS
    assert plans[1] == plans[0] and plans[2] == plans[0]


def test_a_sidecar_gets_a_bind_and_a_backend_and_every_rule_of_the_main_engine():
    plain = serve_edge(SETTINGS, ROUTER, MONITOR)["config"].splitlines()
    plan = serve_edge(dict(SETTINGS, engines=[VL]), ROUTER, MONITOR)
    assert plan["problems"] == []
    lines = plan["config"].splitlines()
    bind = lines.index("    bind 0.0.0.0:8888")
    assert lines[bind + 1:bind + 3] == [
        "    # The sidecars' API ports (dspark_sidecars): every rule below holds on each, the port picks the engine.",
        "    bind 0.0.0.0:8889"]
    use = lines.index("    default_backend dspark_engine")
    assert lines[use - 2:use] == ["    # Each sidecar's API port to its own engine; the main engine's to the default.",
                                  "    use_backend dspark_engine_vl if { dst_port 8889 }"]
    # After every http-request rule: HAProxy runs those first anyway, and warns about a use_backend above one.
    assert max(i for i, line in enumerate(lines) if "http-request" in line) < use - 2
    # The one frontend's rules (key check, paths, probes, rate limit, 425 to the routers) hold on both ports: the
    # configuration is the one without sidecars plus these lines and the sidecar's backend.
    assert [line for line in lines[:lines.index("backend dspark_engine_vl") - 1] if line not in lines[bind + 1:bind + 3]
            and line not in lines[use - 2:use]] == plain
    assert lines[lines.index("backend dspark_engine_vl"):] == [
        "backend dspark_engine_vl",
        "    # The sidecar vl's vLLM on loopback only, as dspark_engine.",
        "    retries 0",
        plain[plain.index("    retries 0") + 1],   # the marked 503 while nothing listens, as the main engine's
        "    server engine 127.0.0.1:18889",     # api_port + 10000 unless engine_port is set
    ]
    other = serve_edge(dict(SETTINGS, engines=[dict(VL, engine_port=28889)]))["config"]
    assert "    server engine 127.0.0.1:28889\n" in other


def test_the_sidecar_rules_are_the_group_engines_ones():
    """A name becomes part of a backend's name: the rule is _group_engines' (copied: that module brings PyYAML)."""
    assert (_serve_edge.SIDECAR_NAME_RE.pattern, _serve_edge.MAIN_ENGINE, _serve_edge.SIDECARS_VAR,
            _serve_edge.ENGINE_PORT_OFFSET) == (_group_engines.NAME_RE.pattern, _group_engines.MAIN, _group_engines.VAR,
                                                _group_engines.ENGINE_PORT_OFFSET)
