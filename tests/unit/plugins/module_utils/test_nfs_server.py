"""nfs_server: /proc/fs/nfsd parsing and the root_squash audit of an exported cache."""

import os

import pytest

from ansible_collections.dspark.cluster.plugins.module_utils import nfs_server


def test_parse_versions_trixie_v4_only():
    versions = nfs_server.parse_versions("-3 +4 +4.1 +4.2\n")
    assert versions == {"3": False, "4": True, "4.1": True, "4.2": True}
    assert nfs_server.legacy_enabled(versions) == []
    assert nfs_server.v4_enabled(versions)


def test_parse_versions_default_server_serves_v3():
    versions = nfs_server.parse_versions("-2 +3 +4 +4.1 +4.2")
    assert nfs_server.legacy_enabled(versions) == ["3"]


def test_parse_versions_ignores_garbage_and_empty():
    assert nfs_server.parse_versions(None) == {}
    assert nfs_server.parse_versions("+ x -abc +4") == {"4": True}
    assert not nfs_server.v4_enabled(nfs_server.parse_versions("+3 -4 -4.1"))


def _proc(tmp_path, threads="8\n", versions="-3 +4 +4.1 +4.2\n", clients=2):
    proc = tmp_path / "nfsd"
    proc.mkdir()
    if threads is not None:
        (proc / "threads").write_text(threads)
    if versions is not None:
        (proc / "versions").write_text(versions)
    if clients is not None:
        (proc / "clients").mkdir()
        for i in range(clients):
            (proc / "clients" / str(i + 5)).mkdir()
        (proc / "clients" / "stray-file").write_text("")
    return str(proc)


def test_server_state_running_with_clients(tmp_path):
    state = nfs_server.server_state(_proc(tmp_path))
    assert state["running"] and state["threads"] == 8
    assert state["clients"] == 2
    assert state["legacy"] == []
    assert state["versions_raw"] == "-3 +4 +4.1 +4.2"


def test_server_state_stopped_or_absent(tmp_path):
    state = nfs_server.server_state(str(tmp_path / "absent"))
    assert state == {"running": False, "threads": 0, "versions_raw": "", "versions": {}, "legacy": [], "clients": None}
    state = nfs_server.server_state(_proc(tmp_path, threads="0\n", versions="-2 +3 +4", clients=None))
    assert not state["running"] and state["legacy"] == ["3"] and state["clients"] is None


def test_server_state_bad_threads(tmp_path):
    assert nfs_server.server_state(_proc(tmp_path, threads="x"))["threads"] == 0


def _tree(tmp_path):
    root = tmp_path / "cache"
    snap = root / "hub" / "models--a--b" / "snapshots" / "r"
    snap.mkdir(parents=True)
    for d in [root, root / "hub", root / "hub" / "models--a--b", snap.parent, snap]:
        os.chmod(str(d), 0o755)
    (snap / "config.json").write_text("{}")
    os.chmod(str(snap / "config.json"), 0o644)
    (root / "token").write_text("hf_secret")
    os.chmod(str(root / "token"), 0o600)
    os.symlink("config.json", str(snap / "link.json"))
    return root, snap


def test_unreadable_clean_tree(tmp_path):
    root = _tree(tmp_path)[0]
    assert nfs_server.unreadable(str(root)) == ([], 0)


def test_unreadable_names_files_dirs_and_root(tmp_path):
    root, snap = _tree(tmp_path)
    os.chmod(str(snap / "config.json"), 0o640)
    os.chmod(str(snap), 0o750)
    os.chmod(str(root), 0o711)  # o+x but no o+r: a client cannot list the export root
    paths, count = nfs_server.unreadable(str(root))
    assert count == 3
    assert paths == [str(root), str(snap), str(snap / "config.json")]
    paths, count = nfs_server.unreadable(str(root), limit=1)
    assert paths == [str(root)] and count == 3


def test_unreadable_absent_root_and_subdir(tmp_path):
    assert nfs_server.unreadable(str(tmp_path / "absent")) == ([], 0)
    root = tmp_path / "empty"
    root.mkdir()
    os.chmod(str(root), 0o755)
    assert nfs_server.unreadable(str(root)) == ([], 0)


def test_secrets_private_and_exposed(tmp_path):
    root = _tree(tmp_path)[0]
    found = nfs_server.secrets(str(root), ["token", "stored_tokens"])
    assert len(found) == 1 and found[0]["mode"] == "0600" and found[0]["path"] == str(root / "token")
    # The test runs as whatever user; privacy needs root ownership.
    assert found[0]["private"] == (os.getuid() == 0 and os.getgid() == 0)
    os.chmod(str(root / "token"), 0o644)
    assert not nfs_server.secrets(str(root), ["token"])[0]["private"]


# --- live state vs the role's files (issue #13 point 5) ---------------------------------------------------------------
TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0264A8C0:0801 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 100 0 0 10 0
   2: 0264A8C0:0801 0164A8C0:03FF 01 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 100 0 0 10 0
"""
TCP6 = """  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:0801 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 0 0 0
"""


@pytest.mark.parametrize("text, expected", [
    (TCP, ["192.168.100.2"]),  # the ESTABLISHED client connection and port 22 are not listeners on 2049
    (TCP6, ["::"]),
    ("", []),
    (None, []),
    ("header\n   0: zz:0801 0 0A\n", []),
])
def test_parse_listen(text, expected):
    assert nfs_server.parse_listen(text) == expected


def test_listen_addresses_reads_both_tables(tmp_path):
    (tmp_path / "tcp").write_text(TCP)
    (tmp_path / "tcp6").write_text(TCP6)
    assert nfs_server.listen_addresses(str(tmp_path)) == ["192.168.100.2", "::"]
    assert nfs_server.listen_addresses(str(tmp_path / "absent")) == []


FILE = """# managed
# The Hugging Face cache of "spark-worker"
/var/lib/dspark/hf-cache 192.168.100.1(ro,sync,no_subtree_check,root_squash)
"""
LIVE = ("/var/lib/dspark/hf-cache 192.168.100.1(sync,wdelay,hide,no_subtree_check,sec=sys,ro,secure,root_squash,no_all_squash)\n"
        "/srv/other 10.0.0.0/8(rw,sync)\n")


@pytest.mark.parametrize("live, reason", [
    (LIVE, None),
    ("/srv/other 10.0.0.0/8(rw,sync)\n", "not exported: /var/lib/dspark/hf-cache 192.168.100.1"),
    ("", "not exported: /var/lib/dspark/hf-cache 192.168.100.1"),
    (LIVE + "/var/lib/dspark/hf-cache 0.0.0.0/0(ro,root_squash,sync,no_subtree_check)\n",
     "exported but not in the file: /var/lib/dspark/hf-cache 0.0.0.0/0"),
    (LIVE.replace("sec=sys,ro,", "sec=sys,rw,"), "options not applied: /var/lib/dspark/hf-cache 192.168.100.1 (ro)"),
])
def test_exports_differ(live, reason):
    assert nfs_server.exports_differ(nfs_server.parse_exports(FILE), nfs_server.parse_exports(live)) == reason


def test_parse_exports_several_clients():
    parsed = nfs_server.parse_exports("/c 10.0.0.1(ro,sync) 10.0.0.2(ro)  # comment\n")
    assert parsed == {("/c", "10.0.0.1"): {"ro", "sync"}, ("/c", "10.0.0.2"): {"ro"}}
