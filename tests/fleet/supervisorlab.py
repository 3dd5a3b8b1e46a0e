# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers of the supervisor's fleet-lab tests (tests/fleet/test_supervisor.py) and bench/bench_recovery.py.

Kept in their own file: tests/fleet/fleetlab.py was overwritten on 2026-11-30 and is being restored by others.
Stdlib + PyYAML (the venv's). The lab is SIMULATED: the serving image is lab/simulator, not vLLM.
"""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventories" / "lab-fleet" / "hosts.yml"
BIN = ROOT / ".venv" / "bin"
CONTAINER = "dspark-vllm"


def groups():
    """{group: [hosts in rank order]} of the lab inventory."""
    doc = yaml.safe_load(INVENTORY.read_text())
    out = {}
    for name, group in doc["all"]["children"]["dspark"]["children"].items():
        hosts = group["hosts"]
        out[name] = sorted(hosts, key=lambda h: int(hosts[h]["dspark_rank"]))
    return out


def lab_env(**extra):
    return dict(os.environ, ANSIBLE_NOCOLOR="1", DSPARK_LAB_STATE=str(ROOT / ".lab"), **extra)


def run_fleet(*args, timeout=1500, env=None):
    """.venv/bin/dspark-fleet ARGS in the checkout; (rc, output)."""
    argv = [str(BIN / "dspark-fleet")] + [str(a) for a in args]
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
                              env=env or lab_env())
        return proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        return 124, "%s\n[timed out after %s s]" % (err.stdout, timeout)


def start_fleet(*args, env=None, log=None):
    """dspark-fleet ARGS in the background (a Popen; output to `log`)."""
    argv = [str(BIN / "dspark-fleet")] + [str(a) for a in args]
    handle = open(log, "w", encoding="utf-8") if log else subprocess.DEVNULL  # pylint: disable=consider-using-with
    return subprocess.Popen(argv, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, env=env or lab_env())


def serve_playbook(*args, timeout=1500):
    """ansible-playbook playbooks/serve.yml on the lab inventory (the restore path); (rc, output)."""
    argv = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), "playbooks/serve.yml"] + list(args)
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False, env=lab_env())
    return proc.returncode, proc.stdout + proc.stderr


def docker(*args, timeout=120):
    proc = subprocess.run(["docker"] + list(args), capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def rank_state(host):
    """(state, started_at) of the serving container on a node, ('absent', None), or ('unknown', why)."""
    rc, out = docker("exec", host, "docker", "inspect", "--format", "{{.State.Status}} {{.State.StartedAt}}",
                     CONTAINER)
    if rc == 0:
        state, started = out.split()[:2]
        return state, started
    if "No such object" in out or "no such object" in out.lower():
        return "absent", None
    return "unknown", out[-300:]


def kill_rank(host):
    return docker("exec", host, "docker", "kill", CONTAINER)


def chat(group, timeout=30):
    """One chat completion on the group's head (from inside the head, on its loopback); (ok, text)."""
    head = groups()[group][0]
    body = json.dumps({"model": "deepseek-v4-flash", "max_tokens": 4,
                       "messages": [{"role": "user", "content": "ping"}]})
    rc, out = docker("exec", head, "curl", "-s", "-m", str(timeout), "-H", "Content-Type: application/json",
                     "-d", body, "http://127.0.0.1:8888/v1/chat/completions", timeout=timeout + 30)
    try:
        return rc == 0 and bool(json.loads(out).get("choices")), out[-500:]
    except ValueError:
        return False, out[-500:]


def wait_for(predicate, timeout, interval=1.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def node_docker_up(host):
    return rank_state(host)[0] != "unknown"


def faulty_inventory(tmp, host, env):
    """A copy of the lab inventory where `host`'s rank gets `env` on top of the group's serve_extra_env."""
    target = Path(tmp) / "inventory"
    shutil.copytree(INVENTORY.parent, target)
    group_vars = target / "group_vars"
    extra = dict(yaml.safe_load((group_vars / "dspark.yml").read_text()).get("serve_extra_env") or {})
    for name, members in groups().items():
        if host in members:
            extra.update(yaml.safe_load((group_vars / (name + ".yml")).read_text()).get("serve_extra_env") or {})
    extra.update(env)
    (target / "host_vars").mkdir(exist_ok=True)
    (target / "host_vars" / (host + ".yml")).write_text(yaml.safe_dump({"serve_extra_env": extra}))
    return target / "hosts.yml"


def journal(path):
    records = []
    if not Path(path).exists():
        return records
    for line in Path(path).read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            pass
    return records


def other_fleet_runs():
    """Other pytest runs on tests/fleet (the lab is shared): their pgrep lines."""
    proc = subprocess.run(["pgrep", "-af", "pytest.*tests/fleet"], capture_output=True, text=True, check=False)
    mine = {str(os.getpid()), str(os.getppid())}
    return [line for line in proc.stdout.splitlines() if line.split()[0] not in mine]


def fabric_name_after_reboot(host, address, name="enp1s0f1np1"):
    """LAB ONLY: a restarted node container gets its fabric NIC back as ethN; a real node keeps its udev name.
    Renames it as lab/lab.sh's node setup does (the interface that holds `address`); changes nothing else."""
    script = ('dev=$(ip -o -4 addr show | awk -v ip="%s/" \'index($4, ip) == 1 {sub(/@.*/, "", $2); print $2; exit}\'); '
              '[ -n "$dev" ] || exit 1; [ "$dev" = "%s" ] && exit 0; '
              'ip link set "$dev" down && ip link set "$dev" name "%s" && ip link set "%s" up') % (address, name, name, name)
    return docker("exec", host, "bash", "-c", script)
