"""LMCache beside every rank (issue #45): plugin_utils._serve_lmcache (the server's command, the connector, its ports), the firewall's loopback-only ports with real packets (firewall_netns), and the serve rules in preflight."""

import json

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_firewall as fw
from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_lmcache as lm

import firewall_netns  # noqa: E402  (the namespace harness beside this file)

VALUES = {"serve_lmcache": True, "serve_lmcache_container_name": "dspark-lmcache", "serve_lmcache_l1_size_gb": 8,
          "serve_lmcache_eviction_policy": "LRU", "serve_lmcache_chunk_size": 256, "serve_lmcache_port": 5555,
          "serve_lmcache_http_port": 8080, "serve_lmcache_metrics_port": 9090, "serve_lmcache_disk_dir": "",
          "serve_lmcache_disk_size_gb": 100, "serve_lmcache_extra_args": [], "serve_lmcache_start_period": 120}


@pytest.mark.parametrize("value, on", [(True, True), ("yes", True), ("true", True), (False, False), ("no", False),
                                       (None, False), ("", False)])
def test_enabled(value, on):
    assert lm.enabled({"serve_lmcache": value}) is on


def test_every_variable_is_a_serve_option_and_read():
    assert all(name.startswith("serve_lmcache") for name in lm.VARIABLES) and len(set(lm.VARIABLES)) == len(lm.VARIABLES)
    assert set(lm.VARIABLES) == set(VALUES)


@pytest.mark.parametrize("group, rank, name", [("pair_a", 0, "dspark_pair_a_r0"), ("pair.b/x", "1", "dspark_pair_b_x_r1")])
def test_one_shared_memory_segment_per_rank(group, rank, name):
    assert lm.shm_name(group, rank) == name


def test_the_server_listens_on_loopback_in_the_shared_memory_mode():
    argv = lm.server_argv(VALUES, "pair_a", 1)
    flags = dict(zip(argv[2::2], argv[3::2]))
    assert argv[:2] == ["lmcache", "server"] and "--l2-adapter" not in flags
    assert flags == {"--host": "127.0.0.1", "--port": "5555", "--http-host": "127.0.0.1", "--http-port": "8080",
                     "--prometheus-port": "9090", "--l1-size-gb": "8", "--eviction-policy": "LRU", "--chunk-size": "256",
                     "--supported-transfer-mode": "auto", "--shm-name": "dspark_pair_a_r1"}


def test_the_disk_tier_is_bounded():
    adapter = json.loads(lm.disk_adapter(dict(VALUES, serve_lmcache_disk_dir="/nvme/kv", serve_lmcache_disk_size_gb="500")))
    assert adapter == {"type": "fs_native", "base_path": lm.DISK_MOUNT, "max_capacity_gb": 500,
                       "eviction": {"eviction_policy": "LRU"}}
    assert lm.disk_adapter(VALUES) is None


def test_ports_and_shared_memory_only_when_on():
    assert lm.ports(VALUES) == [5555, 8080, 9090] and lm.ports(dict(VALUES, serve_lmcache=False)) == []
    assert lm.shm_need_mib(VALUES) == 8 * 1024 + 160 and lm.shm_need_mib(dict(VALUES, serve_lmcache=False)) == 0


# The firewall: LMCache's ports from loopback only, the fabric peer included (its exporter binds every address).
CASES = [
    ("node", "127.0.0.1", "127.0.0.1", 9090, "open"),
    ("fab", "10.77.77.2", "10.77.77.1", 9090, "blocked"),    # the peer reaches the engine's ports, not LMCache's
    ("fab", "10.77.77.2", "10.77.77.1", 41234, "open"),
    ("mgmt", "10.0.0.5", "10.0.0.1", 9090, "blocked"),
    ("mgmt", "10.0.0.5", "10.0.0.1", 5555, "blocked"),
    ("mgmt", "10.0.0.5", "10.0.0.1", 8888, "open"),          # the API from serve_api_allowed_cidrs, as before
]
MODEL = {"group": "pair_a", "host": "a0", "addresses": {"a0": "10.77.77.1", "a1": "10.77.77.2"}, "peers": ["a1"],
         "master_port": 25000, "api_port": 8888}


def test_the_ruleset_without_lmcache_is_unchanged():
    assert fw.plan(MODEL, ["10.0.0.0/29"], [22], local_ports=[])["ruleset"] == fw.plan(MODEL, ["10.0.0.0/29"], [22])["ruleset"]
    bad = fw.plan(MODEL, ["10.0.0.0/29"], [22], local_ports=[70000])
    assert bad["problems"] == ["serve_lmcache ports has 70000, which is not a TCP port. Fix: use 1-65535"]


@pytest.fixture(scope="module")
def packets(tmp_path_factory):
    plan = fw.plan(MODEL, ["10.0.0.0/29"], [22], local_ports=lm.ports(VALUES))
    assert plan["problems"] == [] and plan["ports"]["local"] == [5555, 8080, 9090]
    return firewall_netns.probe(tmp_path_factory.mktemp("lmcache"), plan["ruleset"], CASES)


@pytest.mark.parametrize("name, src, dst, port, expected", CASES, ids=["%s %s->%s:%d" % c[:4] for c in CASES])
def test_packets(packets, name, src, dst, port, expected):
    key = firewall_netns.key(name, src, dst, port)
    assert packets["before"][key] == "open", "the listener is not reachable even without the firewall"
    assert packets["after"][key] == expected
