# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet lab and its router, as the router tests (tests/fleet/test_router.py) and bench/bench_router_roll.py
drive them.

Stdlib only (the benchmark runs it with the system python3). Playbooks run with the checkout's
.venv/bin/ansible-playbook; the router's state is read fast (every 0.2 s) with `docker exec spark-router` on its
admin socket and parsed by the collection's plugins/module_utils/haproxy_stat.py.
"""

import functools
import importlib.util
import json
import os
import re
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = str(ROOT / "inventories" / "lab-fleet" / "hosts.yml")
# Two routers behind one service address (issue #42; group_vars/dspark_router.yml). spark-router, the first, takes the
# address first: the tests that read one router's state read it there, and a test that moves the address puts it back.
ROUTER = "spark-router"
ROUTERS = ("spark-router", "spark-router2")
VIP = "10.232.0.200"
PORT = 8080
ROUTER_URL = "http://%s:%d" % (VIP, PORT)
# The load client targets loopback only, unless a network is allowed: the lab's management network.
LOAD_NETWORKS = ("10.232.0.0/24",)
BACKEND = "dspark"
SOCKET = "/run/haproxy/admin.sock"
MODEL = "deepseek-v4-flash"
VENV_PLAYBOOK = ROOT / ".venv" / "bin" / "ansible-playbook"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)

_SPEC = importlib.util.spec_from_file_location("dspark_haproxy_stat", ROOT / "plugins" / "module_utils" / "haproxy_stat.py")
haproxy_stat = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(haproxy_stat)
_LABSPEC = importlib.util.spec_from_file_location("dspark_labspec", ROOT / "lab" / "labspec.py")
labspec = importlib.util.module_from_spec(_LABSPEC)
_LABSPEC.loader.exec_module(labspec)


class PlaybookRun:
    """One ansible-playbook run: exit code, output, seconds, recap {host: {ok, changed, failed}}."""

    def __init__(self, args, rc, out, seconds):
        self.args, self.rc, self.out, self.seconds = args, rc, out, seconds
        self.recap = {m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)), "unreachable": int(m.group(4)),
                                   "failed": int(m.group(5))} for m in RECAP.finditer(out)}

    def changed(self, host=None):
        return sum(v["changed"] for h, v in self.recap.items() if host is None or h == host)

    def tail(self, chars=4000):
        return self.out[-chars:]


def playbook(name, *args, timeout=1200, env=None):
    """Run playbooks/<name> (or a path) against the fleet lab; never raises on a non-zero exit."""
    path = name if "/" in name else "playbooks/" + name
    tool = str(VENV_PLAYBOOK) if VENV_PLAYBOOK.exists() else "ansible-playbook"
    argv = [tool, "-i", INVENTORY, path] + list(args)
    started = time.monotonic()
    try:
        run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
                             env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", **(env or {})))
        out, rc = run.stdout + run.stderr, run.returncode
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"").decode("utf-8", "replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
        out, rc = out + "\n[timed out after %ss]" % timeout, 124
    return PlaybookRun(argv, rc, out, time.monotonic() - started)


def with_report(name, group, *args, timeout=1200):
    """router_drain.yml / router_enable.yml for `group` with a JSON report; returns (run, report of the router)."""
    with tempfile.TemporaryDirectory() as tmp:
        report_file = os.path.join(tmp, "report.json")
        run = playbook(name, "-e", "router_target_group=" + group, "-e", "router_report_file=" + report_file,
                       *args, timeout=timeout)
        report = None
        if os.path.exists(report_file):
            with open(report_file, encoding="utf-8") as handle:
                report = json.load(handle).get(ROUTER)
    return run, report


def router_servers():
    """The router's servers, read through `docker exec` (fast enough to poll); {} when it does not answer."""
    script = ('echo "show stat" | socat -t 2 stdio unix-connect:{0}; echo "@@@"; '
              'echo "show servers state {1}" | socat -t 2 stdio unix-connect:{0}').format(SOCKET, BACKEND)
    run = subprocess.run(["docker", "exec", ROUTER, "sh", "-c", script], capture_output=True, text=True,
                         timeout=30, check=False)
    if run.returncode != 0 or "@@@" not in run.stdout:
        return {}
    stat, state = run.stdout.split("@@@\n", 1)
    try:
        servers = haproxy_stat.combine(haproxy_stat.parse_stat(stat.strip() + "\n", BACKEND),
                                       haproxy_stat.parse_servers_state(state, BACKEND))
    except haproxy_stat.HAProxyError:
        return {}
    return {s["name"]: s for s in servers}


def wait_router(predicate, timeout, interval=0.2):
    """Poll router_servers() until predicate(servers) is true; returns (servers, seconds) or (servers, None)."""
    started = time.monotonic()
    while True:
        servers = router_servers()
        if servers and predicate(servers):
            return servers, time.monotonic() - started
        if time.monotonic() - started > timeout:
            return servers, None
        time.sleep(interval)


def serving_groups():
    """The fleet lab's serving groups, by name."""
    return sorted({n["group"] for n in labspec.spec_for(INVENTORY)["nodes"]})


def heads():
    """Serving group -> its head's container name."""
    return {n["group"]: n["name"] for n in labspec.spec_for(INVENTORY)["nodes"] if n["rank"] == 0}


@functools.lru_cache(maxsize=None)
def api_key(inventory=INVENTORY):
    """The fleet's API key (serve_api_key of its heads, one for the whole fleet: the router passes the client's header
    through to whichever group serves it), or None for an open fleet. Read with ansible-inventory, as labspec does."""
    hostvars = labspec.load_inventory(inventory)["_meta"]["hostvars"]
    keys = {hostvars.get(head, {}).get("serve_api_key") or None for head in heads().values()}
    if len(keys) != 1:
        raise AssertionError("the lab's heads do not share one serve_api_key (%d different ones)" % len(keys))
    return keys.pop()


def bearer(key=None):
    """Request headers carrying the fleet's key ({} for an open fleet)."""
    key = api_key() if key is None else key
    return {"Authorization": "Bearer " + key} if key else {}


def fleet_problem():
    """None when the fleet lab and its router are up and every group is in rotation, else the reason."""
    status = subprocess.run(["bash", str(ROOT / "lab" / "lab.sh"), "status", "-i", INVENTORY], capture_output=True,
                            text=True, timeout=180, check=False)
    if status.returncode != 0:
        return ("the fleet lab is not up (lab/lab.sh status -i %s: exit %d). Start it: make lab-fleet, then "
                "ansible-playbook -i %s site.yml" % (INVENTORY, status.returncode, INVENTORY))
    if ROUTER not in status.stdout:
        return "the fleet lab has no %s (an older lab): bash lab/lab.sh up -i %s" % (ROUTER, INVENTORY)
    try:
        request = urllib.request.Request(ROUTER_URL + "/v1/models", headers=bearer())
        with urllib.request.urlopen(request, timeout=10) as resp:
            models = [m["id"] for m in json.load(resp)["data"]]
    except (OSError, ValueError, KeyError) as err:
        return ("the router does not answer on %s/v1/models (%s): run ansible-playbook -i %s site.yml"
                % (ROUTER_URL, err, INVENTORY))
    if MODEL not in models:
        return "the router's /v1/models lists %s, not %s" % (models, MODEL)
    servers = router_servers()
    out = sorted(g for g in serving_groups() if not servers.get(g, {}).get("in_rotation"))
    if out:
        return ("not every serving group is in rotation at the router (out: %s): run playbooks/status.yml and "
                "site.yml on the fleet lab, or router_enable.yml" % ", ".join(out))
    return None


# --- the service address (issue #42) -------------------------------------------------------------------------------

def in_router(name, command, timeout=60):
    """A shell command inside router container `name`: (rc, stdout)."""
    run = subprocess.run(["docker", "exec", name, "sh", "-c", command], capture_output=True, text=True, timeout=timeout,
                         check=False)
    return run.returncode, run.stdout


def holders():
    """The routers that hold the service address now."""
    return [name for name in ROUTERS if " %s/" % VIP in in_router(name, "ip -o -4 addr show")[1]]


def until(predicate, timeout, interval=0.2):
    """True once predicate() is, False after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def wait_holder(name, timeout=20):
    """True once `name`, and only it, holds the service address."""
    return until(lambda: holders() == [name], timeout)


def partition(name):
    """Drop every frame from or to router `name`'s management interface on this machine's bridges (nftables' bridge
    family; run as root): its link is cut while the router runs on, as a dead switch port does."""
    mac = in_router(name, "cat /sys/class/net/eth0/address")[1].strip()
    rules = ["add table bridge dspark_test"]
    for hook in ("input", "forward", "output"):
        rules += ["add chain bridge dspark_test %s { type filter hook %s priority -300; policy accept; }" % (hook, hook),
                  "add rule bridge dspark_test %s ether saddr %s drop" % (hook, mac),
                  "add rule bridge dspark_test %s ether daddr %s drop" % (hook, mac)]
    run = subprocess.run(["nft", "-f", "-"], input="\n".join(rules) + "\n", capture_output=True, text=True, timeout=30,
                         check=False)
    if run.returncode != 0:
        raise RuntimeError("nft: %s" % run.stderr)


def heal():
    subprocess.run(["nft", "delete", "table", "bridge", "dspark_test"], capture_output=True, timeout=30, check=False)


def restore_first_router(timeout=60):
    """spark-router holds the service address again, spark-router2 is its backup (run without load: a move costs the
    requests in flight). True when done."""
    if holders() != [ROUTERS[0]]:
        # spark-router's own check first (HAProxy answers, a group is up behind it: after a cut, once its health checks
        # rose again), and keepalived's rise after it; then spark-router2 lets the address go.
        if not until(lambda: in_router(ROUTERS[0], "/usr/local/sbin/dspark-router-check")[0] == 0, timeout, 0.5):
            return False
        time.sleep(3)   # keepalived's rise (2 checks, 1 s apart): it shows in no state that can be read here
        in_router(ROUTERS[1], "systemctl restart keepalived")
    return wait_holder(ROUTERS[0], timeout) and until(
        lambda: in_router(ROUTERS[1], "systemctl is-active keepalived")[1].strip() == "active", timeout, 0.5)


# The ways the holder of the service address dies (tests/fleet/test_router_failover.py, bench/bench_router_failover.py):
# name -> (break it, bring it back).
FAILURES = {
    "haproxy_killed": (lambda name: in_router(name, "pkill -9 -x haproxy"), lambda name: None),
    "router_stopped": (lambda name: subprocess.run(["docker", "stop", "-t", "5", name], capture_output=True, timeout=60,
                                                   check=False),
                       lambda name: subprocess.run(["docker", "start", name], capture_output=True, timeout=60, check=False)),
    "frames_dropped": (partition, lambda name: heal()),
}
