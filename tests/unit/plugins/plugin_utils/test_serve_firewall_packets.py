"""The serve firewall with real packets over IPv4, and a sidecar engine's ports (issue #46) in both families: the rendered
ruleset in a throw-away namespace topology (no lab needed; the harness and its addresses: firewall_netns.py). Skipped
where unshare, ip or nft are missing or unprivileged namespaces are not allowed.
"""

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_firewall as fw

import firewall_netns  # noqa: E402  (the namespace harness beside this file)

# (namespace, source, destination, port, expected after the firewall)
CASES = [
    ("fab", "10.77.77.2", "10.77.77.1", 25000, "open"),      # the peer: rendezvous
    ("fab", "10.77.77.2", "10.77.77.1", 41234, "open"),      # the peer: an engine port on the fabric address
    ("fab", "10.77.77.2", "10.77.77.1", 8888, "open"),
    ("fab", "10.77.77.3", "10.77.77.1", 25000, "blocked"),   # a stranger on the fabric wire
    ("fab", "10.77.77.3", "10.77.77.1", 41234, "blocked"),
    ("fab", "10.77.77.3", "10.77.77.1", 8888, "blocked"),
    ("fab", "10.77.77.3", "10.77.77.1", 22, "open"),         # SSH always
    ("mgmt", "10.0.0.5", "10.0.0.1", 8888, "open"),          # serve_api_allowed_cidrs
    ("mgmt", "10.0.0.9", "10.0.0.1", 8888, "open"),          # the router
    ("mgmt", "10.0.0.20", "10.0.0.1", 8888, "blocked"),      # anyone else
    ("mgmt", "10.0.0.5", "10.0.0.1", 25000, "blocked"),      # the rendezvous port from the management side
    ("mgmt", "10.0.0.20", "10.77.77.1", 41234, "blocked"),   # the fabric address reached over the management side
    ("mgmt", "10.0.0.20", "10.0.0.1", 22, "open"),
    ("mgmt", "10.0.0.20", "10.0.0.1", 5000, "open"),         # an operator's other service: untouched
    ("node", "127.0.0.1", "127.0.0.1", 8888, "open"),        # loopback (tp_api_probe, verify.yml)
]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    model = {"group": "pair_a", "host": "a0", "addresses": {"a0": "10.77.77.1", "a1": "10.77.77.2"}, "peers": ["a1"],
             "master_port": 25000, "api_port": 8888}
    return firewall_netns.probe(tmp_path_factory.mktemp("packets"), fw.plan(model, ["10.0.0.0/29"], [22], ["10.0.0.9"])["ruleset"],
                                CASES)


@pytest.mark.parametrize("name, src, dst, port, expected", CASES, ids=["%s %s->%s:%d" % c[:4] for c in CASES])
def test_packets(results, name, src, dst, port, expected):
    firewall_netns.check(results, name, src, dst, port, expected)


# A sidecar engine beside the main one. The harness listens on fixed ports: the sidecar borrows 5000 for its API and
# 5555 for its rendezvous (in the main cases an operator's service and LMCache's), 9090 plays the operator's service.
SIDECAR = {"name": "vl", "api_port": 5000, "master_port": 5555}
SIDECAR_CASES = [
    ("mgmt", "10.0.0.5", "10.0.0.1", 5000, "open"),          # the sidecar's API from serve_api_allowed_cidrs
    ("mgmt", "10.0.0.9", "10.0.0.1", 5000, "open"),          # ... from the router
    ("mgmt", "10.0.0.20", "10.0.0.1", 5000, "blocked"),      # ... not from anyone else
    ("mgmt", "fd00::5", "fd00::1", 5000, "open"),            # the same over IPv6
    ("mgmt", "fd00::20", "fd00::1", 5000, "blocked"),
    ("node", "127.0.0.1", "127.0.0.1", 5000, "open"),        # loopback (the sidecar's readiness proof)
    ("fab", "10.77.77.2", "10.77.77.1", 5555, "open"),       # the peer: the sidecar's rendezvous
    ("fab", "10.77.77.3", "10.77.77.1", 5555, "blocked"),    # a stranger on the fabric wire
    ("fab", "10.77.77.3", "10.77.77.1", 5000, "blocked"),
    ("mgmt", "10.0.0.5", "10.0.0.1", 5555, "blocked"),       # its rendezvous from the management side, API client or not
    ("mgmt", "fd00::5", "fd00::1", 5555, "blocked"),
    ("mgmt", "10.0.0.5", "10.0.0.1", 8888, "open"),          # the main engine's rules as before
    ("mgmt", "10.0.0.20", "10.0.0.1", 8888, "blocked"),
    ("mgmt", "10.0.0.5", "10.0.0.1", 25000, "blocked"),
    ("mgmt", "10.0.0.20", "10.0.0.1", 9090, "open"),         # an operator's other service: untouched
]


@pytest.fixture(scope="module")
def sidecar_results(tmp_path_factory):
    model = {"group": "pair_a", "host": "a0", "addresses": {"a0": "10.77.77.1", "a1": "10.77.77.2"}, "peers": ["a1"],
             "master_port": 25000, "api_port": 8888}
    plan = fw.plan(model, ["10.0.0.0/29", "fd00::/125"], [22], ["10.0.0.9"], engine_ports=[SIDECAR])
    assert plan["problems"] == [], plan["problems"]
    return firewall_netns.probe(tmp_path_factory.mktemp("sidecar"), plan["ruleset"], SIDECAR_CASES)


@pytest.mark.parametrize("name, src, dst, port, expected", SIDECAR_CASES, ids=["%s %s->%s:%d" % c[:4] for c in SIDECAR_CASES])
def test_sidecar_packets(sidecar_results, name, src, dst, port, expected):
    firewall_netns.check(sidecar_results, name, src, dst, port, expected)
