"""Verify docker_runtime on the lab pair: engine, compose v2, config, the same image everywhere, and the
two refusals (a mismatched image, a restart under running containers) reported by name. The converge uses the
tarball path; the registry path (issue #15 point 2: the lab registry of lab/registry.sh, pull by digest, a wrong
digest) runs last, from the pin that the shared create's `registry.sh up` wrote."""

import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml
from labhosts import NODES, lab_node

ROOT = pathlib.Path(__file__).resolve().parents[4]
INVENTORY = ROOT / "inventories" / "lab" / "hosts.yml"
# The scenario's converge playbook: the role with the same variables as the converge step.
PLAYBOOK = pathlib.Path(__file__).resolve().parents[1] / "converge.yml"
ARCHIVE = pathlib.Path(os.environ.get("DSPARK_LAB_STATE", ROOT / ".lab")) / "images" / "vllm-sim.tar"
IMAGE = "dspark-lab/vllm-sim:latest"
# Written by lab/registry.sh up (the shared create): address (as the nodes reach it), image (the digest pin), vars.yml.
REGISTRY_STATE = pathlib.Path(os.environ.get("DSPARK_LAB_STATE", ROOT / ".lab")) / "registry"
REGISTRY_CONTAINER = "dspark-lab-registry"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def archive_id():
    """The image ID inside the archive the role distributed (config blob name = image ID)."""
    manifest = json.loads(subprocess.run(["tar", "-xOf", str(ARCHIVE), "manifest.json"], capture_output=True,
                                         check=True).stdout)
    config = manifest[0]["Config"]
    return "sha256:" + config.rsplit("/", 1)[-1].removesuffix(".json")


def playbook(*extra):
    run = subprocess.run([shutil.which("ansible-playbook") or "ansible-playbook", "-i", str(INVENTORY), str(PLAYBOOK), *extra],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    return run.returncode, run.stdout + run.stderr


def recap(out, host):
    """The PLAY RECAP counters of `host`, e.g. {"ok": 30, "changed": 0, "failed": 0, "rescued": 0, ...}."""
    plain = ANSI.sub("", out)  # Molecule forces Ansible's colours unless NO_COLOR is set
    line = next(line for line in plain.split("PLAY RECAP")[-1].splitlines() if line.startswith(host + " "))
    return {key: int(value) for key, value in (pair.split("=") for pair in line.split(":", 1)[1].split())}


def test_engine_runs_and_compose_v2_answers(lab_host):
    assert lab_host.service("docker").is_running
    assert lab_host.service("docker").is_enabled
    version = lab_host.check_output("docker compose version --short")
    assert version.lstrip("v").startswith("2."), version


def test_daemon_json_is_the_role_dictionary(lab_host):
    config = json.loads(lab_host.file("/etc/docker/daemon.json").content_string)
    assert config["log-driver"] == "json-file"
    assert config["log-opts"] == {"max-size": "100m", "max-file": "3"}
    assert config["live-restore"] is False
    assert lab_host.file("/etc/docker/daemon.json").mode == 0o644


def test_operator_user_is_in_the_docker_group(lab_host):
    assert "docker" in lab_host.user("spark").groups


def test_image_modules_have_their_python_library(lab_host):
    # community.docker's image modules talk to dockerd through requests in the node's python3.
    assert lab_host.package("python3-requests").is_installed
    assert lab_host.run("python3 -c 'import requests'").rc == 0


def test_no_gpu_means_no_nvidia_toolkit(lab_host):
    assert not lab_host.package("nvidia-container-toolkit").is_installed
    assert not lab_host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").exists


def test_image_is_the_archive_image_and_the_staged_copy_is_gone(lab_host):
    assert lab_host.check_output("docker image inspect --format '{{.Id}}' %s" % IMAGE) == archive_id()
    assert not lab_host.file("/var/tmp/dspark-images/vllm-sim.tar").exists


def test_image_ids_are_equal_on_both_nodes():
    ids = {name: lab_node(name).check_output("docker image inspect --format '{{.Id}}' %s" % IMAGE)
           for name in ("spark-head", "spark-worker")}
    assert len(set(ids.values())) == 1, ids


def test_check_mode_on_converged_nodes_passes_and_changes_nothing():
    # First of the tests that run the role: the nodes are as converge left them (the scenario's idempotence check).
    # The image modules run in --check too (info/tag/pull support it; load is only needed for an absent image).
    rc, out = playbook("--check")
    assert rc == 0, out
    for node in ("spark-head", "spark-worker"):
        assert recap(out, node)["changed"] == 0, out


@pytest.fixture
def worker_with_other_image():
    worker = lab_node("spark-worker")
    worker.check_output("tar -C /etc -c hostname | docker import - dspark-lab/other:1 >/dev/null")
    worker.check_output("docker tag dspark-lab/other:1 %s" % IMAGE)
    other = worker.check_output("docker image inspect --format '{{.Id}}' dspark-lab/other:1")
    yield other
    worker.check_output("docker tag %s %s && docker rmi dspark-lab/other:1" % (archive_id(), IMAGE))


def test_mismatched_image_is_reported_by_node_and_id(worker_with_other_image):
    rc, out = playbook("-e", "docker_runtime_image_source=none")
    assert rc != 0
    assert "group lab_pair: the serving image differs between nodes" in out
    assert "spark-head=%s" % archive_id() in out
    assert "spark-worker=%s" % worker_with_other_image in out


@pytest.fixture
def running_container():
    head = lab_node("spark-head")
    head.check_output("docker run -d --name dspark-test-sleeper --network none %s sleep 600" % archive_id())
    yield "dspark-test-sleeper"
    head.run("docker rm -f dspark-test-sleeper")


def test_config_change_under_running_containers_stops_before_writing(running_container):
    head = lab_node("spark-head")
    before = head.file("/etc/docker/daemon.json").content_string
    rc, out = playbook("-e", '{"docker_runtime_daemon_options": {"log-driver": "json-file", "log-opts": {"max-size": "50m"}}}')
    assert rc != 0
    assert "would stop the running containers %s" % running_container in out
    assert "Nothing was changed" in out
    assert head.file("/etc/docker/daemon.json").content_string == before
    assert head.check_output("docker inspect --format '{{.State.Running}}' %s" % running_container) == "true"


def test_proxy_drop_in_is_private_and_reaches_dockerd(lab_host):
    drop_in = lab_host.file("/etc/systemd/system/docker.service.d/http-proxy.conf")
    assert drop_in.exists and drop_in.mode == 0o600 and drop_in.user == "root"
    assert "EnvironmentFile=/etc/docker/http-proxy.env" in drop_in.content_string
    assert "cret" not in drop_in.content_string
    env_file = lab_host.file("/etc/docker/http-proxy.env")
    assert env_file.exists and env_file.mode == 0o600 and env_file.user == "root"
    assert "HTTPS_PROXY='http://user:se%25cret@proxy.lab.invalid:3128'" in env_file.content_string
    # Issue #13: `systemctl show` (any user) names the file, not the values; dockerd gets them verbatim (% too).
    shown = lab_host.check_output("systemctl show docker --property=Environment --property=EnvironmentFiles")
    assert "/etc/docker/http-proxy.env" in shown and "se%25cret" not in shown and "proxy.lab.invalid" not in shown
    environ = lab_host.check_output("tr '\\0' '\\n' < /proc/$(systemctl show docker --property=MainPID --value)/environ")
    assert "HTTPS_PROXY=http://user:se%25cret@proxy.lab.invalid:3128" in environ.splitlines()


def engine_started(node):
    return node.check_output("systemctl show docker.service --timestamp=us+utc --property=ActiveEnterTimestamp --value")


def test_a_stale_engine_under_running_containers_is_refused_by_name(running_container):
    head = lab_node("spark-head")
    before = engine_started(head)
    head.check_output("touch /etc/docker/daemon.json")
    try:
        rc, out = playbook("-l", "spark-head")
        assert rc != 0
        assert "/etc/docker/daemon.json last changed" in flat(out), out
        assert "would stop the running containers %s" % running_container in flat(out), out
        assert engine_started(head) == before
    finally:
        # Settle the head again for the tests below: no container, then the pending restart.
        head.run("docker rm -f %s" % running_container)
        rc, out = playbook("-l", "spark-head")
        assert rc == 0, out


@pytest.fixture
def worker_broken_three_ways(worker_with_other_image):
    """The worker as three faults leave it, repaired by one run (three runs in all, not seven; CI time):
    - the serving image's tag moved to another image by hand (worker_with_other_image);
    - issue #13 point 5: a run that wrote daemon.json and died before its `Restart dockerd` handler (the file holds
      what this run writes too, so only the node's state, the file newer than the engine, can tell);
    - issue #15 point 3: the lab image's state (apt lists emptied, their directory freshly touched) with a package of
      the role's missing: the role must refresh the lists itself, without a failed-then-rescued task."""
    worker = lab_node("spark-worker")
    started = engine_started(worker)
    worker.check_output("touch /etc/docker/daemon.json")
    worker.check_output("DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq python3-requests >/dev/null")
    worker.check_output("rm -rf /var/lib/apt/lists/* /var/lib/apt/periodic/update-success-stamp"
                        " && touch /var/lib/apt/lists")
    yield worker, started


def test_a_worker_broken_three_ways_is_repaired_by_one_run(worker_broken_three_ways):
    worker, started = worker_broken_three_ways
    assert worker.run("apt-get --simulate install python3-requests").rc != 0
    # --check cannot refresh the lists: it says what a real run would do, and fails nothing.
    rc, out = playbook("--check", "-l", "spark-worker")
    assert rc == 0, out
    assert "would refresh the package lists and install" in out and "would put" in out, out
    assert "fatal:" not in out and "...ignoring" not in out, out
    assert not worker.package("python3-requests").is_installed
    assert engine_started(worker) == started

    rc, out = playbook("-l", "spark-worker")
    assert rc == 0, out
    assert "fatal:" not in out and "...ignoring" not in out and "FAILED!" not in out, out
    counts = recap(out, "spark-worker")
    assert counts["failed"] == counts["rescued"] == counts["ignored"] == 0, out
    assert counts["changed"] >= 1, out
    # The package lists refreshed and the package installed.
    assert worker.package("python3-requests").is_installed
    assert worker.run("ls /var/lib/apt/lists | grep -q _Packages").rc == 0
    # The pending restart done, and said why (flat(): the yaml result format folds a long message over lines).
    assert "runs an older configuration than its files" in out and "/etc/docker/daemon.json last changed" in flat(out), out
    assert engine_started(worker) != started
    # The tag back on the archive's image.
    assert worker.check_output("docker image inspect --format '{{.Id}}' %s" % IMAGE) == archive_id()

    # Settled: the same run again changes nothing.
    rc, out = playbook("-l", "spark-worker")
    assert rc == 0 and recap(out, "spark-worker")["changed"] == 0, out


# --- The registry path (issue #15 point 2). Last in this file: the other tests run the tarball path. ---------------

def flat(out):
    """The output with every run of whitespace as one space (the YAML callback folds long messages), no colours."""
    return " ".join(ANSI.sub("", out).split())


def test_daemon_trusts_the_lab_registry(lab_host):
    address = (REGISTRY_STATE / "address").read_text().strip()
    config = json.loads(lab_host.file("/etc/docker/daemon.json").content_string)
    assert config["insecure-registries"] == [address]
    # dockerd was restarted with it (the check mode and idempotence steps saw no further change).
    info = lab_host.check_output("docker info")
    assert address in info.split("Insecure Registries:", 1)[1].split("\n\n")[0], info


@pytest.fixture
def registry_pin():
    """The variables of the registry path (registry.sh's vars.yml: source registry, the registry trusted, dspark_image
    pinned by digest), with the pinned reference absent from both nodes before and after (the tarball's image keeps
    its tag: `docker rmi repo@digest` only drops that reference)."""
    pin = yaml.safe_load((REGISTRY_STATE / "vars.yml").read_text())
    assert pin["docker_runtime_image_source"] == "registry" and "@sha256:" in pin["dspark_image"], pin
    nodes = [lab_node(name) for name in NODES]
    for node in nodes:
        node.run("docker rmi %s" % pin["dspark_image"])
        assert node.run("docker image inspect %s" % pin["dspark_image"]).rc != 0
    yield pin
    for node in nodes:
        node.run("docker rmi %s" % pin["dspark_image"])


def images(node):
    return node.check_output("docker images --all --digests --no-trunc --format '{{.Repository}} {{.Tag}} {{.Digest}} {{.ID}}'"
                             " | sort")


def test_registry_pull_by_digest_gives_the_archive_image_on_every_node(registry_pin):
    ref = registry_pin["dspark_image"]
    digest = ref.split("@", 1)[1]
    rc, out = playbook("-e", json.dumps(registry_pin))
    assert rc == 0, out
    assert "fatal:" not in out and "...ignoring" not in out, out
    # The same build as the archive: one ID on every node, and the tarball path's ID.
    ids = {name: lab_node(name).check_output("docker image inspect --format '{{.Id}}' %s" % ref) for name in NODES}
    assert set(ids.values()) == {archive_id()}, ids
    for name in NODES:
        assert recap(out, name)["changed"] >= 1, out
        digests = lab_node(name).check_output("docker image inspect --format '{{json .RepoDigests}}' %s" % ref)
        assert ref.split(":", 1)[0] in digests and digest in digests, digests
    # Each node fetched the manifest by digest from the lab registry (its access log names the client's address).
    log = subprocess.run(["docker", "logs", REGISTRY_CONTAINER], capture_output=True, text=True, check=True)
    lines = [line for line in (log.stdout + log.stderr).splitlines() if '"GET /v2/dspark-lab/vllm-sim/manifests/%s ' % digest in line]
    for name in NODES:
        addresses = lab_node(name).check_output("hostname -I").split()
        assert any(line.split(" ", 1)[0] in addresses for line in lines), (name, addresses, lines)
    # Present by digest: nothing pulled or changed on the second run.
    rc, out = playbook("-e", json.dumps(registry_pin))
    assert rc == 0, out
    for name in NODES:
        assert recap(out, name)["changed"] == 0, out


def test_wrong_digest_fails_clearly_and_changes_nothing(registry_pin):
    ref = registry_pin["dspark_image"]
    # A well-formed digest the registry does not hold (the real one with its last hex digit changed).
    wrong = ref[:-1] + ("0" if ref[-1] != "0" else "1")
    nodes = {name: lab_node(name) for name in NODES}
    before = {name: (images(node), node.file("/etc/docker/daemon.json").content_string) for name, node in nodes.items()}
    rc, out = playbook("-e", json.dumps(dict(registry_pin, dspark_image=wrong)))
    assert rc != 0
    text = flat(out)
    for name in NODES:
        assert "%s: cannot pull dspark_image=%s:" % (name, wrong) in text, out
        counts = recap(out, name)
        assert counts["failed"] == 1 and counts["changed"] == 0, out
    assert "manifest unknown" in text, out
    assert "Fix: check that the registry holds this digest" in text, out
    assert {name: (images(node), node.file("/etc/docker/daemon.json").content_string) for name, node in nodes.items()} \
        == before
