"""fabric_check module: main() with ip/ping/systemctl/dpkg-query answered by fakes and a sysfs fixture tree."""

import hashlib
import io
import json

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.modules import fabric_check

IP_JSON = json.dumps([
    {"ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "mtu": 65536, "operstate": "UNKNOWN",
     "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
    {"ifname": "eth0", "flags": ["UP", "LOWER_UP"], "mtu": 1500, "operstate": "UP",
     "addr_info": [{"family": "inet", "local": "10.0.2.15", "prefixlen": 24}]},
    {"ifname": "enp1s0f1np1", "flags": ["UP", "LOWER_UP"], "mtu": 9000, "operstate": "UP",
     "addr_info": [{"family": "inet", "local": "192.168.100.1", "prefixlen": 24}]},
])
PING_OK = ("3 packets transmitted, 3 received, 0% packet loss, time 411ms\n"
           "rtt min/avg/max/mdev = 3.684/7.289/11.256/3.101 ms\n")


@pytest.fixture
def sysfs(tmp_path):
    pdir = tmp_path / "rocep1s0f1" / "ports" / "1"
    (pdir / "gids").mkdir(parents=True)
    (pdir / "state").write_text("4: ACTIVE\n")
    (pdir / "phys_state").write_text("5: LinkUp\n")
    (pdir / "link_layer").write_text("Ethernet\n")
    (tmp_path / "rocep1s0f1" / "parent").write_text("enp1s0f1np1\n")
    return str(tmp_path)


@pytest.fixture
def fake(monkeypatch):
    """Answer the commands the module runs; record them."""
    calls = []
    answers = {"ping": (0, PING_OK, "")}

    def run_command(self, args, **kwargs):
        calls.append((list(args), kwargs))
        name = args[0].rsplit("/", 1)[-1]
        if name == "ip" and args[1:3] == ["-j", "addr"]:
            return 0, IP_JSON, ""
        if name == "ip" and args[1:3] == ["-j", "route"]:
            return 0, json.dumps([{"dst": args[-1], "dev": "eth0"}]), ""
        if name == "systemctl" and args[1] == "is-active":
            return 3, "active\ninactive\n", ""
        if name == "systemctl" and args[1] == "show":
            return 0, "LoadState=not-found\nActiveState=inactive\nUnitFileState=\n", ""
        if name == "dpkg-query":
            return 1, "ethtool installed\n", "dpkg-query: no packages found matching perftest\n"
        if name == "systemd-detect-virt":
            return 1, "none\n", ""
        return answers.get(name, (0, "", ""))

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return "/usr/bin/" + name

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    monkeypatch.setenv("SSH_CONNECTION", "10.0.2.2 40522 10.0.2.15 22")
    fake.calls = calls
    fake.answers = answers
    return fake


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            fabric_check.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_everything_passes(capsys, sysfs, fake, tmp_path):
    conf = tmp_path / "conf"
    conf.write_text("x = 1\n")
    conf.chmod(0o640)
    rc, out = run(capsys, {
        "interfaces": [{"name": "enp1s0f1np1", "mtu": 9000, "address": "192.168.100.1/24"}],
        "networks": [{"cidr": "192.168.100.0/24", "variable": "dspark_fabric_cidr"}],
        "hca": "rocep1s0f1",
        "peers": [{"name": "spark-worker", "address": "192.168.100.2", "interface": "enp1s0f1np1", "mtu": 9000}],
        "sysfs_root": sysfs,
        "sysctls": ["net.core.somaxconn", "net.nonexistent.key"],
        "packages": ["ethtool", "perftest"],
        "units": ["earlyoom.service"],
        "paths": [str(conf), str(tmp_path / "missing")],
    })
    assert rc == 0
    assert out["changed"] is False and out["ok"] is True and out["problems"] == []
    assert out["management"] == {"client": "10.0.2.2", "client_port": "40522", "server": "10.0.2.15",
                                 "server_port": "22", "interface": "eth0"}
    assert [(p["peer"], p["size"], p["received"], p["ok"]) for p in out["pings"]] == [("spark-worker", 8972, 3, True)]
    ping_cmd = next(args for args, _kw in fake.calls if args[0].endswith("/ping"))
    assert ping_cmd == ["/usr/bin/ping", "-n", "-M", "do", "-s", "8972", "-c", "3", "-i", "0.2", "-W", "2",
                        "-I", "enp1s0f1np1", "192.168.100.2"]
    assert [(r["device"], r["state"], r["phys_state"], r["netdev"]) for r in out["rdma"]] == [
        ("rocep1s0f1", "ACTIVE", "LinkUp", "enp1s0f1np1")]
    assert out["services"] == {"systemd-networkd": "active", "NetworkManager": "inactive"}
    assert out["missing_packages"] == ["perftest"]
    # dpkg-query's format must reach it unexpanded.
    dpkg = next((args, kw) for args, kw in fake.calls if args[0].endswith("/dpkg-query"))
    assert "${Package} ${db:Status-Status}\\n" in dpkg[0] and dpkg[1].get("expand_user_and_vars") is False
    assert out["units"] == {"earlyoom.service": {"LoadState": "not-found", "ActiveState": "inactive",
                                                 "UnitFileState": ""}}
    assert out["sysctls"]["net.nonexistent.key"] is None
    assert out["paths"][str(conf)] == {"exists": True, "checksum": hashlib.sha1(b"x = 1\n").hexdigest(),
                                       "mode": "0640"}
    assert out["paths"][str(tmp_path / "missing")] == {"exists": False, "checksum": None, "mode": None}
    assert out["container"] is None


def test_validation_read_finds_wrong_interface_and_management_clash(capsys, sysfs, fake):
    rc, out = run(capsys, {
        "interfaces": [{"name": "enp9s0", "require_up": False}, {"name": "eth0", "variable": "fabric_secondary_interface",
                                                                 "require_up": False}],
        "networks": [{"cidr": "10.0.2.0/24", "variable": "fabric_secondary_cidr"}],
        "read_rings": True,
        "sysfs_root": sysfs,
    })
    assert rc == 0 and out["ok"] is False
    assert out["problems"][0].startswith("dspark_fabric_interface=enp9s0 does not exist on this node "
                                         "(interfaces: enp1s0f1np1, eth0).")
    assert out["problems"][1].startswith("fabric_secondary_interface=eth0 carries this SSH connection")
    assert out["problems"][2].startswith("fabric_secondary_cidr=10.0.2.0/24 holds the management address 10.0.2.15 "
                                         "and the controller address 10.0.2.2")
    # Rings are read only for interfaces that exist.
    assert list(out["rings"]) == ["eth0"]
    assert not any(args[0].endswith("/ping") for args, _kw in fake.calls)


def test_failed_ping_is_a_problem_not_a_failure(capsys, sysfs, fake):
    fake.answers["ping"] = (1, "1 packets transmitted, 0 received, +1 errors, 100% packet loss\n",
                            "ping: sendmsg: Message too long\n")
    rc, out = run(capsys, {
        "peers": [{"name": "spark-worker", "address": "192.168.100.2", "interface": "enp1s0f1np1", "mtu": 9000}],
        "sysfs_root": sysfs,
    })
    assert rc == 0 and out["ok"] is False
    assert out["pings"][0]["too_long"] is True and out["pings"][0]["ok"] is False
    # Too long is final: no second try.
    assert out["pings"][0]["attempts"] == 1
    assert "the local MTU is smaller than the packet" in out["problems"][0]


def test_silent_peer_gets_a_second_try(capsys, sysfs, fake):
    fake.answers["ping"] = (1, "3 packets transmitted, 0 received, 100% packet loss\n", "")
    rc, out = run(capsys, {
        "peers": [{"name": "spark-worker", "address": "192.168.100.2", "interface": "enp1s0f1np1", "mtu": 9000}],
        "sysfs_root": sysfs,
    })
    assert rc == 0 and out["pings"][0]["attempts"] == 2 and out["pings"][0]["ok"] is False
    assert "no reply: the peer is down" in out["problems"][0]


def test_invalid_selector_fails(capsys, sysfs, fake):
    rc, out = run(capsys, {"hca": "rocep1s0f1:0", "sysfs_root": sysfs})
    assert rc == 1 and out["failed"] is True
    assert out["msg"].startswith("dspark_fabric_hca=rocep1s0f1:0 is not a valid NCCL_IB_HCA selector")


def test_ssh_connection_found_in_an_ancestor(monkeypatch):
    """Under sudo the module's own environment lacks SSH_CONNECTION; a parent process has it."""
    monkeypatch.delenv("SSH_CONNECTION", raising=False)
    files = {
        "/proc/100/environ": b"PATH=/bin\0USER=root\0",
        "/proc/100/stat": "100 (sudo) S 50 100 100 0",
        "/proc/50/environ": b"SSH_CONNECTION=10.0.2.2 1 10.0.2.15 22\0HOME=/home/spark\0",
    }
    real_open = open

    def fake_open(path, mode="r", *a, **kw):
        if path in files:
            data = files[path]
            return io.BytesIO(data) if "b" in mode else io.StringIO(data)
        return real_open(path, mode, *a, **kw)

    monkeypatch.setattr(fabric_check.os, "getppid", lambda: 100)
    monkeypatch.setattr("builtins.open", fake_open)
    assert fabric_check.find_ssh_connection() == "10.0.2.2 1 10.0.2.15 22"
