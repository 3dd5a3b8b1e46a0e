"""roles/monitoring/files/dspark-textfile-collector against a fake root (the files the serve, fabric and checkpoint
roles leave on a node; a fake docker), its output parsed by promtool's own exposition-format check. LMCache's /metrics
(serve_lmcache) is served by a local HTTP server from real recordings of LMCache 0.5.6 (fixtures/)."""

import http.server
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import threading

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from monitoring_fixtures import ROLE, defaults, fleet  # noqa: E402

from ansible_collections.dspark.cluster.plugins.plugin_utils import _monitoring_plan as mp  # noqa: E402

COLLECTOR = ROLE / "files" / "dspark-textfile-collector"
REV = "a" * 40


def _write(root, path, text, mtime=None):
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    if mtime:
        os.utime(target, (mtime, mtime))


@pytest.fixture
def node(tmp_path):
    groups, hostvars = fleet()
    config = mp.collector_config(groups, hostvars, "a0", defaults())
    root = tmp_path / "root"
    _write(root, "/etc/dspark/monitoring/collector.json", json.dumps(config))
    _write(root, "/etc/dspark/serve/compose.yaml", "\n".join([
        "name: \"dspark\"", "services:", "  vllm:", "    image: \"sha256:%s\"" % ("b" * 64),
        "    environment: {\"NCCL_IB_GID_INDEX\": \"3\", \"NCCL_IB_HCA\": \"rocep1\"}"]) + "\n", mtime=1700000000)
    _write(root, "/sys/class/net/enp1/operstate", "up\n")
    _write(root, "/sys/class/net/enp1/mtu", "9000\n")
    _write(root, "/sys/class/infiniband/rocep1/ports/1/gids/3", "0000:0000:0000:0000:0000:ffff:0a4d:4d01\n")
    _write(root, "/var/lib/dspark/checkpoint/models--org--model-%s.verified.json" % REV,
           json.dumps({"model": "org/model", "revision": REV}), mtime=1700000500)
    docker = tmp_path / "docker"
    docker.write_text("#!/bin/sh\necho '{\"Running\": true, \"StartedAt\": \"2024-01-02T03:04:05.123Z\"}'\n")
    docker.chmod(0o755)
    return root, docker


def _run(root, docker):
    subprocess.run([sys.executable, str(COLLECTOR), "--root", str(root), "--docker", str(docker)], check=True, timeout=60)
    return (root / "var/lib/prometheus/node-exporter/dspark.prom").read_text()


def _value(text, prefix):
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, (prefix, lines)
    return lines[0].rsplit(" ", 1)[1]


def test_a_healthy_head(node):
    root, docker = node
    text = _run(root, docker)
    assert _value(text, "dspark_serve_container_running ") == "1"
    assert _value(text, "dspark_serve_container_started_seconds ") == "1704164645"
    assert _value(text, "dspark_serve_definition_mtime_seconds ") == "1700000000"
    assert 'dspark_serve_image_info{image="img@sha256:%s",image_id="sha256:%s"} 1' % ("1" * 64, "b" * 64) in text
    assert _value(text, 'dspark_fabric_link_up{interface="enp1"}') == "1"
    assert _value(text, 'dspark_fabric_mtu_bytes{interface="enp1"}') == "9000"
    assert _value(text, 'dspark_fabric_gid_index{hca="rocep1"}') == "3"
    assert _value(text, 'dspark_fabric_gid_matches{hca="rocep1"}') == "1"
    assert _value(text, 'dspark_checkpoint_verified{') == "1"
    assert _value(text, "dspark_checkpoint_verified_seconds ") == "1700000500"
    assert _value(text, 'dspark_node_info{group_size="2",rank="0"}') == "1"
    # The head's /health on 127.0.0.1:8888: nothing listens in the test.
    assert _value(text, "dspark_serve_api_healthy ") == "0"
    # Every name written is one the plan knows (and so the rules and dashboard may use).
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert names <= set(mp.DSPARK_METRICS)
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
        assert "error" not in (check.stdout + check.stderr).lower(), check.stdout + check.stderr


def test_a_broken_node(node, tmp_path):
    root = node[0]
    (root / "sys/class/net/enp1/operstate").write_text("down\n")
    (root / "sys/class/net/enp1/mtu").write_text("1500\n")
    (root / "sys/class/infiniband/rocep1/ports/1/gids/3").write_text("fe80:0000:0000:0000:0000:0000:0000:0001\n")
    stamp = root / ("var/lib/dspark/checkpoint/models--org--model-%s.verified.json" % REV)
    stamp.write_text(json.dumps({"model": "org/model", "revision": "b" * 40}))
    docker = tmp_path / "nodocker"
    docker.write_text("#!/bin/sh\necho 'Error: No such object' >&2\nexit 1\n")
    docker.chmod(0o755)
    text = _run(root, docker)
    assert _value(text, "dspark_serve_container_running ") == "0"
    assert "dspark_serve_container_started_seconds" not in text
    assert _value(text, 'dspark_fabric_link_up{interface="enp1"}') == "0"
    assert _value(text, 'dspark_fabric_mtu_bytes{interface="enp1"}') == "1500"
    assert _value(text, 'dspark_fabric_gid_matches{hca="rocep1"}') == "0"
    assert _value(text, "dspark_checkpoint_verified{") == "0"


def test_the_supervisor_journal(tmp_path):
    groups, hostvars = fleet()
    config = mp.collector_config(groups, hostvars, "ctl", defaults())
    root = tmp_path / "root"
    _write(root, "/etc/dspark/monitoring/collector.json", json.dumps(config))
    import time
    now = time.time()
    records = [{"time": now - 30 * 3600, "group": "pair_a", "action": "restart"},
               {"time": now - 600, "group": "pair_a", "action": "restart"},
               {"time": now - 300, "group": "pair_a", "action": "restart"},
               {"time": now - 200, "group": "pair_b", "action": "give_up"},
               {"time": now - 100, "group": None, "action": "watch_start"}]
    _write(root, "/var/lib/dspark-fleet/journal.jsonl", "\n".join(json.dumps(r) for r in records) + "\nnot json\n")
    text = _run(root, tmp_path / "absent-docker")
    assert _value(text, 'dspark_supervisor_restarts_in_window{dspark_group="pair_a"}') == "2"
    assert _value(text, 'dspark_supervisor_restart_cap{dspark_group="pair_a"}') == "4"
    assert _value(text, 'dspark_supervisor_group_failed{dspark_group="pair_b"}') == "1"
    assert _value(text, 'dspark_supervisor_group_failed{dspark_group="pair_a"}') == "0"
    assert "dspark_serve_container_running" not in text


# -- LMCache beside the rank (serve_lmcache, issue #45) ------------------------------------------------------------

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"


class _Metrics(http.server.BaseHTTPRequestHandler):
    status = 200
    body = b""

    def do_GET(self):  # noqa: N802 (http.server's name)
        code, body = (self.status, self.body) if self.path == "/metrics" else (404, b"not found\n")
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def lmcache_server():
    """A local HTTP server on 127.0.0.1 (an ephemeral port) answering GET /metrics with what the test sets."""
    handler = type("Handler", (_Metrics,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], handler
    server.shutdown()
    server.server_close()


def _lmcache_node(tmp_path, port, lmcache_running=True):
    """The head a0 with serve_lmcache on, its HTTP port ``port``; a docker that knows both containers."""
    groups, hostvars = fleet()
    hostvars["a0"].update(serve_lmcache=True, serve_lmcache_http_port=port)
    config = mp.collector_config(groups, hostvars, "a0", defaults())
    root = tmp_path / "root"
    _write(root, "/etc/dspark/monitoring/collector.json", json.dumps(config))
    docker = tmp_path / "docker"
    lmc = '{"Running": %s, "StartedAt": "2024-01-02T03:04:05Z"}' % ("true" if lmcache_running else "false")
    docker.write_text("#!/bin/sh\n"
                      "for last in \"$@\"; do :; done\n"
                      "case \"$last\" in\n"
                      "  dspark-lmcache) echo '%s' ;;\n"
                      "  dspark-vllm) echo '{\"Running\": true, \"StartedAt\": \"2024-01-02T03:04:05Z\"}' ;;\n"
                      "  *) echo 'Error: No such object' >&2; exit 1 ;;\n"
                      "esac\n" % lmc)
    docker.chmod(0o755)
    return root, docker


def _names(text):
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def _promtool_accepts(text):
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
        assert "error" not in (check.stdout + check.stderr).lower(), check.stdout + check.stderr


def test_the_lmcache_recordings_are_real():
    """The fixtures are recordings of LMCache 0.5.6's own /metrics (their first lines say how they were made)."""
    for path in sorted(FIXTURES.glob("lmcache-0.5.6-metrics-*.txt")):
        lines = path.read_text(encoding="utf-8").splitlines()
        assert lines[0].startswith("# RECORDED, not built: GET /metrics of"), path.name
        assert "lmcache_mp_l1_memory_usage_bytes{" in "\n".join(lines), path.name
    assert len(list(FIXTURES.glob("lmcache-0.5.6-metrics-*.txt"))) == 3


# Each recording -> what the collector writes from it (sums over the samples; absent names not written).
LMCACHE_CASES = {
    # The idle server: no lookup yet, so LMCache exposes no lookup counter at all.
    "idle": {"dspark_lmcache_l1_memory_usage_bytes": "0", "dspark_lmcache_l2_usage_bytes": "0"},
    # Three prompts of 512 tokens stored and each looked up twice (cold, warm): half the looked-up tokens hit L1.
    "l1-hits": {"dspark_lmcache_lookup_requested_tokens_total": "3072", "dspark_lmcache_lookup_hit_tokens_total": "1536",
                "dspark_lmcache_lookup_hit_l1_tokens_total": "1536", "dspark_lmcache_lookup_hit_l2_tokens_total": "0",
                "dspark_lmcache_l1_memory_usage_bytes": "3145728", "dspark_lmcache_l2_usage_bytes": "3145728",
                "dspark_lmcache_l2_store_completed_chunks_total": "12"},
    # The same after a restart of the server on the same disk tier: every token from L2, none stored by this process.
    "l2-hits-after-restart": {
        "dspark_lmcache_lookup_requested_tokens_total": "3072", "dspark_lmcache_lookup_hit_tokens_total": "3072",
        "dspark_lmcache_lookup_hit_l1_tokens_total": "0", "dspark_lmcache_lookup_hit_l2_tokens_total": "3072",
        "dspark_lmcache_l1_memory_usage_bytes": "0", "dspark_lmcache_l2_usage_bytes": "0",
        "dspark_lmcache_l2_load_completed_chunks_total": "24"},
}


@pytest.mark.parametrize("recording", sorted(LMCACHE_CASES))
def test_lmcache_metrics_from_a_recording(tmp_path, lmcache_server, recording):
    port, handler = lmcache_server
    handler.body = (FIXTURES / ("lmcache-0.5.6-metrics-%s.txt" % recording)).read_bytes()
    root, docker = _lmcache_node(tmp_path, port)
    text = _run(root, docker)
    assert _value(text, "dspark_lmcache_container_running ") == "1"
    assert _value(text, "dspark_lmcache_up ") == "1"
    expected = LMCACHE_CASES[recording]
    for name, value in expected.items():
        assert _value(text, name + " ") == value, name
    written = {n for n in _names(text) if n.startswith("dspark_lmcache_")}
    assert written == set(expected) | {"dspark_lmcache_container_running", "dspark_lmcache_up"}
    assert "# TYPE dspark_lmcache_lookup_hit_tokens_total counter" in text or recording == "idle"
    # The node's other metrics are still there, and every name is one the plan knows.
    assert _value(text, "dspark_serve_container_running ") == "1"
    assert _names(text) <= set(mp.DSPARK_METRICS)
    _promtool_accepts(text)


def test_lmcache_down_never_fails_the_collection(tmp_path, lmcache_server):
    port, handler = lmcache_server
    handler.status, handler.body = 500, b"Internal Server Error\n"
    root, docker = _lmcache_node(tmp_path, port, lmcache_running=False)
    text = _run(root, docker)
    assert _value(text, "dspark_lmcache_container_running ") == "0"
    assert _value(text, "dspark_lmcache_up ") == "0"
    assert not [n for n in _names(text) if n.startswith("dspark_lmcache_") and n not in
                ("dspark_lmcache_container_running", "dspark_lmcache_up")]
    assert _value(text, "dspark_checkpoint_verified{") == "0"
    assert _value(text, "dspark_collector_last_run_seconds ") != ""
    _promtool_accepts(text)


def test_lmcache_without_docker(tmp_path, lmcache_server):
    port = lmcache_server[0]
    root, _docker = _lmcache_node(tmp_path, port)
    text = _run(root, tmp_path / "absent-docker")  # no docker binary at all
    assert _value(text, "dspark_lmcache_container_running ") == "0"
    assert _value(text, "dspark_lmcache_up ") == "1"  # the server itself answers with an empty page
    assert not [n for n in _names(text) if n.startswith("dspark_lmcache_") and n.endswith("_total")]


def test_lmcache_port_closed(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root, docker = _lmcache_node(tmp_path, port)
    text = _run(root, docker)
    assert _value(text, "dspark_lmcache_container_running ") == "1"
    assert _value(text, "dspark_lmcache_up ") == "0"
    assert _value(text, "dspark_serve_container_running ") == "1"


def test_lmcache_metrics_only_where_configured(node):
    root, docker = node
    text = _run(root, docker)
    assert "dspark_lmcache_" not in text


def test_sample_sums_reads_labels_with_braces_and_quotes():
    loader = importlib.machinery.SourceFileLoader("dspark_textfile_collector", str(COLLECTOR))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    # No __pycache__ inside the role's files/ (where PYTHONDONTWRITEBYTECODE is unset, the loader would write one).
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes
    text = "\n".join([
        "# HELP lmcache_mp_lookup_hit_tokens_total x",
        'lmcache_mp_lookup_hit_tokens_total{cache_salt="a} b",model_name="m\\\\"} 10.0',
        'lmcache_mp_lookup_hit_tokens_total{cache_salt="\\"c\\"",model_name="m"} 5.0 1700000000000',
        "lmcache_mp_lookup_hit_tokens_total_created 1.7e9",
        "lmcache_mp_lookup_hit_tokens_total{broken 3",
        "lmcache_mp_lookup_requested_tokens_total NaN",
        "lmcache_mp_l2_usage_bytes 2.5e+06"])
    sums = module.sample_sums(text, {"lmcache_mp_lookup_hit_tokens_total", "lmcache_mp_lookup_requested_tokens_total",
                                     "lmcache_mp_l2_usage_bytes"})
    assert sums == {"lmcache_mp_lookup_hit_tokens_total": 15.0, "lmcache_mp_l2_usage_bytes": 2500000.0}


def test_collector_configuration_of_lmcache():
    """serve_lmcache on a node: the server's container and HTTP port in its configuration, the serve role's defaults
    where the inventory sets none; off (the default), no lmcache key."""
    groups, hostvars = fleet()
    assert "lmcache" not in mp.collector_config(groups, hostvars, "a0", defaults())["node"]
    hostvars["a0"]["serve_lmcache"] = True
    hostvars["a1"].update(serve_lmcache="yes", serve_lmcache_container_name="lmc", serve_lmcache_http_port="8181")
    hostvars["b0"]["serve_lmcache"] = "false"
    assert mp.collector_config(groups, hostvars, "a0", defaults())["node"]["lmcache"] == {
        "container": "dspark-lmcache", "http_port": 8080}
    assert mp.collector_config(groups, hostvars, "a1", defaults())["node"]["lmcache"] == {"container": "lmc", "http_port": 8181}
    assert "lmcache" not in mp.collector_config(groups, hostvars, "b0", defaults())["node"]
    serve = yaml.safe_load((ROLE.parent / "serve" / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert (serve["serve_lmcache"], serve["serve_lmcache_container_name"], serve["serve_lmcache_http_port"]) == (
        False, mp.DEFAULT_LMCACHE_CONTAINER, mp.DEFAULT_LMCACHE_HTTP_PORT)
