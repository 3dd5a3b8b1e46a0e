"""IPv6 parity of the serve firewall (issue #26 point 5; plugins/plugin_utils/_serve_firewall.py).

The ruleset in both families: every new IPv6 packet arriving on a fabric interface (by name) is dropped, SSH excepted;
the API and rendezvous drops are family-neutral, so an IPv6 stranger meets them as an IPv4 one does; without a known
interface name only those ports are closed over IPv6 and the plan says why. Then `nft -c -f` on the generated file, and
real packets in the throw-away namespace topology of firewall_netns.py (IPv6 on both links: a global and a link-local
address on the fabric, a global one on the management side). Skipped where unshare, ip or nft are
missing or unprivileged namespaces are not allowed.
"""

import os
import shutil
import subprocess

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_firewall as fw
from ansible_collections.dspark.cluster.plugins.filter.serve_firewall import FilterModule

import firewall_netns  # noqa: E402  (the namespace harness beside this file)

NFT = firewall_netns.NFT
FABRIC = {"dspark_fabric_interface": "enp1s0f1np1", "fabric_secondary_interface": ""}
IPV6_DROP = 'meta nfproto ipv6 iifname { "enp1s0f1np1" } drop'


def model(host="a0"):
    addresses = {"a0": "10.77.77.1", "a1": "10.77.77.2"}
    return {"group": "pair_a", "host": host, "addresses": addresses, "peers": [m for m in addresses if m != host],
            "master_port": 25000, "api_port": 8888}


def rules(ruleset):
    body = ruleset.split("chain input {", 1)[1]
    return [line.split(" comment ")[0].strip() for line in body.splitlines()[2:] if line.strip() not in ("", "}")]


def test_both_families_rule_by_rule():
    plan = fw.plan(model(), ["10.0.0.0/24", "2001:db8::/64"], fabric_interfaces=FABRIC)
    assert plan["problems"] == [] and plan["notes"] == []
    assert plan["fabric_interfaces"] == ["enp1s0f1np1"]
    assert rules(plan["ruleset"]) == [
        'iif "lo" accept',
        "ct state established,related accept",
        "tcp dport { 22 } accept",                       # SSH, always open (both families)
        IPV6_DROP,                                       # IPv6 on the fabric: nothing new gets in
        "ip saddr @fabric_peers accept",                 # the peers speak IPv4 on the fabric
        "tcp dport 8888 ip saddr @api_allowed_v4 accept",
        "tcp dport 8888 ip6 saddr @api_allowed_v6 accept",
        "tcp dport { 8888, 25000 } drop",                # no ip/ip6 match: both families
        "ip daddr 10.77.77.1 drop",
    ]
    assert plan["api_v6"] == ["::1", "2001:db8::/64"]


def test_the_port_drop_is_family_neutral():
    """The API/rendezvous drop names no family, so in `table inet` it drops IPv6 strangers too."""
    line = next(r for r in rules(fw.plan(model(), fabric_interfaces=FABRIC)["ruleset"]) if r.endswith("} drop") and "dport" in r)
    assert not line.startswith(("ip ", "ip6 ", "meta nfproto"))
    assert "table inet dspark_serve {" in fw.plan(model(), fabric_interfaces=FABRIC)["ruleset"]


@pytest.mark.parametrize("interfaces, names", [
    ({"dspark_fabric_interface": "enp1s0f1np1", "fabric_secondary_interface": "enP2p1s0f1np1"}, ["enp1s0f1np1", "enP2p1s0f1np1"]),
    ({"fabric_secondary_interface": "enP2p1s0f1np1", "dspark_fabric_interface": "enp1s0f1np1"}, ["enp1s0f1np1", "enP2p1s0f1np1"]),
    (["enp1s0f1np1", "enp1s0f1np1", ""], ["enp1s0f1np1"]),
    ({"dspark_fabric_interface": "eth1.100"}, ["eth1.100"]),
])
def test_every_fabric_interface_is_closed_to_ipv6(interfaces, names):
    plan = fw.plan(model(), fabric_interfaces=interfaces)
    assert plan["problems"] == [] and plan["fabric_interfaces"] == names
    assert "meta nfproto ipv6 iifname { %s } drop" % ", ".join('"%s"' % n for n in names) in rules(plan["ruleset"])


@pytest.mark.parametrize("interfaces", [None, {}, {"dspark_fabric_interface": ""}, {"dspark_fabric_interface": None}, []])
def test_without_an_interface_name_only_the_ports_close_over_ipv6_and_the_plan_says_why(interfaces):
    plan = fw.plan(model(), fabric_interfaces=interfaces)
    assert plan["problems"] == [] and plan["ruleset"]
    assert not any("nfproto ipv6" in r for r in rules(plan["ruleset"]))
    assert "tcp dport { 8888, 25000 } drop" in rules(plan["ruleset"])
    (note,) = plan["notes"]
    assert note.startswith("a0: dspark_fabric_interface is not set") and "fabric_ipv6_disable" in note and "Fix: " in note


@pytest.mark.parametrize("interfaces, expected", [
    ({"dspark_fabric_interface": 'en"p1'}, "a0: dspark_fabric_interface='en\"p1' is not a Linux interface name"),
    ({"dspark_fabric_interface": "enp1s0f1np1-too-long"}, "a0: dspark_fabric_interface='enp1s0f1np1-too-long' is not"),
    ({"fabric_secondary_interface": "eth1:0"}, "a0: fabric_secondary_interface='eth1:0' is not a Linux interface name"),
    ({"dspark_fabric_interface": 7}, "a0: dspark_fabric_interface=7 is not a Linux interface name"),
    ("enp1s0f1np1", "a0: the fabric interfaces 'enp1s0f1np1' are not a list of names"),
])
def test_a_bad_interface_name_gives_no_ruleset_and_names_the_fix(interfaces, expected):
    plan = fw.plan(model(), fabric_interfaces=interfaces)
    assert plan["ruleset"] == ""
    assert any(p.startswith(expected) and "Fix: " in p for p in plan["problems"]), plan["problems"]


def test_the_filter_passes_the_interfaces_on():
    plan = FilterModule().filters()["serve_firewall"](model(), ["10.1.0.0/16"], [22], [], FABRIC)
    assert IPV6_DROP in rules(plan["ruleset"])
    assert FilterModule().filters()["serve_firewall"](model(), ["10.1.0.0/16"], [22], [])["notes"]


def _nft_check(path):
    """`nft -c -f` as this user, else inside a throw-away user + network namespace; None when neither can run."""
    run = subprocess.run([NFT, "-c", "-f", str(path)], capture_output=True, text=True, check=False)
    if run.returncode == 0 or "Operation not permitted" not in run.stderr:
        return run
    if not shutil.which("unshare"):
        return None
    run = subprocess.run(["unshare", "-rn", NFT, "-c", "-f", str(path)], capture_output=True, text=True, check=False)
    if run.returncode and "Operation not permitted" in run.stderr:
        return None
    return run


@pytest.mark.skipif(not os.path.exists(NFT), reason="needs nft")
@pytest.mark.parametrize("interfaces", [FABRIC, {"dspark_fabric_interface": "enp1s0f1np1", "fabric_secondary_interface": "eth1.100"}, None])
def test_nft_accepts_the_file(tmp_path, interfaces):
    path = tmp_path / "fw.nft"
    path.write_text(fw.plan(model(), ["10.0.0.0/24", "2001:db8::/64"], routers=["10.0.0.9", "fd00::9"],
                            fabric_interfaces=interfaces)["ruleset"])
    run = _nft_check(path)
    if run is None:
        pytest.skip("nft -c needs CAP_NET_ADMIN and no unprivileged namespace is allowed here")
    assert run.returncode == 0, run.stderr


# --------------------------------------------------------------------------- real packets, both families

# (namespace, source, destination, port, expected after the firewall); the device is the source side's link.
CASES = [
    ("fab", "fd77::3", "fd77::1", 41234, "blocked"),        # a global IPv6 on the fabric: the engine's wildcard port
    ("fab", "fd77::3", "fd77::1", 25000, "blocked"),
    ("fab", "fd77::3", "fd77::1", 8888, "blocked"),
    ("fab", "fd77::3", "fd77::1", 5000, "blocked"),         # nothing new over IPv6 on the fabric...
    ("fab", "fd77::3", "fd77::1", 22, "open"),              # ...but SSH
    ("fab", "fe80::3", "fe80::1", 41234, "blocked"),        # link-local on the fabric
    ("fab", "fe80::3", "fe80::1", 25000, "blocked"),
    ("fab", "10.77.77.2", "10.77.77.1", 41234, "open"),     # the peer over IPv4, as before
    ("fab", "10.77.77.3", "10.77.77.1", 41234, "blocked"),
    ("mgmt", "fd00::5", "fd00::1", 8888, "open"),           # api_allowed_v6
    ("mgmt", "fd00::9", "fd00::1", 8888, "open"),           # the router's IPv6 address
    ("mgmt", "fd00::20", "fd00::1", 8888, "blocked"),       # an IPv6 stranger: API
    ("mgmt", "fd00::5", "fd00::1", 25000, "blocked"),       # rendezvous from the management side, IPv6
    ("mgmt", "fd00::20", "fd00::1", 22, "open"),
    ("mgmt", "fd00::20", "fd00::1", 5000, "open"),          # an operator's other service: untouched
    ("mgmt", "fd00::20", "fd00::1", 41234, "open"),         # stated policy: a wildcard engine port on management stays
    ("mgmt", "10.0.0.20", "10.0.0.1", 41234, "open"),       # ... in both families (docs/security.md)
    ("mgmt", "10.0.0.20", "10.0.0.1", 8888, "blocked"),
    ("node", "::1", "::1", 8888, "open"),                   # loopback
]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    plan = fw.plan(model(), ["10.0.0.0/29", "fd00::/125"], [22], ["10.0.0.9", "fd00::9"],
                   fabric_interfaces={"dspark_fabric_interface": "nf"})
    return firewall_netns.probe(tmp_path_factory.mktemp("packets6"), plan["ruleset"], CASES)


@pytest.mark.parametrize("name, src, dst, port, expected", CASES, ids=["%s %s->%s:%d" % c[:4] for c in CASES])
def test_packets(results, name, src, dst, port, expected):
    firewall_netns.check(results, name, src, dst, port, expected)
