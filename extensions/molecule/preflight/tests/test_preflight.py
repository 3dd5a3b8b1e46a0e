"""Verify the preflight scenario on the lab pair.

The nodes are what preflight promises to reach (SSH as the inventory user, sudo, Python 3, the fabric
interface it will later configure), and every broken inventory from the foundation issue stops in
preflight, before a node is contacted, with a message that names the variable.
"""

import copy
import pathlib
import shutil
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[4]
LAB = ROOT / "inventories" / "lab"
PLAYBOOK = ROOT / "playbooks" / "preflight.yml"
PAIR = ("all", "children", "dspark", "children", "lab_pair")


def test_node_answers_as_inventory_user_with_sudo(lab_host):
    # Connected as `spark` and became root through sudo, as every later role will.
    assert lab_host.user().name == "root"
    assert lab_host.user("spark").exists
    assert lab_host.run("printenv SUDO_USER").stdout.strip() == "spark"
    assert lab_host.exists("python3")


def test_fabric_interface_has_the_inventory_address(lab_host):
    address = _pair(yaml.safe_load((LAB / "hosts.yml").read_text()))["hosts"][lab_host.name]["dspark_fabric_address"]
    link = lab_host.interface("enp1s0f1np1")
    assert link.exists
    assert address in link.addresses
    assert lab_host.file("/sys/class/net/enp1s0f1np1/mtu").content_string.strip() == "9000"


def _pair(inventory):
    node = inventory
    for key in PAIR:
        node = node[key]
    return node


def _two_heads(pair):
    pair["hosts"]["spark-worker"]["dspark_rank"] = 0


def _missing_worker(pair):
    del pair["hosts"]["spark-worker"]


def _duplicate_ip(pair):
    pair["hosts"]["spark-worker"]["dspark_fabric_address"] = pair["hosts"]["spark-head"]["dspark_fabric_address"]


def _bad_cidr(pair):
    pair["vars"]["dspark_fabric_cidr"] = "192.168.100.0/33"


def _tp_mismatch(pair):
    pair["vars"]["dspark_tensor_parallel_size"] = 4


def _mtu(pair):
    pair["vars"]["dspark_fabric_mtu"] = 65000


def _mode(pair):
    pair["vars"]["dspark_checkpoint_mode"] = "rsync"


def _outside_cidr(pair):
    pair["hosts"]["spark-worker"]["dspark_fabric_address"] = "10.99.0.2"


BROKEN = [
    ("bad CIDR", _bad_cidr, "group lab_pair: dspark_fabric_cidr='192.168.100.0/33'"),
    ("two heads", _two_heads, "group lab_pair: dspark_rank=0 is set on 2 hosts"),
    ("missing worker", _missing_worker, "group lab_pair: members=['spark-head'] has no worker"),
    ("duplicate fabric IPs", _duplicate_ip, "spark-worker: dspark_fabric_address='192.168.100.1' is also the address of spark-head"),
    ("address outside CIDR", _outside_cidr, "spark-worker: dspark_fabric_address='10.99.0.2' is outside dspark_fabric_cidr"),
    ("tensor-parallel size mismatch", _tp_mismatch, "group lab_pair: dspark_tensor_parallel_size=4 does not equal"),
    ("MTU out of range", _mtu, "group lab_pair: dspark_fabric_mtu=65000 is outside 1500-9216"),
    ("unknown checkpoint mode", _mode, "group lab_pair: dspark_checkpoint_mode='rsync' is not a known checkpoint mode"),
]


@pytest.mark.parametrize("name, breaks, expected", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_inventory_fails_in_preflight_before_any_node_is_contacted(tmp_path, name, breaks, expected):
    inventory = yaml.safe_load((LAB / "hosts.yml").read_text())
    broken = copy.deepcopy(inventory)
    pair = _pair(broken)
    breaks(pair)
    shutil.copytree(LAB / "group_vars", tmp_path / "group_vars")
    # group_vars files outrank vars written in hosts.yml, so a group's own values go in its file.
    (tmp_path / "group_vars" / "lab_pair.yml").write_text(yaml.safe_dump(pair.pop("vars")))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(broken))
    # The lab key path is relative to the inventory directory; point it back at the real one.
    extra = "ansible_ssh_private_key_file=%s" % (ROOT / ".lab" / "id_ed25519")
    run = subprocess.run(
        [shutil.which("ansible-playbook") or "ansible-playbook", "-i", str(tmp_path / "hosts.yml"), "-e", extra, str(PLAYBOOK)],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )
    output = run.stdout + run.stderr
    assert run.returncode != 0, "%s was accepted:\n%s" % (name, output)
    assert expected in output, "%s: message %r not found in:\n%s" % (name, expected, output)
    assert "Fix: " in output
    # Validation is the first task: no node was contacted, so nothing can have changed.
    assert "Contact every node over SSH" not in output, output
    assert "changed=1" not in output
