# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_router_vrrp.py: several routers behind one service address (issue #42): the rules, the
keepalived configuration (checked by the distribution's keepalived), what haproxy.cfg gets of it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_plan
from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_vrrp as vrrp

GROUPS = {"all": ["h0", "h1", "r1", "r2"], "dspark_router": ["r1", "r2"], "dspark": ["h0", "h1"]}
HOSTVARS = {"r1": {"dspark_mgmt_address": "10.0.0.201"}, "r2": {"dspark_mgmt_address": "10.0.0.202"},
            "h0": {"dspark_mgmt_address": "10.0.0.11"}, "h1": {"dspark_mgmt_address": "10.0.0.12"}}
SETTINGS = {"router_vip": "10.0.0.200/24", "router_vrrp_interface": "", "router_vrrp_router_id": 51,
            "router_vrrp_auth_pass": "s3cr3t:x", "router_vrrp_advert_interval": 1, "router_peers_port": 10000,
            "router_bind_address": "0.0.0.0", "router_vrrp_preempt": False}


ROLE_DEFAULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "roles", "router",
                             "defaults", "main.yml")


@pytest.fixture(name="haproxy_settings")
def fixture_haproxy_settings():
    """The router role's defaults as haproxy() reads them (no TLS)."""
    with open(ROLE_DEFAULTS, encoding="utf-8") as handle:
        settings = yaml.safe_load(handle)
    return dict(settings, tls=False, tls_pem="/nonexistent/router.pem")


def problems(groups=None, hostvars=None, **settings):
    return vrrp.problems(dict(SETTINGS, **settings), "r1", groups or GROUPS, hostvars or HOSTVARS)


def named(found):
    return [(var, value) for var, value, dummy, dummy2 in found]


def test_a_valid_pair_of_routers_passes():
    assert problems() == []


def test_one_router_needs_no_service_address():
    one = dict(GROUPS, dspark_router=["r1"])
    assert problems(one, router_vip="", router_vrrp_auth_pass="") == []


def test_several_routers_without_a_service_address_are_refused_naming_them():
    found = problems(router_vip="")
    assert named(found) == [("router_vip", "")]
    assert "group dspark_router has 2 hosts (r1, r2)" in found[0][2] and "10.0.0.200/24" in found[0][3]


@pytest.mark.parametrize("value", ["10.0.0.200", "10.0.0.300/24", "fd00::200/64", "10.0.0.200/32", "vip", 200])
def test_a_service_address_must_be_ipv4_with_a_prefix(value):
    assert named(problems(router_vip=value)) == [("router_vip", value)]


def test_the_service_address_must_lie_in_every_routers_network():
    hostvars = dict(HOSTVARS, r2={"dspark_mgmt_address": "10.0.1.202"})
    found = problems(hostvars=hostvars)
    assert named(found) == [("router_vip", "10.0.0.200/24")]
    assert "router r2's management address 10.0.1.202" in found[0][2]


@pytest.mark.parametrize("address, owner", [("10.0.0.202/24", "router r2's own"), ("10.0.0.11/24", "of h0")])
def test_the_service_address_is_nobodys_own(address, owner):
    found = problems(router_vip=address)
    assert named(found) == [("router_vip", address)] and owner in found[0][2]


@pytest.mark.parametrize("var, value", [("router_vrrp_router_id", 0), ("router_vrrp_router_id", 256),
                                        ("router_vrrp_advert_interval", 0), ("router_vrrp_interface", "eth0 up"),
                                        ("router_peers_port", 70000), ("router_bind_address", "10.0.0.201")])
def test_each_vrrp_setting_is_checked(var, value):
    assert named(problems(**{var: value})) == [(var, value)]


@pytest.mark.parametrize("password", ["", None, "123456789", "two words", 'quo"te'])
def test_the_password_is_one_to_eight_plain_characters(password):
    found = problems(router_vrrp_auth_pass=password)
    assert [var for var, dummy, dummy2, dummy3 in found] == ["router_vrrp_auth_pass"]
    assert "1-8 characters" in found[0][2]


def test_priorities_follow_the_inventory_unless_set_and_must_differ():
    assert vrrp.priorities(HOSTVARS, ["r1", "r2"]) == {"r1": 150, "r2": 140}
    hostvars = dict(HOSTVARS, r1={"dspark_mgmt_address": "10.0.0.201", "router_vrrp_priority": 140})
    found = problems(hostvars=hostvars)
    assert named(found) == [("router_vrrp_priority", 140)] and "shared by routers r1, r2" in found[0][2]
    hostvars = dict(HOSTVARS, r2={"dspark_mgmt_address": "10.0.0.202", "router_vrrp_priority": 255})
    assert named(problems(hostvars=hostvars)) == [("router_vrrp_priority", 255)]


def test_the_interface_is_the_one_holding_the_management_address():
    out = ("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
           "2: eth0@if12    inet 10.0.0.201/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever\n"
           "2: eth0@if12    inet 10.0.0.200/24 scope global secondary eth0\\       valid_lft forever\n")
    assert vrrp.interface_of(out, "10.0.0.201") == "eth0"
    assert vrrp.interface_of(out, "10.0.0.9") is None
    assert vrrp.holds(out, "10.0.0.201/24") is True and vrrp.holds(out, "10.0.0.9/24") is False
    assert vrrp.holds(out, "10.0.0.201") is False and vrrp.holds("", "10.0.0.201/24") is False


def keepalived_conf(host="r1", **settings):
    return "\n".join(vrrp.keepalived(dict(SETTINGS, **settings), host, GROUPS, HOSTVARS, "eth0")) + "\n"


def test_keepalived_speaks_unicast_to_the_other_routers_and_tracks_haproxy():
    text = keepalived_conf()
    assert "unicast_src_ip 10.0.0.201" in text and "unicast_peer {\n        10.0.0.202\n    }" in text
    assert "10.0.0.202" in keepalived_conf() and "10.0.0.201\n" not in text.split("unicast_peer")[1]
    assert "priority 150" in text and "virtual_router_id 51" in text and "state BACKUP" in text
    assert "    nopreempt\n" in text and "    nopreempt\n" not in keepalived_conf(router_vrrp_preempt=True)
    assert "10.0.0.200/24 dev eth0" in text and 'auth_pass "s3cr3t:x"' in text
    assert 'script "%s"' % vrrp.CHECK_SCRIPT in text and "track_script {\n        dspark_haproxy" in text
    assert "priority 140" in keepalived_conf("r2") and "unicast_src_ip 10.0.0.202" in keepalived_conf("r2")


FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "playbooks", "router_plan", "fixtures",
                       "fleet_two_routers.json")


@pytest.mark.skipif(not shutil.which("keepalived"), reason="keepalived is not installed (tests/ci/prereqs.sh test)")
def test_the_distributions_keepalived_accepts_the_configuration(tmp_path):
    """This module's configuration, and each router's as the role renders it under real Ansible (test_router_config's
    fixture); the check script is the role's, absent here: /bin/true stands in."""
    with open(FIXTURE, encoding="utf-8") as handle:
        rendered = ["\n".join(values["keepalived"]) + "\n" for values in json.load(handle).values()]
    assert len(rendered) == 2
    for number, text in enumerate([keepalived_conf()] + rendered):
        conf = tmp_path / ("keepalived-%d.conf" % number)
        conf.write_text(text.replace(vrrp.CHECK_SCRIPT, "/bin/true"))
        run = subprocess.run(["keepalived", "--config-test", "-f", str(conf)], capture_output=True, text=True,
                             timeout=30, check=False)
        assert run.returncode == 0, text + run.stdout + run.stderr
    bad = tmp_path / "bad.conf"
    bad.write_text(keepalived_conf().replace("virtual_router_id 51", "virtual_router_id 300"))
    run = subprocess.run(["keepalived", "--config-test", "-f", str(bad)], capture_output=True, text=True, timeout=30,
                         check=False)
    assert run.returncode != 0, "keepalived took a router id of 300"


def test_haproxy_gets_the_service_address_and_the_peers_only_with_several_routers():
    ha = vrrp.haproxy_settings(SETTINGS, "r2", GROUPS, HOSTVARS)
    assert ha == {"vip": "10.0.0.200", "peers": [("r1", "10.0.0.201", 10000), ("r2", "10.0.0.202", 10000)],
                  "localpeer": "r2"}
    one = dict(GROUPS, dspark_router=["r1"])
    assert vrrp.haproxy_settings(SETTINGS, "r1", one, HOSTVARS)["peers"] == []
    assert vrrp.haproxy_settings(dict(SETTINGS, router_vip=""), "r1", GROUPS, HOSTVARS)["vip"] == ""


def test_haproxy_binds_the_service_address_and_shares_its_tables(haproxy_settings):
    settings = dict(haproxy_settings, ha=vrrp.haproxy_settings(SETTINGS, "r2", GROUPS, HOSTVARS))
    sections = _router_plan.haproxy(settings, {"servers": []})
    assert "    bind 10.0.0.200:8080 transparent" in sections["frontend"]
    tables = [line for line in sections["frontend"] + sections["sources"] if "stick-table" in line]
    assert tables and all(line.endswith(" peers %s" % _router_plan.PEERS_NAME) for line in tables), tables
    assert "    localpeer r2" in sections["global"]
    assert sections["peers"][-2:] == ["    peer r1 10.0.0.201:10000", "    peer r2 10.0.0.202:10000"]
    plain = _router_plan.haproxy(haproxy_settings, {"servers": []})
    assert plain["peers"] == [] and "    bind 0.0.0.0:8080" in plain["frontend"]
