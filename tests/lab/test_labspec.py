"""Unit tests of lab/labspec.py, the inventory reader behind lab/lab.sh (no Docker needed).

The inventories in inventories/ go through the venv's ansible-inventory, and so does the command line; the bad ones
are small hosts.yml files written to a temporary directory and read by labspec.main in this process, with
`ansible-inventory --list` replaced by the same listing made here through ansible-core's InventoryManager (two process
starts less per case; test_in_process_listing_is_ansible_inventorys checks it against the real command).
"""

import contextlib
import importlib.util
import io
import ipaddress
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("labspec", REPO / "lab" / "labspec.py")
labspec = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(labspec)

PAIR = REPO / "inventories" / "lab" / "hosts.yml"
FLEET = REPO / "inventories" / "lab-fleet" / "hosts.yml"


@pytest.fixture(scope="module")
def pair():
    return labspec.spec_for(str(PAIR))


@pytest.fixture(scope="module")
def fleet():
    return labspec.spec_for(str(FLEET))


def test_pair_lab_keeps_its_names_and_addresses(pair):
    """Tests, Molecule and engineers depend on these exact names, ports and addresses."""
    assert pair["lab"] == "lab"
    assert pair["mgmt"] == {"network": "dspark-lab-mgmt", "subnet": "10.231.0.0/24"}
    assert pair["fabrics"] == [{"network": "dspark-lab-fabric", "group": "lab_pair", "cidr": "192.168.100.0/24",
                                "gateway": "192.168.100.254", "mtu": 9000}]
    hosts = "spark-head-fabric:192.168.100.1,spark-worker-fabric:192.168.100.2"
    assert [(n["name"], n["ssh_port"], n["mgmt_ip"], n["fabric_ip"], n["fabric_if"], n["hosts"]) for n in pair["nodes"]] == [
        ("spark-head", 2221, "10.231.0.11", "192.168.100.1", "enp1s0f1np1", hosts),
        ("spark-worker", 2222, "10.231.0.12", "192.168.100.2", "enp1s0f1np1", hosts),
    ]
    assert pair["routers"] == []


def test_fleet_lab(fleet):
    assert fleet["lab"] == "lab-fleet"
    assert fleet["mgmt"] == {"network": "dspark-lab-fleet-mgmt", "subnet": "10.232.0.0/24"}
    assert [(f["network"], f["cidr"], f["gateway"], f["mtu"]) for f in fleet["fabrics"]] == [
        ("dspark-lab-fleet-pair_b", "192.168.102.0/24", "192.168.102.254", 9000),
        ("dspark-lab-fleet-trio_c", "192.168.103.0/24", "192.168.103.254", 9000),
    ]
    assert [(n["name"], n["group"], n["rank"], n["ssh_port"], n["mgmt_ip"], n["fabric_ip"]) for n in fleet["nodes"]] == [
        ("spark-b0", "pair_b", 0, 2243, "10.232.0.11", "192.168.102.1"),
        ("spark-b1", "pair_b", 1, 2244, "10.232.0.12", "192.168.102.2"),
        ("spark-c0", "trio_c", 0, 2245, "10.232.0.13", "192.168.103.1"),
        ("spark-c1", "trio_c", 1, 2246, "10.232.0.14", "192.168.103.2"),
        ("spark-c2", "trio_c", 2, 2247, "10.232.0.15", "192.168.103.3"),
    ]
    trio = [n for n in fleet["nodes"] if n["group"] == "trio_c"]
    assert {n["hosts"] for n in trio} == {
        "spark-c0-fabric:192.168.103.1,spark-c1-fabric:192.168.103.2,spark-c2-fabric:192.168.103.3"}


def test_fleet_routers(fleet):
    """spark-router and spark-router2 (group dspark_router): management network only, SSH 2248 and 2249, nothing
    published (their service address is reached over the lab's bridge)."""
    assert fleet["routers"] == [{"name": "spark-router", "ssh_port": 2248, "mgmt_ip": "10.232.0.201", "publish": []},
                                {"name": "spark-router2", "ssh_port": 2249, "mgmt_ip": "10.232.0.202", "publish": []}]
    assert not {"spark-router", "spark-router2"} & {n["name"] for n in fleet["nodes"]}


def test_fleet_mgmt_addresses_are_the_labs():
    """dspark_mgmt_address (what the router connects to) is set on every fleet node and matches the lab."""
    hostvars = labspec.load_inventory(str(FLEET))["_meta"]["hostvars"]
    for node in labspec.spec_for(str(FLEET))["nodes"]:
        assert hostvars[node["name"]]["dspark_mgmt_address"] == node["mgmt_ip"]


@pytest.mark.parametrize("inventory", [PAIR, FLEET], ids=["lab", "lab-fleet"])
def test_ports_and_addresses_are_unique_and_inside_their_networks(inventory):
    spec = labspec.spec_for(str(inventory))
    nodes = spec["nodes"]
    for key in ("name", "ssh_port", "mgmt_ip", "fabric_ip"):
        values = [n[key] for n in nodes]
        assert len(values) == len(set(values)), (key, values)
    mgmt = ipaddress.ip_network(spec["mgmt"]["subnet"])
    fabrics = {f["network"]: f for f in spec["fabrics"]}
    for node in nodes:
        assert ipaddress.ip_address(node["mgmt_ip"]) in mgmt
        fabric = fabrics[node["fabric_network"]]
        assert ipaddress.ip_address(node["fabric_ip"]) in ipaddress.ip_network(fabric["cidr"])
        assert node["fabric_ip"] != fabric["gateway"]
        assert node["mtu"] == fabric["mtu"]
    nets = [mgmt] + [ipaddress.ip_network(f["cidr"]) for f in spec["fabrics"]]
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:]), nets


def test_lab_name_comes_from_the_directory():
    assert labspec.lab_name("inventories/lab/hosts.yml") == "lab"
    assert labspec.lab_name(str(REPO / "inventories" / "lab-fleet")) == "lab-fleet"


def test_cli_prints_plain_lines():
    result = subprocess.run([sys.executable, str(REPO / "lab" / "labspec.py"), str(FLEET)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "lab lab-fleet"
    assert lines[1] == "mgmt dspark-lab-fleet-mgmt 10.232.0.0/24"
    assert sum(line.startswith("fabric ") for line in lines) == 2
    nodes = [line.split() for line in lines if line.startswith("node ")]
    assert len(nodes) == 5 and all(len(fields) == 12 for fields in nodes)
    assert nodes[-1][:5] == ["node", "spark-c2", "trio_c", "2", "2247"]
    assert lines[-2:] == ["router spark-router 2248 10.232.0.201 -", "router spark-router2 2249 10.232.0.202 -"]


# --- bad inventories --------------------------------------------------------------------------------------

GOOD = """
all:
  vars:
    dspark_fabric_interface: enp1s0f1np1
    dspark_fabric_mtu: 9000
  children:
    dspark:
      children:
        g1:
          vars: {dspark_group: g1, dspark_fabric_cidr: 192.168.1.0/24}
          hosts:
            n0: {ansible_port: 3001, dspark_rank: 0, dspark_fabric_address: 192.168.1.1}
            n1: {ansible_port: 3002, dspark_rank: 1, dspark_fabric_address: 192.168.1.2}
        g2:
          vars: {dspark_group: g2, dspark_fabric_cidr: 192.168.2.0/24}
          hosts:
            m0: {ansible_port: 3003, dspark_rank: 0, dspark_fabric_address: 192.168.2.1}
            m1: {ansible_port: 3004, dspark_rank: 1, dspark_fabric_address: 192.168.2.2}
"""


# What `ansible-inventory --list` leaves out of a host's variables (its InventoryCLI.INTERNAL_VARS, as of 2.19).
INTERNAL_VARS = {"ansible_diff_mode", "ansible_config_file", "ansible_facts", "ansible_forks", "ansible_inventory_sources",
                 "ansible_limit", "ansible_playbook_python", "ansible_run_tags", "ansible_skip_tags", "ansible_verbosity",
                 "ansible_version", "inventory_dir", "inventory_file", "inventory_hostname", "inventory_hostname_short",
                 "groups", "group_names", "omit", "playbook_dir"}


def list_in_process(path):
    """`ansible-inventory -i PATH --list` as data, made in this process."""
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(path)])
    variables = VariableManager(loader=loader, inventory=inventory)
    listed = {"_meta": {"hostvars": {}}}
    for group in inventory.groups.values():
        entry = {}
        if group.hosts:
            entry["hosts"] = [host.name for host in group.hosts]
        if group.child_groups:
            entry["children"] = [child.name for child in group.child_groups]
        listed[group.name] = entry
    for host in inventory.get_hosts():
        found = variables.get_vars(host=host, include_hostvars=False, stage="all")
        listed["_meta"]["hostvars"][host.name] = {k: v for k, v in found.items() if k not in INTERNAL_VARS}
    return listed


def write_inventory(tmp_path, text, name="lab-x"):
    inv = tmp_path / name / "hosts.yml"
    inv.parent.mkdir(parents=True, exist_ok=True)
    inv.write_text(textwrap.dedent(text))
    return inv


def run_cli(tmp_path, text, name="lab-x"):
    """labspec.main on a hosts.yml written from ``text``: (returncode, stdout, stderr) as a process would give."""
    inv = write_inventory(tmp_path, text, name)
    out, err = io.StringIO(), io.StringIO()
    real = labspec.load_inventory
    labspec.load_inventory = list_in_process
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            returncode = labspec.main([str(inv)])
    finally:
        labspec.load_inventory = real
    return types.SimpleNamespace(returncode=returncode, stdout=out.getvalue(), stderr=err.getvalue())


def normalized(listed):
    """A listing without empty group entries and with hosts and children as sets (their order is not the point)."""
    out = {"hostvars": listed["_meta"]["hostvars"]}      # _meta's "profile" (2.19+) says which format, not what
    for name, entry in listed.items():
        if name != "_meta" and entry:
            out[name] = {key: sorted(value) for key, value in entry.items()}
    return out


@pytest.mark.parametrize("text", ["GOOD", "ROUTER"])
def test_in_process_listing_is_ansible_inventorys(tmp_path, text):
    inv = write_inventory(tmp_path, globals()[text])
    assert normalized(list_in_process(inv)) == normalized(labspec.load_inventory(str(inv)))


def test_good_inventory_two_groups(tmp_path):
    result = run_cli(tmp_path, GOOD)
    assert result.returncode == 0, result.stderr
    assert "fabric dspark-lab-x-g1 g1 192.168.1.0/24 192.168.1.254 9000" in result.stdout
    assert "mgmt dspark-lab-x-mgmt 10.231.0.0/24" in result.stdout  # the default management subnet


@pytest.mark.parametrize("change, expected", [
    (("n1: {ansible_port: 3002, ", "n1: {"),
     "n1: ansible_port is not set"),
    (("ansible_port: 3004", "ansible_port: 3001"),
     "lab lab-x: ansible_port=3001 is set on n0, m1"),
    (("dspark_fabric_address: 192.168.2.2", "dspark_fabric_address: 192.168.9.2"),
     "m1: dspark_fabric_address='192.168.9.2' is outside the group's dspark_fabric_cidr (192.168.2.0/24)"),
    (("dspark_fabric_address: 192.168.2.2", "dspark_fabric_address: 192.168.2.254"),
     "m1: dspark_fabric_address='192.168.2.254' is the last usable address of 192.168.2.0/24"),
    (("dspark_fabric_address: 192.168.2.2", "dspark_fabric_address: 192.168.2.1"),
     "m1: dspark_fabric_address='192.168.2.1' is also the address of m0"),
    (("dspark_fabric_cidr: 192.168.2.0/24", "dspark_fabric_cidr: 192.168.1.0/25"),
     "overlaps dspark_fabric_cidr of g1 (192.168.1.0/24)"),
    (("ansible_port: 3004", "ansible_port: 80"),
     "m1: ansible_port=80 is not a port in 1024-65535"),
    (("dspark_rank: 1, dspark_fabric_address: 192.168.2.2", "dspark_rank: 0, dspark_fabric_address: 192.168.2.2"),
     "group g2: dspark_rank=0 is set on m0, m1"),
    (("{dspark_group: g2,", "{dspark_group: g3,"),
     "m0: dspark_group='g3' names a group this host is not in"),
    (("dspark_fabric_mtu: 9000", "dspark_fabric_mtu: 90000"),
     "dspark_fabric_mtu=90000 is not an MTU in 1280-9216"),
    (("dspark_fabric_cidr: 192.168.2.0/24", "dspark_fabric_cidr: 192.168.2.0/31"),
     "group g2: dspark_fabric_cidr='192.168.2.0/31' has room for 0 host(s)"),
    (("  vars:\n", "  vars:\n    lab_mgmt_subnet: 192.168.2.0/24\n"),
     "overlaps lab_mgmt_subnet (192.168.2.0/24)"),
])
def test_bad_inventory_is_a_clear_error(tmp_path, change, expected):
    old, new = change
    assert old in GOOD
    result = run_cli(tmp_path, GOOD.replace(old, new, 1))
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""
    assert "labspec: ERROR: " in result.stderr
    assert expected in result.stderr, result.stderr
    assert "Fix: " in result.stderr


ROUTER = GOOD + """
    dspark_router:
      hosts:
        r0: {ansible_port: 3010, lab_published_ports: ["13080:8080"]}
"""


def test_router_line(tmp_path):
    result = run_cli(tmp_path, ROUTER)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "router r0 3010 10.231.0.201 13080:8080"
    assert run_cli(tmp_path, ROUTER.replace(', lab_published_ports: ["13080:8080"]', ''), "lab-y").stdout.splitlines()[-1] \
        == "router r0 3010 10.231.0.201 -"


@pytest.mark.parametrize("change, expected", [
    (("ansible_port: 3010", "ansible_port: 3001"), "ansible_port=3001 is set on n0, r0"),
    (('["13080:8080"]', '["3002:8080"]'), "ansible_port=3002 is set on n1, r0 (lab_published_ports)"),
    (('["13080:8080"]', '["80:8080"]'), "r0: lab_published_ports='80:8080' is not HOSTPORT:CONTAINERPORT"),
    (('["13080:8080"]', '["13022:22"]'), "publishes sshd"),
    (('["13080:8080"]', '"13080:8080"'), "r0: lab_published_ports='13080:8080' is not a list"),
    (("        r0: {", "        n0: {}\n        r0: {"), "n0: groups='dspark and dspark_router' is in both groups"),
    (("n0: {ansible_port: 3001,", "n0: {ansible_port: 3001, dspark_mgmt_address: 10.231.0.99,"),
     "n0: dspark_mgmt_address='10.231.0.99' is not the management address the lab gives it (10.231.0.11)"),
])
def test_bad_router_inventory_is_a_clear_error(tmp_path, change, expected):
    old, new = change
    assert old in ROUTER
    result = run_cli(tmp_path, ROUTER.replace(old, new, 1))
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""
    assert expected in result.stderr, result.stderr
    assert "Fix: " in result.stderr


def test_every_problem_is_reported_at_once(tmp_path):
    bad = GOOD.replace("n1: {ansible_port: 3002, ", "n1: {").replace("ansible_port: 3004", "ansible_port: 3003")
    result = run_cli(tmp_path, bad)
    assert result.returncode == 2
    assert "n1: ansible_port is not set" in result.stderr
    assert "ansible_port=3003 is set on m0, m1" in result.stderr


def test_no_dspark_group(tmp_path):
    result = run_cli(tmp_path, "all:\n  hosts:\n    lonely: {ansible_port: 3001}\n")
    assert result.returncode == 2
    assert "group dspark has no hosts" in result.stderr


def test_missing_inventory(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "lab" / "labspec.py"), str(tmp_path / "nope" / "hosts.yml")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "no such inventory" in result.stderr
