"""Shared by the fleet-lab suites (tests/fleet): the SIMULATED fleet lab (inventories/lab-fleet), its nodes,
the dspark-fleet CLI and plain ansible-playbook, and faulty copies of the inventory.

The lab is brought up once (`make fleettest` runs `make lab-fleet` first) and shared by every suite here;
the suites run in file order and each leaves the fleet serving for the next. (routerlab.py adds the router's.)
The lab is SIMULATED: the serving image is lab/simulator, not vLLM.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import yaml

import routerlab

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLEET = ROOT / "inventories" / "lab-fleet"
INVENTORY = FLEET / "hosts.yml"
# The fleet's own settings (group_vars/dspark.yml: model, revision, cache, the simulator's env), as the tests read them.
FLEET_VARS = yaml.safe_load((FLEET / "group_vars" / "dspark.yml").read_text())
BIN = pathlib.Path(sys.executable).parent
GROUPS = {"pair_b": ["spark-b0", "spark-b1"], "trio_c": ["spark-c0", "spark-c1", "spark-c2"]}
# GPUs per node (SIMULATED): trio_c runs TP=6 as two ranks per node (inventories/lab-fleet/group_vars/trio_c.yml).
GPUS = {"pair_b": 1, "trio_c": 2}
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


def restore(group):
    """The group serving again (playbooks/serve.yml) and, when it left the router's rotation (a supervisor's drain), back
    in it."""
    rc, out = playbook("playbooks/serve.yml", "--limit", group)
    assert rc == 0, out[-3000:]
    if not routerlab.router_servers().get(group, {}).get("in_rotation"):
        run = routerlab.playbook("router_enable.yml", "-e", "router_target_group=" + group)
        assert run.rc == 0, run.tail()


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


# The key comes on stdin (never on a command line).
CHAT = r"""
import json, sys, urllib.request
key = sys.stdin.readline().strip()
body = json.dumps({"model": sys.argv[1], "max_tokens": 8,
                   "messages": [{"role": "user", "content": "Say OK"}]}).encode()
headers = {"Content-Type": "application/json"}
if key:
    headers["Authorization"] = "Bearer " + key
req = urllib.request.Request("http://127.0.0.1:%s/v1/chat/completions" % sys.argv[2], data=body, headers=headers)
print(json.load(urllib.request.urlopen(req, timeout=20))["choices"][0]["message"]["content"])
"""


def chat(group, port=8888):
    """A real chat completion from the group's head API (with the fleet's key): (ok, text)."""
    proc = subprocess.run(["docker", "exec", "-i", HEADS[group], "python3", "-c", CHAT, MODEL, str(port)],
                          input=(routerlab.api_key() or "") + "\n", capture_output=True, text=True, timeout=60,
                          check=False)
    return proc.returncode == 0 and proc.stdout.strip() != "", (proc.stdout + proc.stderr).strip()


def faulty_inventory(tmp_path, host, env):
    """A copy of the fleet inventory where `host`'s rank gets `env` on top of its serve_extra_env (the fleet's and
    its group's): a SIMULATOR failure."""
    target = pathlib.Path(tmp_path) / "inventory"
    shutil.copytree(FLEET, target)
    group_vars = target / "group_vars"
    extra = dict(FLEET_VARS.get("serve_extra_env") or {})
    for name, members in GROUPS.items():
        if host in members and (group_vars / (name + ".yml")).exists():
            extra.update(yaml.safe_load((group_vars / (name + ".yml")).read_text()).get("serve_extra_env") or {})
    extra.update(env)
    (target / "host_vars").mkdir(exist_ok=True)
    (target / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump({"serve_extra_env": extra}))
    return target / "hosts.yml"


def start_fleet(*args, log=None):
    """dspark-fleet ARGS in the background (a Popen; output to `log`)."""
    handle = open(log, "w", encoding="utf-8") if log else subprocess.DEVNULL  # pylint: disable=consider-using-with
    return subprocess.Popen([str(BIN / "dspark-fleet"), *map(str, args)], cwd=ROOT, stdout=handle,
                            stderr=subprocess.STDOUT, env=ENV)


def docker(*args, timeout=120):
    """A docker command on this machine's engine (the lab nodes are its containers): (rc, output)."""
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def rank_state(host):
    """(state, started_at) of the serving container on a node, ('absent', None), or ('unknown', why)."""
    rc, out = docker("exec", host, "docker", "inspect", "--format", "{{.State.Status}} {{.State.StartedAt}}",
                     CONTAINER)
    if rc == 0:
        state, started = out.split()[:2]
        return state, started
    if "no such object" in out.lower():
        return "absent", None
    return "unknown", out[-300:]


def kill_rank(host):
    return docker("exec", host, "docker", "kill", CONTAINER)


def wait_for(predicate, timeout, interval=1.0, abort=None):
    """predicate()'s first true value within `timeout` seconds, else its last value. `abort`, when given, is asked
    after every false value: a reason it returns (a non-empty string) fails the wait at once with that reason."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        reason = abort() if abort else None
        if reason:
            raise AssertionError(reason)
        time.sleep(interval)


def journal(path):
    """The supervisor's journal records (torn lines skipped)."""
    records = []
    if not pathlib.Path(path).exists():
        return records
    for line in pathlib.Path(path).read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            pass
    return records
