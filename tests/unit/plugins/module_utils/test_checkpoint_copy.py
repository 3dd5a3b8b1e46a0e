"""checkpoint_copy: the file list, balanced buckets (largest first), rsync command lines, diagnosis."""

import os

import pytest

from ansible_collections.dspark.cluster.plugins.module_utils import checkpoint_copy as cc

GB = 1 << 30


@pytest.mark.parametrize("files, streams, expected", [
    # one stream: everything in one bucket, paths sorted
    ([("b", 5), ("a", 7)], 1, [(["a", "b"], 12)]),
    # fewer files than streams: one bucket per file, empty buckets dropped
    ([("a", 1), ("b", 2)], 4, [(["b"], 2), (["a"], 1)]),
    # no files: no buckets
    ([], 4, []),
    # largest first into the least-filled bucket (LPT): 8 | 7 -> 8 | 13 -> 13 | 13 -> tie on bytes and files:
    # the lower index takes 4
    ([("s1", 8), ("s2", 7), ("s3", 6), ("s4", 5), ("s5", 4)], 2, [(["s1", "s4", "s5"], 17), (["s2", "s3"], 13)]),
    # equal shards spread evenly
    ([("shard-%02d" % i, 5 * GB) for i in range(8)], 4,
     [(["shard-00", "shard-04"], 10 * GB), (["shard-01", "shard-05"], 10 * GB),
      (["shard-02", "shard-06"], 10 * GB), (["shard-03", "shard-07"], 10 * GB)]),
    # bytes decide before file counts: zero-byte links all join the empty bucket
    ([("big", 10), ("l1", 0), ("l2", 0), ("l3", 0)], 2, [(["big"], 10), (["l1", "l2", "l3"], 0)]),
    # zero-byte files alone: spread by file count
    ([("l1", 0), ("l2", 0), ("l3", 0)], 2, [(["l1", "l3"], 0), (["l2"], 0)]),
    # one huge shard bounds the time: it gets a bucket alone
    ([("huge", 100), ("a", 10), ("b", 10), ("c", 10)], 2, [(["huge"], 100), (["a", "b", "c"], 30)]),
])
def test_balance(files, streams, expected):
    assert [(b["files"], b["bytes"]) for b in cc.balance(files, streams)] == expected


@pytest.mark.parametrize("streams", [0, -1])
def test_balance_rejects_no_stream(streams):
    with pytest.raises(ValueError):
        cc.balance([("a", 1)], streams)


@pytest.mark.parametrize("sizes, streams, worst", [
    # LPT is within 4/3 of the optimum; on shard-like sizes it is near-perfect
    ([5 * GB] * 30 + [1 << 20] * 10, 4, 1.07),
    # 33 shards in 4 streams: one bucket holds 9 (9 / 8.25 = 1.09 is the floor)
    ([4 * GB + i * (1 << 24) for i in range(33)], 4, 1.1),
    ([3 * GB, 3 * GB, 2 * GB, 2 * GB, 2 * GB], 2, 1.2),
])
def test_balance_is_balanced(sizes, streams, worst):
    buckets = cc.balance([("f%03d" % i, s) for i, s in enumerate(sizes)], streams)
    assert sorted(p for b in buckets for p in b["files"]) == sorted("f%03d" % i for i in range(len(sizes)))
    assert max(b["bytes"] for b in buckets) <= worst * sum(sizes) / streams


def test_list_files(tmp_path):
    rev, other = "a" * 40, "b" * 40
    m = tmp_path / "models--org--name"
    (m / "refs").mkdir(parents=True)
    (m / "refs" / "main").write_text(rev)
    (m / "refs" / "other").write_text(other)
    (m / "blobs").mkdir()
    (m / "blobs" / "abc").write_bytes(b"x" * 100)
    (m / "blobs" / "def").write_bytes(b"y" * 7)
    snap = m / "snapshots" / rev
    (snap / "sub").mkdir(parents=True)
    os.symlink("../../blobs/abc", snap / "model.safetensors")
    (snap / "sub" / "config.json").write_bytes(b"{}")
    (m / "snapshots" / other).mkdir()
    (m / "snapshots" / other / "x").write_bytes(b"zz")
    (m / ".no_exist").mkdir()
    assert cc.list_files(str(m), rev) == [
        ("blobs/abc", 100), ("blobs/def", 7), ("refs/main", 40),
        ("snapshots/%s/model.safetensors" % rev, 0), ("snapshots/%s/sub/config.json" % rev, 2)]


def test_list_files_missing_parts(tmp_path):
    assert cc.list_files(str(tmp_path), "a" * 40) == []


@pytest.mark.parametrize("cipher, ok", [
    ("aes128-gcm@openssh.com", True),
    ("aes128-gcm@openssh.com,chacha20-poly1305@openssh.com", True),
    ("aes128-gcm@openssh.com -o ProxyCommand=x", False),
    ("", False),
    ("aes,", False),
])
def test_ssh_command(cipher, ok):
    base = "ssh -i /k -o BatchMode=yes\n  -o StrictHostKeyChecking=yes"
    if ok:
        assert cc.ssh_command(base, cipher) == (
            "ssh -i /k -o BatchMode=yes -o StrictHostKeyChecking=yes -o Ciphers=%s -o Compression=no" % cipher)
    else:
        with pytest.raises(ValueError):
            cc.ssh_command(base, cipher)


@pytest.mark.parametrize("kw, expected", [
    (dict(files_from="/t/b0"),
     ["rsync", "-a", "--partial", "--itemize-changes", "-e", "ssh", "--from0", "--files-from=/t/b0", "/m/", "u@h:d/"]),
    (dict(filters=["--include=/blobs/***", "--exclude=*"]),
     ["rsync", "-a", "--partial", "--itemize-changes", "-e", "ssh", "--include=/blobs/***", "--exclude=*",
      "/m/", "u@h:d/"]),
    (dict(filters=["--exclude=*"], dry_run=True),
     ["rsync", "-a", "--partial", "--dry-run", "--itemize-changes", "-e", "ssh", "--exclude=*", "/m/", "u@h:d/"]),
])
def test_rsync_argv(kw, expected):
    assert cc.rsync_argv(["-a", "--partial"], "ssh", "/m", "u@h:d", **kw) == expected
    assert "-z" not in expected and "--compress" not in expected


@pytest.mark.parametrize("rc, stderr, bucket, itemized, has", [
    (30, "rsync error: timeout in data send/receive (code 30)", {"files": ["a", "b"], "bytes": 9},
     [">f+++++++++ blobs/a"],
     ["stream 2/4", "timeout", "2 file(s), 9 bytes", "last started: blobs/a", "partial file", "run the playbook again"]),
    (255, "Unable to negotiate with 10.0.0.2 port 22: no matching cipher found", None, [],
     ["final pass", "ssh failed", "checkpoint_scp_cipher"]),
    (255, "ssh: connect to host 10.0.0.2 port 22: No route to host", None, [], ["known_hosts", "reachable"]),
    # rsync reports a refused login as a protocol error; ssh's words decide
    (12, "ssh: connect to host 10.0.0.2 port 22: Connection refused\nrsync: connection unexpectedly closed", None,
     [], ["rc=12", "SSH login failed", "nothing was copied"]),
    (12, "/usr/bin/rrsync error: Another instance of rrsync is already accessing this directory.", None, [],
     ["-no-lock"]),
    (-9, "", {"files": ["a"], "bytes": 1}, [], ["killed by signal 9", "resume"]),
    (99, "", None, [], ["exit status 99"]),
])
def test_diagnose(rc, stderr, bucket, itemized, has):
    text = cc.diagnose("root@10.0.0.2:m", "stream 2/4" if bucket else "the final pass", rc, stderr, bucket, itemized)
    for part in has:
        assert part in text, (part, text)


@pytest.mark.parametrize("lines, expected", [
    ([], []),
    (["<f+++++++++ blobs/abc", "cL+++++++++ snapshots/r/x -> ../../blobs/abc", "cd+++++++++ blobs/",
      ".d..t...... ./", "created directory /proc/self/fd/4/models--o--n"], [("blobs/abc", 100)]),
    # a partial file of the wrong size is sent again (resumed from the partial data)
    (["<f.st...... blobs/def", "<f..t...... refs/main"], [("blobs/def", 7), ("refs/main", 40)]),
    # a name outside the list counts 0 bytes; spaces in names survive
    (["<f+++++++++ snapshots/r/a b.json"], [("snapshots/r/a b.json", 0)]),
])
def test_to_send(lines, expected):
    assert cc.to_send(lines, {"blobs/abc": 100, "blobs/def": 7, "refs/main": 40}) == expected


@pytest.mark.parametrize("lines, expected", [
    (["created directory /data/hub/models--a--b", "cd+++++++++ ./", ">f+++++++++ blobs/x"], True),
    (["cd..t...... ./", ">f+++++++++ blobs/x"], False),
    (["cd+++++++++ created directory/"], False),
    ([], False),
])
def test_creates_dest(lines, expected):
    assert cc.creates_dest(lines) is expected


def test_list_files_copy_links(tmp_path):
    rev = "a" * 40
    m = tmp_path / "models--org--name"
    (m / "refs").mkdir(parents=True)
    (m / "refs" / "main").write_text(rev)
    (m / "blobs").mkdir()
    (m / "blobs" / "abc").write_bytes(b"x" * 100)
    snap = m / "snapshots" / rev
    snap.mkdir(parents=True)
    os.symlink("../../blobs/abc", snap / "model.safetensors")
    os.symlink("../../blobs/gone", snap / "dangling")
    (snap / "config.json").write_bytes(b"{}")
    # --copy-links: links count their referent, blobs/ is not sent
    assert cc.list_files(str(m), rev, copy_links=True) == [
        ("refs/main", 40), ("snapshots/%s/config.json" % rev, 2), ("snapshots/%s/dangling" % rev, 0),
        ("snapshots/%s/model.safetensors" % rev, 100)]


@pytest.mark.parametrize("options, expected", [
    (["--archive", "--partial"], False),
    (["--recursive", "--copy-links"], True),
    (["-rLt"], True),
    (["-rlt", "--log-file=/x/L"], False),
    ([], False),
])
def test_copies_links(options, expected):
    assert cc.copies_links(options) is expected


def test_ssh_command_timeouts():
    cmd = cc.ssh_command("ssh -i /k", "aes128-gcm@openssh.com", connect_timeout=20, alive_interval=15, alive_count=4)
    assert cmd == ("ssh -i /k -o Ciphers=aes128-gcm@openssh.com -o Compression=no -o ConnectTimeout=20"
                   " -o ServerAliveInterval=15 -o ServerAliveCountMax=4")
    assert "Alive" not in cc.ssh_command("ssh", "aes128-gcm@openssh.com", connect_timeout=0, alive_interval=0)


@pytest.mark.parametrize("rc, stderr, expected", [
    (30, "rsync error: timeout in data send/receive (code 30)", True),
    (12, "rsync: connection unexpectedly closed (0 bytes received so far)", True),
    (255, "Timeout, server 10.0.0.2 not responding.", True),
    (10, "", True),
    (12, "u@10.0.0.2: Permission denied (publickey).", False),
    (255, "Host key verification failed.", False),
    (255, "Unable to negotiate with 10.0.0.2 port 22: no matching cipher found", False),
    (12, "rrsync error: Another instance of rrsync is already accessing this directory.", False),
    (1, "rrsync error: option --delete has been disabled on this server.", False),
    (11, "rsync: write failed: No space left on device (28)", False),
    (23, "", False),
    (0, "", False),
])
def test_transient(rc, stderr, expected):
    assert cc.transient(rc, stderr) is expected
