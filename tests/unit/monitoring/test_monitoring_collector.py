"""roles/monitoring/files/dspark-textfile-collector against a fake root (the files the serve, fabric and checkpoint
roles leave on a node; a fake docker), its output parsed by promtool's own exposition-format check."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

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
