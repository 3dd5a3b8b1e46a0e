"""fabric_check module_utils: ping / ib_write_bw / ip -j parsing and the judgements, on outputs captured in the VM lab."""

import pytest

from ansible_collections.dspark.cluster.plugins.module_utils.fabric_check import (
    check_links,
    check_management,
    check_rdma,
    is_connect_error,
    parse_ib_write_bw,
    parse_ip_addr_json,
    parse_ping,
    parse_ssh_connection,
    ping_problem,
)
from ansible_collections.dspark.cluster.plugins.module_utils.roce_gid import parse_hca_selector

PING_OK = """PING 192.168.100.2 (192.168.100.2) from 192.168.100.1 enp1s0f1np1: 8972(9000) bytes of data.
8980 bytes from 192.168.100.2: icmp_seq=1 ttl=64 time=11.3 ms
8980 bytes from 192.168.100.2: icmp_seq=2 ttl=64 time=6.93 ms
8980 bytes from 192.168.100.2: icmp_seq=3 ttl=64 time=3.68 ms

--- 192.168.100.2 ping statistics ---
3 packets transmitted, 3 received, 0% packet loss, time 411ms
rtt min/avg/max/mdev = 3.684/7.289/11.256/3.101 ms
"""
PING_TOO_LONG = """PING 192.168.100.2 (192.168.100.2) from 192.168.100.1 enp1s0f1np1: 8972(9000) bytes of data.
ping: sendmsg: Message too long

--- 192.168.100.2 ping statistics ---
1 packets transmitted, 0 received, +1 errors, 100% packet loss, time 0ms
"""
PING_SILENT = """PING 192.168.100.9 (192.168.100.9) from 192.168.100.1 enp1s0f1np1: 56(84) bytes of data.

--- 192.168.100.9 ping statistics ---
1 packets transmitted, 0 received, 100% packet loss, time 0ms
"""
PING_OLD_BUSYBOX = """--- 10.0.0.2 ping statistics ---
2 packets transmitted, 1 packets received, 50% packet loss
round-trip min/avg/max = 0.1/0.2/0.3 ms
"""

BW_GBITS = """ WARNING: BW peak won't be measured in this run.
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF		Device         : rocep1s0f1
 GID index       : 1
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      454           0.000000            0.079265            0.000151
---------------------------------------------------------------------------------------
"""
BW_MB = """ #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      5000             11654.12            11650.03		   0.186400
"""
BW_CONNECT = """ WARNING: BW peak won't be measured in this run.
Couldn't connect to 192.168.100.2:18516
Unable to open file descriptor for socket connection
 Unable to init the socket connection
"""

IP_JSON = [
    {"ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "mtu": 65536, "operstate": "UNKNOWN",
     "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
    {"ifindex": 2, "ifname": "eth0", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "mtu": 1500,
     "operstate": "UP", "addr_info": [{"family": "inet", "local": "10.0.2.15", "prefixlen": 24},
                                      {"family": "inet6", "local": "fe80::5054:ff:fed5:1", "prefixlen": 64}]},
    {"ifindex": 3, "ifname": "enp1s0f1np1", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "mtu": 9000,
     "operstate": "UP", "addr_info": [{"family": "inet", "local": "192.168.100.1", "prefixlen": 24}]},
    {"ifindex": 4, "ifname": "enp1s0f0np0", "flags": ["BROADCAST", "MULTICAST"], "mtu": 1500,
     "operstate": "DOWN", "addr_info": []},
]
LINKS = parse_ip_addr_json(IP_JSON)
MGMT = dict(parse_ssh_connection("10.0.2.2 40522 10.0.2.15 22"), interface="eth0")


# ---------------------------------------------------------------- parsers

def test_parse_ping_ok():
    res = parse_ping(PING_OK)
    assert res == {"transmitted": 3, "received": 3, "errors": 0, "loss_percent": 0.0, "rtt_avg_ms": 7.289,
                   "too_long": False}


def test_parse_ping_message_too_long_and_silence():
    too_long = parse_ping(PING_TOO_LONG)
    assert too_long["too_long"] and too_long["received"] == 0 and too_long["errors"] == 1
    silent = parse_ping(PING_SILENT)
    assert not silent["too_long"] and silent["received"] == 0 and silent["loss_percent"] == 100.0


def test_parse_ping_other_formats_and_nothing():
    assert parse_ping(PING_OLD_BUSYBOX)["received"] == 1
    assert parse_ping(PING_OLD_BUSYBOX)["rtt_avg_ms"] == 0.2
    assert parse_ping("ping: SO_BINDTODEVICE enp9s0: No such device")["transmitted"] is None
    assert parse_ping(None)["received"] is None


def test_parse_ib_write_bw_gbits():
    res = parse_ib_write_bw(BW_GBITS)
    assert res["gbits_average"] == 0.079265 and res["gbits_peak"] == 0.0
    assert res["bytes"] == 65536 and res["iterations"] == 454 and res["msg_rate_mpps"] == 0.000151
    assert res["unit"] == "Gb/sec"


def test_parse_ib_write_bw_megabytes_converted():
    res = parse_ib_write_bw(BW_MB)
    # perftest's MB is MiB: 11650.03 MiB/s = 97.73 Gb/s.
    assert res["gbits_average"] == pytest.approx(97.727, abs=0.01)
    assert res["bw_average"] == 11650.03


def test_parse_ib_write_bw_without_result():
    assert parse_ib_write_bw(BW_CONNECT) is None
    assert parse_ib_write_bw("") is None
    assert is_connect_error(BW_CONNECT) and not is_connect_error(BW_GBITS)


def test_parse_ip_addr_json():
    assert LINKS["enp1s0f1np1"] == {"mtu": 9000, "operstate": "up", "up": True, "carrier": True,
                                    "ipv4": ["192.168.100.1/24"], "ipv6": [], "master": None}
    assert LINKS["enp1s0f0np0"]["up"] is False and LINKS["enp1s0f0np0"]["operstate"] == "down"


def test_parse_ssh_connection():
    assert parse_ssh_connection("10.0.2.2 40522 10.0.2.15 22") == {
        "client": "10.0.2.2", "client_port": "40522", "server": "10.0.2.15", "server_port": "22"}
    assert parse_ssh_connection("fe80::1%eth0 5 fe80::2%eth0 22")["server"] == "fe80::2"
    assert parse_ssh_connection(None) is None
    assert parse_ssh_connection("garbage") is None
    assert parse_ssh_connection("a b c d") is None


# ---------------------------------------------------------------- links

def spec(**kw):
    base = {"name": "enp1s0f1np1", "variable": "dspark_fabric_interface", "mtu": 9000,
            "address": "192.168.100.1/24", "require_up": True}
    base.update(kw)
    return base


def test_check_links_all_good():
    results, problems = check_links([spec()], LINKS)
    assert problems == [] and results[0]["ok"] and results[0]["mtu_expected"] == 9000


def test_check_links_missing_interface_names_the_variable_and_lists_the_real_ones():
    results, problems = check_links([spec(name="enp9s0", mtu=None, address=None, require_up=False)], LINKS)
    assert not results[0]["exists"]
    assert problems == ["dspark_fabric_interface=enp9s0 does not exist on this node (interfaces: enp1s0f0np0, "
                        "enp1s0f1np1, eth0). Fix: set dspark_fabric_interface to the ConnectX netdev that carries "
                        "the fabric (`ibdev2netdev` or `ip -br link` show the names)."]


def test_check_links_down_wrong_mtu_and_missing_address():
    results, problems = check_links([spec(name="enp1s0f0np0", variable="fabric_secondary_interface")], LINKS)
    assert not results[0]["ok"] and len(problems) == 3
    # Down first, named as down; the MTU and the address follow as its consequences.
    assert problems[0].startswith("fabric_secondary_interface=enp1s0f0np0 is not up: the link is DOWN (operstate down, "
                                  "carrier no). Fix: check the cable and the peer, then `ip link set enp1s0f0np0 up`")
    assert "has MTU 1500, expected 9000 (dspark_fabric_mtu) (a consequence: the link is down)" in problems[1]
    assert "lacks the fabric address 192.168.100.1/24 (has: no IPv4) (a consequence: the link is down)" in problems[2]


def test_check_links_down_is_fine_before_the_change():
    _results, problems = check_links([spec(name="enp1s0f0np0", mtu=None, address=None, require_up=False)], LINKS)
    assert problems == []


# ---------------------------------------------------------------- management

NETS = [{"cidr": "192.168.100.0/24", "variable": "dspark_fabric_cidr"}]


def test_management_clear():
    assert check_management([spec()], NETS, LINKS, MGMT) == []


def test_management_interface_as_fabric_is_refused():
    problems = check_management([spec(name="eth0")], [], LINKS, MGMT)
    assert problems == ["dspark_fabric_interface=eth0 carries this SSH connection (10.0.2.2 -> 10.0.2.15): "
                        "configuring it as the fabric would cut the management connection. Fix: set "
                        "dspark_fabric_interface to the ConnectX netdev of the direct link, not the management "
                        "interface."]


def test_fabric_network_holding_the_management_address_is_refused_once():
    problems = check_management([spec()], [{"cidr": "10.0.0.0/8", "variable": "dspark_fabric_cidr"}], LINKS, MGMT)
    assert problems == ["dspark_fabric_cidr=10.0.0.0/8 holds the management address 10.0.2.15 and the controller "
                        "address 10.0.2.2 of this SSH connection: its route would take the management traffic onto "
                        "the fabric. Fix: give the fabric its own private network that holds no management address."]


def test_fabric_network_overlapping_another_interface_is_refused():
    links = dict(LINKS, docker0={"mtu": 1500, "operstate": "up", "up": True, "carrier": True,
                                 "ipv4": ["192.168.100.129/25"], "ipv6": [], "master": None})
    problems = check_management([spec()], NETS, links, MGMT)
    assert problems == ["dspark_fabric_cidr=192.168.100.0/24 overlaps 192.168.100.129/25 on docker0: two interfaces "
                        "would claim the same addresses. Fix: choose a fabric network that overlaps no other "
                        "interface's network."]


def test_management_unknown_still_checks_overlaps():
    assert check_management([spec()], NETS, LINKS, None) == []
    problems = check_management([spec()], [{"cidr": "10.0.2.0/24", "variable": "dspark_fabric_cidr"}], LINKS, None)
    assert "overlaps 10.0.2.15/24 on eth0" in problems[0]
    assert check_management([spec()], [{"cidr": "bogus", "variable": "x"}], LINKS, MGMT) == []


# ---------------------------------------------------------------- RDMA ports

def inventory(state="ACTIVE", netdev="enp1s0f1np1"):
    return {
        "rocep1s0f1": {"netdevs": [netdev], "ports": {1: {
            "state": state, "state_raw": "4: ACTIVE" if state == "ACTIVE" else "1: DOWN",
            "link_layer": "Ethernet", "netdev": netdev, "gids": {}}}},
        "rocep1s0f0": {"netdevs": ["enp1s0f0np0"], "ports": {1: {
            "state": "DOWN", "state_raw": "1: DOWN", "link_layer": "Ethernet", "netdev": "enp1s0f0np0", "gids": {}}}},
    }


def test_rdma_active_port_passes():
    results, problems = check_rdma(parse_hca_selector("rocep1s0f1"), inventory(), {("rocep1s0f1", 1): "LinkUp"},
                                   ["enp1s0f1np1"])
    assert problems == []
    assert results == [{"device": "rocep1s0f1", "port": 1, "state": "ACTIVE", "phys_state": "LinkUp",
                        "link_layer": "Ethernet", "netdev": "enp1s0f1np1", "used": True, "problems": [],
                        "ok": True}]


def test_rdma_down_sibling_of_a_prefix_is_only_reported():
    results, problems = check_rdma(parse_hca_selector("rocep1s0f"), inventory(), {}, ["enp1s0f1np1"])
    assert problems == []
    assert [(r["device"], r["used"], r["ok"]) for r in results] == [
        ("rocep1s0f0", False, True), ("rocep1s0f1", True, True)]


def test_rdma_down_port_and_wrong_netdev_are_problems():
    _r, problems = check_rdma(parse_hca_selector("=rocep1s0f0"), inventory(), {}, ["enp1s0f1np1"])
    assert problems == ["dspark_fabric_hca==rocep1s0f0: rocep1s0f0 port 1 is 1: DOWN, not ACTIVE. Fix: check the "
                        "cable, the peer and `ibstat rocep1s0f0`."]
    _r, problems = check_rdma(parse_hca_selector("=rocep1s0f1"), inventory(), {}, ["enp1s0f0np0"])
    assert problems == ["dspark_fabric_hca==rocep1s0f1: rocep1s0f1 port 1 belongs to enp1s0f1np1, which is not a "
                        "fabric interface (enp1s0f0np0): NCCL would use another port than the one with the fabric "
                        "address. Fix: pick the HCA of the fabric port (`ibdev2netdev`)."]


def test_rdma_phys_state_and_unknown_device():
    _r, problems = check_rdma(parse_hca_selector("rocep1s0f1,mlx5_9"), inventory(),
                              {("rocep1s0f1", 1): "Polling"}, ["enp1s0f1np1"])
    assert problems == [
        "dspark_fabric_hca=rocep1s0f1,mlx5_9: mlx5_9 matches no RDMA device on this node (devices: rocep1s0f0, "
        "rocep1s0f1). Fix: use the names `ibdev2netdev` prints (case-sensitive; a leading \"=\" means exact names).",
        "dspark_fabric_hca=rocep1s0f1,mlx5_9: rocep1s0f1 port 1 has physical state Polling, not LinkUp."]


def test_rdma_exclude_selector_needs_one_active_port():
    _r, problems = check_rdma(parse_hca_selector("^rocep1s0f1"), inventory(), {}, [])
    assert problems[-1].startswith("dspark_fabric_hca=^rocep1s0f1 leaves no ACTIVE RDMA port")
    _r, problems = check_rdma(parse_hca_selector("^rocep1s0f0"), inventory(), {}, [])
    assert problems == []


# ---------------------------------------------------------------- ping judgement

def ping_result(**kw):
    base = {"ok": False, "size": 8972, "mtu": 9000, "peer": "spark-worker", "address": "192.168.100.2",
            "interface": "enp1s0f1np1", "received": 0, "errors": 0, "too_long": False, "output": ""}
    base.update(kw)
    return base


def test_ping_problem_sentences():
    assert ping_problem(ping_result(ok=True)) is None
    assert "the local MTU is smaller than the packet" in ping_problem(ping_result(too_long=True))
    assert "no reply: the peer is down" in ping_problem(ping_result())
    odd = ping_problem(ping_result(errors=1, output="ping: connect: Network is unreachable"))
    assert "(ping: connect: Network is unreachable)" in odd
    assert ping_problem(ping_result()).startswith(
        "DF ping of 8972 bytes (MTU 9000) from this node to spark-worker 192.168.100.2 over enp1s0f1np1 failed")
