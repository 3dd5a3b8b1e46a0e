"""The filter dspark.cluster.serve_edge: the serve role's variables by their names (_serve_edge.VARIABLES, handed over
by the lookup role_vars with reads='serve_edge'), a missing one named, and the trusted sources gathered from the
routers, the monitors and serve_edge_trusted_cidrs. The configuration itself: tests/unit/playbooks/test_serve_edge_haproxy.py."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dspark.cluster.plugins.filter.serve_edge import serve_edge
from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_edge

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
