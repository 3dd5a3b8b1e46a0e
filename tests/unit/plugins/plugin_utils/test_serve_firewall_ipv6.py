"""IPv6 parity of the serve firewall (issue #26 point 5; plugins/plugin_utils/_serve_firewall.py).

The ruleset in both families: every new IPv6 packet arriving on a fabric interface (by name) is dropped, SSH excepted;
the API and rendezvous drops are family-neutral, so an IPv6 stranger meets them as an IPv4 one does; without a known
interface name only those ports are closed over IPv6 and the plan says why. Then `nft -c -f` on the generated file, and
real packets in a throw-away namespace topology (as test_serve_firewall_packets.py, with IPv6 on both links: a global
and a link-local address on the fabric, a global one on the management side). Skipped where unshare, ip or nft are
missing or unprivileged namespaces are not allowed.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_firewall as fw
from ansible_collections.dspark.cluster.plugins.filter.serve_firewall import FilterModule

NFT = shutil.which("nft") or "/usr/sbin/nft"
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

LISTEN = textwrap.dedent("""
    import socket, sys, threading, time
    socks = []
    # An engine that binds the wildcard (41234): reachable wherever the table does not close it.
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        for port in (22, 8888, 25000, 5000, 41234):
            s = socket.socket(family); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((addr, port)); s.listen(64); socks.append(s)
    def serve(s):
        while True:
            c, _a = s.accept(); c.close()
    for s in socks:
        threading.Thread(target=serve, args=(s,), daemon=True).start()
    open(sys.argv[1], "w").write("ready")
    time.sleep(900)
""")

PROBE = textwrap.dedent("""
    import json, socket, sys
    out = {}
    for item in sys.argv[1:]:
        src, dst, port, dev = item.split(",")
        if ":" in dst:
            scope = socket.if_nametoindex(dev) if dst.startswith("fe80") else 0
            s = socket.socket(socket.AF_INET6); s.bind((src, 0, 0, scope)); target = (dst, int(port), 0, scope)
        else:
            s = socket.socket(); s.bind((src, 0)); target = (dst, int(port))
        s.settimeout(1.0)
        try:
            s.connect(target); out[item] = "open"
        except ConnectionRefusedError:
            out[item] = "refused"
        except OSError:
            out[item] = "blocked"
        finally:
            s.close()
    print(json.dumps(out))
""")

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
DEVICES = {"fab": "fn", "mgmt": "mn", "node": "lo"}


def script(tmp_path, ruleset_path):
    ns = {"node": [], "fab": [], "mgmt": []}
    for name, src, dst, port, dummy in CASES:
        ns[name].append("%s,%s,%d,%s" % (src, dst, port, DEVICES[name]))
    (tmp_path / "listen.py").write_text(LISTEN)
    (tmp_path / "probe.py").write_text(PROBE)
    py = sys.executable

    def probes(tag):
        return "\n".join("ip netns exec %s %s %s/probe.py %s > %s/%s-%s.json" % (name, py, tmp_path, " ".join(items), tmp_path, tag, name)
                         for name, items in ns.items())
    return textwrap.dedent("""
        set -e
        mkdir -p /run/netns && mount -t tmpfs none /run/netns
        for n in node fab mgmt; do ip netns add $n; ip -n $n link set lo up; done
        ip link add nf type veth peer name fn && ip link set nf netns node && ip link set fn netns fab
        ip link add nm type veth peer name mn && ip link set nm netns node && ip link set mn netns mgmt
        ip -n node addr add 10.77.77.1/24 dev nf && ip -n node addr add 10.0.0.1/24 dev nm
        ip -n node -6 addr add fd77::1/64 dev nf nodad && ip -n node -6 addr add fe80::1/64 dev nf nodad
        ip -n node -6 addr add fd00::1/64 dev nm nodad
        for a in 10.77.77.2 10.77.77.3; do ip -n fab addr add $a/24 dev fn; done
        ip -n fab -6 addr add fd77::3/64 dev fn nodad && ip -n fab -6 addr add fe80::3/64 dev fn nodad
        for a in 10.0.0.5 10.0.0.9 10.0.0.20; do ip -n mgmt addr add $a/24 dev mn; done
        for a in fd00::5 fd00::9 fd00::20; do ip -n mgmt -6 addr add $a/64 dev mn nodad; done
        ip -n node link set nf up && ip -n node link set nm up && ip -n fab link set fn up && ip -n mgmt link set mn up
        sleep 1
        ip netns exec node {py} {t}/listen.py {t}/ready > /dev/null 2>&1 &
        listener=$!
        for i in $(seq 50); do [ -e {t}/ready ] && break; sleep 0.1; done
        {before}
        ip netns exec node {nft} -c -f {r}
        ip netns exec node {nft} -f {r}
        {after}
        kill $listener
    """).format(py=py, t=tmp_path, nft=NFT, r=ruleset_path, before=probes("before"), after=probes("after"))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    if not (shutil.which("unshare") and shutil.which("ip") and os.path.exists(NFT)):
        pytest.skip("needs unshare, ip and nft")
    tmp_path = tmp_path_factory.mktemp("packets6")
    ruleset = tmp_path / "fw.nft"
    plan = fw.plan(model(), ["10.0.0.0/29", "fd00::/125"], [22], ["10.0.0.9", "fd00::9"],
                   fabric_interfaces={"dspark_fabric_interface": "nf"})
    ruleset.write_text(plan["ruleset"])
    run = subprocess.run(["unshare", "-rnm", "--propagation", "private", "sh", "-c", script(tmp_path, ruleset)],
                         capture_output=True, text=True, timeout=300, check=False)
    if run.returncode and not (tmp_path / "ready").exists():
        pytest.skip("cannot build the namespaces here: %s" % run.stderr.strip()[-500:])
    assert run.returncode == 0, run.stderr
    found = {}
    for tag in ("before", "after"):
        for name in ("node", "fab", "mgmt"):
            found.setdefault(tag, {}).update(json.loads((tmp_path / ("%s-%s.json" % (tag, name))).read_text()))
    return found


@pytest.mark.parametrize("name, src, dst, port, expected", CASES, ids=["%s %s->%s:%d" % c[:4] for c in CASES])
def test_packets(results, name, src, dst, port, expected):
    key = "%s,%s,%d,%s" % (src, dst, port, DEVICES[name])
    assert results["before"][key] == "open", "the listener is not reachable even without the firewall"
    assert results["after"][key] == expected
