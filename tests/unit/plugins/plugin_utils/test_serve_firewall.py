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


# --------------------------------------------------------------------------- sidecar engines (issue #46)

VL = {"name": "vl", "api_port": 8889, "master_port": 25100}
FABRIC = {"dspark_fabric_interface": "enp1s0f1np1"}
# The ruleset of this input as the module wrote it before sidecars existed (git 2524433): a changed text replaces the
# table on every node of every group, so without sidecars it must stay this one.
BEFORE_SIDECARS = "be8f15cc4763dc8db4ef5a2ca8bebeda07fdd7b80edd169d5eb30566b08e2d10"


def test_without_sidecars_the_ruleset_is_the_one_before_them():
    args = (model(), ["10.0.0.0/24", "2001:db8::/64"], [22], ["10.0.0.9"])
    plans = [fw.plan(*args, fabric_interfaces=FABRIC, local_ports=[9090], **extra)
             for extra in ({}, {"engine_ports": None}, {"engine_ports": []})]
    assert plans[0]["digest"] == BEFORE_SIDECARS
    assert plans[1] == plans[0] and plans[2] == plans[0]
    assert plans[0]["ports"]["sidecars"] == []


def test_a_sidecar_is_ruled_as_the_main_engine_on_its_own_ports():
    """Its API port from the API's sources, dropped for anyone else; its rendezvous port from the fabric peers only
    (accepted above on every port). Other keys of a sidecar (the inventory's dspark_sidecars) are ignored."""
    plan = fw.plan(model(), ["10.0.0.0/24"], engine_ports=[dict(VL, model="cyankiwi/Qwen3-VL-4B-Instruct-AWQ-4bit")])
    assert plan["problems"] == []
    assert plan["ports"]["sidecars"] == [VL]
    assert rules(plan["ruleset"]) == [
        'iif "lo" accept',
        "ct state established,related accept",
        "tcp dport { 22 } accept",
        "ip saddr @fabric_peers accept",
        "tcp dport 8888 ip saddr @api_allowed_v4 accept",
        "tcp dport 8888 ip6 saddr @api_allowed_v6 accept",
        "tcp dport { 8888, 25000 } drop",
        "tcp dport 8889 ip saddr @api_allowed_v4 accept",
        "tcp dport 8889 ip6 saddr @api_allowed_v6 accept",
        "tcp dport { 8889, 25100 } drop",
        "ip daddr 10.77.77.1 drop",
    ]
    text = plan["ruleset"]
    assert '\t\ttcp dport 8889 ip saddr @api_allowed_v4 accept comment "sidecar vl: API from serve_api_allowed_cidrs"\n' in text
    assert '\t\ttcp dport { 8889, 25100 } drop comment "sidecar vl: API and rendezvous from anyone else"\n' in text
    assert plan["digest"] != fw.plan(model(), ["10.0.0.0/24"])["digest"]


def test_two_sidecars_each_get_their_rules_in_their_order():
    ocr = {"name": "ocr-2", "api_port": "8890", "master_port": 24000}
    found = rules(fw.plan(model(), engine_ports=[VL, ocr])["ruleset"])
    assert found[found.index("tcp dport { 8889, 25100 } drop") + 1:-1] == [
        "tcp dport 8890 ip saddr @api_allowed_v4 accept",
        "tcp dport 8890 ip6 saddr @api_allowed_v6 accept",
        "tcp dport { 8890, 24000 } drop",
    ]


@pytest.mark.parametrize("engine_ports, expected", [
    ("vl", "group pair_a: dspark_sidecars='vl' is not a list of sidecars"),
    ([["vl", 8889]], "group pair_a: dspark_sidecars[0]=['vl', 8889] is not a mapping"),
    ([dict(VL, name="main")], "group pair_a: dspark_sidecars[0].name='main' is not a sidecar name"),
    ([dict(VL, name='vl" accept')], "group pair_a: dspark_sidecars[0].name='vl\" accept' is not a sidecar name"),
    ([dict(VL, name=None)], "group pair_a: dspark_sidecars[0].name=None is not a sidecar name"),
    ([VL, dict(VL, api_port=8890, master_port=25200)], "group pair_a: dspark_sidecars[1].name='vl' is also another sidecar's"),
    ([dict(VL, api_port="88x9")], "group pair_a: dspark_sidecars[0].api_port='88x9' is not a TCP port"),
    ([dict(VL, master_port=25100.5)], "group pair_a: dspark_sidecars[0].master_port=25100.5 is not a TCP port"),
    ([dict(VL, api_port=True)], "group pair_a: dspark_sidecars[0].api_port=True is not a TCP port"),
    ([{"name": "vl", "api_port": 8889}], "group pair_a: dspark_sidecars[0].master_port=None is not a TCP port"),
    ([dict(VL, api_port=8888)], "group pair_a: dspark_sidecars[0].api_port=8888 is also dspark_api_port"),
    ([dict(VL, api_port=25000)], "group pair_a: dspark_sidecars[0].api_port=25000 is also dspark_master_port"),
    ([dict(VL, master_port=22)], "group pair_a: dspark_sidecars[0].master_port=22 is also serve_firewall_ssh_ports"),
    ([dict(VL, api_port=9090)], "group pair_a: dspark_sidecars[0].api_port=9090 is also serve_lmcache ports"),
    ([dict(VL, master_port=8889)], "group pair_a: dspark_sidecars[0].master_port=8889 is also dspark_sidecars[0].api_port"),
    ([VL, {"name": "ocr", "api_port": 8890, "master_port": 8889}],
     "group pair_a: dspark_sidecars[1].master_port=8889 is also dspark_sidecars[0].api_port"),
])
def test_a_bad_sidecar_gives_no_ruleset_and_names_the_fix(engine_ports, expected):
    plan = fw.plan(model(), local_ports=[9090], engine_ports=engine_ports)
    assert plan["ruleset"] == "" and plan["digest"] == ""
    assert any(p.startswith(expected) and "Fix: " in p for p in plan["problems"]), plan["problems"]


def test_the_sidecar_name_rule_is_the_group_engines_one():
    """The name becomes part of a comment in the table: the rule is _group_engines' (copied: that module brings PyYAML)."""
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_engines
    assert (fw.SIDECAR_NAME_RE.pattern, fw.MAIN_ENGINE, fw.SIDECARS_VAR) == (
        _group_engines.NAME_RE.pattern, _group_engines.MAIN, _group_engines.VAR)


def test_the_filter_passes_the_sidecars_on():
    seen = FilterModule().filters()["serve_firewall"](model(), ["10.1.0.0/16"], [22], [], FABRIC, [], [VL])
    assert seen["problems"] == [] and "tcp dport { 8889, 25100 } drop" in rules(seen["ruleset"])
    assert FilterModule().filters()["serve_firewall"](model(), ["10.1.0.0/16"], [22], [], FABRIC)["ports"]["sidecars"] == []


@pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("nft"), reason="needs unshare and nft")
def test_nft_accepts_a_ruleset_with_sidecars(tmp_path):
    path = tmp_path / "fw.nft"
    path.write_text(fw.plan(model(), ["10.0.0.0/24", "2001:db8::/64"], routers=["10.0.0.9"], fabric_interfaces=FABRIC,
                            engine_ports=[VL, {"name": "ocr", "api_port": 8890, "master_port": 25200}])["ruleset"])
    run = subprocess.run(["unshare", "-rn", "sh", "-c", "nft -c -f %s && nft -f %s && nft list table inet dspark_serve" % (path, path)],
                         capture_output=True, text=True, check=False)
    if run.returncode and "Operation not permitted" in run.stderr:
        pytest.skip("no unprivileged network namespaces here: %s" % run.stderr.strip())
    assert run.returncode == 0, run.stderr
    assert 'tcp dport 8890 ip saddr @api_allowed_v4 accept comment "sidecar ocr: API from serve_api_allowed_cidrs"' in run.stdout
