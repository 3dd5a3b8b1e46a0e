"""playbooks/qualify.yml on the container lab's pair (lab/lab.sh up): the bare nodes qualify, and faults injected at
once are each named in one run with their Fix: a process on the head's API port, the worker's fabric link set down,
a small file system as the head's model cache, and an allow list that excludes the node's kernel. Nothing changes.

Skipped when the lab is not up, unless DSPARK_LAB_REQUIRED=1 (as tests/lab/test_lab.py).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_lab import INVENTORY, NODES, REPO, ssh
from test_lab import lab_is_up  # noqa: F401 pylint: disable=unused-import  # the fixture skips without a lab

ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
HEAD, WORKER = sorted(NODES, key=lambda n: NODES[n]["mgmt"])[:2]
API_PORT = 8888     # inventories/lab: dspark_api_port
# labtest brings up the nodes without the lab's registry (whose files name the image): preflight gets an image here.
NO_REGISTRY = json.dumps({"dspark_image": "registry.invalid/dspark/vllm@sha256:" + "0" * 64,
                          "docker_runtime_insecure_registries": []})


def qualify(*extra):
    """Run playbooks/qualify.yml with the JSON callback: (the run, its document, {host: qualify_result})."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    run = subprocess.run([ANSIBLE_PLAYBOOK, "-i", INVENTORY, str(REPO / "playbooks" / "qualify.yml"),
                          "-e", NO_REGISTRY, *extra],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    doc = json.loads(run.stdout[run.stdout.index("{"):])
    results = {}
    for play in doc["plays"]:
        for task in play["tasks"]:
            for host, res in task["hosts"].items():
                fact = (res.get("ansible_facts") or {}).get("qualify_result")
                if fact:
                    results[host] = fact
    return run, doc, results


def failing(result):
    return {(c["check"], c["subject"]): c for c in result["checks"] if c["verdict"] == "fail"}


def test_the_bare_lab_nodes_qualify():
    run, doc, results = qualify()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert sorted(results) == sorted(NODES)
    for host, result in results.items():
        assert result["ok"], (host, failing(result))
        checks = {c["check"] for c in result["checks"]}
        assert {"kernel", "os", "disk", "memory", "time", "link", "mtu_end_to_end"} <= checks, (host, checks)
    ends = [c for c in results[HEAD]["checks"] if c["check"] == "mtu_end_to_end"]
    assert ends and all(c["verdict"] == "pass" for c in ends), ends
    assert any(c["check"] == "port" and c["verdict"] == "pass" for c in results[HEAD]["checks"])
    assert any(c["scope"] == "group" for c in results[HEAD]["checks"])
    assert all(s["changed"] == 0 for s in doc["stats"].values()), doc["stats"]


@pytest.fixture()
def faults():
    """A listener on the head's API port, the worker's fabric link down, a 32 MiB tmpfs as the head's model cache;
    all undone afterwards."""
    iface = NODES[WORKER]["fabric_if"]
    ssh(HEAD, "sudo mkdir -p /var/lib/dspark/hf-cache && sudo mount -t tmpfs -o size=32m qualifytest "
              "/var/lib/dspark/hf-cache")
    ssh(HEAD, "sudo systemd-run --unit=qualify-squatter python3 -m http.server %d" % API_PORT)
    ssh(WORKER, "sudo ip link set dev %s down" % iface)
    try:
        yield
    finally:
        ssh(WORKER, "sudo ip link set dev %s up" % iface, check=False)
        ssh(HEAD, "sudo systemctl stop qualify-squatter", check=False)
        ssh(HEAD, "sudo umount /var/lib/dspark/hf-cache", check=False)


def test_each_injected_fault_is_named_with_its_fix(faults):  # pylint: disable=redefined-outer-name,unused-argument
    run, _doc, results = qualify("-e", json.dumps({"qualify_kernel_allow": ["0\\.0\\.0-never"],
                                                   "qualify_disk_reserve_bytes": 256 * 1024 * 1024}))
    assert run.returncode != 0
    head, worker = failing(results[HEAD]), failing(results[WORKER])
    for result in (head, worker):
        kernel = [c for key, c in result.items() if key[0] == "kernel"]
        assert kernel and "qualify_kernel_allow" in (kernel[0]["variable"] or "") and kernel[0]["fix"]
    port = [c for key, c in head.items() if key[0] == "port"]
    assert port and "python3" in port[0]["message"] and str(API_PORT) in port[0]["subject"], port
    disk = [c for key, c in head.items() if key[0] == "disk" and "/var/lib/dspark/hf-cache" in key[1]]
    assert disk and disk[0]["fix"], head
    link = [c for key, c in worker.items() if key[0] == "link"]
    assert link and "DOWN" in link[0]["message"] and NODES[WORKER]["fabric_if"] in link[0]["message"], worker
    # The play's failure says it too, one line per check.
    assert "DOWN" in run.stdout and "python3" in run.stdout


def test_dspark_fleet_qualify_reports_the_faults(faults, tmp_path):  # pylint: disable=redefined-outer-name,unused-argument
    fleet = str(Path(sys.executable).with_name("dspark-fleet"))
    run = subprocess.run([fleet, "qualify", "-i", INVENTORY, "-e", NO_REGISTRY, "--artifacts", str(tmp_path / "a"),
                          "--plain"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-2000:]
    assert "NOT qualified" in run.stdout, run.stdout
    doc = json.loads((tmp_path / "a" / "report.json").read_text(encoding="utf-8"))
    entry = next(iter(doc["groups"].values()))["qualify"]
    assert entry["verdict"] == "not qualified"
    problems = {host: [c["check"] for c in h["problems"] if c["verdict"] == "fail"] for host, h in entry["hosts"].items()}
    assert "port" in problems[HEAD] and "link" in problems[WORKER], problems
    markdown = (tmp_path / "a" / "report.md").read_text(encoding="utf-8")
    assert "DOWN" in markdown and "Fix" in markdown
