"""fabric_ipv6_disable (issue #26 point 5) through the fabric role's configure step under real Ansible, on the controller.

The harness of test_fabric_configure.py (the role's tasks/configure.yml and configure_node.yml, its defaults, vars and
templates, files under a temporary directory, stand-in handlers): with the variable on, the sysctl file gets the fabric
link's disable_ipv6 and the links ask for no link-local address (networkd and netplan), the sysctl handler runs once,
a second run and a --check --diff run change nothing; turned off again, the files are as before the change. What the
kernel, networkd and NetworkManager do with them is the VM lab's part. Three hosts, four ansible-playbook runs.
"""

import json

import test_fabric_configure as fc

ON = ("-e", json.dumps({"fabric_ipv6_disable": True}))
SYSCTL_LINE = "-net.ipv6.conf.enp1s0f1np1.disable_ipv6 = 1"


def test_ipv6_off_on_the_fabric_links(tmp_path):
    tmp = str(tmp_path)
    fc.setup(tmp)
    changed, output = fc.run(tmp, "fresh,netplan", *ON)
    sysctl = fc.read(tmp, "fresh", "sysctl/90-dspark-fabric.conf").splitlines()
    assert sysctl[-1] == SYSCTL_LINE and sysctl.count(SYSCTL_LINE) == 1
    assert "net.core.rmem_max = 268435456" in sysctl
    network = fc.read(tmp, "fresh", "network/20-dspark-fabric-primary.network")
    assert "LinkLocalAddressing=no\n" in network and "IPv6AcceptRA=no\n" in network
    assert "      link-local: []\n" in fc.read(tmp, "netplan", "netplan/90-dspark-fabric.yaml")
    assert output.count(fc.SYSCTLS) == 2           # once per host

    changed, output = fc.run(tmp, "fresh,netplan", *ON)
    assert changed == {"fresh": 0, "netplan": 0} and "CHAR handler" not in output
    changed, output = fc.run(tmp, "fresh,netplan", "--check", "--diff", *ON)
    assert changed == {"fresh": 0, "netplan": 0} and "CHAR handler" not in output

    # Off again (the default): the files are what they were before the variable existed.
    changed, output = fc.run(tmp, "fresh,netplan")
    assert SYSCTL_LINE not in fc.read(tmp, "fresh", "sysctl/90-dspark-fabric.conf")
    assert "LinkLocalAddressing=ipv6\n" in fc.read(tmp, "fresh", "network/20-dspark-fabric-primary.network")
    assert "      link-local: [ipv6]\n" in fc.read(tmp, "netplan", "netplan/90-dspark-fabric.yaml")
