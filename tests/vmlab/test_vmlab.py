"""Checks the real state of the VM lab started by `lab/vm/vmlab.sh up` (two QEMU VMs, soft-RoCE fabric).

Skipped when the VMs do not answer (`vmlab.sh status` fails), unless DSPARK_VMLAB_REQUIRED=1, then failed.
Run it explicitly: `.venv/bin/pytest -q tests/vmlab` (pytest.ini only collects tests/unit by default).
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VMLAB_SH = REPO / "lab" / "vm" / "vmlab.sh"
KEY = REPO / ".lab" / "id_ed25519"
FABRIC_IF = "enp1s0f1np1"
FABRIC_HCA = "rocep1s0f1"
FABRIC_MTU = 9000
PORT_SYSFS = f"/sys/class/infiniband/{FABRIC_HCA}/ports/1"
NODES = {
    "spark-head": {"port": 2231, "fabric": "192.168.100.1", "peer": "spark-worker",
                   "gid": "0000:0000:0000:0000:0000:ffff:c0a8:6401"},
    "spark-worker": {"port": 2232, "fabric": "192.168.100.2", "peer": "spark-head",
                     "gid": "0000:0000:0000:0000:0000:ffff:c0a8:6402"},
}
SSH_OPTS = [
    "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null",
    "-o", "BatchMode=yes",
    "-o", "ConnectTimeout=15",
    "-o", "LogLevel=ERROR",
]
# One SSH login costs 1-3 s against an emulated guest: share one connection per node and user, through
# control sockets in a directory that lives as long as this module's tests.
_CONTROL = {"dir": None}


@pytest.fixture(scope="module", autouse=True)
def vmlab_is_up():
    """Skip every test here (pytest still exits 0) unless both VMs answer; fail instead if they are required."""
    status = subprocess.run(["bash", str(VMLAB_SH), "status"], capture_output=True, text=True, timeout=120,
                            check=False)
    if status.returncode != 0:
        detail = " | ".join(" ".join(line.split()) for line in (status.stdout + status.stderr).splitlines())
        reason = (f"VM lab is not up (lab/vm/vmlab.sh status: exit {status.returncode}; {detail}); "
                  "start it with: bash lab/vm/vmlab.sh up")
        if os.environ.get("DSPARK_VMLAB_REQUIRED") == "1":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    # Short path: the control socket name must fit in a unix socket address (108 bytes).
    _CONTROL["dir"] = tempfile.mkdtemp(prefix="vmlab-ssh-")
    yield
    for node in NODES:
        for user in ("spark", "root"):
            subprocess.run(["ssh", *_ssh_args(node, user), "-O", "exit", f"{user}@127.0.0.1"],
                           capture_output=True, timeout=30, stdin=subprocess.DEVNULL, check=False)
    shutil.rmtree(_CONTROL["dir"], ignore_errors=True)
    _CONTROL["dir"] = None


def _ssh_args(node, user):
    args = ["-i", str(KEY), "-p", str(NODES[node]["port"]), *SSH_OPTS]
    if _CONTROL["dir"]:
        args += ["-o", "ControlMaster=auto", "-o", "ControlPersist=120",
                 "-o", f"ControlPath={_CONTROL['dir']}/{node}-{user}"]
    return args


def ssh(node, command, user="spark", check=True, timeout=90):
    """Run a shell command on a VM over real SSH, as the inventory would."""
    result = subprocess.run(
        ["ssh", *_ssh_args(node, user), f"{user}@127.0.0.1", command],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False,
    )
    if check:
        assert result.returncode == 0, f"{node}: {command!r} exit {result.returncode}: {result.stderr}{result.stdout}"
    return result


def fabric_link(node):
    """`ip -j addr show` of the fabric NIC, as a dict."""
    out = ssh(node, f"ip -j addr show dev {FABRIC_IF}").stdout
    (link,) = json.loads(out)
    return link


def ipv4_of(link):
    return [a["local"] for a in link.get("addr_info", []) if a.get("family") == "inet"]


# --- Access --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("node", NODES)
def test_ssh_as_spark_with_passwordless_sudo(node):
    assert ssh(node, "id -un; hostname; sudo -n id -u").stdout.split() == ["spark", node, "0"]


@pytest.mark.parametrize("node", NODES)
def test_ssh_as_root(node):
    assert ssh(node, "id -u", user="root").stdout.strip() == "0"


def test_host_keys_and_machine_ids_differ():
    """Both VMs boot from one image: host keys and machine-id must still be their own."""
    keys, machine_ids = {}, {}
    for node, spec in NODES.items():
        scan = subprocess.run(["ssh-keyscan", "-T", "15", "-t", "ed25519", "-p", str(spec["port"]), "127.0.0.1"],
                              capture_output=True, text=True, timeout=60, check=False)
        lines = [line.split()[-1] for line in scan.stdout.splitlines() if "ssh-ed25519" in line]
        assert lines, f"{node}: ssh-keyscan found no ed25519 host key: {scan.stderr}"
        keys[node] = lines[0]
        machine_ids[node] = ssh(node, "cat /etc/machine-id").stdout.strip()
    assert keys["spark-head"] != keys["spark-worker"], "both VMs present the same SSH host key"
    assert machine_ids["spark-head"] != machine_ids["spark-worker"], f"same machine-id: {machine_ids}"


# --- Fabric NIC and soft-RoCE, before any role ran ------------------------------------------------------

@pytest.mark.parametrize("node", NODES)
def test_fabric_nic_up_at_jumbo_mtu_without_ipv4(node):
    link = fabric_link(node)
    assert "UP" in link["flags"] and link["operstate"] == "UP", f"{node}: {FABRIC_IF} is not up: {link}"
    assert link["mtu"] == FABRIC_MTU, f"{node}: {FABRIC_IF} has MTU {link['mtu']}"
    assert ipv4_of(link) == [], (
        f"{node}: {FABRIC_IF} already has IPv4 {ipv4_of(link)}; a fresh VM has none (a role or an interrupted "
        "test left it?): bash lab/vm/vmlab.sh down && bash lab/vm/vmlab.sh up")


@pytest.mark.parametrize("node", NODES)
def test_soft_roce_port_active_on_fabric_nic(node):
    out = ssh(node, f"cat {PORT_SYSFS}/state {PORT_SYSFS}/link_layer; "
                    f"cat {PORT_SYSFS}/gid_attrs/ndevs/* 2>/dev/null | sort -u; true").stdout.split("\n")
    assert out[0].strip() == "4: ACTIVE", f"{node}: {PORT_SYSFS}/state is {out[0]!r}"
    assert out[1].strip() == "Ethernet", f"{node}: link_layer is {out[1]!r}"
    ndevs = {line.strip() for line in out[2:] if line.strip()}
    assert ndevs == {FABRIC_IF}, f"{node}: the GID table names netdevs {ndevs}, expected {FABRIC_IF} only"


@pytest.mark.parametrize("node", NODES)
def test_verbs_userspace_sees_active_port(node):
    """rdma-core + the rxe provider: what NCCL and perftest open."""
    out = ssh(node, f"ibv_devinfo -d {FABRIC_HCA}").stdout
    assert "PORT_ACTIVE" in out, f"{node}: ibv_devinfo -d {FABRIC_HCA}:\n{out}"


@pytest.mark.parametrize("node", NODES)
def test_nfs_kernel_modules_load(node):
    ssh(node, "sudo -n modprobe nfsd && sudo -n modprobe nfsv4")
    assert "nfsd" in ssh(node, "cat /proc/filesystems").stdout.split()


# --- With fabric addresses (added here, removed afterwards) --------------------------------------------

@pytest.fixture(scope="class")
def fabric_addresses():
    """Give each fabric NIC its address, as the fabric role would; remove only what was added here."""
    added = []
    try:
        for node, spec in NODES.items():
            if spec["fabric"] not in ipv4_of(fabric_link(node)):
                ssh(node, f"sudo -n ip addr add {spec['fabric']}/24 dev {FABRIC_IF}")
                added.append(node)
        yield
    finally:
        for node in added:
            ssh(node, f"sudo -n ip addr del {NODES[node]['fabric']}/24 dev {FABRIC_IF}", check=False)


def wait_for(predicate, timeout, interval=1.0):
    """Poll predicate() until it returns something truthy or timeout seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


@pytest.mark.usefixtures("fabric_addresses")
class TestWithFabricAddresses:
    @pytest.mark.parametrize("node", NODES)
    def test_roce_v2_gid_for_fabric_ipv4(self, node):
        """The kernel adds the IPv4-mapped GID asynchronously after the address appears."""
        want = NODES[node]["gid"]
        # One grep over the whole table (rxe has hundreds of entries; a process per entry takes a minute here).
        script = (f"cd {PORT_SYSFS} && for g in $(grep -lxF {want} gids/* 2>/dev/null); do "
                  f"i=${{g#gids/}}; echo \"$i $(cat gid_attrs/types/$i)\"; done")
        found = wait_for(lambda: [line.split(" ", 1) for line in ssh(node, script).stdout.splitlines()], timeout=20)
        types = dict(found)
        assert "RoCE v2" in types.values(), f"{node}: GID {want} has indexes/types {types}, no RoCE v2"

    @pytest.mark.parametrize("node", NODES)
    def test_jumbo_frames_pass_unfragmented(self, node):
        peer = NODES[NODES[node]["peer"]]["fabric"]
        ok = ssh(node, f"ping -M do -s 8972 -c 2 -w 20 {peer}", check=False)
        assert ok.returncode == 0, f"{node}: DF 8972-byte ping to {peer} failed:\n{ok.stdout}{ok.stderr}"
        too_big = ssh(node, f"ping -M do -s 8973 -c 1 -w 5 {peer}", check=False)
        assert too_big.returncode != 0, f"{node}: DF 8973-byte ping to {peer} passed: MTU above {FABRIC_MTU}?"
        assert "too long" in too_big.stdout + too_big.stderr, (
            f"{node}: DF 8973-byte ping failed, but not for its size:\n{too_big.stdout}{too_big.stderr}")
