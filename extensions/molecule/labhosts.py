"""The lab nodes as testinfra hosts over plain SSH, for the scenario verifiers.

The lab inventory spells its key path as a template, which testinfra's ansible backend does not render;
here the path comes from DSPARK_LAB_STATE (set by extensions/molecule/config.yml) and the ports from the
inventory, so the checks never depend on a reused SSH session.
"""

import json
import os
import pathlib
import shutil
import subprocess

import testinfra
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAB_INVENTORY = ROOT / "inventories" / "lab" / "hosts.yml"
LAB_STATE = pathlib.Path(os.environ.get("DSPARK_LAB_STATE", ROOT / ".lab"))
PAIR = yaml.safe_load(LAB_INVENTORY.read_text())["all"]["children"]["dspark"]["children"]["lab_pair"]
NODES = tuple(PAIR["hosts"])


def lab_node(name):
    """A testinfra host for lab node `name`, as root through sudo, like the roles."""
    port = PAIR["hosts"][name]["ansible_port"]
    return testinfra.get_host(
        "ssh://spark@127.0.0.1:%d" % port, sudo=True, ssh_identity_file=str(LAB_STATE / "id_ed25519"),
        ssh_extra_args="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR")


def playbook(name, inventory=LAB_INVENTORY, *extra):
    """(rc, stdout+stderr) of playbooks/<name> run on the lab pair (or another inventory), at the default verbosity
    unless `extra` asks for more: a scenario's verbosity and log file (the serve scenario's leak sweep sets them for
    its provisioner, and Molecule hands them to the verifier too) stay out of the tests' own runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANSIBLE_VERBOSITY", "ANSIBLE_LOG_PATH")}
    run = subprocess.run([shutil.which("ansible-playbook") or "ansible-playbook", "-i", str(inventory),
                          str(ROOT / "playbooks" / name), *extra],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    return run.returncode, run.stdout + run.stderr


def container(name):
    """`docker inspect` of the serving container on lab node `name`, or None when there is none."""
    out = lab_node(name).run("docker inspect --format '{{json .}}' dspark-vllm")
    return json.loads(out.stdout) if out.rc == 0 else None
