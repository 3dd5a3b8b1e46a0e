"""playbooks/status.yml run INSIDE the execution environment (issue #29 item 4) against the real-engine pair, the way
ansible-navigator and AWX's execution nodes run a job: the venv's ansible-runner with --process-isolation starts a
container of `dspark-ee:latest` (built by `make ee` from a base image made on this machine), and ansible-core,
dspark.cluster and its collections come from the image, not from this checkout.

What it proves beyond tools/ee/check.sh (which has no node): SSH from the image to serving nodes with become, the key
handed over as AWX hands a machine credential's (ssh-agent), the
collection's roles and filters from the image against real vLLM, no prompt, and the report as the job's artifact
(set_stats in playbook_on_stats, where AWX keeps it), checked against docker on the nodes.
"""

import json
import os
import shutil
import subprocess

from reallab import BIN, CONTAINER, GROUP, HEAD, INVENTORY, KEYS, MODEL_NAME, ROOT, STATE, WORKER, node

IMAGE = os.environ.get("DSPARK_EE_IMAGE", "dspark-ee") + ":latest"
IDENT = "ee-status"


def image_id(host):
    rc, out = node(host, "docker inspect --format '{{.Image}}' %s" % CONTAINER)
    assert rc == 0, out
    return out.strip()


def test_status_runs_inside_the_execution_environment(tmp_path):
    rc = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, check=False).returncode
    assert rc == 0, f"no image {IMAGE}: build it first (make ee)"
    pd = tmp_path / "runner"
    project = pd / "project"
    (pd / "env").mkdir(parents=True)
    project.mkdir()
    # The committed project, as AWX checks it out (the checkout itself holds .venv and .lab).
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(project)], input=archive, check=True)
    # The image's collections, not the project's collections/ symlink to itself (ansible.cfg's collections_path);
    # the lab's pins (registry, model, key) from its state directory, mounted read-only.
    (pd / "env" / "envvars").write_text(json.dumps({
        "ANSIBLE_COLLECTIONS_PATH": "/usr/share/ansible/collections", "DSPARK_LAB_STATE": "/lab-state"}))
    # The key as AWX's machine credential hands it over: env/ssh_key, loaded into ssh-agent in the container (a
    # fifo, never a file there); the inventory's key file is pointed away so that only the agent can log in.
    (pd / "env" / "ssh_key").write_text((STATE / "id_ed25519").read_text())
    (pd / "env" / "ssh_key").chmod(0o600)
    (pd / "env" / "extravars").write_text(json.dumps({"ansible_ssh_private_key_file": "/nonexistent/id_ed25519"}))
    # The inventory where AWX puts a job's: <private data dir>/inventory (hosts.yml and its group_vars).
    shutil.copytree(INVENTORY.parent, pd / "inventory")
    argv = [BIN / "ansible-runner", "run", pd, "-p", "playbooks/status.yml", "--ident", IDENT,
            "--limit", GROUP,
            "--process-isolation", "--process-isolation-executable", "docker", "--container-image", IMAGE,
            # The nodes' SSH ports are published on this machine's loopback.
            "--container-option=--network=host", "--container-option=--name=dspark-ee-realtest",
            "--container-volume-mount", f"{STATE}:/lab-state:ro"]
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=900, check=False,
                          stdin=subprocess.DEVNULL)
    artifacts = pd / "artifacts" / IDENT
    status = (artifacts / "status").read_text() if (artifacts / "status").is_file() else "none"
    assert proc.returncode == 0 and status == "successful", (status, proc.stdout[-4000:] + proc.stderr[-2000:])

    # It ran in the image: the runner's command is docker's, with the image, under ssh-agent.
    command = json.loads((artifacts / "command").read_text())["command"]
    assert command[:2] == ["docker", "run"] and IMAGE in command, command
    assert command[command.index(IMAGE) + 1] == "ssh-agent", command

    events = [json.loads(p.read_text()) for p in sorted((artifacts / "job_events").glob("*.json"))]
    start = [e["event_data"] for e in events if e["event"] == "playbook_on_start"]
    assert start, "no playbook_on_start event"
    stats = [e["event_data"] for e in events if e["event"] == "playbook_on_stats"]
    assert len(stats) == 1, "no playbook_on_stats event"
    assert sorted(stats[0]["ok"]) == sorted([HEAD, WORKER]) and not stats[0]["failures"] and not stats[0]["dark"]

    report = stats[0]["artifact_data"]["dspark_status"]
    print(json.dumps(report, indent=1))
    assert list(report) == [GROUP], report
    group = report[GROUP]
    assert group["serving"] is True and group["first_failure"] is None, group
    assert MODEL_NAME in group["api_models"], group
    for host in (HEAD, WORKER):
        container = group["ranks"][host]["container"]
        assert container["state"] == "running", (host, container)
        assert container["image"] == image_id(host), (host, container)

    # No serving key in the job's output or anything it left (the /v1/models request carries one).
    for key in KEYS:
        assert key not in proc.stdout + proc.stderr, "serving key in the runner's output"
    for path in artifacts.rglob("*"):
        if path.is_file() and not path.is_fifo():
            text = path.read_text(errors="replace")
            for key in KEYS:
                assert key not in text, f"serving key in {path}"
