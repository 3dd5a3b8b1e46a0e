"""qualify: parsing of recorded tool outputs (fixtures/qualify, see its README) and every verdict of the judges."""

import json
import os

import math

import pytest

from ansible_collections.dspark.cluster.plugins.module_utils import qualify

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "qualify")


def fixture(name, mode="r"):
    with open(os.path.join(FIXTURES, name), mode) as handle:
        return handle.read()


def sys_class_net():
    """{if: {attr: value or None}} from the recorded /sys/class/net (cat's error = unreadable)."""
    links = {}
    for line in fixture("sys_class_net.txt").splitlines():
        name, attr, value = line.split(" ", 2)
        links.setdefault(name, {})[attr] = None if value.startswith("cat:") else value + "\n"
    return links


def assert_shape(check):
    assert set(check) >= {"check", "subject", "value", "threshold", "verdict", "message", "fix", "variable"}
    assert check["check"] in qualify.CHECKS and check["verdict"] in qualify.VERDICTS
    if check["verdict"] == "fail":
        assert check["fix"]
    json.dumps(check)


# ------------------------------------------------------------------------------------------------ kernel, os, driver

def test_kernel_recorded_release_any_allowed():
    check = qualify.judge_kernel(fixture("uname_r.txt"))
    assert_shape(check)
    assert check["verdict"] == "pass" and check["value"] == "6.18.44-fc-v769"


def test_kernel_not_in_allow_list_fails_naming_variable_and_value():
    check = qualify.judge_kernel("6.18.44-fc-v769", allow=[r"6\.11\..*-nvidia"], allow_variable="qualify_kernel_allow")
    assert_shape(check)
    assert check["verdict"] == "fail" and check["variable"] == "qualify_kernel_allow"
    assert "6.18.44-fc-v769" in check["message"] and "qualify_kernel_allow" in check["message"]


def test_kernel_allow_is_fullmatch_not_search():
    assert qualify.judge_kernel("6.11.0-1016-nvidia", allow=[r"6\.11"])["verdict"] == "fail"
    assert qualify.judge_kernel("6.11.0-1016-nvidia", allow=[r"6\.11\..*"])["verdict"] == "pass"


def test_kernel_deny_wins_over_allow_and_cites_reason_and_source():
    deny = [{"pattern": r"6\.11\.0-1001-nvidia", "reason": "memory not reclaimed", "source": "issue 27"}]
    check = qualify.judge_kernel("6.11.0-1001-nvidia", allow=[r"6\.11\..*"], deny=deny)
    assert_shape(check)
    assert check["verdict"] == "fail" and check["variable"] == "kernel_deny"
    assert "memory not reclaimed" in check["message"] and "issue 27" in check["message"]


def test_bad_regex_is_an_option_error():
    with pytest.raises(qualify.QualifyError, match="kernel_allow"):
        qualify.judge_kernel("6.1", allow=["6.(1"])


def test_os_release_recorded_and_hand_written():
    debian = qualify.parse_os_release(fixture("os-release_debian12.txt"))
    assert qualify.os_string(debian) == "debian 12"
    ubuntu = qualify.parse_os_release(fixture("hand_os-release_ubuntu2404.txt"))
    assert qualify.os_string(ubuntu) == "ubuntu 24.04"
    assert qualify.judge_os(ubuntu, [r"ubuntu 24\.04"])["verdict"] == "pass"
    check = qualify.judge_os(debian, [r"ubuntu 24\.04"], "os_allow")
    assert_shape(check)
    assert check["verdict"] == "fail" and "debian 12" in check["message"] and "os_allow" in check["message"]


def test_os_release_tolerates_garbage_and_missing_version():
    fields = qualify.parse_os_release("# comment\n\nnot a line\nID=arch\nNAME='Arch Linux'\n")
    assert fields == {"ID": "arch", "NAME": "Arch Linux"}
    assert qualify.os_string(fields) == "arch"
    assert qualify.os_string({}) == "unknown"


def test_nvidia_version_takes_nvrm_line_not_gcc():
    assert qualify.parse_nvidia_version(fixture("hand_nvidia_proc_version.txt")) == "580.95.05"
    assert qualify.parse_nvidia_version(fixture("hand_nvidia_sys_module_version.txt")) == "580.95.05"
    assert qualify.parse_nvidia_version("") is None
    assert qualify.parse_nvidia_version("garbage\n") is None
    # Recorded on the device machine (an H200 host, open kernel module, a GCC 15 line after the NVRM one).
    assert qualify.parse_nvidia_version(fixture("device_proc_driver_nvidia_version.txt")) == "580.159.04"
    assert qualify.parse_nvidia_version(fixture("device_sys_module_nvidia_version.txt")) == "580.159.04"


def test_driver_absent_skips_or_fails_when_required():
    skip = qualify.judge_driver(None)
    assert skip["verdict"] == "skip"
    fail = qualify.judge_driver(None, required=True)
    assert_shape(fail)
    assert fail["verdict"] == "fail" and "driver_required" in fail["message"]


def test_driver_allow_and_deny():
    assert qualify.judge_driver("580.95.05", allow=[r"580\..*"])["verdict"] == "pass"
    check = qualify.judge_driver("575.51.02", allow=[r"580\..*"])
    assert check["verdict"] == "fail" and "575.51.02" in check["message"] and "driver_allow" in check["message"]
    deny = [{"pattern": r"580\.95\.05", "reason": "hangs under load", "source": "forum"}]
    check = qualify.judge_driver("580.95.05", deny=deny)
    assert check["verdict"] == "fail" and "hangs under load" in check["message"]


# ------------------------------------------------------------------------------------------------ disk

def test_disk_recorded_statvfs_passes_and_fails():
    stat = json.loads(fixture("statvfs_root_ext4.json"))
    free = stat["f_bavail"] * stat["f_frsize"]
    ok = qualify.judge_disk({"path": "/", "need_bytes": free - 1, "variable": "cache_dir", "label": "cache"}, stat)
    assert_shape(ok)
    assert ok["verdict"] == "pass" and ok["value"]["free_bytes"] == free
    bad = qualify.judge_disk({"path": "/", "need_bytes": free + 10 * qualify.GIB, "variable": "cache_dir"}, stat)
    assert_shape(bad)
    assert bad["verdict"] == "fail" and "cache_dir=/" in bad["message"] and "10.0 GiB missing" in bad["message"]
    assert "cache_dir" in bad["fix"]


def test_disk_inodes_and_missing_path_measured_at_parent():
    stat = json.loads(fixture("statvfs_root_ext4.json"))
    check = qualify.judge_disk({"path": "/srv/models/new", "need_bytes": 0, "need_inodes": stat["f_favail"] + 1,
                                "variable": "model_dir"}, stat, measured_at="/srv")
    assert_shape(check)
    assert check["verdict"] == "fail" and "inodes free" in check["message"]
    assert "nearest existing parent /srv" in check["message"] and check["value"]["measured_at"] == "/srv"


def test_disk_without_inode_count_is_not_judged_on_inodes():
    stat = {"f_bavail": 100, "f_frsize": 4096, "f_files": 0, "f_favail": 0}   # btrfs reports no inode count
    check = qualify.judge_disk({"path": "/data", "need_bytes": 1, "need_inodes": 1000}, stat)
    assert check["verdict"] == "pass" and "no fixed inode count" in check["message"]


# ------------------------------------------------------------------------------------------------ memory, swap

def test_memory_recorded_meminfo():
    facts = qualify.meminfo_facts(fixture("meminfo.txt"))
    assert facts["memory_total_mib"] == 24683656 // 1024 and facts["memory_available_mib"] == 23996472 // 1024
    assert facts["swap_total_mib"] == 0
    assert qualify.judge_memory(fixture("meminfo.txt"), 0.5)["verdict"] == "pass"
    assert qualify.judge_memory(fixture("meminfo.txt"), 0.0)["verdict"] == "skip"


def test_memory_short_names_missing_mib_variable_and_fix():
    meminfo = "MemTotal: 8388608 kB\nMemAvailable: 1048576 kB\n"     # 8192 MiB, 1024 free
    check = qualify.judge_memory(meminfo, 0.5, 512, "serve_gpu_memory_utilization")
    assert_shape(check)
    assert check["verdict"] == "fail" and check["threshold"]["need_mib"] == 4608
    assert "3584 MiB missing" in check["message"] and "serve_gpu_memory_utilization=0.5" in check["message"]
    assert "reboot" in check["fix"] and "serve_gpu_memory_utilization" in check["fix"]


@pytest.mark.parametrize("total_kib, fraction, l1_mib, reserve, verdict, room", [
    (126976000, 0.835, 8192, 4096, "pass", None),      # a DGX Spark (124000 MiB): 103540 + 8192 + 4096 = 115828
    (126976000, 0.835, 16384, 4096, "fail", 15),       # 124020 > 124000: at most 15 GB of L1 fit
    (126976000, 0.80, 16384, 4096, "pass", None),      # the vision sidecar's share leaves room for it
    (24683656, 0.0, 8192, 4096, "pass", None),         # this machine (no GPU: the engine's share is 0)
])
def test_memory_budget_with_lmcache(total_kib, fraction, l1_mib, reserve, verdict, room):
    """#45: engine share + LMCache L1 + reserve against MemTotal, whatever runs now (MemAvailable plays no part)."""
    meminfo = "MemTotal: %d kB\nMemAvailable: 1024 kB\n" % total_kib
    check = qualify.judge_memory_budget(meminfo, fraction, l1_mib, reserve)
    assert_shape(check)
    assert check["verdict"] == verdict and check["variable"] == "serve_lmcache_l1_size_gb"
    assert check["threshold"]["need_mib"] == math.ceil(fraction * (total_kib // 1024)) + l1_mib + reserve
    assert "serve_gpu_memory_utilization=%s x MemTotal %d MiB" % (fraction, total_kib // 1024) in check["message"]
    if room is not None:
        assert "cannot all fit" in check["message"]
        assert check["fix"].startswith("Lower serve_lmcache_l1_size_gb to at most %d, or lower serve_gpu_memory_utilization" % room)


def test_memory_budget_only_with_an_l1():
    assert qualify.judge_memory_budget("MemTotal: 1000 kB\n", 0.9, 0, 4096) is None
    assert qualify.judge_memory_budget("Nothing: 1\n", 0.9, 1024, 0)["verdict"] == "skip"


SPARK = "MemTotal: 126976000 kB\nMemAvailable: 1024 kB\n"     # a DGX Spark: 124000 MiB (121.1 GiB)
MAIN = ("main", 0.80, "qualify_memory_fraction")
VL = ("vl", 0.12, "dspark_sidecars[0].gpu_memory_utilization")


@pytest.mark.parametrize("fraction, l1_mib", [(0.835, 8192), (0.835, 16384), (0.0, 8192), (0.9, 0)])
def test_memory_budget_of_the_main_engine_alone_is_as_before(fraction, l1_mib):
    """#46: no sidecars (every engine's shares hold the main engine only) judges as the main engine's share did."""
    before = qualify.judge_memory_budget(SPARK, fraction, l1_mib, 4096, "qualify_memory_fraction")
    assert qualify.judge_memory_budget(SPARK, 0.5, l1_mib, 4096, "serve_gpu_memory_utilization",
                                       shares=[("main", fraction, "qualify_memory_fraction")]) == before
    assert qualify.judge_memory_budget(SPARK, fraction, l1_mib, 4096, "qualify_memory_fraction", shares=[]) == before


@pytest.mark.parametrize("l1_mib, variable", [(0, "dspark_sidecars"), (4096, "serve_lmcache_l1_size_gb")])
def test_memory_budget_of_two_engines_that_fit_names_both(l1_mib, variable):
    """#46: the recipe's main engine at 0.80 beside its vision sidecar at 0.12; with no L1 judged all the same."""
    check = qualify.judge_memory_budget(SPARK, 0.80, l1_mib, 4096, shares=[MAIN, VL])
    assert_shape(check)
    assert check["verdict"] == "pass" and check["variable"] == variable
    assert check["threshold"]["engine_mib"] == 99200 + 14880
    assert check["threshold"]["need_mib"] == 99200 + 14880 + l1_mib + 4096
    assert check["threshold"]["shares"] == [["main", 0.80], ["vl", 0.12]]
    assert check["message"].startswith("main 0.8 + vl 0.12 = 0.92 of MemTotal 124000 MiB (121.1 GiB) is 114080 MiB")
    assert "main: qualify_memory_fraction, vl: dspark_sidecars[0].gpu_memory_utilization" in check["message"]
    assert "<= MemTotal 124000 MiB" in check["message"]
    assert ("LMCache's L1 4096 MiB (serve_lmcache_l1_size_gb)" in check["message"]) == bool(l1_mib)


def test_memory_budget_of_two_engines_that_do_not_fit_fails_naming_both():
    """#46: the main engine's 0.835 beside the sidecar's 0.12 and a 16 GiB L1: 134560 MiB > 124000."""
    check = qualify.judge_memory_budget(SPARK, 0.835, 16384, 4096, shares=[("main", 0.835, "qualify_memory_fraction"), VL])
    assert_shape(check)
    assert check["verdict"] == "fail" and check["variable"] == "serve_lmcache_l1_size_gb"
    assert check["threshold"]["need_mib"] == 103540 + 14880 + 16384 + 4096
    assert check["message"].startswith("main 0.835 + vl 0.12 = 0.955 of MemTotal 124000 MiB")
    assert "that is 138900 MiB > MemTotal 124000 MiB: the engines, LMCache's L1 and the host cannot all fit" in check["message"]
    assert check["fix"] == ("Lower the engines' shares (main: qualify_memory_fraction, vl: "
                            "dspark_sidecars[0].gpu_memory_utilization) so that they add up to at most 0.83, not 0.955, "
                            "or lower serve_lmcache_l1_size_gb to at most 1")


def test_memory_budget_of_engines_alone_that_do_not_fit():
    """Without an L1 the engines and the host's reserve against MemTotal; a share with no variable is still named."""
    check = qualify.judge_memory_budget(SPARK, 0.80, 0, 4096, shares=[MAIN, VL, ("ocr", 0.08)])
    assert_shape(check)
    assert check["verdict"] == "fail" and check["variable"] == "dspark_sidecars"
    assert check["message"].startswith("main 0.8 + vl 0.12 + ocr 0.08 = 1 of MemTotal 124000 MiB")
    assert "the engines and the host cannot all fit" in check["message"] and "LMCache" not in check["message"]
    assert check["fix"].startswith("Lower the engines' shares (main: qualify_memory_fraction, vl: dspark_sidecars[0]."
                                   "gpu_memory_utilization, ocr: its gpu_memory_utilization) so that they add up to at "
                                   "most 0.96, not 1")
    filled = qualify.judge_memory_budget(SPARK, 0.80, 121000, 4096, shares=[MAIN, VL])     # the L1 leaves no room
    assert filled["fix"].startswith("Lower serve_lmcache_l1_size_gb (now 121000 MiB;") and "at most" not in filled["fix"]
    skipped = qualify.judge_memory_budget("Nothing: 1\n", 0.80, 0, 4096, shares=[MAIN, VL])
    assert skipped["verdict"] == "skip" and "main 0.8 + vl 0.12 = 0.92" in skipped["message"]


def test_memory_is_not_judged_while_the_serving_engine_holds_it():
    """A serving group's re-run: its engine holds its share (unified memory), so MemAvailable is low by design; the
    site.yml gate must not fail every re-run on a serving pair for it."""
    meminfo = "MemTotal: 126976000 kB\nMemAvailable: 8388608 kB\n"
    assert qualify.judge_memory(meminfo, 0.835, 4096)["verdict"] == "fail"
    check = qualify.judge_memory(meminfo, 0.835, 4096, engine_running="dspark-vllm")
    assert check["verdict"] == "skip" and "dspark-vllm runs and holds its share" in check["message"]


def test_memory_without_memavailable_skips():
    assert qualify.judge_memory("MemTotal: 1000 kB\n", 0.5)["verdict"] == "skip"


def test_swap_policies_on_recorded_and_hand_written():
    off = fixture("swaps_off.txt")
    on = fixture("hand_swaps_on.txt")
    assert qualify.parse_swaps(off) == []
    areas = qualify.parse_swaps(on)
    assert [a["name"] for a in areas] == ["/swap.img", "/dev/zram0"] and areas[0]["size_kib"] == 16777212
    assert qualify.judge_swap(on, policy="any")["verdict"] == "info"
    assert qualify.judge_swap(off, fixture("meminfo.txt"), "off")["verdict"] == "pass"
    check = qualify.judge_swap(on, None, "off", "node_swap")
    assert_shape(check)
    assert check["verdict"] == "fail" and "node_swap=off" in check["message"] and "/dev/zram0" in check["message"]
    check = qualify.judge_swap(off, fixture("meminfo.txt"), "on")
    assert_shape(check)
    assert check["verdict"] == "fail" and "swap is off" in check["message"]


# ------------------------------------------------------------------------------------------------ oom

def test_oom_without_systemd_is_unknown_skip():
    states = qualify.parse_is_active(int(fixture("systemctl_no_systemd.rc")), fixture("systemctl_no_systemd.stdout"))
    assert states is None
    check = qualify.judge_oom(states, "required", why_unknown=fixture("systemctl_no_systemd.stderr").splitlines()[0])
    assert check["verdict"] == "skip" and check["value"] == "unknown" and "booted with systemd" in check["message"]


def test_oom_policies():
    states = qualify.parse_is_active(3, fixture("hand_systemctl_earlyoom_active.stdout"))
    assert states == {"earlyoom": "active", "systemd-oomd": "inactive"}
    assert qualify.judge_oom(states, "any")["verdict"] == "info"
    assert qualify.judge_oom(states, "required")["verdict"] == "pass"
    check = qualify.judge_oom(states, "none", "node_oom_policy")
    assert_shape(check)
    assert check["verdict"] == "fail" and "earlyoom active" in check["message"] and "earlyoom" in check["fix"]
    none = {"earlyoom": "inactive", "systemd-oomd": "inactive"}
    assert qualify.judge_oom(none, "required")["verdict"] == "fail"
    assert qualify.judge_oom(none, "none")["verdict"] == "pass"
    with pytest.raises(qualify.QualifyError):
        qualify.judge_oom(none, "sometimes")


# ------------------------------------------------------------------------------------------------ time

def test_time_recorded_unsynchronised():
    time = qualify.time_facts(json.loads(fixture("adjtimex_unsync.json")), 1767225600.0)
    assert time == {"synchronized": False, "esterror_ms": 16000.0, "maxerror_ms": 16000.0, "wall": 1767225600.0}
    check = qualify.judge_time(time, required=True)
    assert_shape(check)
    assert check["verdict"] == "fail" and "time_sync_required" in check["message"] and "chrony" in check["fix"]
    assert qualify.judge_time(time, required=False)["verdict"] == "warn"


def test_time_synchronised_error_bound():
    good = qualify.time_facts({"status": 0x2001, "esterror": 1500, "maxerror": 40000}, 1.0)
    assert good["synchronized"] is True and good["esterror_ms"] == 1.5
    assert qualify.judge_time(good, True, 100)["verdict"] == "pass"
    bad = qualify.time_facts({"status": 0x2001, "esterror": 250000, "maxerror": 400000}, 1.0)
    check = qualify.judge_time(bad, True, 100)
    assert_shape(check)
    assert check["verdict"] == "fail" and "250.0 ms" in check["message"] and "time_max_error_ms=100" in check["message"]


def test_time_unreadable_skips():
    time = qualify.time_facts(None, 5.0)
    assert time["esterror_ms"] is None
    assert qualify.judge_time(time, error="ENOSYS")["verdict"] == "skip"


# ------------------------------------------------------------------------------------------------ ports

def test_parse_ss_recorded():
    listeners = qualify.parse_ss(fixture("ss_Hltnp.txt"))
    by_port = dict((item["port"], item) for item in listeners)
    assert sorted(by_port) == [2024, 18765, 18766, 18767]
    assert by_port[2024]["users"] == [] and by_port[2024]["address"] == "0.0.0.0"
    assert by_port[18765]["address"] == "[::]" and by_port[18767]["address"] == "*"
    assert [u["name"] for u in by_port[18766]["users"]] == ["python3", "python3"]
    assert all(isinstance(u["pid"], int) for u in by_port[18766]["users"])
    nousers = qualify.parse_ss(fixture("ss_Hltn_nousers.txt"))
    assert [item["port"] for item in nousers] == [2024, 18766, 18767, 18765]
    assert all(item["users"] == [] for item in nousers)


def test_parse_ss_old_format_and_docker_proxy():
    old = qualify.parse_ss(fixture("hand_ss_old_with_header.txt"))
    assert [(item["address"], item["port"]) for item in old] == [("*", 22), ("::", 8000)]
    assert old[1]["users"] == [{"name": "tmux: server", "pid": 4321, "fd": 5}]
    proxied = qualify.parse_ss(fixture("hand_ss_docker_proxy.txt"))
    assert [item["port"] for item in proxied] == [8000, 8000, 8001, 6379, 53]
    assert proxied[4]["address"] == "127.0.0.53%lo"


def test_container_ids_from_cgroup():
    assert qualify.container_id_from_cgroup(fixture("cgroup_host_v1.txt")) is None
    assert qualify.container_id_from_cgroup(fixture("hand_cgroup_docker_v2_systemd.txt")).startswith("3f1c0d6e2a9b")
    assert qualify.container_id_from_cgroup(fixture("hand_cgroup_docker_v1_cgroupfs.txt")).startswith("aa11bb22")
    assert qualify.docker_proxy_target(fixture("hand_docker_proxy_cmdline.bin", "rb")) == ("172.17.0.2", "8000")
    assert qualify.docker_proxy_target(b"/usr/bin/sleep\x0010") is None


def test_port_verdicts():
    spec = {"port": 8000, "label": "vLLM API", "variable": "serve_port"}
    assert qualify.judge_port(spec, [])["verdict"] == "pass"
    own = qualify.judge_port(spec, [{"address": "0.0.0.0", "process": "docker-proxy", "pid": 5120,
                                     "container": "vllm-serve"}], ["vllm-serve"])
    assert own["verdict"] == "pass" and "vllm-serve" in own["message"]
    other = qualify.judge_port(spec, [{"address": "0.0.0.0", "process": "python3", "pid": 6001,
                                       "container": "someone-else"}], ["vllm-serve"])
    assert_shape(other)
    assert other["verdict"] == "fail" and "'someone-else'" in other["message"] and "serve_port=8000" in other["message"]
    host = qualify.judge_port(spec, [{"address": "[::]", "process": "python3", "pid": 6001, "container": None}])
    assert_shape(host)
    assert host["verdict"] == "fail" and "'python3' pid 6001" in host["message"] and "serve_port" in host["fix"]
    unknown = qualify.judge_port(spec, [{"address": "0.0.0.0", "process": None, "pid": None, "container": None}])
    assert unknown["verdict"] == "warn" and "unknown holder" in unknown["message"]
    # The serve role's API edge: a host process of our own unit; the same process under another unit is foreign.
    edge = {"address": "0.0.0.0", "process": "haproxy", "pid": 7001, "container": None, "unit": "dspark-edge.service"}
    ours = qualify.judge_port(spec, [edge], ["vllm-serve"], ["dspark-edge.service"])
    assert ours["verdict"] == "pass" and "unit 'dspark-edge.service'" in ours["message"], ours
    theirs = qualify.judge_port(spec, [dict(edge, unit="haproxy.service")], ["vllm-serve"], ["dspark-edge.service"])
    assert theirs["verdict"] == "fail" and "'haproxy' pid 7001" in theirs["message"]


def test_the_unit_of_a_host_process_from_its_cgroup():
    assert qualify.unit_from_cgroup("0::/system.slice/dspark-edge.service\n") == "dspark-edge.service"
    assert qualify.unit_from_cgroup("1:name=systemd:/system.slice/ssh.service\n2:cpu:/\n") == "ssh.service"
    # A lab node (itself a container): its services sit under the node's own scope.
    assert qualify.unit_from_cgroup("0::/docker/abc/system.slice/dspark-edge.service\n") == "dspark-edge.service"
    assert qualify.unit_from_cgroup("0::/user.slice/user-0.slice/session-3.scope\n") is None
    assert qualify.unit_from_cgroup("") is None


# ------------------------------------------------------------------------------------------------ links

def test_links_recorded_sysfs():
    links = sys_class_net()
    eth0 = qualify.judge_link({"name": "eth0", "variable": "mgmt_if", "min_speed_mbps": 1000}, links["eth0"])
    assert [c["verdict"] for c in eth0] == ["pass", "skip"]          # speed -1: a virtual link
    assert eth0[0]["value"]["mtu"] == 1400 and "-1" in eth0[1]["message"]
    docker0 = qualify.judge_link({"name": "docker0", "variable": "rdma_if"}, links["docker0"])
    assert_shape(docker0[0])
    assert docker0[0]["verdict"] == "fail"
    assert docker0[0]["message"] == "rdma_if=docker0 is DOWN (operstate down, carrier 0)"
    assert "ip link set docker0 up" in docker0[0]["fix"] and docker0[1]["verdict"] == "skip"
    ifb0 = qualify.judge_link({"name": "ifb0", "variable": "rdma_if"}, links["ifb0"])
    assert ifb0[0]["verdict"] == "fail" and "operstate down, carrier unreadable" in ifb0[0]["message"]
    lo = qualify.judge_link({"name": "lo", "variable": "x", "min_speed_mbps": 10}, links["lo"])
    assert [c["verdict"] for c in lo] == ["pass", "skip"]            # operstate unknown, carrier 1, speed EINVAL
    assert "unreadable" in lo[1]["message"]


def test_link_missing_is_down_and_speed_floor():
    missing = qualify.judge_link({"name": "enp1s0f0np0", "variable": "rdma_if"}, None, ["eth0", "lo"])
    assert_shape(missing[0])
    assert missing[0]["verdict"] == "fail" and missing[0]["message"].startswith("rdma_if=enp1s0f0np0 is DOWN")
    assert "eth0, lo" in missing[0]["message"]
    attrs = {"operstate": "up\n", "carrier": "1\n", "speed": "100000\n", "mtu": "9000\n"}
    spec = {"name": "enp1s0f0np0", "variable": "rdma_if", "min_speed_mbps": 200000}
    slow = qualify.judge_link(spec, attrs)
    assert_shape(slow[1])
    assert slow[0]["verdict"] == "pass" and slow[1]["verdict"] == "fail"
    assert "100000 Mb/s < min_speed_mbps 200000" in slow[1]["message"]
    spec["min_speed_mbps"] = 100000
    assert qualify.judge_link(spec, attrs)[1]["verdict"] == "pass"
    spec["min_speed_mbps"] = 0
    assert qualify.judge_link(spec, attrs)[1]["verdict"] == "info"


# ------------------------------------------------------------------------------------------------ group

def synced(err, wall=100.0):
    return {"synchronized": True, "esterror_ms": err, "maxerror_ms": err * 4, "wall": wall}


def test_group_time_pairwise_bound_names_hosts():
    members = {"a": {"time": synced(10)}, "b": {"time": synced(60)}, "c": {"time": synced(50)}}
    checks = qualify.judge_group(members, max_offset_ms=100)
    bound = [c for c in checks if c["check"] == "time" and c["subject"] == "group"][0]
    assert bound["scope"] == "group" and bound["verdict"] == "fail"
    assert bound["value"] == {"hosts": ["b", "c"], "bound_ms": 110.0}
    assert "b and c" in bound["message"] and "max_offset_ms=100" in bound["message"] and bound["fix"]
    ok = qualify.judge_group(members, max_offset_ms=110)
    assert [c["verdict"] for c in ok if c["subject"] == "group"] == ["pass"]


def test_group_time_unsynchronised_and_wall_gap():
    members = {"a": {"time": synced(1, 100.0)}, "b": {"time": {"synchronized": False, "esterror_ms": 16000.0,
                                                               "maxerror_ms": 16000.0, "wall": 400.0}}}
    checks = qualify.judge_group(members)
    verdicts = dict(((c["subject"], c["verdict"]), c) for c in checks)
    assert ("group", "fail") in verdicts and "on b" in verdicts[("group", "fail")]["message"]
    assert ("wall", "warn") in verdicts
    for check in checks:
        assert_shape(check)


def test_group_links_must_agree():
    members = {
        "spark-1": {"links": [{"name": "enp1s0f0np0", "variable": "rdma_if"}]},
        "spark-2": {"links": [{"name": "enp1s0f1np1", "variable": "rdma_if"}]},
        "spark-3": {"links": [{"name": "enp1s0f0np0", "variable": "rdma_if"}]},
    }
    checks = qualify.judge_group(members)
    assert len(checks) == 1
    check = checks[0]
    assert_shape(check)
    assert check["verdict"] == "fail" and check["variable"] == "rdma_if" and check["scope"] == "group"
    assert "spark-2 has enp1s0f1np1" in check["message"] and "spark-1 has enp1s0f0np0" in check["message"]
    members["spark-2"]["links"][0]["name"] = "enp1s0f0np0"
    assert [c["verdict"] for c in qualify.judge_group(members)] == ["pass"]
    members["spark-3"]["links"] = []
    check = qualify.judge_group(members)[0]
    assert check["verdict"] == "fail" and "spark-3 has none" in check["message"]


def test_group_empty_and_single():
    assert qualify.judge_group({}) == []
    single = qualify.judge_group({"a": {"time": synced(5)}})
    assert single == []


def test_fail_without_fix_is_refused():
    with pytest.raises(qualify.QualifyError):
        qualify.make_check("disk", "/", 0, 1, "fail", "no fix")


def test_a_service_of_a_node_that_is_itself_a_container_is_a_host_process():
    # Recorded on a lab node (a Docker container running systemd, cgroup v1 hybrid): a systemd-run service and PID 1.
    assert qualify.container_id_from_cgroup(fixture("cgroup_lab_service_v1.txt")) is None
    assert qualify.container_id_from_cgroup(fixture("cgroup_lab_init_v1.txt")) is None
    nested = "0::/docker/%s/docker/%s\n" % ("a" * 64, "b" * 64)
    assert qualify.container_id_from_cgroup(nested) == "b" * 64
    assert qualify.container_id_from_cgroup("0::/system.slice/docker-%s.scope\n" % ("c" * 64)) == "c" * 64


def test_cma_required_on_a_spark():
    # This machine's /proc/meminfo (recorded) has no CmaTotal line: its kernel has no CMA.
    recorded = fixture("meminfo.txt")
    assert "CmaTotal" not in recorded
    info = qualify.judge_cma(recorded, required=False, variable="qualify_cma_required")
    assert info["verdict"] == "info" and "absent" in info["message"]
    missing = qualify.judge_cma(recorded, required=True, variable="qualify_cma_required")
    assert missing["verdict"] == "fail" and "ibv_reg_mr_iova2" in missing["message"] and "cma=" in missing["fix"]
    zero = qualify.judge_cma("MemTotal: 100 kB\nCmaTotal:              0 kB\nCmaFree: 0 kB\n", required=True)
    assert zero["verdict"] == "fail" and "0 kB" in zero["message"]
    good = qualify.judge_cma("CmaTotal:        1048576 kB\nCmaFree: 1000 kB\n", required=True)
    assert good["verdict"] == "pass" and good["value"] == 1024


def test_du_and_what_of_the_model_is_there():
    assert qualify.parse_du("1080033975\t/var/lib/dspark/hf-cache/hub/models--o--m\n") == 1080033975
    assert qualify.parse_du("") == 0 and qualify.parse_du("du: cannot access") == 0
    spec = {"need_bytes": 10, "model_bytes": 100, "label": "model: {present} there"}
    assert qualify.model_disk_need(spec, 40) == (70, "model: 40 there")
    assert qualify.model_disk_need(spec, 400) == (10, "model: 100 there")


def test_the_fabric_address_from_ip_json():
    ip_json = [{"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
               {"ifname": "enp1", "addr_info": [{"family": "inet", "local": "192.168.100.1", "prefixlen": 24}]},
               {"ifname": "enp2", "addr_info": []}]
    ipv4 = qualify.parse_ipv4(ip_json)
    assert ipv4 == {"lo": ["127.0.0.1/8"], "enp1": ["192.168.100.1/24"], "enp2": []}
    assert qualify.holds_address(ipv4, ["enp2", "enp1"], "192.168.100.1")
    assert not qualify.holds_address(ipv4, ["enp2"], "192.168.100.1")
    assert not qualify.holds_address(ipv4, ["enp1"], "")


def test_distribution_facts_as_setup_names_them():
    q = qualify
    ubuntu = q.parse_os_release('NAME="Ubuntu"\nID=ubuntu\nVERSION_CODENAME=noble\nID_LIKE=debian\n')
    assert q.distribution_facts(ubuntu, "aarch64") == {"distribution": "Ubuntu", "distribution_release": "noble",
                                                       "architecture": "aarch64"}
    debian = q.parse_os_release('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_CODENAME=bookworm\n')
    assert q.distribution_facts(debian, "x86_64")["distribution"] == "Debian"
    assert q.distribution_facts({"ID": "rhel", "VERSION_CODENAME": "x"}, "x86_64")["distribution"] == "Redhat"
    # Without a codename (Debian testing/sid, some derivatives) setup's own logic decides: nothing set here.
    assert q.distribution_facts(q.parse_os_release("ID=debian\n"), "x86_64") == {}
    assert q.distribution_facts(ubuntu, "") == {}
