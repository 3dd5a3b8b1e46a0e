"""The serve firewall with real packets: the rendered ruleset in a throw-away namespace topology (no lab needed).

Inside `unshare -rnm` (a user, network and mount namespace of its own; /run/netns on a private tmpfs) three network
namespaces: `node` (the ruleset, listeners on the SSH, API, master, an engine-like ephemeral port on the fabric address and
an operator's unrelated service), `fab` (the fabric link: the peer 10.77.77.2 and a stranger 10.77.77.3 on the same
wire) and `mgmt` (the management network: an allowed client 10.0.0.5, the router 10.0.0.9, an outsider 10.0.0.20).
TCP connects from each source address, before and after `nft -f`: open (connected), refused, or blocked (dropped:
timeout). Skipped where unshare, ip or nft are missing or unprivileged namespaces are not allowed.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_firewall as fw

NFT = shutil.which("nft") or "/usr/sbin/nft"
pytestmark = pytest.mark.skipif(not (shutil.which("unshare") and shutil.which("ip") and os.path.exists(NFT)),
                                reason="needs unshare, ip and nft")

LISTEN = textwrap.dedent("""
    import socket, sys, threading, time
    socks = []
    for addr, port in [("0.0.0.0", 22), ("0.0.0.0", 8888), ("0.0.0.0", 25000), ("0.0.0.0", 5000), ("10.77.77.1", 41234)]:
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((addr, port)); s.listen(64)
        socks.append(s)
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
        src, dst, port = item.split(",")
        s = socket.socket(); s.settimeout(1.0); s.bind((src, 0))
        try:
            s.connect((dst, int(port))); out[item] = "open"
        except ConnectionRefusedError:
            out[item] = "refused"
        except OSError:
            out[item] = "blocked"
        finally:
            s.close()
    print(json.dumps(out))
""")

# (namespace, source, destination, port, expected after the firewall)
CASES = [
    ("fab", "10.77.77.2", "10.77.77.1", 25000, "open"),      # the peer: rendezvous
    ("fab", "10.77.77.2", "10.77.77.1", 41234, "open"),      # the peer: an engine port on the fabric address
    ("fab", "10.77.77.2", "10.77.77.1", 8888, "open"),
    ("fab", "10.77.77.3", "10.77.77.1", 25000, "blocked"),   # a stranger on the fabric wire
    ("fab", "10.77.77.3", "10.77.77.1", 41234, "blocked"),
    ("fab", "10.77.77.3", "10.77.77.1", 8888, "blocked"),
    ("fab", "10.77.77.3", "10.77.77.1", 22, "open"),         # SSH always
    ("mgmt", "10.0.0.5", "10.0.0.1", 8888, "open"),          # serve_api_allowed_cidrs
    ("mgmt", "10.0.0.9", "10.0.0.1", 8888, "open"),          # the router
    ("mgmt", "10.0.0.20", "10.0.0.1", 8888, "blocked"),      # anyone else
    ("mgmt", "10.0.0.5", "10.0.0.1", 25000, "blocked"),      # the rendezvous port from the management side
    ("mgmt", "10.0.0.20", "10.77.77.1", 41234, "blocked"),   # the fabric address reached over the management side
    ("mgmt", "10.0.0.20", "10.0.0.1", 22, "open"),
    ("mgmt", "10.0.0.20", "10.0.0.1", 5000, "open"),         # an operator's other service: untouched
    ("node", "127.0.0.1", "127.0.0.1", 8888, "open"),        # loopback (tp_api_probe, verify.yml)
]


def script(tmp_path, ruleset_path):
    ns = {"node": [], "fab": [], "mgmt": []}
    for name, src, dst, port, dummy in CASES:
        ns[name].append("%s,%s,%d" % (src, dst, port))
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
        for a in 10.77.77.2 10.77.77.3; do ip -n fab addr add $a/24 dev fn; done
        for a in 10.0.0.5 10.0.0.9 10.0.0.20; do ip -n mgmt addr add $a/24 dev mn; done
        ip -n node link set nf up && ip -n node link set nm up && ip -n fab link set fn up && ip -n mgmt link set mn up
        ip -n mgmt route add 10.77.77.0/24 via 10.0.0.1
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
    tmp_path = tmp_path_factory.mktemp("packets")
    model = {"group": "pair_a", "host": "a0", "addresses": {"a0": "10.77.77.1", "a1": "10.77.77.2"}, "peers": ["a1"],
             "master_port": 25000, "api_port": 8888}
    ruleset = tmp_path / "fw.nft"
    ruleset.write_text(fw.plan(model, ["10.0.0.0/29"], [22], ["10.0.0.9"])["ruleset"])
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
    key = "%s,%s,%d" % (src, dst, port)
    assert results["before"][key] == "open", "the listener is not reachable even without the firewall"
    assert results["after"][key] == expected
