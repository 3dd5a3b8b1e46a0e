"""Checks the real state of a container lab started by `lab/lab.sh up [-i INVENTORY]`.

The lab is the one DSPARK_LAB_INVENTORY names (default inventories/lab/hosts.yml, the pair); its nodes,
ports and addresses come from lab/labspec.py, as lab.sh reads them. Skipped when the lab is not up
(`lab.sh status` fails), unless DSPARK_LAB_REQUIRED=1, then failed.
"""

import importlib.util
import itertools
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB_SH = REPO / "lab" / "lab.sh"
KEY = REPO / ".lab" / "id_ed25519"
INVENTORY = os.environ.get("DSPARK_LAB_INVENTORY", str(REPO / "inventories" / "lab" / "hosts.yml"))
_SPEC = importlib.util.spec_from_file_location("labspec", REPO / "lab" / "labspec.py")
labspec = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(labspec)
SPEC = labspec.spec_for(INVENTORY)
NODES = {
    n["name"]: {
        "port": n["ssh_port"], "mgmt": n["mgmt_ip"], "fabric": n["fabric_ip"], "prefix": n["prefixlen"],
        "group": n["group"], "fabric_if": n["fabric_if"], "mtu": n["mtu"],
    }
    for n in SPEC["nodes"]
}
MGMT_PREFIX = SPEC["mgmt"]["subnet"].split("/")[1]
# Routers (group dspark_router, the fleet lab's spark-router): management network only.
ROUTERS = {r["name"]: {"port": r["ssh_port"], "mgmt": r["mgmt_ip"]} for r in SPEC.get("routers", [])}
# Every ordered pair of members of one serving group; and one pair of nodes of different groups, if any.
PEERS = [(a, b) for a, b in itertools.permutations(NODES, 2) if NODES[a]["group"] == NODES[b]["group"]]
STRANGERS = [(a, b) for a, b in itertools.permutations(NODES, 2) if NODES[a]["group"] != NODES[b]["group"]][:1]
SSH_OPTS = [
    "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null",
    "-o", "BatchMode=yes",
    "-o", "ConnectTimeout=10",
    "-o", "LogLevel=ERROR",
]


def lab_status():
    return subprocess.run(["bash", str(LAB_SH), "status", "-i", INVENTORY], capture_output=True, text=True,
                          timeout=180, check=False)


@pytest.fixture(scope="module", autouse=True)
def lab_is_up():
    """Skip every test here (pytest still exits 0) unless the lab answers; fail instead if it is required."""
    status = lab_status()
    if status.returncode == 0:
        return
    detail = " | ".join(" ".join(line.split()) for line in (status.stdout + status.stderr).splitlines())
    reason = (f"lab {SPEC['lab']} is not up (lab/lab.sh status -i {INVENTORY}: exit {status.returncode}; {detail}); "
              f"start it with: bash lab/lab.sh up -i {INVENTORY}")
    if os.environ.get("DSPARK_LAB_REQUIRED") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def ssh(node, command, user="spark", check=True):
    """Run a shell command on a node (or router) over real SSH, as the inventory would."""
    result = subprocess.run(
        ["ssh", "-i", str(KEY), "-p", str({**NODES, **ROUTERS}[node]["port"]), *SSH_OPTS, f"{user}@127.0.0.1", command],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False,
    )
    if check:
        assert result.returncode == 0, f"{node}: {command!r} exit {result.returncode}: {result.stderr}"
    return result


@pytest.mark.parametrize("node", NODES)
def test_ssh_as_spark_and_hostname(node):
    assert ssh(node, "id -un; hostname").stdout.split() == ["spark", node]


@pytest.mark.parametrize("node", NODES)
def test_ssh_as_root(node):
    assert ssh(node, "id -u", user="root").stdout.strip() == "0"


@pytest.mark.parametrize("node", NODES)
def test_passwordless_sudo(node):
    assert ssh(node, "sudo -n id -u").stdout.strip() == "0"
    assert ssh(node, "stat -c %a /etc/sudoers.d/spark", user="root").stdout.strip() == "440"


@pytest.mark.parametrize("node", NODES)
def test_python_loads_the_labs_module_bytecode_cache(node):
    """Lab nodes only (lab/image/dspark_lab_ansiballz_cache.py): every python3 start wraps zipimport's compile."""
    probe = ("import sys, zipimport; "
             "print(zipimport._compile_source.__module__ if 'dspark_lab_ansiballz_cache' in sys.modules else '')")
    assert ssh(node, f'python3 -c "{probe}"').stdout.strip() == "dspark_lab_ansiballz_cache"


@pytest.mark.parametrize("node", NODES)
def test_systemd_is_running(node):
    state = ssh(node, "systemctl is-system-running", check=False).stdout.strip()
    assert state == "running", ssh(node, "systemctl --failed --no-legend", check=False).stdout
    assert ssh(node, "ps -o comm= -p 1").stdout.strip() == "systemd"


@pytest.mark.parametrize("node", NODES)
def test_fabric_interface(node):
    want = NODES[node]
    out = ssh(node, f"ip -o -4 addr show dev {want['fabric_if']}; cat /sys/class/net/{want['fabric_if']}/mtu").stdout
    assert f"inet {want['fabric']}/{want['prefix']} " in out
    assert out.split()[-1] == str(want["mtu"])


@pytest.mark.parametrize("node", NODES)
def test_management_interface(node):
    out = ssh(node, "ip -o -4 addr show").stdout
    assert f"inet {NODES[node]['mgmt']}/{MGMT_PREFIX} " in out


@pytest.mark.parametrize("node", NODES)
def test_no_default_route_over_fabric(node):
    fabric_if = NODES[node]["fabric_if"]
    routes = ssh(node, "ip -4 route show default").stdout
    assert routes.strip(), "no default route at all (the mgmt network should provide one)"
    assert fabric_if not in routes
    assert ssh(node, "ip -4 route get 1.1.1.1").stdout.split("dev ")[1].split()[0] != fabric_if


@pytest.mark.parametrize("src, dst", PEERS, ids=[f"{a}->{b}" for a, b in PEERS])
def test_jumbo_frames_between_group_members(src, dst):
    """Full-MTU frames pass unfragmented (MTU - 28 bytes of ICMP payload); one byte more is refused."""
    fabric_if, size = NODES[src]["fabric_if"], NODES[src]["mtu"] - 28
    ok = ssh(src, f"ping -M do -s {size} -c1 -W2 -I {fabric_if} {NODES[dst]['fabric']}", check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    too_big = ssh(src, f"ping -M do -s {size + 1} -c1 -W2 -I {fabric_if} {NODES[dst]['fabric']}", check=False)
    assert too_big.returncode != 0, too_big.stdout


@pytest.mark.parametrize("src, dst", PEERS, ids=[f"{a}->{b}" for a, b in PEERS])
def test_members_reach_each_other_over_fabric_by_name(src, dst):
    result = ssh(src, f"ping -M do -s {NODES[src]['mtu'] - 28} -c1 -W2 {dst}-fabric", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert NODES[dst]["fabric"] in result.stdout


@pytest.mark.parametrize("src, dst", STRANGERS or [(None, None)], ids=[f"{a}->{b}" for a, b in STRANGERS] or ["one-group"])
def test_groups_have_separate_fabrics(src, dst):
    """Each serving group has its own fabric: another group's fabric address is not reachable, nor its name known."""
    if src is None:
        pytest.skip(f"lab {SPEC['lab']} has a single serving group")
    result = ssh(src, f"ping -c1 -W1 {NODES[dst]['fabric']}", check=False)
    assert result.returncode != 0, result.stdout
    assert ssh(src, f"getent hosts {dst}-fabric", check=False).returncode != 0


def test_distinct_ssh_host_keys():
    keys = {node: ssh(node, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1] for node in NODES}
    assert len(set(keys.values())) == len(NODES), keys


def test_distinct_machine_ids():
    ids = {node: ssh(node, "cat /etc/machine-id").stdout.strip() for node in NODES}
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids.values()), ids
    assert len(set(ids.values())) == len(NODES), ids


@pytest.mark.parametrize("router", ROUTERS or [None])
def test_router_has_only_the_management_network(router):
    if router is None:
        pytest.skip(f"lab {SPEC['lab']} has no router")
    assert ssh(router, "sudo -n id -un; hostname").stdout.split() == ["root", router]
    addresses = ssh(router, "ip -o -4 addr show | awk '{print $2, $4}'").stdout.split("\n")
    assert sorted(a for a in addresses if a and not a.startswith("lo ")) == [f"eth0 {ROUTERS[router]['mgmt']}/{MGMT_PREFIX}"]


def test_status_exits_zero():
    status = lab_status()
    assert status.returncode == 0, status.stdout + status.stderr
    lines = status.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(NODES) + list(ROUTERS)
    assert all("running" in line and "ssh ok" in line for line in lines), lines
    assert all(f"mtu {NODES[line.split()[0]]['mtu']} " in line for line in lines if line.split()[0] in NODES), lines
