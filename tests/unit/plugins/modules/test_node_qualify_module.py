"""node_qualify module: main() end to end against a fake node (files, statvfs, adjtimex, commands), in check mode too."""

import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.modules import node_qualify

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "module_utils", "fixtures", "qualify")
CONTAINER = "3f1c0d6e2a9b4c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d"


def fixture(name, mode="r"):
    with open(os.path.join(FIXTURES, name), mode) as handle:
        return handle.read()


def fake_node(monkeypatch, files=None, commands=None, timex=None, existing=("/", "/srv")):
    node_files = {
        "/etc/os-release": fixture("hand_os-release_ubuntu2404.txt"),
        "/proc/driver/nvidia/version": fixture("hand_nvidia_proc_version.txt"),
        "/proc/meminfo": "MemTotal: 8388608 kB\nMemAvailable: 1048576 kB\nSwapTotal: 0 kB\n",
        "/proc/swaps": fixture("swaps_off.txt"),
        "/sys/class/net/eth0/operstate": "up\n", "/sys/class/net/eth0/carrier": "1\n",
        "/sys/class/net/eth0/speed": "10000\n", "/sys/class/net/eth0/mtu": "1500\n",
        "/sys/class/net/rdma0/operstate": "down\n", "/sys/class/net/rdma0/carrier": "0\n",
        "/sys/class/net/rdma0/mtu": "9000\n",
        "/proc/5120/cgroup": fixture("cgroup_host_v1.txt"),
        "/proc/6001/cgroup": fixture("hand_cgroup_docker_v2_systemd.txt"),
        "/proc/901/cgroup": fixture("cgroup_host_v1.txt"),
        "/proc/700/cgroup": fixture("cgroup_host_v1.txt"),
    }
    node_files.update(files or {})
    node_commands = {
        ("systemctl", "is-active", "earlyoom", "systemd-oomd"): (3, fixture("hand_systemctl_earlyoom_active.stdout"), ""),
        ("ss", "-Hltnp"): (0, fixture("hand_ss_docker_proxy.txt"), ""),
        ("docker", "inspect", "--format", "{{.Name}}", CONTAINER): (0, "/vllm-serve\n", ""),
        ("docker", "ps", "-q", "--no-trunc"): (0, CONTAINER + "\n", ""),
        ("docker", "inspect", "--format", "{{.Name}}{{range .NetworkSettings.Networks}} {{.IPAddress}}{{end}}",
         CONTAINER): (0, "/router 172.17.0.2\n", ""),
    }
    node_commands.update(commands or {})
    calls = []

    def run(module, argv):
        calls.append(tuple(argv))
        return node_commands.get(tuple(argv))

    monkeypatch.setattr(node_qualify, "read_text", node_files.get)
    monkeypatch.setattr(node_qualify, "read_bytes",
                        lambda path: fixture("hand_docker_proxy_cmdline.bin", "rb") if path in ("/proc/5120/cmdline", "/proc/5127/cmdline")
                        else None)
    monkeypatch.setattr(node_qualify, "kernel_release", lambda: "6.11.0-1016-nvidia")
    monkeypatch.setattr(node_qualify, "statvfs", lambda path: json.loads(fixture("statvfs_root_ext4.json")))
    monkeypatch.setattr(node_qualify, "path_exists", lambda path: path in existing)
    monkeypatch.setattr(node_qualify, "list_links", lambda: ["eth0", "lo", "rdma0"])
    monkeypatch.setattr(node_qualify, "wall_time", lambda: 1767225600.5)
    monkeypatch.setattr(node_qualify, "adjtimex",
                        lambda: timex if timex is not None else {"state": 0, "status": 0x2001, "esterror": 2000,
                                                                 "maxerror": 30000})
    monkeypatch.setattr(node_qualify, "run", run)
    return calls


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            node_qualify.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def by(result, check, subject=None):
    found = [c for c in result["checks"] if c["check"] == check and (subject is None or c["subject"] == subject)]
    assert len(found) == 1, (check, subject, result["checks"])
    return found[0]


FULL = {
    "kernel_allow": [r"6\.11\..*-nvidia"],
    "kernel_deny": [{"pattern": r"6\.11\.0-1001-nvidia", "reason": "leak", "source": "issue 27"}],
    "os_allow": [r"ubuntu 24\.04"],
    "driver_allow": [r"580\..*"],
    "driver_required": True,
    "disks": [{"path": "/srv/models", "need_bytes": 10 ** 15, "variable": "model_cache_dir", "label": "models"}],
    "memory_fraction": 0.5,
    "memory_reserve_mib": 512,
    "swap": "off",
    "oom_policy": "none",
    "time_max_error_ms": 100,
    "ports": [{"port": 8000, "label": "router", "variable": "router_port"},
              {"port": 8001, "label": "engine", "variable": "serve_port"},
              {"port": 6379, "label": "redis", "variable": "redis_port"},
              {"port": 9000, "label": "free", "variable": "free_port"}],
    "own_containers": ["router"],
    "links": [{"name": "eth0", "variable": "mgmt_if", "min_speed_mbps": 25000},
              {"name": "rdma0", "variable": "rdma_if"},
              {"name": "enp9", "variable": "spare_if"}],
}


def test_full_run_verdicts(monkeypatch, capsys):
    calls = fake_node(monkeypatch)
    code, result = run_module(capsys, FULL)
    assert code == 0 and result["changed"] is False           # failing verdicts do not fail the module
    assert by(result, "kernel")["verdict"] == "pass"
    assert by(result, "os")["verdict"] == "pass" and by(result, "os")["value"] == "ubuntu 24.04"
    assert by(result, "driver")["verdict"] == "pass" and result["facts"]["driver"] == "580.95.05"
    disk = by(result, "disk")
    assert disk["verdict"] == "fail" and disk["value"]["measured_at"] == "/srv" and "model_cache_dir" in disk["message"]
    memory = by(result, "memory")
    assert memory["verdict"] == "fail" and "3584 MiB missing" in memory["message"]   # 0.5 x 8192 + 512 - 1024
    assert by(result, "swap")["verdict"] == "pass"
    assert by(result, "oom")["verdict"] == "fail"
    assert by(result, "time")["verdict"] == "pass"
    assert result["time"] == {"synchronized": True, "esterror_ms": 2.0, "maxerror_ms": 30.0, "wall": 1767225600.5}
    router = by(result, "port", "8000")                        # docker-proxy in front of the own container
    assert router["verdict"] == "pass" and "'router'" in router["message"]
    engine = by(result, "port", "8001")                        # a process inside another container
    assert engine["verdict"] == "fail" and "'vllm-serve'" in engine["message"] and "serve_port=8001" in engine["message"]
    redis = by(result, "port", "6379")
    assert redis["verdict"] == "fail" and "'redis-server' pid 901" in redis["message"]
    assert by(result, "port", "9000")["verdict"] == "pass"
    assert by(result, "link", "eth0")["verdict"] == "pass"
    speed = by(result, "link_speed", "eth0")
    assert speed["verdict"] == "fail" and "10000 Mb/s < min_speed_mbps 25000" in speed["message"]
    assert by(result, "link", "rdma0")["message"] == "rdma_if=rdma0 is DOWN (operstate down, carrier 0)"
    spare = by(result, "link", "enp9")
    assert spare["verdict"] == "fail" and "is DOWN" in spare["message"] and "eth0, lo, rdma0" in spare["message"]
    failed = [c for c in result["checks"] if c["verdict"] == "fail"]
    assert result["failed_checks"] == len(failed) == 8 and all(c["fix"] for c in failed)
    assert result["facts"] == {"kernel": "6.11.0-1016-nvidia", "os_id": "ubuntu", "os_version": "24.04",
                               "driver": "580.95.05", "memory_total_mib": 8192, "memory_available_mib": 1024,
                               "swap_total_mib": 0}
    assert ("ss", "-Hltnp") in calls and all(call[0] in ("ss", "systemctl", "docker") for call in calls)
    assert all(call[1] in ("-Hltnp", "is-active", "inspect", "ps") for call in calls)   # read-only commands only


def test_check_mode_gives_the_same_result(monkeypatch, capsys):
    fake_node(monkeypatch)
    _unused, normal = run_module(capsys, FULL)
    fake_node(monkeypatch)
    code, checked = run_module(capsys, dict(FULL, _ansible_check_mode=True))
    assert code == 0 and checked["checks"] == normal["checks"] and checked["changed"] is False


def test_defaults_on_a_bare_node(monkeypatch, capsys):
    fake_node(monkeypatch, files={"/proc/driver/nvidia/version": None},
              commands={("systemctl", "is-active", "earlyoom", "systemd-oomd"): None},
              timex={"state": 5, "status": 64, "esterror": 16000000, "maxerror": 16000000})
    code, result = run_module(capsys, {})
    assert code == 0
    assert [c["check"] for c in result["checks"]] == ["kernel", "os", "driver", "memory", "cma", "swap", "oom", "time"]
    assert by(result, "driver")["verdict"] == "skip" and by(result, "memory")["verdict"] == "skip"
    assert by(result, "swap")["verdict"] == "info"
    oom = by(result, "oom")
    assert oom["verdict"] == "skip" and oom["value"] == "unknown" and "systemctl is absent" in oom["message"]
    assert by(result, "time")["verdict"] == "fail" and result["failed_checks"] == 1
    assert result["time"]["synchronized"] is False


def test_driver_from_sys_module_and_ports_without_root(monkeypatch, capsys):
    fake_node(monkeypatch, files={"/proc/driver/nvidia/version": None,
                                  "/sys/module/nvidia/version": fixture("hand_nvidia_sys_module_version.txt")},
              commands={("ss", "-Hltnp"): (0, fixture("ss_Hltn_nousers.txt"), "")})
    code, result = run_module(capsys, {"ports": [{"port": 18766, "variable": "serve_port"}], "time_sync_required": False})
    assert code == 0 and result["facts"]["driver"] == "580.95.05"
    port = by(result, "port")
    assert port["verdict"] == "warn" and "unknown holder" in port["message"]


def test_bad_option_values_fail_the_module(monkeypatch, capsys):
    fake_node(monkeypatch)
    code, result = run_module(capsys, {"memory_fraction": 1.5})
    assert code == 1 and "memory_fraction=1.5" in result["msg"]
    fake_node(monkeypatch)
    code, result = run_module(capsys, {"kernel_allow": ["6.(11"]})
    assert code == 1 and "kernel_allow" in result["msg"] and "regular expression" in result["msg"]
    fake_node(monkeypatch)
    code, result = run_module(capsys, {"swap": "maybe"})
    assert code == 1 and "swap" in result["msg"]


def test_variable_names_are_cited(monkeypatch, capsys):
    fake_node(monkeypatch)
    code, result = run_module(capsys, {"os_allow": [r"debian 12"], "variable_names": {"os_allow": "qualify_os_allow"}})
    os_check = by(result, "os")
    assert os_check["verdict"] == "fail" and os_check["variable"] == "qualify_os_allow"
    assert "qualify_os_allow" in os_check["message"] and "ubuntu 24.04" in os_check["message"]


def test_the_model_in_the_cache_the_fabric_address_and_the_image(monkeypatch, capsys):
    ip_json = json.dumps([{"ifname": "eth0", "addr_info": [{"family": "inet", "local": "192.168.100.1", "prefixlen": 24}]}])
    calls = fake_node(monkeypatch, commands={
        ("du", "-s", "--apparent-size", "--block-size=1", "--", "/srv/hub/models--o--m"): (0, "%d\t/srv\n" % 10 ** 9, ""),
        ("ip", "-j", "-4", "addr", "show"): (0, ip_json, ""),
        ("systemd-detect-virt", "--container"): (0, "docker\n", ""),
        ("docker", "image", "inspect", "--format", "{{.Id}}", "reg/img:1"): (1, "", "Error: No such image: reg/img:1\n"),
    })
    code, result = run_module(capsys, {
        "disks": [{"path": "/srv", "need_bytes": 10, "model_bytes": 3 * 10 ** 9, "present_path": "/srv/hub/models--o--m",
                   "label": "cache: {present} there"}],
        "links": [{"name": "eth0"}, {"name": "rdma0"}], "fabric_address": "192.168.100.1", "image": "reg/img:1",
        "time_sync_required": False})
    assert code == 0
    disk = by(result, "disk")
    assert disk["threshold"]["need_bytes"] == 2 * 10 ** 9 + 10 and "cache: 1000000000 there" in disk["message"]
    assert result["fabric"] == {"address": "192.168.100.1", "addressed": True, "container": "docker",
                                "ipv4": {"eth0": ["192.168.100.1/24"], "rdma0": []}}
    assert result["image"] == {"name": "reg/img:1", "docker": True, "present": False,
                               "msg": "Error: No such image: reg/img:1"}
    assert all(call[0] in ("ss", "systemctl", "docker", "du", "ip", "systemd-detect-virt") for call in calls)


def test_without_ip_docker_or_systemd_detect_virt(monkeypatch, capsys):
    fake_node(monkeypatch, files={"/run/systemd/container": "lxc\n"})
    code, result = run_module(capsys, {"links": [{"name": "eth0"}], "fabric_address": "192.168.100.1",
                                       "image": "reg/img:1", "time_sync_required": False})
    assert code == 0 and result["fabric"]["addressed"] is False and result["fabric"]["container"] == "lxc"
    assert result["image"]["docker"] is False and result["image"]["present"] is False


def test_every_engines_share_in_the_memory_budget(monkeypatch, capsys):
    """#46: memory_shares (the main engine first, then the group's sidecars) reach the budget check, each named."""
    spark = {"/proc/meminfo": "MemTotal: 126976000 kB\nMemAvailable: 125829120 kB\nSwapTotal: 0 kB\n"}
    shares = [{"name": "main", "share": 0.80, "variable": "qualify_memory_fraction"},
              {"name": "vl", "share": 0.12, "variable": "dspark_sidecars[0].gpu_memory_utilization"}]
    fake_node(monkeypatch, files=spark)
    code, result = run_module(capsys, {"memory_fraction": 0.80, "memory_shares": shares, "lmcache_reserve_mib": 4096})
    budget = by(result, "memory", "memory budget")
    assert code == 0 and budget["verdict"] == "pass" and budget["variable"] == "dspark_sidecars"
    assert budget["message"].startswith("main 0.8 + vl 0.12 = 0.92 of MemTotal 124000 MiB")
    fake_node(monkeypatch, files=spark)
    code, result = run_module(capsys, {"memory_fraction": 0.80, "memory_shares": shares, "lmcache_l1_mib": 16384,
                                       "lmcache_reserve_mib": 4096})
    budget = by(result, "memory", "memory budget")
    assert budget["verdict"] == "fail" and "dspark_sidecars[0].gpu_memory_utilization" in budget["fix"]
    fake_node(monkeypatch, files=spark)
    code, result = run_module(capsys, {"memory_fraction": 0.80, "memory_shares": shares[:1]})
    assert code == 0 and [c for c in result["checks"] if c["subject"] == "memory budget"] == []
    fake_node(monkeypatch)
    code, result = run_module(capsys, {"memory_shares": [{"name": "vl", "share": 1.2}]})
    assert code == 1 and "memory_shares: vl=1.2" in result["msg"]
