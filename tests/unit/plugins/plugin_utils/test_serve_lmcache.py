"""LMCache beside every rank (issue #45): plugin_utils._serve_lmcache (the server's command, the connector, its ports)
and the firewall's rules for them with real packets (firewall_netns)."""

import http.server
import json
import subprocess
import sys
import threading

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_firewall as fw
from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_lmcache as lm

import firewall_netns  # noqa: E402  (the namespace harness beside this file)

VALUES = {"serve_lmcache": True, "serve_lmcache_container_name": "dspark-lmcache", "serve_lmcache_l1_size_gb": 8,
          "serve_lmcache_eviction_policy": "LRU", "serve_lmcache_chunk_size": 256, "serve_lmcache_port": 5555,
          "serve_lmcache_http_port": 9090, "serve_lmcache_disk_dir": "",
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


def test_the_server_listens_on_the_fabric_and_answers_http_on_loopback():
    argv = lm.server_argv(VALUES, "pair_a", 1, "10.77.77.2")
    flags = dict(zip(argv[2::2], argv[3::2]))
    assert argv[:2] == ["lmcache", "server"] and "--l2-adapter" not in flags
    assert flags == {"--host": "10.77.77.2", "--port": "5555", "--http-host": "127.0.0.1", "--http-port": "9090",
                     "--l1-size-gb": "8", "--eviction-policy": "LRU", "--chunk-size": "256",
                     "--supported-transfer-mode": "auto", "--shm-name": "dspark_pair_a_r1"}
    assert lm.ENVIRONMENT["LMCACHE_TRACK_USAGE"] == "false"     # no reports to stats.lmcache.ai; a stop in seconds


def test_every_rank_knows_every_server_in_node_rank_order():
    group = {"members": ["n0", "n1", "n2"], "addresses": {"n2": "10.0.0.3", "n0": "10.0.0.1", "n1": "10.0.0.2"}}
    config = json.loads(lm.kv_transfer_config(dict(VALUES, serve_lmcache_port="5600"), group))
    assert config == {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both", "kv_connector_extra_config": {
        "lmcache.mp.server_urls": "tcp://10.0.0.1:5600,tcp://10.0.0.2:5600,tcp://10.0.0.3:5600"}}


def test_the_disk_tier_is_bounded():
    adapter = json.loads(lm.disk_adapter(dict(VALUES, serve_lmcache_disk_dir="/nvme/kv", serve_lmcache_disk_size_gb="500")))
    assert adapter == {"type": "fs_native", "base_path": lm.DISK_MOUNT, "max_capacity_gb": 500,
                       "eviction": {"eviction_policy": "LRU"}}
    assert lm.disk_adapter(VALUES) is None


def test_local_ports_only_when_on():
    assert lm.local_ports(VALUES) == [9090] and lm.local_ports(dict(VALUES, serve_lmcache=False)) == []


def test_the_health_check_asks_the_http_port():
    test = lm.healthcheck(VALUES)
    assert test[:3] == ["CMD", "python3", "-c"] and "HTTPConnection('127.0.0.1', 9090, timeout=5)" in test[3]
    compile(test[3], "healthcheck", "exec")


def test_the_health_check_runs_against_a_real_http_server():
    """The probe's Python as compose runs it: exit 0 while /healthcheck answers 200, 1 on 503, else an error."""
    answers = {"status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            self.send_response(answers["status"] if self.path == "/healthcheck" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        probe = lm.healthcheck(dict(VALUES, serve_lmcache_http_port=server.server_address[1]))[3]
        assert subprocess.run([sys.executable, "-c", probe], check=False, timeout=30).returncode == 0
        answers["status"] = 503
        assert subprocess.run([sys.executable, "-c", probe], check=False, timeout=30).returncode == 1
    finally:
        server.shutdown()
    assert subprocess.run([sys.executable, "-c", probe], check=False, capture_output=True, timeout=30).returncode != 0


# The firewall: LMCache's HTTP port (here 9090) from loopback only, the fabric peer included; its request port (5555)
# on the fabric address from the group's peers only.
CASES = [
    ("node", "127.0.0.1", "127.0.0.1", 9090, "open"),
    ("fab", "10.77.77.2", "10.77.77.1", 9090, "blocked"),    # the peer reaches the engine's ports, not LMCache's HTTP
    ("fab", "10.77.77.2", "10.77.77.1", 5555, "open"),       # the head's scheduler looks prompts up on every server
    ("fab", "10.77.77.3", "10.77.77.1", 5555, "blocked"),    # a stranger on the fabric wire
    ("mgmt", "10.0.0.5", "10.0.0.1", 9090, "blocked"),
    ("mgmt", "10.0.0.20", "10.77.77.1", 5555, "blocked"),
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
    plan = fw.plan(MODEL, ["10.0.0.0/29"], [22], local_ports=lm.local_ports(VALUES))
    assert plan["problems"] == [] and plan["ports"]["local"] == [9090]
    return firewall_netns.probe(tmp_path_factory.mktemp("lmcache"), plan["ruleset"], CASES)


@pytest.mark.parametrize("name, src, dst, port, expected", CASES, ids=["%s %s->%s:%d" % c[:4] for c in CASES])
def test_packets(packets, name, src, dst, port, expected):
    firewall_netns.check(packets, name, src, dst, port, expected)


@pytest.mark.parametrize("conf, expected", [
    ("expandable_segments:True", None),
    ("expandable_segments:True,max_split_size_mb:512", "max_split_size_mb:512"),
    ("max_split_size_mb:512", "max_split_size_mb:512"),
    (None, None),
])
def test_the_engine_loses_expandable_segments_with_lmcache(conf, expected):
    """vLLM 0.32.0 refuses the connector beside PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (measured in the
    real-engine lab: `Value error, KV connector LMCacheMPConnector is incompatible with ...`); the recipe sets it."""
    env = {"HF_HOME": "/cache"} if conf is None else {"HF_HOME": "/cache", "PYTORCH_CUDA_ALLOC_CONF": conf}
    out = lm.engine_environment(env, VALUES)
    assert out.get("PYTORCH_CUDA_ALLOC_CONF") == expected and out["HF_HOME"] == "/cache"
    assert lm.engine_environment(env, dict(VALUES, serve_lmcache=False)) == env
