"""Helpers of the real-engine suite (tests/real): the pair of inventories/lab-real, serving REAL vLLM (the CPU build,
lab/engine) with the lab's tiny model (lab/model). Node containers on this machine's Docker engine."""

import json
import os
import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The fleet suites' load client and roll checks (tests/fleet) serve the real-engine lab's router too.
sys.path.insert(0, str(ROOT / "tests" / "fleet"))
BIN = ROOT / ".venv" / "bin"
INVENTORY = ROOT / "inventories" / "lab-real" / "hosts.yml"
STATE = pathlib.Path(os.environ.get("DSPARK_LAB_STATE", ROOT / ".lab"))
GROUP_VARS = yaml.safe_load((INVENTORY.parent / "group_vars" / "dspark.yml").read_text())
PAIR = yaml.safe_load(INVENTORY.read_text())["all"]["children"]["dspark"]["children"]["real_pair"]
GROUP = "real_pair"
HEAD, WORKER = "spark-r0", "spark-r1"
HEAD_API = "http://10.233.0.11:%d/v1" % GROUP_VARS["dspark_api_port"]
KEYS = GROUP_VARS["serve_api_keys"]
MODEL_NAME = GROUP_VARS["serve_served_model_name"]
CONTAINER = "dspark-vllm"
# The lab's router (spark-rrouter, group dspark_router): port 8080 published on 127.0.0.1:18081.
ROUTER_URL = "http://127.0.0.1:18081"
SIM_GROUP = "sim_pair"
MODEL = json.loads((STATE / "model" / "model.json").read_text())
# The lab Hugging Face endpoint's sentinel token (lab/hf_endpoint; read when the suite runs, the lab is up by then).
TOKEN_FILE = STATE / "hf_endpoint" / "lab-real" / "token"


def run(argv, timeout=1800, env=None):
    """(rc, stdout+stderr) of a command on this machine, without the verbosity or log file of an outer run."""
    environ = {k: v for k, v in os.environ.items() if k not in ("ANSIBLE_VERBOSITY", "ANSIBLE_LOG_PATH")}
    environ.update(env or {})
    proc = subprocess.run([str(a) for a in argv], cwd=ROOT, env=environ, capture_output=True, text=True,
                          timeout=timeout, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def playbook(name, *args, timeout=1800, env=None):
    """A playbook on the real group only (sim_pair and the router are there for test_real_roll.py)."""
    return run([BIN / "ansible-playbook", "-i", INVENTORY, "--limit", GROUP, ROOT / name, *args], timeout=timeout,
               env=env)


def fleet(*args, timeout=1800):
    """(rc, output) of dspark-fleet (the venv's console script)."""
    return run([BIN / "dspark-fleet", *args], timeout=timeout)


def node(host, command, timeout=120):
    """(rc, output) of a shell command inside lab node `host` (a container on this machine's engine)."""
    return run(["docker", "exec", host, "sh", "-c", command], timeout=timeout)


def rank_state(host):
    """The serving container's state on a node ('running', 'exited', ...) or 'absent'."""
    rc, out = node(host, "docker inspect --format '{{.State.Status}}' %s" % CONTAINER)
    return out.strip() if rc == 0 else "absent"
