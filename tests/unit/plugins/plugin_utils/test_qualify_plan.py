"""The qualify role's plan (plugins/plugin_utils/_qualify_plan.py): what each node checks, the fabric_check result
as checks, the published result and its failure lines; and the role's default deny list."""

import base64
import json
import os

import pytest
import yaml

from ansible_collections.dspark.cluster.plugins.module_utils import qualify
from ansible_collections.dspark.cluster.plugins.plugin_utils import _qualify_plan as plan

GIB = 1024 ** 3


def test_disks_need_what_the_model_still_needs_plus_the_reserve():
    disks = plan.disks({"hf_cache": "/cache", "qualify_model_bytes": str(100 * GIB), "present_bytes": str(40 * GIB),
                        "qualify_disk_reserve_bytes": 10 * GIB, "qualify_disk_min_inodes": "1000",
                        "qualify_docker_root": "/var/lib/docker", "qualify_docker_root_min_bytes": 5 * GIB})
    assert disks[0]["path"] == "/cache"
    assert disks[0]["need_bytes"] == 70 * GIB
    assert disks[0]["need_inodes"] == 1000
    assert disks[0]["variable"] == "dspark_hf_cache" and "(qualify_model_bytes)" in disks[0]["label"]
    assert disks[1] == {"path": "/var/lib/docker", "need_bytes": 5 * GIB, "need_inodes": 0,
                        "variable": "qualify_docker_root", "label": "Docker's data root: qualify_docker_root_min_bytes"}


def test_a_model_already_whole_in_the_cache_needs_only_the_reserve():
    disks = plan.disks({"hf_cache": "/c", "qualify_model_bytes": 100, "present_bytes": 150, "qualify_disk_reserve_bytes": 7,
                        "qualify_docker_root_min_bytes": 0, "qualify_docker_root": "/d"})
    assert [d["need_bytes"] for d in disks] == [7]


def test_an_unknown_model_size_checks_the_reserve_and_says_so():
    disk = plan.disks({"hf_cache": "/c", "qualify_model_bytes": 0, "present_bytes": "garbage",
                       "qualify_disk_reserve_bytes": 9})[0]
    assert disk["need_bytes"] == 9
    assert disk["variable"] == "dspark_hf_cache"
    assert "qualify_model_bytes is 0" in disk["label"] and "qualify_disk_reserve_bytes" in disk["label"]


def test_the_lmcache_disk_tier_needs_its_bound_less_what_it_holds():
    """#45: the module measures what the tier holds (present_path) and needs the rest of serve_lmcache_disk_size_gb."""
    base = {"hf_cache": "/c", "qualify_model_bytes": 0, "qualify_disk_reserve_bytes": 9}
    assert len(plan.disks(dict(base, lmcache_disk_dir="", lmcache_disk_gb=100))) == 1
    tier = plan.disks(dict(base, lmcache_disk_dir="/nvme/kv", lmcache_disk_gb="100"))[1]
    assert tier == {"path": "/nvme/kv", "need_bytes": 0, "need_inodes": 0, "variable": "serve_lmcache_disk_dir",
                    "model_bytes": 100 * GIB, "present_path": "/nvme/kv",
                    "label": "LMCache's disk tier: serve_lmcache_disk_size_gb=100 GB, {present} bytes of it there already"}
    need, label = qualify.model_disk_need(tier, 30 * GIB)
    assert need == 70 * GIB and "%d bytes of it there" % (30 * GIB) in label


def test_the_lmcache_l1_needs_dev_shm_beside_vllms_segment():
    """#45: /dev/shm holds the L1 (less what of it a running server's segment holds) plus vLLM's 160 MiB."""
    base = {"hf_cache": "/c", "qualify_model_bytes": 0, "qualify_disk_reserve_bytes": 9}
    assert len(plan.disks(dict(base, lmcache_l1_gb=0))) == 1
    shm = plan.disks(dict(base, lmcache_l1_gb="0.5", lmcache_group="real_pair", lmcache_rank=1))[1]
    assert shm["path"] == "/dev/shm" and shm["variable"] == "serve_lmcache_l1_size_gb"
    assert shm["present_path"] == "/dev/shm/lmcache_l1_pool_dspark_real_pair_r1"
    assert qualify.model_disk_need(shm, 0)[0] == GIB // 2 + 160 * 1024 ** 2
    assert qualify.model_disk_need(shm, GIB // 2)[0] == 160 * 1024 ** 2
    check = qualify.judge_disk(dict(shm, need_bytes=GIB), {"f_bavail": 1, "f_frsize": 4096, "f_favail": 9, "f_files": 9})
    assert check["verdict"] == "fail" and check["message"].startswith("/dev/shm (LMCache's L1")
    assert check["fix"].startswith("Lower serve_lmcache_l1_size_gb") and check["variable"] == "serve_lmcache_l1_size_gb"


REV = "0123456789abcdef0123456789abcdef01234567"
VL = {"name": "vl", "model": "cyankiwi/Qwen3-VL-4B-Instruct-AWQ-4bit", "revision": REV, "api_port": 8889,
      "master_port": 25100, "gpu_memory_utilization": 0.12}
SPARK = "MemTotal: 126976000 kB\nMemAvailable: 1024 kB\n"     # 124000 MiB


def judged(shares, l1_mib=0):
    """The memory budget node_qualify judges from the plan's memory_shares (as the module hands them over)."""
    return qualify.judge_memory_budget(SPARK, 0.5, l1_mib, 4096, "qualify_memory_fraction",
                                       shares=[(s["name"], s["share"], s["variable"]) for s in shares])


@pytest.mark.parametrize("sidecars", [None, []])
def test_memory_shares_without_sidecars_are_the_main_engines_alone(sidecars):
    """#46: no sidecars: the main engine's share only, and the budget judged exactly as before (an L1, or nothing)."""
    shares = plan.memory_shares({"qualify_memory_fraction": "0.835", "sidecars": sidecars})
    assert shares == [{"name": "main", "share": 0.835, "variable": "qualify_memory_fraction"}]
    assert judged(shares) is None
    assert judged(shares, 8192) == qualify.judge_memory_budget(SPARK, 0.835, 8192, 4096, "qualify_memory_fraction")


def test_memory_shares_name_every_engine_of_the_group():
    """#46: the recipe's main engine at 0.80 and its vision sidecar at 0.12 fit; a second sidecar at 0.1 does not."""
    shares = plan.memory_shares({"qualify_memory_fraction": 0.80, "sidecars": [VL]})
    assert shares == [{"name": "main", "share": 0.80, "variable": "qualify_memory_fraction"},
                      {"name": "vl", "share": 0.12, "variable": "dspark_sidecars[0].gpu_memory_utilization"}]
    fits = judged(shares)
    assert fits["verdict"] == "pass" and fits["message"].startswith("main 0.8 + vl 0.12 = 0.92 of MemTotal 124000 MiB")
    ocr = dict(VL, name="ocr", api_port=8890, master_port=25200, gpu_memory_utilization=0.1)
    too_much = judged(plan.memory_shares({"qualify_memory_fraction": 0.80, "sidecars": [VL, ocr]}))
    assert too_much["verdict"] == "fail" and too_much["message"].startswith("main 0.8 + vl 0.12 + ocr 0.1 = 1.02 of")
    assert "vl: dspark_sidecars[0].gpu_memory_utilization, ocr: dspark_sidecars[1].gpu_memory_utilization" in too_much["fix"]


@pytest.mark.parametrize("sidecars, expected", [
    ("vl", []),                                                                  # not a list
    ([VL, "ocr"], [("vl", 0.12, 0)]),                                            # not a mapping: left out
    (["ocr", VL], [("vl", 0.12, 1)]),                                            # the variable keeps its index
    ([dict(VL, gpu_memory_utilization=12)], []),                                 # outside 0 < x < 1
    ([dict(VL, gpu_memory_utilization="0.12")], [("vl", 0.12, 0)]),
    ([dict(VL, gpu_memory_utilization=True)], []),
    ([{"gpu_memory_utilization": 0.1}], [("dspark_sidecars[0]", 0.1, 0)]),       # no name: its place names it
    ([dict(VL, name=["vl"], model=7, revision=None, extra_args="x", api_port="y")], [("dspark_sidecars[0]", 0.12, 0)]),
])
def test_memory_shares_of_a_refused_sidecar_list_are_those_it_could_read(sidecars, expected):
    """A list _group_engines refuses is preflight's to name; the plan gives the shares it could read and never fails."""
    shares = plan.memory_shares({"qualify_memory_fraction": 0.80, "sidecars": sidecars})
    assert shares[0] == {"name": "main", "share": 0.80, "variable": "qualify_memory_fraction"}
    assert [(s["name"], s["share"], s["variable"]) for s in shares[1:]] == [
        (name, share, "dspark_sidecars[%d].gpu_memory_utilization" % index) for name, share, index in expected]


def test_links_add_the_second_fabric_interface():
    assert plan.links({"interface": "a", "secondary_interface": "", "qualify_link_min_speed_mbps": "0"}) == [
        {"name": "a", "variable": "dspark_fabric_interface", "min_speed_mbps": 0}]
    links = plan.links({"interface": "a", "secondary_interface": "b", "qualify_link_min_speed_mbps": 200000})
    assert [(l["name"], l["variable"], l["min_speed_mbps"]) for l in links] == [
        ("a", "dspark_fabric_interface", 200000), ("b", "fabric_secondary_interface", 200000)]
    assert plan.read_interfaces({"interface": "a"}) == [
        {"name": "a", "variable": "dspark_fabric_interface", "require_up": False}]


def test_ports_are_the_heads_only():
    inputs = {"is_head": True, "api_port": "8000", "master_port": 25000}
    ports = [(p["port"], p["variable"]) for p in plan.ports(inputs)]
    assert ports == [(8000, "dspark_api_port"), (25000, "dspark_master_port")]
    assert plan.ports(dict(inputs, is_head=False)) == []


def test_addressed_reads_the_fabric_address_from_the_links():
    read = {"links": [{"interface": "f0", "ipv4": ["192.168.100.1/24"]}]}
    assert plan.addressed({"read": read, "address": "192.168.100.1"})
    assert not plan.addressed({"read": read, "address": "192.168.100.2"})
    assert not plan.addressed({"read": {"links": [{"interface": "f0"}]}, "address": "192.168.100.1"})
    assert plan.unaddressed({"members": ["h", "w1", "w2"], "addressed": {"h": True, "w2": False}}) == ["w1", "w2"]


def test_peers_and_ping_interfaces():
    peers = plan.peers({"host": "h", "interface": "f0", "mtu": "9000",
                        "addresses": {"h": "10.0.0.1", "w": "10.0.0.2", "x": ""}})
    assert peers == [{"name": "w", "address": "10.0.0.2", "interface": "f0", "mtu": 9000}]
    assert plan.ping_interfaces({"interface": "f0", "mtu": 9000, "address": "10.0.0.1", "cidr": "10.0.0.0/30"}) == [
        {"name": "f0", "variable": "dspark_fabric_interface", "mtu": 9000, "address": "10.0.0.1/30"}]


def test_the_end_to_end_check_is_skipped_with_its_reason():
    never = plan.fabric_checks({"qualify_fabric_end_to_end": "never", "result": None})
    assert [c["verdict"] for c in never] == ["skip"]
    first = plan.fabric_checks({"qualify_fabric_end_to_end": "auto", "result": {"skipped": True},
                                "unaddressed": ["spark-worker"]})
    assert first[0]["verdict"] == "skip"
    assert "spark-worker" in first[0]["message"]


def test_fabric_check_results_become_checks():
    result = {
        "links": [{"interface": "f0", "variable": "dspark_fabric_interface", "mtu": 1500, "mtu_expected": 9000,
                   "ipv4": ["10.0.0.1/30"], "address_expected": "10.0.0.1/30",
                   "problems": ["dspark_fabric_interface=f0 has MTU 1500, expected 9000 (dspark_fabric_mtu). Fix: "
                                "re-run the fabric role."]}],
        "pings": [{"peer": "w", "address": "10.0.0.2", "interface": "f0", "size": 8972, "mtu": 9000,
                   "transmitted": 3, "received": 0, "too_long": True, "ok": False},
                  {"peer": "x", "address": "10.0.0.3", "interface": "f0", "size": 8972, "mtu": 9000,
                   "transmitted": 3, "received": 3, "ok": True}]}
    checks = plan.fabric_checks({"qualify_fabric_end_to_end": "auto", "result": result})
    assert [(c["check"], c["verdict"]) for c in checks] == [
        ("fabric_link", "fail"), ("mtu_end_to_end", "fail"), ("mtu_end_to_end", "pass")]
    assert checks[0]["message"] == "dspark_fabric_interface=f0 has MTU 1500, expected 9000 (dspark_fabric_mtu)."
    assert checks[0]["fix"] == "re-run the fabric role."
    assert "too long" in checks[1]["message"] and "8972" in checks[1]["message"]
    assert checks[1]["variable"] == "dspark_fabric_mtu" and checks[1]["fix"]


def test_the_result_counts_and_the_failure_lines():
    node = [plan.check("port", "8000", "python3 (pid 7)", "free", "fail", "port 8000 is held by python3 (pid 7)",
                       fix="stop it"),
            plan.check("kernel", "6.8.0", "6.8.0", None, "pass", "allowed")]
    group_level = [plan.check("time", "clocks", 3, 100, "pass", "within")]
    res = plan.result({"host": "h", "group": "g", "node": node, "fabric": [], "group_level": group_level})
    assert not res["ok"]
    assert res["counts"]["fail"] == 1 and res["counts"]["pass"] == 2
    assert [c["scope"] for c in res["checks"]] == ["node", "node", "group"]
    assert plan.failures(res["checks"]) == ["port 8000: port 8000 is held by python3 (pid 7) Fix: stop it"]
    assert plan.result({"host": "h", "group": "g", "node": node[1:]})["ok"]


def _measured(esterror_a, esterror_b, synced=True):
    return {"h": {"time": {"synchronized": synced, "esterror_ms": esterror_a, "maxerror_ms": 1, "wall": 1000.0}},
            "w": {"time": {"synchronized": synced, "esterror_ms": esterror_b, "maxerror_ms": 1, "wall": 1000.1}},
            "gone": None}


def test_group_clocks_are_bounded_by_the_sum_of_their_errors():
    links = {"h": [{"name": "f0", "variable": "dspark_fabric_interface"}],
             "w": [{"name": "f0", "variable": "dspark_fabric_interface"}]}
    ok = plan.group_checks({"measured": _measured(10, 20), "planned_links": links, "qualify_time_max_offset_ms": 100,
                            "qualify_time_sync_required": True})
    assert [c["verdict"] for c in ok if c["check"] == "time" and c["subject"] == "group"][0] == "pass"
    assert not [c for c in ok if c["verdict"] == "fail"]
    far = plan.group_checks({"measured": _measured(60, 70), "planned_links": links, "qualify_time_max_offset_ms": "100",
                             "qualify_time_sync_required": True})
    bad = [c for c in far if c["check"] == "time" and c["verdict"] == "fail"]
    assert bad and bad[0]["variable"] == "qualify_time_max_offset_ms" and "130" in bad[0]["message"]


def test_unsynchronised_clocks_warn_when_sync_is_not_required():
    measured = _measured(16000, 16000, synced=False)
    required = plan.group_checks({"measured": measured, "planned_links": {}, "qualify_time_max_offset_ms": 100,
                                  "qualify_time_sync_required": True})
    assert any(c["check"] == "time" and c["verdict"] == "fail" for c in required)
    relaxed = plan.group_checks({"measured": measured, "planned_links": {}, "qualify_time_max_offset_ms": 100,
                                 "qualify_time_sync_required": False})
    times = [c for c in relaxed if c["check"] == "time"]
    assert times and all(c["verdict"] != "fail" for c in times)
    assert any("qualify_time_sync_required is false" in c["message"] for c in times if c["verdict"] == "warn")


def test_group_interface_names_must_agree():
    measured = _measured(1, 1)
    links = {"h": [{"name": "f0", "variable": "dspark_fabric_interface"}],
             "w": [{"name": "f1", "variable": "dspark_fabric_interface"}]}
    checks = plan.group_checks({"measured": measured, "planned_links": links, "qualify_time_max_offset_ms": 100})
    names = [c for c in checks if c["check"] != "time"]
    assert names and names[0]["verdict"] == "fail" and "f1" in names[0]["message"], checks


def test_the_default_deny_list_refuses_the_fields_bad_kernel_with_its_source():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    with open(os.path.join(root, "roles", "qualify", "defaults", "main.yml"), encoding="utf-8") as handle:
        deny = yaml.safe_load(handle)["qualify_kernel_deny"]
    bad = qualify.judge_kernel("7.0.0-1019-nvidia", [], deny, "qualify_kernel_allow", "qualify_kernel_deny")
    assert bad["verdict"] == "fail" and "ibv_reg_mr_iova2" in bad["message"] and "MiaAI-Lab" in bad["message"], bad
    assert bad["fix"]
    good = qualify.judge_kernel("6.17.0-1032-nvidia", [], deny, "qualify_kernel_allow", "qualify_kernel_deny")
    assert good["verdict"] == "pass", good


GID = {"gid_index": 3, "members": [{"device": "rocep1s0f1", "port": 1, "netdev": "enp1s0f1np1"},
                                   {"device": "rocep1s0f0", "port": 1, "netdev": "enp1s0f0np0"}]}


def test_the_rdma_port_of_the_fabric_interface():
    assert plan.rdma_port({"gid": GID, "interface": "enp1s0f1np1"}) == {"device": "rocep1s0f1", "ib_port": 1}
    assert plan.rdma_port({"gid": GID, "interface": "eth9"}) is None
    assert plan.rdma_port({"gid": {"failed": True}, "interface": "enp1s0f1np1"}) is None


def test_gid_checks():
    assert plan.gid_checks({"first": {"skipped": True}}) == []
    missing = plan.gid_checks({"first": {"failed": True, "msg": "no RoCE v2 GID"}, "hca": "rxe0"})[0]
    assert missing["verdict"] == "fail" and "rxe0" in missing["message"] and missing["variable"] == "dspark_fabric_hca"
    once = plan.gid_checks({"first": GID, "second": {"skipped": True}, "hca": "rxe0"})[0]
    assert once["verdict"] == "pass" and once["value"] == 3
    same = plan.gid_checks({"first": GID, "second": dict(GID), "qualify_gid_interval": 5, "hca": "rxe0"})[0]
    assert same["verdict"] == "pass" and "two reads 5 s apart" in same["message"]
    moved = plan.gid_checks({"first": GID, "second": dict(GID, gid_index=4), "qualify_gid_interval": 5, "hca": "rxe0"})[0]
    assert moved["verdict"] == "fail" and "moved from 3 to 4 within 5 s" in moved["message"] and moved["fix"]


def test_the_bandwidth_floor_follows_the_link_speed_when_it_has_one():
    checks = [{"check": "link_speed", "subject": "f0", "value": 200000}, {"check": "link_speed", "subject": "f1", "value": -1}]
    floor = {"qualify_bandwidth_min_gbits": 10, "qualify_bandwidth_min_fraction": 0.4, "checks": checks}
    assert plan.bandwidth_floor(dict(floor, interface="f0")) == 80.0
    assert plan.bandwidth_floor(dict(floor, interface="f1")) == 10.0
    assert plan.bandwidth_floor(dict(floor, qualify_bandwidth_min_gbits="0.01", checks=[], interface="f0")) == 0.01


def test_the_bandwidth_plan_and_its_checks():
    port = {"device": "rxe0", "ib_port": 1}
    peers = {"w1": plan.bandwidth_peer({"dspark_fabric_address": "10.0.0.2", "dspark_rank": 1, "_qualify_rdma_port": port}),
             "w2": plan.bandwidth_peer({"dspark_fabric_address": "10.0.0.3", "dspark_rank": "2"})}   # no RDMA port
    head = plan.bandwidth_plan({"rank": 0, "qualify_bandwidth_port": 18600, "port": port, "peers": peers})
    assert head == {"receive": [{"device": "rxe0", "ib_port": 1, "peer": "w1", "tcp_port": 18600 + 64}],
                    "send": [{"device": "rxe0", "ib_port": 1, "peer": "w1", "server": "10.0.0.2", "tcp_port": 18601}]}
    worker = plan.bandwidth_plan({"rank": "1", "qualify_bandwidth_port": "18600", "port": port, "peers": {
        "h": plan.bandwidth_peer({"dspark_fabric_address": "10.0.0.1", "dspark_rank": 0, "_qualify_rdma_port": port})}})
    # What the head sends, the worker receives on the same port, and the other way round.
    assert worker["receive"][0]["tcp_port"] == head["send"][0]["tcp_port"]
    assert worker["send"][0]["tcp_port"] == head["receive"][0]["tcp_port"] and worker["send"][0]["server"] == "10.0.0.1"
    assert plan.bandwidth_plan({"rank": 0, "port": None, "peers": peers}) == {"receive": [], "send": []}
    runs = {"results": [{"item": head["send"][0], "gbits_average": 95.5},
                        {"item": dict(head["send"][0], peer="w3"), "gbits_average": 41.0},
                        {"item": dict(head["send"][0], peer="w4"), "failed": True, "msg": "could not reach"},
                        {"skipped": True}]}
    checks = plan.bandwidth_checks({"runs": runs, "floor": 80.0})
    assert [c["verdict"] for c in checks] == ["pass", "fail", "fail"]
    assert "41.00 Gb/s, below the floor 80.00" in checks[1]["message"] and checks[1]["fix"]
    assert "could not reach" in checks[2]["message"]
    assert plan.bandwidth_checks({"runs": {"skipped": True}, "floor": 1}) == []


def test_why_rdma_is_not_checked():
    base = {"qualify_rdma": True, "hca": "rxe0", "container": None, "unaddressed": []}
    assert plan.rdma_skip(base) == []
    for change, words in (({"qualify_rdma": False}, "qualify_rdma is false"), ({"hca": ""}, "dspark_fabric_hca is not set"),
                          ({"container": "docker"}, "container (docker)"), ({"unaddressed": ["w"]}, "not set up yet on w")):
        skip = plan.rdma_skip(dict(base, **change))
        assert len(skip) == 1 and skip[0]["verdict"] == "skip" and words in skip[0]["message"], (change, skip)


def _slurped(doc):
    return {"content": base64.b64encode(json.dumps(doc).encode()).decode(), "encoding": "base64"}


def test_the_model_size_from_a_members_checkpoint_manifest():
    slurped = {"h": _slurped({"total_size": 150, "entries": []}), "w": {"failed": True, "msg": "file not found"},
               "x": None, "y": {"content": "bm90IGpzb24="}}
    assert plan.manifest_bytes({"slurped": slurped}) == 150
    assert plan.manifest_bytes({"slurped": {"w": {"failed": True}}}) == 0
    disk = plan.disks({"hf_cache": "/c", "qualify_model_bytes": 0, "manifest_bytes": 150, "present_bytes": 100,
                       "qualify_disk_reserve_bytes": 7})[0]
    assert disk["need_bytes"] == 57 and "the checkpoint manifest" in disk["label"]
    assert disk["variable"] == "dspark_hf_cache"
    set_by_hand = plan.disks({"hf_cache": "/c", "qualify_model_bytes": 500, "manifest_bytes": 150,
                              "qualify_disk_reserve_bytes": 0})[0]
    assert set_by_hand["need_bytes"] == 500 and "(qualify_model_bytes)" in set_by_hand["label"]


def test_the_gpu_seen_from_a_container():
    listing = fixture_text("device_nvidia_smi_L.txt")     # recorded on the device machine (one H200)
    ok = plan.gpu_checks({"image": {"rc": 0}, "run": {"rc": 0, "stdout": listing}, "want": 1, "image_name": "i"})[0]
    assert ok["verdict"] == "pass" and "NVIDIA H200" in ok["message"]
    two = plan.gpu_checks({"image": {"rc": 0}, "run": {"rc": 0, "stdout": listing}, "want": "2", "image_name": "i"})[0]
    assert two["verdict"] == "fail" and "1 GPU(s)" in two["message"] and "nvidia-ctk" in two["fix"]
    broken = plan.gpu_checks({"image": {"rc": 0}, "want": 1, "image_name": "i",
                              "run": {"rc": 125, "stdout": "", "stderr": "docker: Error response from daemon: could "
                                      "not select device driver \"\" with capabilities: [[gpu]]."}})[0]
    assert broken["verdict"] == "fail" and "could not select device driver" in broken["message"]
    absent = plan.gpu_checks({"image": {"rc": 1}, "image_name": "reg/img@sha256:1"})[0]
    assert absent["verdict"] == "skip" and "reg/img@sha256:1" in absent["message"]
    no_docker = plan.gpu_checks({"image": {"rc": None, "msg": "No such file or directory"}})[0]
    assert no_docker["verdict"] == "skip" and "Docker is not there yet" in no_docker["message"]


def fixture_text(name):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "module_utils", "fixtures", "qualify", name), encoding="utf-8") as handle:
        return handle.read()


def test_node_qualify_measures_what_of_the_model_the_cache_holds():
    disk = plan.disks({"hf_cache": "/c", "qualify_model_bytes": 0, "manifest_bytes": 150, "present_path": "/c/hub/models--o--m",
                       "qualify_disk_reserve_bytes": 7})[0]
    # The module adds what of model_bytes is not there yet (du of present_path) and fills {present} in the label.
    assert disk["need_bytes"] == 7 and disk["model_bytes"] == 150 and disk["present_path"] == "/c/hub/models--o--m"
    assert "the model's 150 bytes (the checkpoint manifest), {present} already there" in disk["label"]
    need, label = qualify.model_disk_need(disk, 100)
    assert need == 57 and "150 bytes (the checkpoint manifest), 100 already there" in label
    unknown = plan.disks({"hf_cache": "/c", "qualify_model_bytes": 0, "present_path": "/c/x",
                          "qualify_disk_reserve_bytes": 9})[0]
    assert unknown["need_bytes"] == 9 and "model_bytes" not in unknown and "{present}" not in unknown["label"]


def test_the_unaddressed_members_from_what_node_qualify_read():
    measured = {"h": {"fabric": {"addressed": True}}, "w1": {"fabric": {"addressed": False}}, "w2": None}
    assert plan.unaddressed({"members": ["h", "w1", "w2"], "measured": measured}) == ["w1", "w2"]


def test_the_gpu_image_as_node_qualify_saw_it():
    listing = fixture_text("device_nvidia_smi_L.txt")
    ok = plan.gpu_checks({"image": {"docker": True, "present": True}, "run": {"rc": 0, "stdout": listing}, "want": 1})[0]
    assert ok["verdict"] == "pass"
    absent = plan.gpu_checks({"image": {"docker": True, "present": False}, "image_name": "reg/img:1"})[0]
    assert absent["verdict"] == "skip" and "reg/img:1 is not on this node yet" in absent["message"]
    no_docker = plan.gpu_checks({"image": {"docker": False, "present": False}, "image_name": "reg/img:1"})[0]
    assert no_docker["verdict"] == "skip" and "Docker is not there yet" in no_docker["message"]


def test_the_rdma_checks_are_the_skip_or_the_gid_and_bandwidth_checks():
    skip = plan.rdma_skip({"qualify_rdma": True, "hca": "rxe0", "container": "docker", "unaddressed": []})
    assert plan.rdma_checks({"skip": skip, "gid": {"first": None}}) == skip
    fast = plan.rdma_checks({"skip": [], "gid": {"first": {"gid_index": 3}, "second": None, "hca": "rxe0"},
                             "bandwidth": {"runs": {}, "floor": {}}, "qualify_bandwidth_min_gbits": 10})
    assert [(c["check"], c["verdict"]) for c in fast] == [("gid", "pass")]
    runs = {"results": [{"item": {"device": "rxe0", "peer": "w", "server": "10.0.0.2"}, "gbits_average": 5.0}]}
    full = plan.rdma_checks({"skip": [], "gid": {"first": {"gid_index": 3}, "second": {"gid_index": 3}, "hca": "rxe0"},
                             "bandwidth": {"runs": runs, "floor": {"checks": [], "interface": "f0"}},
                             "qualify_gid_interval": 5, "qualify_bandwidth_min_gbits": 10,
                             "qualify_bandwidth_min_fraction": 0.4})
    assert [(c["check"], c["verdict"]) for c in full] == [("gid", "pass"), ("rdma_bandwidth", "fail")]
    assert full[1]["threshold"] == 10.0 and "5 s apart" in full[0]["message"]


def test_each_part_reads_the_role_variables_it_declares_by_their_names():
    """VARIABLES[part] is what the lookup role_vars hands over (reads='qualify_<part>'): options of the role, and
    every one of them reaches the part (a changed value changes its result)."""
    assert all(name.startswith("qualify_") for names in plan.VARIABLES.values() for name in names)
    assert set(plan.VARIABLES) <= set(dir(plan))
    assert plan.links({"interface": "a", "qualify_link_min_speed_mbps": 7})[0]["min_speed_mbps"] == 7
    assert plan.bandwidth_plan({"rank": 0, "qualify_bandwidth_port": 20000, "port": {"device": "d", "ib_port": 1},
                                "peers": {"w": {"address": "10.0.0.2", "rank": 1, "port": {}}}})["receive"] == []
    assert plan.bandwidth_plan({"rank": 0, "qualify_bandwidth_port": 20000, "port": {"device": "d", "ib_port": 1},
                                "peers": {"w": {"address": "10.0.0.2", "rank": 1, "port": {"device": "e"}}}}
                               )["send"][0]["tcp_port"] == 20001


def test_no_sidecar_share_counts_on_a_node_without_a_gpu():
    """qualify_memory_fraction 0 (no GPU): the CPU build's KV cache is VLLM_CPU_KVCACHE_SPACE, no share sizes memory."""
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _qualify_plan
    vl = {"name": "vl", "model": "o/m", "revision": "a" * 40, "api_port": 8889, "master_port": 25100,
          "gpu_memory_utilization": 0.1}
    assert [s["name"] for s in _qualify_plan.memory_shares({"qualify_memory_fraction": 0, "sidecars": [vl]})] == ["main"]
    assert [s["name"] for s in _qualify_plan.memory_shares({"qualify_memory_fraction": 0.8, "sidecars": [vl]})] == ["main", "vl"]
