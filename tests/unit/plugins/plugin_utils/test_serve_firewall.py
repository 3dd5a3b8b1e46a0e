"""Table-driven tests of the serve role's nftables ruleset (plugins/plugin_utils/_serve_firewall.py)."""

import shutil
import subprocess

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_model as gm
from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_firewall as fw
from ansible_collections.dspark.cluster.plugins.filter.serve_firewall import FilterModule


def model(host="a0", addresses=None, master=25000, api=8888):
    addresses = addresses or {"a0": "10.77.77.1", "a1": "10.77.77.2"}
    members = list(addresses)
    return {"group": "pair_a", "host": host, "addresses": addresses, "peers": [m for m in members if m != host],
            "master_port": master, "api_port": api}


def rules(ruleset):
    """The chain's rule lines, without comments."""
    body = ruleset.split("chain input {", 1)[1]
    return [line.split(" comment ")[0].strip() for line in body.splitlines()[2:] if line.strip() not in ("", "}")]


def test_head_of_a_pair():
    plan = fw.plan(model(), ["10.0.0.0/24"])
    assert plan["problems"] == []
    assert plan["peers"] == ["10.77.77.2"]
    assert plan["api_v4"] == ["10.0.0.0/24", "127.0.0.0/8"] and plan["api_v6"] == ["::1"]
    assert rules(plan["ruleset"]) == [
        'iif "lo" accept',
        "ct state established,related accept",
        "tcp dport { 22 } accept",
        "ip saddr @fabric_peers accept",
        "tcp dport 8888 ip saddr @api_allowed_v4 accept",
        "tcp dport 8888 ip6 saddr @api_allowed_v6 accept",
        "tcp dport { 8888, 25000 } drop",
        "ip daddr 10.77.77.1 drop",
    ]
    text = plan["ruleset"]
    # One table of its own, replaced atomically: create-if-absent, delete, define (one nft transaction).
    assert text.index("table inet dspark_serve\n") < text.index("delete table inet dspark_serve\n") < text.index("table inet dspark_serve {")
    assert "policy accept" in text and "flush ruleset" not in text
    assert "elements = { 10.77.77.2 }" in text
    assert len(plan["digest"]) == 64


@pytest.mark.parametrize("host, addresses, peers, own", [
    ("a1", {"a0": "10.77.77.1", "a1": "10.77.77.2"}, ["10.77.77.1"], "10.77.77.2"),
    ("c1", {"c0": "10.0.5.1", "c1": "10.0.5.2", "c2": "10.0.5.3"}, ["10.0.5.1", "10.0.5.3"], "10.0.5.2"),
])
def test_every_member_allows_its_peers_and_closes_its_own_fabric_address(host, addresses, peers, own):
    plan = fw.plan(model(host, addresses))
    assert plan["peers"] == peers
    assert "ip daddr %s drop" % own in rules(plan["ruleset"])


@pytest.mark.parametrize("cidrs, routers, v4, v6", [
    ([], [], ["127.0.0.0/8"], ["::1"]),
    (["10.0.0.0/24", "10.0.0.0/25", "192.0.2.7/32"], [], ["10.0.0.0/24", "127.0.0.0/8", "192.0.2.7"], ["::1"]),
    (["2001:db8::/64"], ["10.0.0.9", "fd00::1", "router-name"], ["10.0.0.9", "127.0.0.0/8"], ["::1", "2001:db8::/64", "fd00::1"]),
    (["127.0.0.1/32"], [], ["127.0.0.0/8"], ["::1"]),   # overlapping intervals are merged (nft refuses them)
])
def test_api_networks(cidrs, routers, v4, v6):
    plan = fw.plan(model(), cidrs, routers=routers)
    assert plan["problems"] == []
    assert (plan["api_v4"], plan["api_v6"]) == (v4, v6)


@pytest.mark.parametrize("kwargs, expected", [
    ({"api_allowed_cidrs": ["10.0.0.1/24"]}, "serve_api_allowed_cidrs has '10.0.0.1/24', which is not a network"),
    ({"api_allowed_cidrs": ["any"]}, "serve_api_allowed_cidrs has 'any'"),
    ({"api_allowed_cidrs": "10.0.0.0/24"}, "serve_api_allowed_cidrs='10.0.0.0/24' is not a list"),
    ({"ssh_ports": []}, "serve_firewall_ssh_ports=[] opens no SSH port"),
    ({"ssh_ports": [22, 70000]}, "serve_firewall_ssh_ports has 70000, which is not a TCP port"),
])
def test_bad_inputs_give_no_ruleset_and_name_the_fix(kwargs, expected):
    plan = fw.plan(model(), **kwargs)
    assert plan["ruleset"] == "" and plan["digest"] == ""
    assert any(p.startswith(expected) and "Fix: " in p for p in plan["problems"]), plan["problems"]


@pytest.mark.parametrize("change, expected", [
    ({"addresses": {"a0": "10.77.77.1", "a1": None}}, "a1: dspark_fabric_address=None"),
    ({"addresses": {"a0": "fe80::1", "a1": "10.77.77.2"}}, "a0: dspark_fabric_address='fe80::1'"),
    ({"master_port": None}, "group pair_a: dspark_master_port=None"),
    ({"api_port": 0}, "group pair_a: dspark_api_port=0"),
])
def test_bad_group_model_is_refused(change, expected):
    plan = fw.plan(dict(model(), **change))
    assert any(p.startswith(expected) for p in plan["problems"]), plan["problems"]
    assert plan["ruleset"] == ""


def test_same_ports_are_written_once_and_digest_follows_the_text():
    a, b = fw.plan(model()), fw.plan(model())
    assert a["digest"] == b["digest"]
    assert fw.plan(model(), ["10.0.0.0/24"])["digest"] != a["digest"]
    assert "tcp dport { 22, 2222 } accept" in fw.plan(model(), ssh_ports=[22, "2222", 22])["ruleset"]


def test_filter_reads_the_group_model_and_router_hostvars():
    groups = {"pair_a": ["a0", "a1"], "dspark_router": ["rt"]}
    hostvars = {"a0": {"dspark_rank": 0, "dspark_fabric_address": "10.77.77.1", "dspark_master_port": 25000, "dspark_api_port": 8888},
                "a1": {"dspark_rank": 1, "dspark_fabric_address": "10.77.77.2", "dspark_master_port": 25000, "dspark_api_port": 8888},
                "rt": {"ansible_host": "10.0.0.9", "inventory_hostname": "rt"}}
    seen = gm.group_model("pair_a", groups, hostvars, "a1")
    plan = FilterModule().filters()["serve_firewall"](seen, ["10.1.0.0/16"], [22], [hostvars["rt"], {"dspark_mgmt_address": "10.0.0.10"}])
    assert plan["peers"] == ["10.77.77.1"]
    assert plan["api_v4"] == ["10.0.0.9", "10.0.0.10", "10.1.0.0/16", "127.0.0.0/8"]
    assert "ip daddr 10.77.77.2 drop" in plan["ruleset"]


@pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("nft"), reason="needs unshare and nft")
def test_nft_accepts_the_ruleset_and_a_second_apply_changes_nothing(tmp_path):
    """In a throw-away user and network namespace: nft -c, nft -f twice, the listed table is the same."""
    path = tmp_path / "fw.nft"
    path.write_text(fw.plan(model(), ["10.0.0.0/24", "2001:db8::/64"], routers=["10.0.0.9"])["ruleset"])
    script = ("nft -c -f {p} && nft add table inet operator && nft -f {p} && nft list table inet dspark_serve > {t}/1 && "
              "nft -f {p} && nft list table inet dspark_serve > {t}/2 && nft list table inet operator").format(p=path, t=tmp_path)
    run = subprocess.run(["unshare", "-rn", "sh", "-c", script], capture_output=True, text=True, check=False)
    if run.returncode and "Operation not permitted" in run.stderr:
        pytest.skip("no unprivileged network namespaces here: %s" % run.stderr.strip())
    assert run.returncode == 0, run.stderr
    assert "table inet operator" in run.stdout   # the operator's own table is untouched
    assert (tmp_path / "1").read_text() == (tmp_path / "2").read_text()
    assert "ip daddr 10.77.77.1 drop" in (tmp_path / "1").read_text()
