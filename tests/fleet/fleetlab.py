"""Shared by the fleet-lab suites (tests/fleet): the SIMULATED fleet lab (inventories/lab-fleet), its nodes,
the dspark-fleet CLI and plain ansible-playbook, and faulty copies of the inventory.

The lab is brought up once (`make fleettest` runs `make lab-fleet` first) and shared by every suite here;
the suites run in file order and each leaves the fleet serving for the next. (routerlab.py adds the router's.)
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLEET = ROOT / "inventories" / "lab-fleet"
INVENTORY = FLEET / "hosts.yml"
BIN = pathlib.Path(sys.executable).parent
GROUPS = {"pair_a": ["spark-a0", "spark-a1"], "pair_b": ["spark-b0", "spark-b1"],
          "trio_c": ["spark-c0", "spark-c1", "spark-c2"]}
HEADS = {group: members[0] for group, members in GROUPS.items()}
CONTAINER = "dspark-vllm"
MODEL = "deepseek-v4-flash"
ENV = dict(os.environ, DSPARK_LAB_STATE=str(ROOT / ".lab"), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))


def run(argv, timeout=1800):
    """(rc, stdout+stderr) of a command run from the repository root."""
    proc = subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def fleet(*args, timeout=1800):
    """Run dspark-fleet (the venv's console script)."""
    return run([str(BIN / "dspark-fleet"), *map(str, args)], timeout=timeout)


def playbook(name, *args, inventory=INVENTORY, timeout=1800):
    return run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(ROOT / name), *map(str, args)],
               timeout=timeout)


def report(path):
    return json.loads(pathlib.Path(path).read_text())


def node(name, command, timeout=120):
    """Run a shell command inside lab node `name` (a container on this machine's engine)."""
    proc = subprocess.run(["docker", "exec", name, "sh", "-c", command], capture_output=True, text=True,
                          timeout=timeout, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def container_id(host):
    """'<id> <state>' of the serving container on `host`, or None."""
    rc, out, dummy = node(host, "docker inspect --format '{{.Id}} {{.State.Status}}' %s" % CONTAINER)
    return out.strip() if rc == 0 else None


CHAT = r"""
import json, sys, urllib.request
body = json.dumps({"model": sys.argv[1], "max_tokens": 8,
                   "messages": [{"role": "user", "content": "Say OK"}]}).encode()
req = urllib.request.Request("http://127.0.0.1:%s/v1/chat/completions" % sys.argv[2], data=body,
                             headers={"Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(req, timeout=20))["choices"][0]["message"]["content"])
"""


def chat(group, port=8888):
    """A real chat completion from the group's head API: (ok, text)."""
    proc = subprocess.run(["docker", "exec", "-i", HEADS[group], "python3", "-", MODEL, str(port)], input=CHAT,
                          capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode == 0 and proc.stdout.strip() != "", (proc.stdout + proc.stderr).strip()


def faulty_inventory(tmp_path, host, env):
    """A copy of the fleet inventory whose `host` injects a SIMULATOR failure (serve_extra_env)."""
    target = tmp_path / "inventory"
    shutil.copytree(FLEET, target)
    base = yaml.safe_load((FLEET / "group_vars" / "dspark.yml").read_text())["serve_extra_env"]
    (target / "host_vars").mkdir(exist_ok=True)
    (target / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump({"serve_extra_env": dict(base, **env)}))
    return target / "hosts.yml"
