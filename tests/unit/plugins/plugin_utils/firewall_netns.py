"""Real packets against a serve firewall ruleset in a throw-away namespace topology (no lab needed): the harness of
test_serve_firewall_packets.py (IPv4) and test_serve_firewall_ipv6.py (both families).

Inside `unshare -rnm` (a user, network and mount namespace of its own; /run/netns on a private tmpfs) three network
namespaces: `node` (the ruleset; listeners in both families on the wildcard for SSH 22, the API 8888, the master
25000, an engine-like ephemeral port 41234, an operator's unrelated service 5000 and LMCache's 5555 and 9090), `fab` (the fabric link `nf`/`fn`:
the peer 10.77.77.2 and a stranger 10.77.77.3 on the same wire, fd77::3 and fe80::3) and `mgmt` (the management
network `nm`/`mn`: an allowed client 10.0.0.5 / fd00::5, the router 10.0.0.9 / fd00::9, an outsider 10.0.0.20 /
fd00::20; a route to the fabric network through the node). TCP connects from each source address, before and after
`nft -f`: open (connected), refused, or blocked (dropped: timeout).
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

NFT = shutil.which("nft") or "/usr/sbin/nft"
# The device each namespace's probes leave by (the scope of a link-local destination).
DEVICES = {"fab": "fn", "mgmt": "mn", "node": "lo"}

LISTEN = textwrap.dedent("""
    import socket, sys, threading, time
    socks = []
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        for port in (22, 8888, 25000, 5000, 41234, 5555, 9090):
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

TOPOLOGY = textwrap.dedent("""
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
    ip -n mgmt route add 10.77.77.0/24 via 10.0.0.1
    sleep 1
""")


def key(name, src, dst, port):
    """A probe's name in the results: source, destination, port and the device it leaves by."""
    return "%s,%s,%d,%s" % (src, dst, port, DEVICES[name])


def _script(tmp_path, ruleset_path, cases):
    ns = {"node": [], "fab": [], "mgmt": []}
    for name, src, dst, port, dummy in cases:
        ns[name].append(key(name, src, dst, port))
    (tmp_path / "listen.py").write_text(LISTEN)
    (tmp_path / "probe.py").write_text(PROBE)
    py = sys.executable

    def probes(tag):
        return "\n".join("ip netns exec %s %s %s/probe.py %s > %s/%s-%s.json" % (name, py, tmp_path, " ".join(items), tmp_path, tag, name)
                         for name, items in ns.items() if items)
    return TOPOLOGY + textwrap.dedent("""
        ip netns exec node {py} {t}/listen.py {t}/ready > /dev/null 2>&1 &
        listener=$!
        for i in $(seq 50); do [ -e {t}/ready ] && break; sleep 0.1; done
        {before}
        ip netns exec node {nft} -c -f {r}
        ip netns exec node {nft} -f {r}
        {after}
        kill $listener
    """).format(py=py, t=tmp_path, nft=NFT, r=ruleset_path, before=probes("before"), after=probes("after"))


def probe(tmp_path, ruleset, cases):
    """{"before": {key: outcome}, "after": {...}} of every case (namespace, source, destination, port, expected) with
    ``ruleset`` loaded in the node namespace; pytest.skip where the namespaces cannot be built here."""
    if not (shutil.which("unshare") and shutil.which("ip") and os.path.exists(NFT)):
        pytest.skip("needs unshare, ip and nft")
    ruleset_path = tmp_path / "fw.nft"
    ruleset_path.write_text(ruleset)
    run = subprocess.run(["unshare", "-rnm", "--propagation", "private", "sh", "-c", _script(tmp_path, ruleset_path, cases)],
                         capture_output=True, text=True, timeout=300, check=False)
    if run.returncode and not (tmp_path / "ready").exists():
        pytest.skip("cannot build the namespaces here: %s" % run.stderr.strip()[-500:])
    assert run.returncode == 0, run.stderr
    found = {}
    for tag in ("before", "after"):
        for name in sorted({case[0] for case in cases}):
            found.setdefault(tag, {}).update(json.loads((tmp_path / ("%s-%s.json" % (tag, name))).read_text()))
    return found


def check(results, name, src, dst, port, expected):
    """One case of probe()'s results: reachable without the firewall, ``expected`` with it."""
    found = key(name, src, dst, port)
    assert results["before"][found] == "open", "the listener is not reachable even without the firewall"
    assert results["after"][found] == expected
