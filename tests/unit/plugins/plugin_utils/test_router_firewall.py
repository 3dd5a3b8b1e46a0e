"""The routers' firewall (plugin_utils/_router_firewall.py): HAProxy's peers port and VRRP from the routers only.
Real packets: tests/fleet/test_router_failover.py (the fleet lab's two routers and a serving node)."""

import shutil
import subprocess

import pytest

from ansible_collections.dspark.cluster.plugins.filter.router_vrrp import router_vrrp
from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_firewall as fw

GROUPS = {"dspark_router": ["r1", "r2"], "dspark": ["h0"]}
HOSTVARS = {"r1": {"dspark_mgmt_address": "10.0.0.201"}, "r2": {"ansible_host": "10.0.0.202"},
            "h0": {"dspark_mgmt_address": "10.0.0.11"}}


def plan(groups=None, hostvars=None, host="r1"):
    return fw.firewall(groups or GROUPS, hostvars or HOSTVARS, host, 10000, "/etc/dspark/router/firewall.nft")


def test_the_peers_port_and_vrrp_are_open_to_the_routers_only():
    result = plan()
    assert result["routers"] == ["10.0.0.201", "10.0.0.202"]    # its own too: a reload's processes talk over it
    text = result["ruleset"]
    assert "elements = { 10.0.0.201, 10.0.0.202 }" in text and "10.0.0.11" not in text
    rules = [line.strip() for line in text.splitlines() if "dport" in line or "112" in line]
    assert rules == [
        'tcp dport 10000 ip saddr @routers_v4 accept comment "HAProxy peers from the routers"',
        'tcp dport 10000 counter drop comment "HAProxy peers from anyone else"',
        'ip protocol 112 ip saddr @routers_v4 accept comment "VRRP from the routers"',
        'meta l4proto 112 counter drop comment "VRRP from anyone else"']
    assert "policy accept" in text and text.index("delete table inet dspark_router") < text.index("chain input")
    assert result["unit_name"] == "dspark-router-firewall.service"
    assert "RequiredBy=haproxy.service" in result["unit"] and "Before=network-pre.target haproxy.service " \
        "keepalived.service" in result["unit"] and "ExecStart=/usr/sbin/nft -f /etc/dspark/router/firewall.nft" in result["unit"]


def test_the_digest_follows_the_text_and_the_filter_gives_the_same():
    assert plan()["digest"] != plan(hostvars=dict(HOSTVARS, r2={"ansible_host": "10.0.0.203"}))["digest"]
    via_filter = router_vrrp({"router_peers_port": 10000, "ruleset_path": "/etc/dspark/router/firewall.nft"},
                             "firewall", host="r1", groups=GROUPS, hostvars=HOSTVARS)
    assert via_filter == plan()


def test_names_that_are_not_ipv4_addresses_are_left_out():
    result = plan(hostvars={"r1": {"ansible_host": "router-one.example"}, "r2": {"ansible_host": "10.0.0.202"}})
    assert result["routers"] == ["10.0.0.202"]


@pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("nft"), reason="needs unshare and nft")
@pytest.mark.parametrize("hostvars", [HOSTVARS, {"r1": {"ansible_host": "a.example"}, "r2": {"ansible_host": "b.example"}}],
                         ids=["two-routers", "no-address"])
def test_nft_accepts_the_ruleset_and_a_second_apply_changes_nothing(tmp_path, hostvars):
    """In a throw-away user and network namespace: nft -c, nft -f twice, the listed table is the same, another table
    untouched (an empty set too: no elements line)."""
    path = tmp_path / "fw.nft"
    path.write_text(plan(hostvars=hostvars)["ruleset"])
    script = ("nft -c -f {p} && nft add table inet operator && nft -f {p} && nft list table inet dspark_router > {t}/1 && "
              "nft -f {p} && nft list table inet dspark_router > {t}/2 && nft list table inet operator").format(p=path, t=tmp_path)
    run = subprocess.run(["unshare", "-rn", "sh", "-c", script], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert "table inet operator" in run.stdout
    assert (tmp_path / "1").read_text() == (tmp_path / "2").read_text()
    assert "counter packets 0 bytes 0 drop" in (tmp_path / "1").read_text()
