"""plugins/module_utils/serve_node.py: the serve role's reads of a node (serve_node_info), with canned command answers."""

import hashlib
import json
import os

from ansible_collections.dspark.cluster.plugins.module_utils import serve_node as sn


def sha(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def params(tmp_path, **over):
    base = {"infiniband_path": str(tmp_path / "no-ib"), "docker_path": str(tmp_path / "docker"), "image": None,
            "container": None, "cache_dir": None, "snapshot_dir": None, "nfs_mountpoint": None, "stamp_path": None,
            "recheck": None, "hotfix_dir": None, "hotfix_sums": None, "firewall_table": None,
            "nft_path": str(tmp_path / "nft"), "firewall_state": None, "files": [], "units": [], "timeout": 5}
    base.update(over)
    return base


class Runner:
    """Canned answers by the command's first words; records every call."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        for prefix, answer in self.answers.items():
            if " ".join(argv).startswith(prefix) or " ".join(argv[1:]).startswith(prefix):
                return answer
        return 1, "", "unexpected"


def test_cache_read_only_from_findmnt():
    assert sn.cache_read_only(0, "nfs4 ro,relatime,vers=4.2") is True
    assert sn.cache_read_only(0, "ext4 rw,relatime") is False
    assert sn.cache_read_only(0, "ext4 rw,errors=remount-ro") is False
    assert sn.cache_read_only(1, "") is False
    assert sn.cache_read_only(0, "") is False


def test_mounted_filesystem():
    text = json.dumps({"filesystems": [{"source": "10.0.0.2:/hf", "fstype": "nfs4", "options": "ro"}]})
    assert sn.mounted_filesystem(0, text)["fstype"] == "nfs4"
    assert sn.mounted_filesystem(1, "") == {} and sn.mounted_filesystem(0, "not json") == {}


def test_image_state_names_a_daemon_failure_but_not_a_missing_image():
    assert sn.image_state(0, "sha256:abc\n", "") == {"id": "sha256:abc", "reason": ""}
    assert sn.image_state(1, "", "Error response from daemon: No such image: x:1") == {"id": None, "reason": ""}
    gone = sn.image_state(1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.")
    assert gone["id"] is None and "Cannot connect" in gone["reason"]


def test_container_state_returns_no_environment():
    inspect = [{"State": {"Status": "running"}, "Config": {"Labels": {sn.CONFIG_LABEL: "f00d"}, "Env": ["VLLM_API_KEY=secret"]}}]
    state = sn.container_state(0, json.dumps(inspect))
    assert state == {"exists": True, "status": "running", "config": "f00d"}
    assert "secret" not in json.dumps(state)
    assert sn.container_state(1, "")["exists"] is False
    assert sn.container_state(0, "[]")["exists"] is False


def test_read_stamp(tmp_path):
    path = tmp_path / "stamp.json"
    assert sn.read_stamp(str(path)) == {}
    path.write_text('{"model": "m", "revision": "r"}\n')
    assert sn.read_stamp(str(path)) == {"model": "m", "revision": "r"}
    path.write_text("")
    assert sn.read_stamp(str(path)) == {}
    path.write_text("{broken")
    assert sn.read_stamp(str(path)) == {}


def test_file_current_compares_content_mode_and_kind(tmp_path):
    path = tmp_path / "f"
    path.write_text("rules\n")
    os.chmod(str(path), 0o600)
    assert sn.file_current(str(path), sha("rules\n"), "0600")
    assert not sn.file_current(str(path), sha("rules\n"), "0644")
    assert not sn.file_current(str(path), sha("other\n"), "0600")
    assert not sn.file_current(str(tmp_path / "absent"), sha("rules\n"))
    assert not sn.file_current(str(tmp_path), sha("rules\n"))
    os.chmod(str(tmp_path), 0o755)
    assert sn.file_current(str(tmp_path), None, "0755", "directory")
    assert not sn.file_current(str(path), None, None, "directory")
    # absent: current only when nothing is there (a dangling link is something)
    assert sn.file_current(str(tmp_path / "absent"), kind="absent")
    assert not sn.file_current(str(path), kind="absent") and not sn.file_current(str(tmp_path), kind="absent")
    os.symlink(str(tmp_path / "nowhere"), str(tmp_path / "dangling"))
    assert not sn.file_current(str(tmp_path / "dangling"), kind="absent")


def test_file_current_compares_the_owner_when_asked(tmp_path):
    path = tmp_path / "f"
    path.write_text("x\n")
    me, group = os.getuid(), os.getgid()
    assert sn.file_current(str(path), sha("x\n"), None, "file", me, group)
    assert not sn.file_current(str(path), sha("x\n"), None, "file", me + 1, group)
    assert not sn.file_current(str(path), None, None, "file", None, group + 1)
    assert sn.file_current(str(tmp_path), None, None, "directory", me, None)
    assert not sn.file_current(str(tmp_path), None, None, "directory", me + 1, None)


def test_file_current_of_a_socket(tmp_path):
    import socket
    path = str(tmp_path / "admin.sock")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(path)
        os.chmod(path, 0o600)
        assert sn.file_current(path, None, "0600", "socket")
        assert not sn.file_current(path, None, "0660", "socket")
        assert not sn.file_current(path, None, None, "file") and not sn.file_current(str(tmp_path), None, None, "socket")
        # a digest never makes a socket current
        assert not sn.file_current(path, sha(""), None, "socket")
    finally:
        server.close()


def test_secret_files_are_compared_like_files_and_units_needing_a_reload_are_named(tmp_path):
    conf = tmp_path / "keepalived.conf"
    conf.write_text("auth_pass x\n")
    os.chmod(str(conf), 0o600)
    run = Runner({"systemctl show a.service": (0, "no\n", ""), "systemctl show b.service": (0, "yes\n", ""),
                  "systemctl show c.service": (1, "", "Failed to connect to bus")})
    result = sn.read_node(params(tmp_path, secret_files=[{"path": str(conf), "sha256": sha("auth_pass x\n"), "mode": "0600"},
                                                         {"path": str(tmp_path / "absent"), "sha256": sha("")}],
                                 reload_units=["a.service", "b.service", "c.service"]), run)
    assert result["files"] == {str(conf): True, str(tmp_path / "absent"): False}
    assert result["need_daemon_reload"] == {"a.service": False, "b.service": True, "c.service": True}
    assert ["systemctl", "show", "a.service", "--property=NeedDaemonReload", "--value"] in run.calls


def test_packages_installed_from_dpkg_query():
    out = "prometheus-node-exporter ii \nnftables rc \nlibc6 ii \n"
    assert sn.packages_installed(["prometheus-node-exporter", "nftables", "absent-one"], 1, out) == {
        "prometheus-node-exporter": True, "nftables": False, "absent-one": False}
    # multi-arch names carry no architecture in ${Package}; any other answer (no dpkg) reads as not installed
    assert sn.packages_installed(["libc6"], 0, "libc6 ii \n") == {"libc6": True}
    assert sn.packages_installed(["libc6"], 127, "") == {"libc6": False}
    assert sn.packages_installed(["libc6"], 2, "libc6 ii \n") == {"libc6": False}


def test_read_node_asks_dpkg_once_for_every_package(tmp_path):
    run = Runner({"dpkg-query": (1, "a ii \n", "dpkg-query: no packages found matching b")})
    result = sn.read_node(params(tmp_path, packages=["a", "b"]), run)
    assert result["packages"] == {"a": True, "b": False}
    assert len(run.calls) == 1 and run.calls[0][-2:] == ["a", "b"]
    assert sn.read_node(params(tmp_path), Runner({}))["packages"] == {}


def test_file_digest_of_a_regular_file_only(tmp_path):
    path = tmp_path / "compose.yaml"
    path.write_text("name: x\n")
    os.chmod(str(path), 0o644)
    assert sn.file_digest(str(path)) == {"sha256": sha("name: x\n"), "mode": "0644"}
    os.symlink(str(path), str(tmp_path / "link"))
    assert sn.file_digest(str(tmp_path / "link")) is None
    assert sn.file_digest(str(tmp_path / "absent")) is None and sn.file_digest(str(tmp_path)) is None


def test_tree_held(tmp_path):
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "a.py").write_text("a\n")
    sums = "%s  patches/a.py\n" % sha("a\n")
    assert sn.tree_held(str(tmp_path), sums)
    (tmp_path / "patches" / "a.py").write_text("changed\n")
    assert not sn.tree_held(str(tmp_path), sums)
    assert not sn.tree_held(str(tmp_path), "")
    assert not sn.tree_held(str(tmp_path / "absent"), sums)
    assert not sn.tree_held(str(tmp_path), "%s  ../etc/passwd\n" % sha("a\n"))
    assert not sn.tree_held(str(tmp_path), "garbage\n")


def test_recheck_without_a_record_says_so(tmp_path):
    files = tmp_path / "files.json"
    result = sn.recheck_checkpoint("org/m", "a" * 40, str(tmp_path / "hf"), str(files))
    assert result["ok"] is False and result["code"] == "no_record"
    assert "org/m@aaaaaaaaaaaa: no verification record at %s" % files in result["msg"]


def test_read_node_with_everything_as_wanted(tmp_path):
    docker = tmp_path / "docker"
    docker.write_text("")
    nft = tmp_path / "nft"
    nft.write_text("")
    (tmp_path / "snap").mkdir()
    live = "table inet dspark_serve {\n}"
    state = tmp_path / "firewall.state"
    state.write_text(json.dumps({"digest": "d", "listed": live}))
    ruleset = tmp_path / "firewall.nft"
    ruleset.write_text("rules\n")
    os.chmod(str(ruleset), 0o600)
    run = Runner({
        "image inspect": (0, "sha256:%s\n" % ("0" * 64), ""),
        "container inspect": (0, json.dumps([{"State": {"Status": "running"}, "Config": {"Labels": {sn.CONFIG_LABEL: "h"}}}]), ""),
        "findmnt --noheadings": (0, "ext4 rw,relatime\n", ""),
        "findmnt --json": (0, json.dumps({"filesystems": [{"fstype": "nfs4"}]}), ""),
        "list table inet dspark_serve": (0, live + "\n", ""),
        "systemctl is-enabled": (0, "enabled\n", ""),
        "systemctl is-active": (0, "active\n", ""),
    })
    result = sn.read_node(params(
        tmp_path, image="x:1", container="dspark-vllm", cache_dir=str(tmp_path), snapshot_dir=str(tmp_path / "snap"),
        nfs_mountpoint=str(tmp_path), firewall_table="dspark_serve", firewall_state=str(state),
        files=[{"path": str(ruleset), "sha256": sha("rules\n"), "mode": "0600", "kind": "file"}],
        units=["dspark-serve-firewall.service"], active_units=["dspark-edge.service"]), run)
    assert result["changed"] is False and result["infiniband"] is False and result["docker"] is True
    assert result["image"]["id"] == "sha256:" + "0" * 64
    assert result["container"] == {"exists": True, "status": "running", "config": "h"}
    assert result["cache_read_only"] is False and result["snapshot_isdir"] is True
    assert result["cache_mount"] == {"fstype": "nfs4"}
    assert result["firewall"] == {"nft": True, "live_rc": 0, "live": live, "state": {"digest": "d", "listed": live}}
    assert result["files"] == {str(ruleset): True}
    assert result["units"] == {"dspark-serve-firewall.service": True}
    assert result["active"] == {"dspark-edge.service": True}
    assert result["recheck"] is None and result["stamp"] == {} and result["hotfix_held"] is False


def test_read_node_without_docker_nft_or_systemd(tmp_path):
    run = Runner({"systemctl is-enabled": (1, "disabled\n", ""), "systemctl is-active": (3, "inactive\n", "")})
    result = sn.read_node(params(tmp_path, image="x:1", container="c", firewall_table="dspark_serve",
                                 firewall_state=str(tmp_path / "absent"), units=["u.service"],
                                 active_units=["e.service"]), run)
    assert result["docker"] is False and result["image"] == {"id": None, "reason": ""}
    assert result["container"]["exists"] is False
    assert result["firewall"] == {"nft": False, "live_rc": 1, "live": "", "state": None}
    assert result["units"] == {"u.service": False} and result["active"] == {"e.service": False}
    assert not [c for c in run.calls if "docker" in c[0] or "nft" in c[0]]


def test_read_node_reads_the_lmcache_server_beside_the_engine(tmp_path):
    """#45: the LMCache server's container read like the engine's (a dead one makes the rank not current)."""
    (tmp_path / "docker").write_text("")

    def run(argv):
        if argv[1:3] == ["container", "inspect"]:
            status = {"dspark-vllm": "running", "dspark-lmcache": "exited"}.get(argv[3])
            if status:
                return 0, json.dumps([{"State": {"Status": status}, "Config": {"Labels": {sn.CONFIG_LABEL: "h"}}}]), ""
            return 1, "", "Error: No such container: %s" % argv[3]
        return 1, "", "unexpected"

    result = sn.read_node(params(tmp_path, container="dspark-vllm", lmcache_container="dspark-lmcache"), run)
    assert result["container"]["status"] == "running"
    assert result["lmcache"] == {"exists": True, "status": "exited", "config": "h"}
    result = sn.read_node(params(tmp_path, container="dspark-vllm", lmcache_container="gone"), run)
    assert result["lmcache"] == {"exists": False, "status": "", "config": ""}
    assert sn.read_node(params(tmp_path, container="dspark-vllm"), run)["lmcache"]["exists"] is False


def test_a_stateless_firewall_read_lists_the_table_without_its_counters(tmp_path):
    """The router's table counts dropped packets: it is listed with nft -s, as its record is, so that a counted packet
    does not make the next run re-apply it."""
    (tmp_path / "nft").write_text("")
    run = Runner({"-s list table inet dspark_router": (0, "table inet dspark_router {\n}\n", "")})
    result = sn.read_node(params(tmp_path, firewall_table="dspark_router", firewall_stateless=True), run)
    assert result["firewall"]["live"] == "table inet dspark_router {\n}" and result["firewall"]["live_rc"] == 0
    assert [c[1:] for c in run.calls if c[0].endswith("nft")] == [["-s", "list", "table", "inet", "dspark_router"]]
    plain = Runner({"list table inet dspark_router": (0, "listed\n", "")})
    sn.read_node(params(tmp_path, firewall_table="dspark_router"), plain)
    assert [c[1:] for c in plain.calls if c[0].endswith("nft")] == [["list", "table", "inet", "dspark_router"]]


def test_read_node_lists_every_sidecar_engine_container(tmp_path):
    """#46: every container labelled with an engine name, wanted or left over, in one docker call."""
    (tmp_path / "docker").write_text("")
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    listed = "dspark-vllm-vl\trunning\tvl\th1\ndspark-vllm-old\texited\told\t\n"
    runner = Runner({"ps --all": (0, listed, "")})
    result = sn.read_node(params(tmp_path, engines=True, snapshot_dirs=[str(snapshot), str(tmp_path / "none")]), runner)
    assert result["engines"] == {"dspark-vllm-vl": {"engine": "vl", "status": "running", "config": "h1"},
                                 "dspark-vllm-old": {"engine": "old", "status": "exited", "config": ""}}
    assert runner.calls[0][-1] == sn.ENGINES_FORMAT and "label=" + sn.ENGINE_LABEL in runner.calls[0]
    assert result["snapshots"] == {str(snapshot): True, str(tmp_path / "none"): False}
    # Without the option, or when docker fails, none (never a guess).
    assert sn.read_node(params(tmp_path), Runner({}))["engines"] == {}
    assert sn.engine_containers(1, listed) == {}
