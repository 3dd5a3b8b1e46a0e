"""roce_gid: NCCL_IB_HCA parsing, sysfs scan and per-node RoCE v2 GID index resolution on fixture trees."""

import errno
import os

import pytest

from ansible_collections.dspark.cluster.plugins.module_utils import roce_gid
from ansible_collections.dspark.cluster.plugins.module_utils.roce_gid import (
    GidResolutionError,
    format_selector,
    parse_hca_selector,
    parse_ip_addr_output,
    resolve_gid_index,
    scan_sysfs,
    select_ports,
)

V1 = "IB/RoCE v1"
V2 = "RoCE v2"
F1_IP, F2_IP = "192.168.177.11", "192.168.178.11"  # each twin in its own subnet
IPS = {"enp1s0f1np1": [F1_IP], "enP2p1s0f1np1": [F2_IP]}


# ---------------------------------------------------------------- fixture tree helpers

def v4gid(ip):
    a, b, c, d = (int(x) for x in ip.split("."))
    return "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % (a, b, c, d)


def v6gid(prefix, tail):
    return "%s:%s" % (prefix, tail)


LINK_LOCAL = v6gid("fe80:0000:0000:0000", "0a0b:0cff:fe0d:0e0f")
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


def roce_table(netdev, ip, extra_v6=0):
    """The usual mlx5 table: link-local v1/v2 at 0/1, optional global IPv6 pairs, then the IPv4 v1/v2 pair."""
    rows = [(LINK_LOCAL, V1, netdev), (LINK_LOCAL, V2, netdev)]
    for n in range(extra_v6):
        g = v6gid("2001:0db8:0000:00%02x" % n, "0000:0000:0000:0001")
        rows += [(g, V1, netdev), (g, V2, netdev)]
    if ip:
        rows += [(v4gid(ip), V1, netdev), (v4gid(ip), V2, netdev)]
    return dict(enumerate(rows))


def add_port(root, device, port=1, state="4: ACTIVE", link_layer="Ethernet", gids=None, netdev=None, empty_slots=4):
    """Write one sysfs port; gids maps index -> (gid, type, ndev). Unused slots read as the zero GID."""
    pdir = root / device / "ports" / str(port)
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (pdir / sub).mkdir(parents=True, exist_ok=True)
    (pdir / "state").write_text(state + "\n")
    (pdir / "link_layer").write_text(link_layer + "\n")
    gids = gids or {}
    top = max(list(gids) + [-1]) + 1
    for index in range(top + empty_slots):
        gid, gtype, ndev = gids.get(index, (ZERO, None, None))
        (pdir / "gids" / str(index)).write_text(gid + "\n")
        if gtype is not None:
            (pdir / "gid_attrs/types" / str(index)).write_text(gtype + "\n")
        if ndev is not None:
            (pdir / "gid_attrs/ndevs" / str(index)).write_text(ndev + "\n")
    if netdev:
        (root / device / "device" / "net" / netdev).mkdir(parents=True, exist_ok=True)
    return pdir


def spark_tree(root, f1_ip=F1_IP, f2_ip=F2_IP, f2_extra_v6=0):
    """A DGX Spark: f1 twins cabled (ACTIVE), f0 twins DOWN."""
    add_port(root, "rocep1s0f0", state="1: DOWN", gids={0: (LINK_LOCAL, V1, "enp1s0f0np0")}, netdev="enp1s0f0np0")
    add_port(root, "roceP2p1s0f0", state="1: DOWN", gids={0: (LINK_LOCAL, V1, "enP2p1s0f0np0")}, netdev="enP2p1s0f0np0")
    add_port(root, "rocep1s0f1", gids=roce_table("enp1s0f1np1", f1_ip), netdev="enp1s0f1np1")
    add_port(root, "roceP2p1s0f1", gids=roce_table("enP2p1s0f1np1", f2_ip, f2_extra_v6), netdev="enP2p1s0f1np1")
    return root


def resolve(root, hca, netdev_ipv4=None, match_ip=None):
    return resolve_gid_index(hca, scan_sysfs(str(root)), IPS if netdev_ipv4 is None else netdev_ipv4, match_ip=match_ip)


def error(root, hca, netdev_ipv4=None, match_ip=None):
    with pytest.raises(GidResolutionError) as exc:
        resolve(root, hca, netdev_ipv4, match_ip)
    return exc.value


# ---------------------------------------------------------------- selector

def test_selector_exclude_exact_ports_and_empty_items():
    sel = parse_hca_selector("^=rocep1s0f1:1,,roceP2p1s0f1,")
    assert sel["exclude"] and sel["exact"]
    assert [(i["name"], i["port"]) for i in sel["items"]] == [("rocep1s0f1", 1), ("roceP2p1s0f1", None)]
    assert format_selector(sel) == "^=rocep1s0f1:1,roceP2p1s0f1"


def test_selector_plain_list_is_prefix_match():
    sel = parse_hca_selector("rocep1s0f1,roceP2p1s0f1")
    assert not sel["exclude"] and not sel["exact"]
    assert roce_gid.selector_matches(sel, "rocep1s0f10", 1)
    assert not roce_gid.selector_matches(parse_hca_selector("=rocep1s0f1"), "rocep1s0f10", 1)


def test_selector_port_is_read_like_atoi():
    assert parse_hca_selector("mlx5_0: +2x")["items"][0]["port"] == 2
    assert parse_hca_selector("mlx5_0:1:7")["items"][0]["port"] == 1  # NCCL skips to the next comma
    assert parse_hca_selector("mlx5_0:007")["items"][0]["port"] == 7


def test_selector_names_are_truncated_to_63_bytes():
    assert parse_hca_selector("x" * 80)["items"][0]["name"] == "x" * 63
    assert parse_hca_selector("=" + "é" * 40)["items"][0]["name"].encode("utf-8") == ("é" * 31).encode("utf-8")


def test_selector_accepts_32_items():
    assert len(parse_hca_selector(",".join("mlx5_%d" % n for n in range(32)))["items"]) == 32


@pytest.mark.parametrize("text, needle", [
    ("", "names no HCA"),
    ("^", "names no HCA"),
    ("^=", "names no HCA"),
    (",,", "names no HCA"),
    (None, "empty"),
    (":1", "no device name"),
    ("rocep1s0f1,:2", "no device name"),
    ("rocep1s0f1:", "matches no port"),
    ("rocep1s0f1:abc", "read by NCCL as 0"),
    ("rocep1s0f1:0", "matches no port"),
    ("rocep1s0f1:-1", "read by NCCL as -1"),
    ("rocep1s0f1:99999999999", "out of range"),
    ("rocep1s0f1, roceP2p1s0f1", "whitespace"),
    ("rocep1s0f1\n", "whitespace"),
    (",".join("mlx5_%d" % n for n in range(33)), "at most 32"),
])
def test_selector_errors(text, needle):
    with pytest.raises(ValueError) as exc:
        parse_hca_selector(text)
    assert needle in str(exc.value)


def test_resolver_reports_selector_errors_with_a_code(tmp_path):
    err = error(spark_tree(tmp_path), "rocep1s0f1:")
    assert err.code == "invalid_selector"
    assert "NCCL_IB_HCA" in err.message


# ---------------------------------------------------------------- sysfs scan

def test_scan_reads_state_link_layer_gids_and_skips_zero_gid(tmp_path):
    add_port(tmp_path, "rocep1s0f1", gids=roce_table("enp1s0f1np1", F1_IP), netdev="enp1s0f1np1", empty_slots=250)
    inv = scan_sysfs(str(tmp_path))
    port = inv["rocep1s0f1"]["ports"][1]
    assert port["state"] == "ACTIVE" and port["state_raw"] == "4: ACTIVE"
    assert port["link_layer"] == "Ethernet" and port["netdev"] == "enp1s0f1np1"
    assert sorted(port["gids"]) == [0, 1, 2, 3]
    assert port["gids"][3] == {"gid": v4gid(F1_IP), "type": V2, "ndev": "enp1s0f1np1"}


def test_scan_of_missing_root_is_empty(tmp_path):
    assert scan_sysfs(str(tmp_path / "absent")) == {}


def test_scan_skips_unreadable_gid_entries(tmp_path, monkeypatch):
    gids = {0: (LINK_LOCAL, V1, "eth1"), 1: (v4gid("192.168.100.1"), V1, "eth1"), 2: (v4gid("192.168.100.1"), V2, "eth1")}
    pdir = add_port(tmp_path, "rxe0", gids=gids, empty_slots=0)
    os.symlink("missing", str(pdir / "gids" / "9"))  # dangling entry
    (pdir / "gids" / "8").mkdir()  # not a file
    bad = str(pdir / "gids" / "1")
    real_open = open

    def fake_open(path, *args, **kwargs):
        if str(path) == bad:
            raise OSError(errno.EINVAL, "Invalid argument", path)  # what real sysfs does for some slots
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(roce_gid, "open", fake_open, raising=False)
    port = scan_sysfs(str(tmp_path))["rxe0"]["ports"][1]
    assert sorted(port["gids"]) == [0, 2]
    result = resolve_gid_index("rxe0", scan_sysfs(str(tmp_path)), {"eth1": ["192.168.100.1/24"]})
    assert result["gid_index"] == 2


def test_scan_tolerates_unreadable_type_and_ndev(tmp_path):
    gids = roce_table("enp1s0f1np1", F1_IP)
    pdir = add_port(tmp_path, "rocep1s0f1", gids=gids, netdev="enp1s0f1np1")
    (pdir / "gid_attrs/types/1").unlink()
    (pdir / "gid_attrs/ndevs/3").unlink()
    port = scan_sysfs(str(tmp_path))["rocep1s0f1"]["ports"][1]
    assert port["gids"][1]["type"] is None
    assert port["gids"][3]["ndev"] is None
    # the port netdev stands in for the missing ndev
    assert resolve(tmp_path, "=rocep1s0f1")["gid_index"] == 3


def test_soft_roce_layout_from_the_lab(tmp_path):
    """rdma_rxe in the lab VM: no device/net link, ndevs give eth1, RoCE v2 IPv4 GID at index 1."""
    add_port(tmp_path, "rxe0", gids={0: (LINK_LOCAL, V2, "eth1"), 1: ("0000:0000:0000:0000:0000:ffff:c0a8:6401", V2, "eth1")})
    result = resolve(tmp_path, "rxe0", {"eth0": ["10.0.2.15"], "eth1": ["192.168.100.1"]})
    assert result["gid_index"] == 1
    assert result["members"][0]["netdev"] == "eth1"
    assert result["members"][0]["evidence"][0]["ipv4"] == "192.168.100.1"


# ---------------------------------------------------------------- resolution

def test_single_hca(tmp_path):
    result = resolve(spark_tree(tmp_path), "=rocep1s0f1")
    assert result["gid_index"] == 3
    assert result["shared_indexes"] == [3]
    (member,) = result["members"]
    assert (member["device"], member["port"], member["netdev"]) == ("rocep1s0f1", 1, "enp1s0f1np1")
    assert member["candidates"] == [3]
    assert member["evidence"][0]["via"] == "netdev" and member["evidence"][0]["ipv4"] == F1_IP
    assert result["match_ip"] is None and result["match_ip_used"] is False
    assert result["warnings"] == []


def test_dual_hca_twins_in_own_subnets_share_index_3(tmp_path):
    result = resolve(spark_tree(tmp_path), "=rocep1s0f1,roceP2p1s0f1", match_ip=F1_IP)
    assert result["gid_index"] == 3
    assert [(m["device"], m["candidates"]) for m in result["members"]] == [("roceP2p1s0f1", [3]), ("rocep1s0f1", [3])]
    vias = dict((m["device"], m["evidence"][0]["via"]) for m in result["members"])
    assert vias == {"rocep1s0f1": "match_ip", "roceP2p1s0f1": "netdev"}
    assert result["match_ip_used"] is True


def test_dual_hca_without_shared_index(tmp_path):
    # A global IPv6 address on one twin only shifts its IPv4 GIDs to 4/5.
    err = error(spark_tree(tmp_path, f2_extra_v6=1), "=rocep1s0f1,roceP2p1s0f1")
    assert err.code == "no_shared_index"
    assert "roceP2p1s0f1 port 1" in err.message and "[5]" in err.message
    assert "rocep1s0f1 port 1" in err.message and "[3]" in err.message
    assert "narrow NCCL_IB_HCA" in err.message
    assert [m["candidates"] for m in err.details["members"]] == [[5], [3]]


def test_down_sibling_port_is_ignored(tmp_path):
    # The prefix "rocep1s0f" names the DOWN f0 as well; NCCL never opens it.
    result = resolve(spark_tree(tmp_path), "rocep1s0f")
    assert [m["device"] for m in result["members"]] == ["rocep1s0f1"]
    assert result["gid_index"] == 3
    assert [(i["device"], i["state"]) for i in result["ignored"]] == [("rocep1s0f0", "DOWN")]


def test_only_down_ports_selected(tmp_path):
    err = error(spark_tree(tmp_path), "=rocep1s0f0")
    assert err.code == "no_selected_port"
    assert "link is DOWN" in err.message and "rocep1s0f0 port 1" in err.message
    assert "check NCCL_IB_HCA" in err.message


def test_exclusion(tmp_path):
    result = resolve(spark_tree(tmp_path), "^=rocep1s0f1")
    assert [m["device"] for m in result["members"]] == ["roceP2p1s0f1"]
    assert result["ignored"] == [
        dict(device=d, port=1, netdev=n, link_layer="Ethernet", state="DOWN", reason="link is DOWN (state '1: DOWN'), NCCL skips it")
        for d, n in (("roceP2p1s0f0", "enP2p1s0f0np0"), ("rocep1s0f0", "enp1s0f0np0"))]
    members, _diag = select_ports("^roce", scan_sysfs(str(tmp_path)))
    assert members == []


def test_prefix_versus_exact(tmp_path):
    spark_tree(tmp_path)
    inv = scan_sysfs(str(tmp_path))

    def names(hca):
        return [m["device"] for m in select_ports(hca, inv)[0]]

    assert names("roce") == ["roceP2p1s0f1", "rocep1s0f1"]
    assert names("rocep") == ["rocep1s0f1"]  # case-sensitive: roceP2... is not a "rocep" prefix
    assert names("=rocep1s0f") == []
    assert select_ports("=rocep1s0f", inv)[1]["unmatched_items"] == ["rocep1s0f"]
    err = error(tmp_path, "=rocep1s0f")
    assert err.code == "no_selected_port"
    assert "devices present" in err.message


def test_name_port(tmp_path):
    add_port(tmp_path, "mlx5_0", port=1, gids=roce_table("ib0", None))
    add_port(tmp_path, "mlx5_0", port=2, gids=roce_table("eth2", "10.0.0.1"))
    result = resolve(tmp_path, "mlx5_0:2", {"eth2": ["10.0.0.1"]})
    assert [(m["device"], m["port"]) for m in result["members"]] == [("mlx5_0", 2)]
    assert result["gid_index"] == 3
    err = error(tmp_path, "mlx5_0:1", {"eth2": ["10.0.0.1"]})
    assert err.code == "no_usable_gid"


def test_ipv6_only_gid_is_not_usable(tmp_path):
    add_port(tmp_path, "rocep1s0f1", gids=roce_table("enp1s0f1np1", None, extra_v6=1), netdev="enp1s0f1np1")
    err = error(tmp_path, "=rocep1s0f1", {"enp1s0f1np1": []})
    assert err.code == "no_usable_gid"
    assert "rocep1s0f1 port 1 (netdev enp1s0f1np1)" in err.message
    assert "3=2001:db8::1 (RoCE v2)" in err.message  # what was found
    assert "give the fabric interface (enp1s0f1np1) an IPv4 address" in err.message
    assert "::ffff:" not in err.message and "2001:db8::1 (RoCE v2)" in err.message
    assert "enp1s0f1np1: none" in err.message


def test_no_roce_v2_at_all(tmp_path):
    add_port(tmp_path, "rocep1s0f1", gids={0: (LINK_LOCAL, V1, "enp1s0f1np1"), 1: (v4gid(F1_IP), V1, "enp1s0f1np1")})
    err = error(tmp_path, "rocep1s0f1")
    assert err.code == "no_usable_gid"
    assert "no RoCE v2 GID at all" in err.message


def test_one_member_without_usable_gid_fails_the_whole_selection(tmp_path):
    err = error(spark_tree(tmp_path, f2_ip=None), "=rocep1s0f1,roceP2p1s0f1")
    assert err.code == "no_usable_gid"
    assert "roceP2p1s0f1 port 1" in err.message and "rocep1s0f1 port 1" not in err.message


def test_roce_v1_entry_at_lower_index_is_ignored(tmp_path):
    gids = {0: (LINK_LOCAL, V1, "enp1s0f1np1"), 1: (v4gid(F1_IP), V1, "enp1s0f1np1"),
            2: (LINK_LOCAL, V2, "enp1s0f1np1"), 4: (v4gid(F1_IP), V2, "enp1s0f1np1")}
    add_port(tmp_path, "rocep1s0f1", gids=gids, netdev="enp1s0f1np1")
    result = resolve(tmp_path, "=rocep1s0f1", match_ip=F1_IP)
    assert result["gid_index"] == 4
    assert result["members"][0]["candidates"] == [4]


def test_gid_of_an_address_on_another_netdev_is_not_usable(tmp_path):
    # A stale GID for an address that is no longer on this netdev (and is not the match IP).
    add_port(tmp_path, "rocep1s0f1", gids=roce_table("enp1s0f1np1", "10.9.9.9"), netdev="enp1s0f1np1")
    err = error(tmp_path, "=rocep1s0f1", {"enp1s0f1np1": [F1_IP], "eth0": ["10.9.9.9"]})
    assert err.code == "no_usable_gid"
    assert "carry IPv4 10.9.9.9, which is neither the match_ip nor an address listed on enp1s0f1np1" in err.message
    assert "pass it as match_ip" in err.message and "IPv4 on netdev: enp1s0f1np1: 192.168.177.11" in err.message


def test_match_ip_preference(tmp_path):
    other = "192.168.177.99"
    gids = roce_table("enp1s0f1np1", F1_IP)
    gids.update({4: (v4gid(other), V1, "enp1s0f1np1"), 5: (v4gid(other), V2, "enp1s0f1np1")})
    add_port(tmp_path, "rocep1s0f1", gids=gids, netdev="enp1s0f1np1")
    ips = {"enp1s0f1np1": [F1_IP, other + "/24"]}
    assert resolve(tmp_path, "=rocep1s0f1", ips)["gid_index"] == 3  # lowest without a preference
    result = resolve(tmp_path, "=rocep1s0f1", ips, match_ip=other)
    assert result["gid_index"] == 5 and result["match_ip_used"] is True
    assert result["shared_indexes"] == [3, 5]
    assert result["members"][0]["evidence"][0]["index"] == 5  # evidence for the chosen index first
    # the match IP alone makes a GID usable even when it is not in the address map
    assert resolve(tmp_path, "=rocep1s0f1", {}, match_ip=other)["gid_index"] == 5


def test_match_ip_not_on_any_member_warns(tmp_path):
    result = resolve(spark_tree(tmp_path), "=rocep1s0f1", match_ip="10.0.0.1")
    assert result["gid_index"] == 3 and result["match_ip_used"] is False
    assert any("match_ip 10.0.0.1" in w for w in result["warnings"])


def test_unmatched_list_item_warns(tmp_path):
    result = resolve(spark_tree(tmp_path), "=rocep1s0f1,roceP2p1s0f9")
    assert [m["device"] for m in result["members"]] == ["rocep1s0f1"]
    assert any("'roceP2p1s0f9'" in w for w in result["warnings"])


def test_infiniband_link_layer_is_selected_but_has_no_roce_gid(tmp_path):
    add_port(tmp_path, "mlx5_0", link_layer="InfiniBand", gids={0: (LINK_LOCAL, V1, None)})
    err = error(tmp_path, "mlx5_0", {})
    assert err.code == "no_usable_gid"
    assert "InfiniBand" in err.message


def test_unsupported_link_layer_is_skipped(tmp_path):
    add_port(tmp_path, "odd0", link_layer="Unknown", gids=roce_table("eth9", "10.1.1.1"))
    err = error(tmp_path, "odd0", {"eth9": ["10.1.1.1"]})
    assert err.code == "no_selected_port"
    assert "link layer 'Unknown'" in err.message


def test_empty_inventory(tmp_path):
    err = error(tmp_path / "absent", "=rocep1s0f1")
    assert err.code == "no_selected_port"
    assert "no RDMA device was found" in err.message


@pytest.mark.parametrize("kwargs", [dict(match_ip="fe80::1"), dict(match_ip="not-an-ip"), dict(netdev_ipv4={"eth0": ["300.1.1.1"]})])
def test_invalid_addresses(tmp_path, kwargs):
    spark_tree(tmp_path)
    with pytest.raises(GidResolutionError) as exc:
        resolve_gid_index("=rocep1s0f1", scan_sysfs(str(tmp_path)), kwargs.get("netdev_ipv4", IPS), match_ip=kwargs.get("match_ip"))
    assert exc.value.code == "invalid_argument"


# ---------------------------------------------------------------- ip(8) output

def test_parse_ip_addr_output():
    text = (
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
        "3: enp1s0f1np1    inet 192.168.177.11/24 brd 192.168.177.255 scope global enp1s0f1np1\\       valid_lft forever\n"
        "3: enp1s0f1np1    inet 192.168.177.12/24 scope global secondary enp1s0f1np1:1\\       valid_lft forever\n"
        "7: enp1s0f1np1.100@enp1s0f1np1    inet 10.100.0.1/24 scope global enp1s0f1np1.100\\       valid_lft forever\n"
        "garbage\n"
    )
    assert parse_ip_addr_output(text) == {
        "lo": ["127.0.0.1"],
        "enp1s0f1np1": ["192.168.177.11", "192.168.177.12"],
        "enp1s0f1np1.100": ["10.100.0.1"],
    }


def test_address_on_netdev_but_no_ipv4_gid_yet(tmp_path):
    add_port(tmp_path, "rocep1s0f1", gids=roce_table("enp1s0f1np1", None), netdev="enp1s0f1np1")
    err = error(tmp_path, "=rocep1s0f1")
    assert err.code == "no_usable_gid"
    assert "no RoCE v2 entry for the IPv4 of enp1s0f1np1" in err.message
