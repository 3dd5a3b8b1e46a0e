"""IPv6 off on the fabric interfaces (fabric_ipv6_disable, issue #26 point 5; plugins/plugin_utils/_fabric_plan.py).

The sysctl file gets each fabric link's disable_ipv6 (none where the node has no such key), the live read
asks for those keys and a live 0 is applied again, no link-local address is asked for (networkd and NetworkManager
would turn IPv6 back on), and with the variable off nothing changes. The RoCE GID index needs no IPv6 GID: it is the
IPv4-mapped RoCE v2 entry, with or without the fe80:: entries of the port (plugins/module_utils/roce_gid.py).
"""

import os
import shutil
import subprocess

import pytest

from ansible_collections.dspark.cluster.plugins.filter.fabric_plan import fabric_plan
from ansible_collections.dspark.cluster.plugins.module_utils.roce_gid import resolve_gid_index, scan_sysfs
from ansible_collections.dspark.cluster.plugins.plugin_utils import _fabric_plan as fp

PRIMARY = {"name": "enp1s0f1np1", "link": "primary", "address": "10.77.77.1", "prefix": 30}
SECONDARY = {"name": "enP2p1s0f1np1", "link": "secondary", "address": "10.77.78.1", "prefix": 30}
SYSCTLS = {"net.core.rmem_max": 268435456, "net.ipv4.tcp_rmem": "4096 131072 268435456"}
PATHS = {"networkd_dir": "/etc/systemd/network", "networkd_prefix": "20-dspark-fabric", "netplan_file": "/etc/netplan/90-dspark-fabric.yaml",
         "netplan_validate": "validate %s", "sysctl_file": "/etc/sysctl.d/90-dspark-fabric.conf",
         "rings_rule": "/etc/udev/rules.d/81-dspark-fabric-rings.rules", "limits_file": "/etc/security/limits.d/90-dspark-fabric.conf"}
KEY = "net.ipv6.conf.enp1s0f1np1.disable_ipv6"
KEY2 = "net.ipv6.conf.enP2p1s0f1np1.disable_ipv6"


def files_inputs(**overrides):
    values = {"backend": "networkd", "in_container": False, "fabric_links": [PRIMARY], "rings": [], "mtu": 9000,
              "netplan_renderer": "NetworkManager", "ipv6_link_local": True, "ipv6_disable": True, "sysctls": SYSCTLS,
              "memlock": "", "paths": PATHS}
    values.update(overrides)
    return values


def role_inputs(live=None, **overrides):
    """The role's plan inputs (plan_inputs.yml) with the node's read (pre) of the sysctls."""
    values = {"interface": "enp1s0f1np1", "address": "10.77.77.1", "cidr": "10.77.77.0/30", "secondary_interface": "",
              "secondary_cidr": "", "secondary_address": "", "sysctls": SYSCTLS, "ipv6_disable": True,
              "pre": {"sysctls": dict({"net.core.rmem_max": "268435456", "net.ipv4.tcp_rmem": "4096 131072 268435456"}, **(live or {}))}}
    values.update(overrides)
    return values


@pytest.mark.parametrize("overrides, lines", [
    ({}, ["net.core.rmem_max = 268435456", "net.ipv4.tcp_rmem = 4096 131072 268435456", "-%s = 1" % KEY]),
    ({"fabric_links": [PRIMARY, SECONDARY]},
     ["net.core.rmem_max = 268435456", "net.ipv4.tcp_rmem = 4096 131072 268435456", "-%s = 1" % KEY, "-%s = 1" % KEY2]),
    # A VLAN's dot stays a dot: "/" separators (sysctl.d and procps keep the rest as written).
    ({"fabric_links": [dict(PRIMARY, name="eth1.100")]},
     ["net.core.rmem_max = 268435456", "net.ipv4.tcp_rmem = 4096 131072 268435456", "-net/ipv6/conf/eth1.100/disable_ipv6 = 1"]),
    ({"ipv6_disable": False}, ["net.core.rmem_max = 268435456", "net.ipv4.tcp_rmem = 4096 131072 268435456"]),
    ({"ipv6_disable": "no"}, ["net.core.rmem_max = 268435456", "net.ipv4.tcp_rmem = 4096 131072 268435456"]),
    ({"ipv6_disable": None}, ["net.core.rmem_max = 268435456", "net.ipv4.tcp_rmem = 4096 131072 268435456"]),
    ({"sysctls": {}}, ["-%s = 1" % KEY]),
    # The node's read found no such key (a kernel booted without IPv6): nothing to turn off, and `sysctl -p` would fail.
    ({"live_sysctls": {KEY: None}}, ["net.core.rmem_max = 268435456", "net.ipv4.tcp_rmem = 4096 131072 268435456"]),
    ({"live_sysctls": {KEY: "0"}}, ["net.core.rmem_max = 268435456", "net.ipv4.tcp_rmem = 4096 131072 268435456", "-%s = 1" % KEY]),
])
def test_the_sysctl_file(overrides, lines):
    (sysctl,) = [f for f in fp.files(files_inputs(**overrides)) if f["kind"] == "sysctl"]
    assert sysctl["lines"] == lines


def test_a_container_gets_no_sysctl_file():
    assert [f["kind"] for f in fp.files(files_inputs(in_container=True))] == []


@pytest.mark.parametrize("overrides, link_local", [
    ({}, "[]"),                                          # IPv6 off: no link-local whatever fabric_ipv6_link_local says
    ({"ipv6_disable": False}, "[ipv6]"),                 # as before
    ({"ipv6_disable": False, "ipv6_link_local": False}, "[]"),
])
def test_netplan_asks_for_no_link_local_with_ipv6_off(overrides, link_local):
    lines = fp.netplan_lines(files_inputs(**overrides))
    assert "      link-local: %s" % link_local in lines


def test_the_role_reads_the_keys_and_applies_a_live_difference():
    assert fp.sysctl_keys(role_inputs()) == ["net.core.rmem_max", "net.ipv4.tcp_rmem", KEY]
    assert fp.sysctl_keys(role_inputs({KEY: None})) == ["net.core.rmem_max", "net.ipv4.tcp_rmem", KEY]   # read every run
    assert fabric_plan(role_inputs(), "inputs")["sysctl_keys"] == fp.sysctl_keys(role_inputs())
    assert fp.sysctl_keys(role_inputs(ipv6_disable=False)) == ["net.core.rmem_max", "net.ipv4.tcp_rmem"]
    assert fp.sysctl_keys(role_inputs(secondary_interface="enP2p1s0f1np1", secondary_cidr="10.77.78.0/30"))[-2:] == [KEY, KEY2]
    # fabric_check reads a key by turning dots into slashes: a VLAN's key is written, not read.
    assert fp.sysctl_keys(role_inputs(interface="eth1.100")) == ["net.core.rmem_max", "net.ipv4.tcp_rmem"]
    assert fp.ipv6_sysctls(role_inputs(interface="eth1.100")) == {"net/ipv6/conf/eth1.100/disable_ipv6": 1}


@pytest.mark.parametrize("live, differs", [
    ({KEY: "1"}, False),
    ({KEY: "0"}, True),                  # set back by hand, or networkd turned it on: the handler loads the file again
    ({KEY: None}, False),                # a kernel without IPv6: nothing to turn off
    ({}, False),                         # not read (the variable was off when the node was read)
])
def test_sysctls_differ(live, differs):
    assert fp.sysctls_differ(role_inputs(live)) is differs


def test_with_the_variable_off_a_live_ipv6_is_left_alone():
    assert fp.sysctls_differ(role_inputs({KEY: "0"}, ipv6_disable=False)) is False
    assert fp.ipv6_sysctls(role_inputs(ipv6_disable=False)) == {}


def test_fabric_sysctls_still_decide_as_before():
    assert fp.sysctls_differ(role_inputs({KEY: "1", "net.core.rmem_max": "212992"})) is True


# --------------------------------------------------------------------------- the GID index needs no IPv6 GID

V1, V2 = "IB/RoCE v1", "RoCE v2"
LINK_LOCAL = "fe80:0000:0000:0000:0a0b:0cff:fe0d:0e0f"
V4 = "0000:0000:0000:0000:0000:ffff:0a4d:4d01"          # ::ffff:10.77.77.1
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


def port(root, gids, slots=8):
    pdir = root / "rocep1s0f1" / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (pdir / sub).mkdir(parents=True, exist_ok=True)
    (pdir / "state").write_text("4: ACTIVE\n")
    (pdir / "link_layer").write_text("Ethernet\n")
    for index in range(slots):
        gid, kind = gids.get(index, (ZERO, None))
        (pdir / "gids" / str(index)).write_text(gid + "\n")
        if kind:
            (pdir / "gid_attrs/types" / str(index)).write_text(kind + "\n")
            (pdir / "gid_attrs/ndevs" / str(index)).write_text("enp1s0f1np1\n")
    (root / "rocep1s0f1" / "device" / "net" / "enp1s0f1np1").mkdir(parents=True, exist_ok=True)
    return root


@pytest.mark.parametrize("gids, index", [
    ({0: (LINK_LOCAL, V1), 1: (LINK_LOCAL, V2), 2: (V4, V1), 3: (V4, V2)}, 3),   # IPv6 on: the fe80:: pair first
    ({2: (V4, V1), 3: (V4, V2)}, 3),                                              # turned off live: the slots stay
    ({0: (V4, V1), 1: (V4, V2)}, 1),                                              # after a boot without IPv6
    ({0: (LINK_LOCAL, V2), 1: (V4, V2)}, 1),                                      # soft-RoCE (v2 only), the VM lab
    ({0: (V4, V2)}, 0),
])
def test_the_gid_index_is_the_ipv4_mapped_roce_v2_entry(tmp_path, gids, index):
    result = resolve_gid_index("=rocep1s0f1", scan_sysfs(str(port(tmp_path, gids))), {"enp1s0f1np1": ["10.77.77.1"]},
                               match_ip="10.77.77.1")
    assert result["gid_index"] == index


# --------------------------------------------------------------------------- the file under procps' sysctl -p

def test_sysctl_p_turns_ipv6_off_on_the_named_links(tmp_path):
    """The handler's `sysctl -q -p` on the rendered file, in a throw-away user + network namespace with links
    named like a fabric port and a VLAN (veth pairs): both get disable_ipv6 = 1, nothing else is touched, rc 0."""
    sysctl, ip = shutil.which("sysctl") or "/usr/sbin/sysctl", shutil.which("ip")
    if not (shutil.which("unshare") and ip and os.path.exists(sysctl)):
        pytest.skip("needs unshare, ip and sysctl")
    (entry,) = [f for f in fp.files(files_inputs(sysctls={}, fabric_links=[PRIMARY, dict(SECONDARY, name="eth1.100")]))
                if f["kind"] == "sysctl"]
    conf = tmp_path / "90-dspark-fabric.conf"
    conf.write_text("\n".join(entry["lines"]) + "\n")
    script = ("{ip} link add enp1s0f1np1 type veth peer name other0 && {ip} link add eth1.100 type veth peer name other1 && "
              "{s} -q -p {c} && cat /proc/sys/net/ipv6/conf/enp1s0f1np1/disable_ipv6 /proc/sys/net/ipv6/conf/eth1.100/disable_ipv6 "
              "/proc/sys/net/ipv6/conf/other0/disable_ipv6").format(ip=ip, s=sysctl, c=conf)
    run = subprocess.run(["unshare", "-rn", "sh", "-c", script], capture_output=True, text=True, check=False)
    if run.returncode and "Operation not permitted" in run.stderr:
        pytest.skip("no unprivileged network namespaces here: %s" % run.stderr.strip())
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["1", "1", "0"]
