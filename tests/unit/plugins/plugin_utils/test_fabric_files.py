"""Table-driven tests of the fabric role's files and its handler's script (plugins/plugin_utils/_fabric_plan.py, phases
files and apply_script; was Jinja in roles/fabric/tasks/plan_files.yml, the templates and handlers/main.yml).

The expected lines are what the role's Jinja rendered for the same values before the move (the rendered files of the
fleet lab are also compared, under real Ansible, by tests/unit/playbooks/test_role_plans.py; the script was compared
with the old handler's Jinja for both backends, both renderers and one and two links).
"""

import pytest

from ansible_collections.dspark.cluster.plugins.filter.fabric_plan import fabric_plan
from ansible_collections.dspark.cluster.plugins.plugin_utils import _fabric_plan as fp

PRIMARY = {"name": "enp1s0f1np1", "link": "primary", "address": "10.77.77.1", "prefix": 30}
SECONDARY = {"name": "enP2p1s0f1np1", "link": "secondary", "address": "10.77.78.1", "prefix": 30}
RING = {"name": "enp1s0f1np1", "rx": 4096, "tx": 8192, "rx_max": 4096, "tx_max": 8192, "change": True}
PATHS = {"networkd_dir": "/etc/systemd/network", "networkd_prefix": "20-dspark-fabric", "netplan_file": "/etc/netplan/90-dspark-fabric.yaml",
         "netplan_validate": "validate %s", "sysctl_file": "/etc/sysctl.d/90-dspark-fabric.conf",
         "rings_rule": "/etc/udev/rules.d/81-dspark-fabric-rings.rules", "limits_file": "/etc/security/limits.d/90-dspark-fabric.conf"}
SYSCTLS = {"net.ipv4.tcp_rmem": "4096 131072 268435456", "net.core.rmem_max": 268435456, "Net.A": 1}


def inputs(**overrides):
    values = {"backend": "networkd", "in_container": False, "fabric_links": [PRIMARY], "rings": [RING], "mtu": 9000,
              "netplan_renderer": "NetworkManager", "ipv6_link_local": True, "sysctls": SYSCTLS, "memlock": "unlimited", "paths": PATHS}
    values.update(overrides)
    return values


@pytest.mark.parametrize("overrides, expected", [
    ({}, [("network", "/etc/systemd/network/20-dspark-fabric-primary.network", "0644", "fabric.network.j2"),
          ("sysctl", PATHS["sysctl_file"], "0644", "sysctl.conf.j2"), ("rings", PATHS["rings_rule"], "0644", "rings.rules.j2"),
          ("limits", PATHS["limits_file"], "0644", "limits.conf.j2")]),
    ({"fabric_links": [PRIMARY, SECONDARY], "rings": [], "memlock": ""},
     [("network", "/etc/systemd/network/20-dspark-fabric-primary.network", "0644", "fabric.network.j2"),
      ("network", "/etc/systemd/network/20-dspark-fabric-secondary.network", "0644", "fabric.network.j2"),
      ("sysctl", PATHS["sysctl_file"], "0644", "sysctl.conf.j2")]),
    ({"backend": "netplan", "fabric_links": [PRIMARY, SECONDARY]},
     [("network", PATHS["netplan_file"], "0600", "fabric-netplan.yaml.j2"), ("sysctl", PATHS["sysctl_file"], "0644", "sysctl.conf.j2"),
      ("rings", PATHS["rings_rule"], "0644", "rings.rules.j2"), ("limits", PATHS["limits_file"], "0644", "limits.conf.j2")]),
    # A container: its engine owns the interfaces and the kernel, only the logins' memlock limit is written.
    ({"in_container": True}, [("limits", PATHS["limits_file"], "0644", "limits.conf.j2")]),
    ({"in_container": True, "memlock": ""}, []),
    # A number is a limit too (Jinja's `string | length`).
    ({"in_container": True, "memlock": 65536}, [("limits", PATHS["limits_file"], "0644", "limits.conf.j2")]),
])
def test_files(overrides, expected):
    planned = fp.files(inputs(**overrides))
    assert [(f["kind"], f["dest"], f["mode"], f["src"]) for f in planned] == expected
    assert fabric_plan(inputs(**overrides), "files") == planned
    for entry in planned:
        assert ("link" in entry) == (entry["src"] == "fabric.network.j2")
        assert ("validate" in entry) == (entry["src"] == "fabric-netplan.yaml.j2")
        assert ("lines" in entry) == (entry["kind"] in ("sysctl", "rings") or entry["src"] == "fabric-netplan.yaml.j2")
    links = [f["link"] for f in planned if "link" in f]
    assert links == ([PRIMARY, SECONDARY][:len(links)])


NETPLAN_PRIMARY = ["    enp1s0f1np1:", "      renderer: NetworkManager", "      dhcp4: false", "      dhcp6: false", "      accept-ra: false",
                   "      link-local: [ipv6]", "      mtu: 9000", "      addresses: [10.77.77.1/30]", "      optional: true"]


@pytest.mark.parametrize("overrides, expected", [
    ({}, NETPLAN_PRIMARY),
    ({"ipv6_link_local": "no", "mtu": 1500}, [line.replace("[ipv6]", "[]").replace("9000", "1500") for line in NETPLAN_PRIMARY]),
    ({"netplan_renderer": "networkd", "fabric_links": [PRIMARY, SECONDARY]},
     [line.replace("NetworkManager", "networkd") for line in NETPLAN_PRIMARY] + ["      ignore-carrier: true"]
     + ["    enP2p1s0f1np1:", "      renderer: networkd", "      dhcp4: false", "      dhcp6: false", "      accept-ra: false",
        "      link-local: [ipv6]", "      mtu: 9000", "      addresses: [10.77.78.1/30]", "      optional: true", "      ignore-carrier: true"]),
    ({"fabric_links": []}, []),
])
def test_netplan_lines(overrides, expected):
    assert fp.netplan_lines(inputs(**overrides)) == expected


@pytest.mark.parametrize("sysctls, expected", [
    (SYSCTLS, ["Net.A = 1", "net.core.rmem_max = 268435456", "net.ipv4.tcp_rmem = 4096 131072 268435456"]),
    ({}, []),
    (None, []),
])
def test_sysctl_lines_sorted_without_case(sysctls, expected):
    assert fp.sysctl_lines({"sysctls": sysctls}) == expected


@pytest.mark.parametrize("rings, expected", [
    ([RING], ['ACTION=="add", SUBSYSTEM=="net", NAME=="enp1s0f1np1", RUN+="/usr/sbin/ethtool -G $name rx 4096 tx 8192"',
              'ACTION=="add", SUBSYSTEM=="net", KERNEL=="enp1s0f1np1", RUN+="/usr/sbin/ethtool -G $name rx 4096 tx 8192"']),
    ([RING, dict(RING, name="eth2", rx=1, tx=2)], [
        'ACTION=="add", SUBSYSTEM=="net", NAME=="enp1s0f1np1", RUN+="/usr/sbin/ethtool -G $name rx 4096 tx 8192"',
        'ACTION=="add", SUBSYSTEM=="net", KERNEL=="enp1s0f1np1", RUN+="/usr/sbin/ethtool -G $name rx 4096 tx 8192"',
        'ACTION=="add", SUBSYSTEM=="net", NAME=="eth2", RUN+="/usr/sbin/ethtool -G $name rx 1 tx 2"',
        'ACTION=="add", SUBSYSTEM=="net", KERNEL=="eth2", RUN+="/usr/sbin/ethtool -G $name rx 1 tx 2"']),
    ([], []),
])
def test_rings_lines(rings, expected):
    assert fp.rings_lines({"rings": rings}) == expected


WAIT = ['# The addresses come asynchronously; the RoCE v2 GIDs follow them.', 'i=0', 'while [ "$i" -lt 150 ]; do', '  missing=']
CASE = ['  case "$(ip -4 -o addr show dev enp1s0f1np1)" in', '    *" 10.77.77.1/30 "*) ;;', '    *) missing="$missing enp1s0f1np1" ;;', '  esac']
CASE2 = ['  case "$(ip -4 -o addr show dev enP2p1s0f1np1)" in', '    *" 10.77.78.1/30 "*) ;;', '    *) missing="$missing enP2p1s0f1np1" ;;',
         '  esac']
END = ['  [ -z "$missing" ] && exit 0', '  i=$((i + 1))', '  sleep 0.2', 'done', 'echo "the fabric address did not appear on:$missing" >&2']
STATUS = 'networkctl status %s >&2 2>/dev/null || nmcli device show %s >&2 || true'


@pytest.mark.parametrize("backend, renderer, links, expected", [
    ("networkd", "NetworkManager", [PRIMARY],
     ["set -eu", "networkctl reload", "networkctl reconfigure enp1s0f1np1"] + WAIT + CASE + END
     + [STATUS % ("enp1s0f1np1", "enp1s0f1np1"), "exit 1"]),
    ("networkd", "NetworkManager", [PRIMARY, SECONDARY],
     ["set -eu", "networkctl reload", "networkctl reconfigure enp1s0f1np1 enP2p1s0f1np1"] + WAIT + CASE + CASE2 + END
     + [STATUS % ("enp1s0f1np1", "enp1s0f1np1"), STATUS % ("enP2p1s0f1np1", "enP2p1s0f1np1"), "exit 1"]),
    ("netplan", "NetworkManager", [PRIMARY, SECONDARY],
     ["set -eu", "netplan generate", "nmcli connection reload", 'nmcli --wait 30 connection up "netplan-enp1s0f1np1"',
      'nmcli --wait 30 connection up "netplan-enP2p1s0f1np1"'] + WAIT + CASE + CASE2 + END
     + [STATUS % ("enp1s0f1np1", "enp1s0f1np1"), STATUS % ("enP2p1s0f1np1", "enP2p1s0f1np1"), "exit 1"]),
    ("netplan", "networkd", [PRIMARY],
     ["set -eu", "netplan generate", "networkctl reload", "networkctl reconfigure enp1s0f1np1"] + WAIT + CASE + END
     + [STATUS % ("enp1s0f1np1", "enp1s0f1np1"), "exit 1"]),
])
def test_apply_script(backend, renderer, links, expected):
    values = {"backend": backend, "netplan_renderer": renderer, "fabric_links": links}
    assert fp.apply_script(values) == "\n".join(expected) + "\n"
    assert fabric_plan(values, "apply_script") == fp.apply_script(values)
