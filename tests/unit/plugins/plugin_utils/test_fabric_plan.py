"""Table-driven tests of the fabric role's plan (was Jinja in roles/fabric/vars/main.yml).

The expected messages and values are those the role's Jinja produced for the same inputs (recorded with the old
vars file on the lab, fleet lab, VM lab and example inventories before the move).
"""

import itertools

import pytest

from ansible_collections.dspark.cluster.plugins.filter.fabric_plan import fabric_plan
from ansible_collections.dspark.cluster.plugins.plugin_utils import _fabric_plan as fp
from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_model as gm


def model(host, addresses, group="g", ranks=None):
    """The group model of ``group`` whose members (in rank order unless ranks say otherwise) have these addresses."""
    hosts = list(addresses)
    ranks = ranks or {h: i for i, h in enumerate(hosts)}
    hostvars = {h: {"dspark_rank": ranks[h], "dspark_fabric_address": addresses[h]} for h in hosts}
    return gm.group_model(group, {"all": hosts, group: hosts}, hostvars, host)


def inputs(host="head", addresses=None, **overrides):
    addresses = addresses or {"head": "192.168.100.1", "worker": "192.168.100.2"}
    values = {
        "host": host, "group": "g", "interface": "enp1s0f1np1", "hca": "rocep1s0f1", "address": addresses.get(host, ""),
        "cidr": "192.168.100.0/24", "mtu": 9000, "secondary_interface": "", "secondary_cidr": "", "secondary_address": "",
        "network_backend": "auto", "netplan_renderer": "NetworkManager", "ring_rx": 8192, "ring_tx": 8192,
        "sysctls": {"net.core.rmem_max": 268435456, "net.ipv4.tcp_rmem": "4096 131072 268435456"},
        "bandwidth_port": 18515, "bandwidth_duration": 5, "bandwidth_min_gbits": 80, "bandwidth_on_low": "warn",
        "bandwidth_extra_args": [],
    }
    values.update(overrides)
    values["model"] = overrides.get("model") or model(host, addresses, group=values["group"] or "g")
    return values


# The standard one-line format (where, variable, value, problem, fix): preflight reports the same lines.
def IFACE(value, host="head"):
    return ("%s: dspark_fabric_interface=%r is not a Linux interface name. Fix: set the ConnectX netdev that carries the fabric address,"
            " e.g. enp1s0f1np1" % (host, value))


HCA = ("head: dspark_fabric_hca is not set (NCCL needs the RDMA device(s) of the fabric port). Fix: set them in NCCL_IB_HCA syntax,"
       " e.g. rocep1s0f1 (ibdev2netdev prints the pairs)")


def MTU(value):
    return ("group g: dspark_fabric_mtu=%r is outside 1500-9216. Fix: use 9000 when every hop of the direct ConnectX link carries jumbo"
            " frames" % (value,))


def CIDR(value):
    return "group g: dspark_fabric_cidr=%r is not an IPv4 network in CIDR form. Fix: write it as network/prefix, e.g. 192.168.100.0/24" % value


def NOT_IP(host, value, cidr="192.168.100.0/24"):
    return ("%s: dspark_fabric_address=%r is not an IPv4 address. Fix: set this node's address on the fabric, inside dspark_fabric_cidr (%s)"
            % (host, value, cidr))


SECOND = "head: fabric_secondary_%s"
SECOND_W = "worker: fabric_secondary_%s"


@pytest.mark.parametrize("overrides, problems", [
    ({}, []),
    ({"mtu": "9000"}, []),
    ({"cidr": "192.168.100.0/31", "addresses": {"head": "192.168.100.0", "worker": "192.168.100.1"}}, []),
    ({"interface": "bad/if", "hca": "", "mtu": 100, "cidr": "192.168.100.1/24"},
     [MTU(100), "group g: dspark_fabric_cidr='192.168.100.1/24' is not written as its network address (host bits set). Fix: use the network"
      " address 192.168.100.0/24", IFACE("bad/if"), HCA]),
    ({"interface": "a-name-longer-than-15"}, [IFACE("a-name-longer-than-15")]),
    ({"interface": "eth1:0"}, [IFACE("eth1:0")]),
    ({"interface": None}, ["head: dspark_fabric_interface is not set (is not a Linux interface name). Fix: set the ConnectX netdev that"
                           " carries the fabric address, e.g. enp1s0f1np1"]),
    ({"mtu": 1499}, [MTU(1499)]),
    ({"mtu": 9217}, [MTU(9217)]),
    ({"mtu": "9000.0"}, [MTU("9000.0")]),
    ({"mtu": True}, [MTU(True)]),
    ({"hca": "rocep1s0f1 roceP2p1s0f1"},
     ["head: dspark_fabric_hca='rocep1s0f1 roceP2p1s0f1' is not in NCCL_IB_HCA syntax. Fix: write one string of device[:port] names"
      " separated by commas, e.g. rocep1s0f1 or =rocep1s0f1,roceP2p1s0f1"]),
    ({"hca": ["rocep1s0f1"]},
     ["head: dspark_fabric_hca=['rocep1s0f1'] is not in NCCL_IB_HCA syntax. Fix: write one string of device[:port] names"
      " separated by commas, e.g. rocep1s0f1 or =rocep1s0f1,roceP2p1s0f1"]),
    ({"hca": "^=rocep1s0f1:1,roceP2p1s0f1:1"}, []),
    ({"cidr": "192.168.100.0"}, [CIDR("192.168.100.0")]),
    ({"cidr": "192.168.100.0/33"}, [CIDR("192.168.100.0/33")]),
    ({"cidr": None}, ["group g: dspark_fabric_cidr is not set (is not an IPv4 network in CIDR form). Fix: write it as network/prefix,"
                      " e.g. 192.168.100.0/24"]),
    ({"cidr": "192.168.100.0/32", "addresses": {"head": "192.168.100.0", "worker": "192.168.100.0"}},
     ["group g: dspark_fabric_cidr='192.168.100.0/32' holds one address only. Fix: use a network with an address for every node, e.g. a /30",
      "worker: dspark_fabric_address='192.168.100.0' is also the address of head. Fix: give every node of the group its own fabric address"]),
    ({"cidr": "fe80::/64"}, [CIDR("fe80::/64")]),
    # The fleet lab's broken cases (pair_b, worker outside the network; trio_c, one address not IPv4).
    ({"group": "pair_b", "cidr": "192.168.102.0/24", "addresses": {"spark-b0": "192.168.102.1", "spark-b1": "192.168.111.1"},
      "host": "spark-b0"},
     ["spark-b1: dspark_fabric_address='192.168.111.1' is outside dspark_fabric_cidr (192.168.102.0/24). Fix: choose an address inside"
      " 192.168.102.0/24 or set dspark_fabric_cidr to a network that holds every address of the group, e.g. 192.168.96.0/20"]),
    ({"addresses": {"head": "192.168.100.1", "worker": "10.0.0.2"}},
     ["worker: dspark_fabric_address='10.0.0.2' is outside dspark_fabric_cidr (192.168.100.0/24). Fix: choose an address inside"
      " 192.168.100.0/24 or set dspark_fabric_cidr to a network that holds every address of the group"]),
    ({"group": "trio_c", "addresses": {"c0": "192.168.100.1", "c1": "192.168.100.2", "c2": "300.1.1.1"}, "host": "c0"},
     [NOT_IP("c2", "300.1.1.1")]),
    # Stricter than ansible.utils (which read a decimal integer as an address).
    ({"addresses": {"head": "192.168.100.1", "worker": "3232261122"}}, [NOT_IP("worker", "3232261122")]),
    ({"addresses": {"head": "192.168.100.1", "worker": "192.168.100.1/24"}}, [NOT_IP("worker", "192.168.100.1/24")]),
    ({"addresses": {"head": "192.168.100.1", "worker": ""}},
     ["worker: dspark_fabric_address is not set (is not an IPv4 address). Fix: set this node's address on the fabric, inside"
      " dspark_fabric_cidr (192.168.100.0/24)"]),
    ({"addresses": {"head": "192.168.100.0", "worker": "192.168.100.255"}},
     ["head: dspark_fabric_address='192.168.100.0' is the network or broadcast address of 192.168.100.0/24. Fix: use a host address between"
      " 192.168.100.1 and 192.168.100.254",
      "worker: dspark_fabric_address='192.168.100.255' is the network or broadcast address of 192.168.100.0/24. Fix: use a host address"
      " between 192.168.100.1 and 192.168.100.254"]),
    ({"secondary_interface": "enp1s0f1np1", "secondary_cidr": "192.168.101.0/24"},
     [SECOND % "interface='enp1s0f1np1' is not a Linux interface name other than dspark_fabric_interface. Fix: set the second interface of"
      " the port, e.g. enP2p1s0f1np1, or leave it empty"]),
    ({"secondary_interface": "enp2", "secondary_cidr": "192.168.101.1/24"},
     [SECOND % "cidr='192.168.101.1/24' is not an IPv4 network in CIDR form without host bits. Fix: give the second interface its own"
      " network, e.g. 192.168.101.0/30"]),
    ({"secondary_interface": "enp2", "secondary_cidr": ""},
     [SECOND % "cidr is not set (is not an IPv4 network in CIDR form without host bits). Fix: give the second interface its own"
      " network, e.g. 192.168.101.0/30"]),
    ({"secondary_interface": "enp2", "secondary_cidr": "192.168.100.128/25"},
     [SECOND % "cidr='192.168.100.128/25' overlaps dspark_fabric_cidr (192.168.100.0/24). Fix: each interface of the port needs its own"
      " subnet"]),
    ({"secondary_interface": "enp2", "secondary_cidr": "192.168.0.0/16"},
     [SECOND % "cidr='192.168.0.0/16' overlaps dspark_fabric_cidr (192.168.100.0/24). Fix: each interface of the port needs its own"
      " subnet"]),
    ({"secondary_interface": "enp2", "secondary_cidr": "10.0.0.0/30", "host": "worker",
      "addresses": {"head": "192.168.100.1", "worker": "192.168.100.3"}},
     [SECOND_W % "cidr='10.0.0.0/30' is too small for host number 3 of dspark_fabric_address=192.168.100.3. Fix: use a network as large"
      " as dspark_fabric_cidr or set fabric_secondary_address"]),
    ({"secondary_interface": "enp2", "secondary_cidr": "10.0.0.0/30", "host": "worker"}, []),
    ({"secondary_interface": "enp2", "secondary_cidr": "10.0.0.0/31", "host": "worker"},
     [SECOND_W % "cidr='10.0.0.0/31' is too small for host number 2 of dspark_fabric_address=192.168.100.2. Fix: use a network as large"
      " as dspark_fabric_cidr or set fabric_secondary_address"]),
    ({"secondary_interface": "enp2", "secondary_cidr": "10.0.0.0/30", "secondary_address": "10.0.0.3"},
     [SECOND % "address='10.0.0.3' is not a usable address of fabric_secondary_cidr (10.0.0.0/30). Fix: choose an address inside it"]),
    ({"secondary_interface": "enp2", "secondary_cidr": "10.0.0.0/30", "secondary_address": "10.0.0.2", "host": "worker"}, []),
    ({"bandwidth_extra_args": ["--tclass", "106", "--qp-timeout=20"]}, []),
    ({"bandwidth_extra_args": ["--tclass 106"]},
     ["head: fabric_bandwidth_extra_args=['--tclass 106'] has the item '--tclass 106', which is not one argument. Fix: write one"
      " list item per argument, e.g. [--tclass, \"106\"] or [--tclass=106]"]),
    ({"bandwidth_extra_args": ["-q", " "]},
     ["head: fabric_bandwidth_extra_args=['-q', ' '] has the item ' ', which is not one argument. Fix: write one"
      " list item per argument, e.g. [--tclass, \"106\"] or [--tclass=106]"]),
])
def test_input_problems(overrides, problems):
    host = overrides.pop("host", None)
    addresses = overrides.pop("addresses", None)
    if host is None:
        host = next(iter(addresses)) if addresses else "head"
    assert fp.input_problems(inputs(host, addresses, **overrides)) == problems


@pytest.mark.parametrize("group, host, known, problem", [
    ("nope", "head", False, "names no inventory group"),
    (None, "head", False, "is not set"),
    ("", "head", False, "is not set"),
    ("g", "stranger", True, "names a group this host is not in"),
])
def test_input_problems_group(group, host, known, problem):
    values = inputs(host)
    values["group"] = group
    values["model"] = gm.group_model(group, {"g": ["head", "worker"]}, {"head": {"dspark_rank": 0}, "worker": {"dspark_rank": 1}}, host)
    assert values["model"]["known"] is known
    first = fp.input_problems(values)[0]
    shown = ("dspark_group=%r " % group) if group else "dspark_group is not set ("
    assert first.startswith("%s: %s%s" % (host, shown, problem)), first


def test_group_rules_take_preflight_limits():
    values = inputs(mtu=1400)
    assert fp.group_findings(values, mtu_min=1280, mtu_max=9216) == []
    assert fp.group_findings(values)[0][:4] == ("group g", "dspark_fabric_mtu", 1400, "is outside 1500-9216")


def test_group_rules_name_the_host_when_the_group_is_unknown():
    values = inputs(mtu=1)
    values["model"] = gm.group_model("nope", {}, {}, "head")
    assert fp.group_findings(values)[0][0] == "head"


@pytest.mark.parametrize("host, overrides, expected", [
    ("head", {}, [{"link": "primary", "name": "enp1s0f1np1", "variable": "dspark_fabric_interface", "address": "192.168.100.1",
                   "cidr": "192.168.100.0/24", "prefix": 24}]),
    # The second interface takes this node's host number in its own network.
    ("worker", {"secondary_interface": "enp2", "secondary_cidr": "192.168.101.0/24"},
     [{"link": "primary", "name": "enp1s0f1np1", "variable": "dspark_fabric_interface", "address": "192.168.100.2",
       "cidr": "192.168.100.0/24", "prefix": 24},
      {"link": "secondary", "name": "enp2", "variable": "fabric_secondary_interface", "address": "192.168.101.2",
       "cidr": "192.168.101.0/24", "prefix": 24}]),
    ("worker", {"secondary_interface": "enp2", "secondary_cidr": "10.9.0.0/30", "secondary_address": "10.9.0.1"},
     [{"link": "primary", "name": "enp1s0f1np1", "variable": "dspark_fabric_interface", "address": "192.168.100.2",
       "cidr": "192.168.100.0/24", "prefix": 24},
      {"link": "secondary", "name": "enp2", "variable": "fabric_secondary_interface", "address": "10.9.0.1",
       "cidr": "10.9.0.0/30", "prefix": 30}]),
])
def test_links(host, overrides, expected):
    values = inputs(host, **overrides)
    assert fp.links(values) == expected
    assert fp.pre_args(values) == {
        "interfaces": [{"name": link["name"], "variable": link["variable"], "require_up": False} for link in expected],
        "networks": [{"cidr": link["cidr"], "variable": link["variable"].replace("_interface", "_cidr")} for link in expected]}
    values["fabric_links"] = expected
    assert fp.post_interfaces(values) == [{"name": link["name"], "variable": link["variable"], "mtu": 9000,
                                           "address": "%s/%s" % (link["address"], link["prefix"]), "require_up": True} for link in expected]


def test_links_of_bad_inputs_do_not_raise():
    """The links are only used after the input checks pass, but a bad value must not break the checks' own message."""
    values = inputs(cidr="nonsense", secondary_interface="enp2", secondary_cidr="")
    assert [(link["prefix"], link["address"]) for link in fp.links(values)] == [(None, "192.168.100.1"), (None, "")]


def pre(**overrides):
    values = {"container": None, "tools": {"netplan": None}, "services": {"systemd-networkd": "active", "NetworkManager": "inactive"},
              "interfaces": {"enp1s0f1np1": {"ipv4": ["192.168.100.1/24"], "mtu": 9000, "up": True}},
              "rings": {"enp1s0f1np1": {"supported": True, "rx": 1024, "tx": 8192, "rx_max": 4096, "tx_max": 8192}},
              "paths": {}, "sysctls": {"net.core.rmem_max": "268435456", "net.ipv4.tcp_rmem": "4096 131072 268435456"}}
    values.update(overrides)
    return values


@pytest.mark.parametrize("overrides, node, backend, problems, differs", [
    ({}, {}, "networkd", [], False),
    ({}, {"interfaces": {"enp1s0f1np1": {"ipv4": ["192.168.100.1/24"], "mtu": 1500, "up": True}}}, "networkd", [], True),
    ({}, {"interfaces": {"enp1s0f1np1": {"ipv4": [], "mtu": 9000, "up": True}}}, "networkd", [], True),
    ({}, {"interfaces": {"enp1s0f1np1": {"ipv4": ["192.168.100.1/24"], "mtu": 9000, "up": False}}}, "networkd", [], True),
    ({}, {"tools": {"netplan": "/usr/sbin/netplan"}}, "netplan",
     ["fabric_network_backend=netplan with fabric_netplan_renderer=NetworkManager needs NetworkManager, which is inactive on this node. Fix:"
      " choose the backend that manages this node's network (netplan with NetworkManager on DGX OS, networkd on Debian)."], False),
    ({"network_backend": "netplan", "netplan_renderer": "networkd"}, {}, "netplan",
     ["fabric_network_backend=netplan but netplan is not installed on this node. Fix: install netplan.io or set fabric_network_backend:"
      " networkd."], False),
    ({}, {"services": {}}, "networkd",
     ["fabric_network_backend=networkd needs systemd-networkd, which is unknown on this node. Fix: choose the backend that manages this"
      " node's network (netplan with NetworkManager on DGX OS, networkd on Debian)."], False),
    ({}, {"container": "docker", "services": {}}, "networkd", [], False),
    ({}, {"container": "docker", "interfaces": {}}, "networkd",
     ["this node is a container (docker), whose interfaces belong to the container engine: enp1s0f1np1 does not exist. Fix: attach the"
      " container to its fabric network with dspark_fabric_address and MTU 9000, or run the role on the host."], True),
    # A link that is down is named as down (issue #27 point 3), not as one that lacks its address or MTU.
    ({}, {"container": "docker",
          "interfaces": {"enp1s0f1np1": {"ipv4": [], "mtu": 1500, "up": False, "carrier": False, "operstate": "down"}}}, "networkd",
     ["this node is a container (docker), whose interfaces belong to the container engine: enp1s0f1np1 is DOWN (operstate down,"
      " carrier no). Fix: bring the link up (`ip link set <name> up`; check the cable and the peer)"], True),
    ({}, {"container": "docker", "interfaces": {"enp1s0f1np1": {"ipv4": [], "mtu": 1500, "up": True, "carrier": True}}}, "networkd",
     ["this node is a container (docker), whose interfaces belong to the container engine: enp1s0f1np1 lacks the fabric address"
      " 192.168.100.1/24; enp1s0f1np1 has MTU 1500, not 9000. Fix: attach the container to its fabric network with dspark_fabric_address"
      " and MTU 9000, or run the role on the host."], True),
])
def test_node_state(overrides, node, backend, problems, differs):
    values = inputs(pre=pre(**node), **overrides)
    assert fp.backend(values) == backend
    assert fp.backend_problems(values) == problems
    assert fp.live_differs(values) is differs
    assert fp.container(values) is (node.get("container") is not None)


@pytest.mark.parametrize("rx, tx, rings", [
    (8192, 8192, [{"name": "enp1s0f1np1", "rx": 4096, "tx": 8192, "rx_max": 4096, "tx_max": 8192, "change": True}]),
    (0, 8192, [{"name": "enp1s0f1np1", "rx": 1024, "tx": 8192, "rx_max": 4096, "tx_max": 8192, "change": False}]),
    (0, 0, []),
])
def test_rings(rx, tx, rings):
    assert fp.rings(inputs(pre=pre(), ring_rx=rx, ring_tx=tx)) == rings
    unsupported = pre(rings={"enp1s0f1np1": {"supported": False}})
    assert fp.rings(inputs(pre=unsupported, ring_rx=rx, ring_tx=tx)) == []


def test_sysctls_differ():
    assert fp.sysctls_differ(inputs(pre=pre())) is False
    assert fp.sysctls_differ(inputs(pre=pre(sysctls={"net.core.rmem_max": "212992"}))) is True
    assert fp.sysctls_differ(inputs(pre=pre(sysctls={}))) is True
    # fabric_check collapses the kernel's tabs; the wanted value is collapsed here.
    assert fp.sysctls_differ(inputs(pre=pre(), sysctls={"net.ipv4.tcp_rmem": "4096  131072\t268435456"})) is False


def test_rank_env():
    env = {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "GLOO_SOCKET_IFNAME": "enp1s0f1np1", "TP_SOCKET_IFNAME": "enp1s0f1np1",
           "NCCL_IB_HCA": "rocep1s0f1", "VLLM_HOST_IP": "192.168.100.1"}
    assert fp.rank_env(inputs()) == env
    assert fp.rank_env(inputs(gid={"gid_index": 3})) == dict(env, NCCL_IB_GID_INDEX="3")


TRIO = {"c2": "192.168.103.3", "c1": "192.168.103.2", "c0": "192.168.103.1"}
TRIO_RANKS = {"c2": 0, "c1": 1, "c0": 2}


def trio(host, **overrides):
    """The fleet lab's trio with ranks reversed (c2 is the head), two links per node."""
    links = [{"link": "primary", "name": "p", "variable": "dspark_fabric_interface", "address": TRIO[host], "prefix": 24},
             {"link": "secondary", "name": "s", "variable": "fabric_secondary_interface",
              "address": TRIO[host].replace("103", "104"), "prefix": 24}]
    gid = {"gid_index": 3, "members": [{"netdev": "p", "device": "roce0", "port": 1}, {"netdev": "s", "device": "roce1", "port": 1}]}
    return inputs(host, TRIO, model=model(host, TRIO, ranks=TRIO_RANKS), cidr="192.168.103.0/24", fabric_links=links, gid=gid, **overrides)


def plans():
    return {h: fp.bw_links(trio(h)) for h in TRIO}


def test_ping_peers():
    values = trio("c1")
    peer_links = {h: trio(h)["fabric_links"] for h in TRIO}
    assert fp.ping_peers(values, peer_links) == [
        {"name": "c2", "address": "192.168.103.3", "interface": "p", "mtu": 9000},
        {"name": "c2", "address": "192.168.104.3", "interface": "s", "mtu": 9000},
        {"name": "c0", "address": "192.168.103.1", "interface": "p", "mtu": 9000},
        {"name": "c0", "address": "192.168.104.1", "interface": "s", "mtu": 9000}]


def test_bandwidth_head():
    plan = fp.bandwidth(trio("c2"), plans())
    assert [(s["peer"], s["link"], s["server"], s["tcp_port"]) for s in plan["head_sends"]] == [
        ("c1", "primary", "192.168.103.2", 18515), ("c1", "secondary", "192.168.104.2", 18516),
        ("c0", "primary", "192.168.103.1", 18517), ("c0", "secondary", "192.168.104.1", 18518)]
    assert [(r["peer"], r["link"], r["device"], r["tcp_port"]) for r in plan["head_receives"]] == [
        ("c1", "primary", "roce0", 18615), ("c1", "secondary", "roce1", 18616),
        ("c0", "primary", "roce0", 18617), ("c0", "secondary", "roce1", 18618)]
    assert plan["worker_sends"] == [] and plan["worker_receives"] == []
    assert fp.server_timeout(trio("c2")) == 60 + 3 * 2 * 35


@pytest.mark.parametrize("host, receives, sends", [
    ("c1", [18515, 18516], [("c2", "192.168.103.3", 18615), ("c2", "192.168.104.3", 18616)]),
    ("c0", [18517, 18518], [("c2", "192.168.103.3", 18617), ("c2", "192.168.104.3", 18618)]),
])
def test_bandwidth_worker(host, receives, sends):
    plan = fp.bandwidth(trio(host), plans())
    assert [r["tcp_port"] for r in plan["worker_receives"]] == receives
    assert [(r["device"], r["ib_port"]) for r in plan["worker_receives"]] == [("roce0", 1), ("roce1", 1)]
    assert [(s["peer"], s["server"], s["tcp_port"]) for s in plan["worker_sends"]] == sends
    assert plan["head_sends"] == [] and plan["head_receives"] == []


def test_bandwidth_peer_without_plan():
    """A worker that published no plan (its GID resolution was skipped) gets no test."""
    assert fp.bandwidth(trio("c2"), {"c1": [], "c0": fp.bw_links(trio("c0"))})["head_sends"][0]["peer"] == "c0"


def results(on_low="warn"):
    sends = fp.bandwidth(trio("c2"), plans())["head_sends"]
    measured = [{"gbits_average": 95.5, "meets_threshold": True}, {"gbits_average": 12.0, "meets_threshold": False},
                {"msg": "boom", "failed": True}, {}]
    sent = {"results": [dict(r, item=item) for item, r in zip(sends, measured)]}
    post = {"problems": ["link down"], "links": [{"interface": "p"}, {"interface": "s"}], "rdma": [{"device": "roce0", "used": True}],
            "pings": [{"peer": "c1", "output": "...", "rc": 0, "ok": True}]}
    return trio("c2", bw_sent=sent, bw_received={"results": [{"skipped": True, "item": {}}]}, post=post, bandwidth_on_low=on_low,
                gid_index=3, nccl_env={"A": "1"})


def test_check_results():
    values = results()
    assert [(b["to"], b["link"], b["gbits_average"], b["meets_threshold"], b["error"]) for b in fp.bw_results(values)] == [
        ("c1", "primary", 95.5, True, None), ("c1", "secondary", 12.0, False, None),
        ("c0", "primary", None, False, "boom"), ("c0", "secondary", None, False, "no result")]
    low = ("RDMA write bandwidth c2 -> c1 over roce1 is 12.0 Gb/s, below fabric_bandwidth_min_gbits=80.0. Fix: check the cable and both ends'"
           " MTU, the PCIe width of each controller (current_link_width x4) and that both halves of the port are in dspark_fabric_hca; about"
           " 13 Gb/s means a degraded ConnectX-7 init (power-cycle the node).")
    assert fp.bw_low(values) == [low]
    failed = ["ib_write_bw c2 -> c0 over roce0 failed: boom", "ib_write_bw c2 -> c0 over roce1 failed: no result"]
    assert fp.check_problems(values) == ["link down"] + failed
    assert fp.check_problems(results("fail")) == ["link down"] + failed + [low]
    result = fp.check_result(values)
    assert {k: result[k] for k in ("host", "group", "rank", "ok", "warnings", "gid_index", "pings", "nccl_env")} == {
        "host": "c2", "group": "g", "rank": 0, "ok": False, "warnings": [low], "gid_index": 3, "pings": [{"peer": "c1", "ok": True}],
        "nccl_env": {"A": "1"}}
    assert fp.check_result(results("fail"))["warnings"] == []


def test_summary_and_report():
    values = results()
    values["check_result"] = fp.check_result(values)
    assert fp.summary(values) == (
        "fabric OK: p, s up at MTU 9000 with 192.168.103.3, 192.168.104.3; DF ping of 8972 bytes to c1, c0; roce0 ACTIVE; NCCL_IB_GID_INDEX=3"
        "; ib_write_bw -> c1 95.5 Gb/s; ib_write_bw -> c1 12.0 Gb/s; ib_write_bw -> c0  Gb/s; ib_write_bw -> c0  Gb/s. WARNING: "
        + values["check_result"]["warnings"][0])
    values["check_result"] = dict(values["check_result"], rdma=[], bandwidth=[], warnings=[])
    values["gid_index"] = None
    assert fp.summary(values).endswith("to c1, c0; RDMA not checked; NCCL_IB_GID_INDEX=")
    ok = {"ok": True}
    assert fp.report(values, {"c2": ok, "c1": ok, "c0": ok}) == {"group": "g", "ok": True, "nodes": {"c2": ok, "c1": ok, "c0": ok}}
    assert fp.report(values, {"c2": ok, "c1": {"ok": False}})["ok"] is False


def test_filter_shell_gives_one_structure_per_phase():
    hostvars = {h: {"fabric_links": trio(h)["fabric_links"], "_fabric_phase_gid": fp.phase_gid(trio(h))} for h in TRIO}
    values = trio("c2")
    assert fabric_plan(values, "inputs") == {"links": fp.links(values), "pre_args": fp.pre_args(values),
                                             "sysctl_keys": fp.sysctl_keys(values)}
    assert fabric_plan(values, "gid") == {"rank_env": fp.rank_env(values), "bw_links": fp.bw_links(values)}
    checks = fabric_plan(values, "checks", hostvars)
    assert sorted(checks) == ["bandwidth", "ping_peers", "post_interfaces", "server_timeout"]
    assert checks["ping_peers"] == fp.ping_peers(values, {h: hostvars[h]["fabric_links"] for h in TRIO})
    assert checks["bandwidth"] == fp.bandwidth(values, plans())
    # A peer that has not published yet (it failed earlier) counts as having no links and no ports.
    partial = {"c0": hostvars["c0"]}
    assert fabric_plan(values, "checks", partial)["ping_peers"] == fp.ping_peers(values, {"c0": hostvars["c0"]["fabric_links"]})
    assert fabric_plan(values, "checks", partial)["bandwidth"] == fp.bandwidth(values, {"c0": fp.bw_links(trio("c0"))})
    with pytest.raises(Exception, match="unknown phase 'links'"):
        fabric_plan(values, "links")


def test_input_rules_and_links_never_raise_on_garbage():
    """The role sets links, problems and pre_args in one set_fact before it asserts: bad inputs must not crash them."""
    values = [None, "", "x", "300.1.1.1", "192.168.100.1/24", "10.0.0.0/33", ["a"], True]
    for address, cidr, scidr, saddress in itertools.product(values, repeat=4):
        model = gm.group_model("g", {"g": ["h"]}, {"h": {"dspark_rank": 0, "dspark_fabric_address": address}}, "h")
        values_in = {"host": "h", "group": "g", "model": model, "interface": "eth1", "hca": "x", "address": address, "cidr": cidr,
                     "mtu": "x", "secondary_interface": "eth2", "secondary_cidr": scidr, "secondary_address": saddress}
        assert fp.input_problems(values_in)
        fp.links(values_in)
        fp.pre_args(values_in)


def test_values_phase_renames_the_variables_and_keeps_what_the_role_computed():
    """The role hands its variables over by their names (lookup role_vars); the plan's keys come from VARIABLES only."""
    values = {"fabric_network_backend": "netplan", "dspark_fabric_mtu": 9000, "fabric_secondary_interface": "",
              "host": "spark-head", "model": {"known": True}, "fabric_links": [{"name": "enp1"}]}
    out = fabric_plan(values, "values")
    assert out["network_backend"] == "netplan" and out["mtu"] == 9000 and out["secondary_interface"] == ""
    assert out["host"] == "spark-head" and out["model"] == {"known": True} and out["fabric_links"] == [{"name": "enp1"}]
    assert out["ring_rx"] is None and "fabric_network_backend" not in out and "dspark_fabric_mtu" not in out
    assert set(fp.VARIABLES) <= set(out)
