"""roce_gid_index module: main() against sysfs fixture trees, with patched module args."""

import json

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.modules import roce_gid_index

IP_OUTPUT = (
    "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
    "4: enp1s0f1np1    inet 192.168.177.11/24 brd 192.168.177.255 scope global enp1s0f1np1\\       valid_lft forever\n"
    "6: enP2p1s0f1np1    inet 192.168.178.11/24 brd 192.168.178.255 scope global enP2p1s0f1np1\\       valid_lft forever\n"
)


def v4gid(ip):
    return "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % tuple(int(x) for x in ip.split("."))


def add_port(root, device, netdev, ip, state="4: ACTIVE"):
    """A ConnectX-style port: link-local v1/v2 at 0/1, IPv4 v1/v2 at 2/3, then unused (zero) slots."""
    pdir = root / device / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (pdir / sub).mkdir(parents=True)
    (pdir / "state").write_text(state + "\n")
    (pdir / "link_layer").write_text("Ethernet\n")
    link_local = "fe80:0000:0000:0000:0a0b:0cff:fe0d:0e0f"
    rows = [(link_local, "IB/RoCE v1"), (link_local, "RoCE v2")]
    if ip:
        rows += [(v4gid(ip), "IB/RoCE v1"), (v4gid(ip), "RoCE v2")]
    rows += [("0000:0000:0000:0000:0000:0000:0000:0000", None)] * 4
    for index, (gid, gtype) in enumerate(rows):
        (pdir / "gids" / str(index)).write_text(gid + "\n")
        if gtype:
            (pdir / "gid_attrs/types" / str(index)).write_text(gtype + "\n")
            (pdir / "gid_attrs/ndevs" / str(index)).write_text(netdev + "\n")
    (root / device / "device" / "net" / netdev).mkdir(parents=True)


@pytest.fixture
def sysfs(tmp_path):
    add_port(tmp_path, "rocep1s0f0", "enp1s0f0np0", None, state="1: DOWN")
    add_port(tmp_path, "rocep1s0f1", "enp1s0f1np1", "192.168.177.11")
    add_port(tmp_path, "roceP2p1s0f1", "enP2p1s0f1np1", "192.168.178.11")
    return str(tmp_path)


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            roce_gid_index.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_dual_hca_with_given_addresses(capsys, sysfs):
    rc, out = run(capsys, {
        "hca": "=rocep1s0f1,roceP2p1s0f1",
        "match_ip": "192.168.177.11",
        "sysfs_root": sysfs,
        "netdev_ipv4": {"enp1s0f1np1": ["192.168.177.11/24"], "enP2p1s0f1np1": "192.168.178.11"},
    })
    assert rc == 0
    assert out["changed"] is False
    assert out["gid_index"] == 3
    assert out["shared_indexes"] == [3]
    assert out["match_ip"] == "192.168.177.11" and out["match_ip_used"] is True
    assert [(m["device"], m["port"], m["netdev"], m["candidates"]) for m in out["members"]] == [
        ("roceP2p1s0f1", 1, "enP2p1s0f1np1", [3]), ("rocep1s0f1", 1, "enp1s0f1np1", [3])]
    assert out["netdev_ipv4"] == {"enp1s0f1np1": ["192.168.177.11"], "enP2p1s0f1np1": ["192.168.178.11"]}
    assert out["selector"] == {"exclude": False, "exact": True,
                               "devices": [{"name": "rocep1s0f1", "port": None}, {"name": "roceP2p1s0f1", "port": None}]}
    assert "warnings" not in out


def test_addresses_read_from_ip_in_check_mode(capsys, sysfs, monkeypatch):
    calls = []

    def fake_run_command(self, args, **kwargs):
        calls.append(args)
        return 0, IP_OUTPUT, ""

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/sbin/ip")
    monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run_command)
    rc, out = run(capsys, {"hca": "rocep1s0f", "sysfs_root": sysfs, "_ansible_check_mode": True})
    assert rc == 0
    assert calls == [["/usr/sbin/ip", "-4", "-o", "addr", "show"]]
    assert out["changed"] is False and out["gid_index"] == 3
    assert [m["device"] for m in out["members"]] == ["rocep1s0f1"]
    assert [(i["device"], i["state"]) for i in out["ignored"]] == [("rocep1s0f0", "DOWN")]
    assert out["netdev_ipv4"]["enp1s0f1np1"] == ["192.168.177.11"]


def test_without_ip_binary_falls_back_to_ioctl(capsys, sysfs, monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    rc, out = run(capsys, {"hca": "=rocep1s0f1", "match_ip": "192.168.177.11", "sysfs_root": sysfs})
    assert rc == 0 and out["gid_index"] == 3 and out["match_ip_used"] is True
    assert isinstance(out["netdev_ipv4"], dict)


def test_ip_failure_is_reported(capsys, sysfs, monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/sbin/ip")
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, args, **k: (1, "", "Cannot open netlink socket"))
    rc, out = run(capsys, {"hca": "rocep1s0f1", "sysfs_root": sysfs})
    assert rc == 1 and out["failed"] is True
    assert out["code"] == "ip_command_failed" and "netdev_ipv4" in out["msg"]


def test_warnings_reach_the_result(capsys, sysfs, monkeypatch):
    # Record warn() calls: once controller code is imported (other tests do), ansible-core 2.19 sends module
    # warnings to Display instead of the result JSON.
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, msg: warnings.append(msg))
    rc, out = run(capsys, {"hca": "=rocep1s0f1,roceP2p1s0f9", "sysfs_root": sysfs,
                           "netdev_ipv4": {"enp1s0f1np1": ["192.168.177.11"]}})
    assert rc == 0 and out["gid_index"] == 3
    assert len(warnings) == 1 and "'roceP2p1s0f9' matches no RDMA device" in warnings[0]


def test_no_usable_gid_fails_with_code(capsys, sysfs):
    rc, out = run(capsys, {"hca": "=rocep1s0f1,roceP2p1s0f1", "sysfs_root": sysfs,
                           "netdev_ipv4": {"enp1s0f1np1": ["192.168.177.11"], "enP2p1s0f1np1": []}})
    assert rc == 1 and out["failed"] is True
    assert out["code"] == "no_usable_gid"
    assert "roceP2p1s0f1 port 1 (netdev enP2p1s0f1np1)" in out["msg"]
    assert "pass it as match_ip" in out["msg"]
    assert [m["candidates"] for m in out["details"]["members"]] == [[], [3]]


def test_down_port_only_fails_with_code(capsys, sysfs):
    rc, out = run(capsys, {"hca": "=rocep1s0f0", "sysfs_root": sysfs, "netdev_ipv4": {}})
    assert rc == 1
    assert out["code"] == "no_selected_port" and "link is DOWN" in out["msg"]


def test_bad_selector_fails_with_code(capsys, sysfs):
    rc, out = run(capsys, {"hca": "^", "sysfs_root": sysfs, "netdev_ipv4": {}})
    assert rc == 1
    assert out["code"] == "invalid_selector"
