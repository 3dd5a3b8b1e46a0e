"""checkpoint_copy module: main() copying a fake HF model directory into a local directory (rsync without SSH):
parallel streams, a re-run with no change, check mode, a resumed partial file, a failing stream's diagnosis."""

import importlib.util
import json
import os
import pathlib
import shutil

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.modules import checkpoint_copy
from ansible_collections.dspark.cluster.plugins.module_utils import checkpoint_copy as cc

ROOT = pathlib.Path(__file__).resolve().parents[4]
_spec = importlib.util.spec_from_file_location("fake_checkpoint", str(ROOT / "lab" / "fake_checkpoint.py"))
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)

MODEL = "org/Fake"
REV = "0123456789abcdef0123456789abcdef01234567"
FILTERS = ["--include=/refs/", "--include=/refs/main", "--include=/snapshots/", "--include=/snapshots/%s/***" % REV,
           "--include=/blobs/***", "--exclude=*"]

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync not installed")


@pytest.fixture
def src(tmp_path):
    fake.generate(str(tmp_path / "src"), model=MODEL, revision=REV, shards=5, shard_size=256 * 1024,
                  sparse_size=0, blobs=True)
    return str(tmp_path / "src" / "hub" / "models--org--Fake")


def run(capsys, src, dest, check=False, **extra):
    args = dict(src=src, dest=dest, revision=REV, streams=3, filters=FILTERS,
                rsync_options=["--archive", "--sparse", "--partial"], retries=0, _ansible_check_mode=check)
    args.update(extra)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            checkpoint_copy.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def tree(path):
    out = {}
    for dirpath, dummy, files in os.walk(path):
        for name in files:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, path)
            out[rel] = os.readlink(full) if os.path.islink(full) else pathlib.Path(full).read_bytes()
    return out


@pytest.mark.parametrize("streams", [1, 3, 8])
def test_copy_then_no_change(capsys, tmp_path, src, streams):
    dest = str(tmp_path / "dst" / "models--org--Fake")
    os.makedirs(os.path.dirname(dest))
    rc, res = run(capsys, src, dest, streams=streams)
    assert rc == 0 and res["changed"], res
    assert tree(dest) == tree(src)
    names = [s["name"] for s in res["streams"]]
    assert names[0] == "dry run" and names[-1] == "final pass"
    if streams == 1:
        assert names == ["dry run", "final pass"]
    else:  # the destination is new: its directories go first
        assert names[1] == "directories" and 5 <= len(names) <= 3 + streams, names
    rc, res = run(capsys, src, dest, streams=streams)
    assert rc == 0 and not res["changed"] and res["stdout_lines"] == [], res
    assert [s["name"] for s in res["streams"]] == ["dry run"]


def test_directories_pass_makes_the_filtered_directories_only(tmp_path, src):
    # The pass the module runs first into a new destination: with it, parallel streams find the destination
    # made (rsync's mkdir of a missing destination stops with rc 11 when another stream made it first).
    dest = str(tmp_path / "new" / "models--org--Fake")
    os.makedirs(os.path.dirname(dest))
    rc, out, err = cc.finish(cc.start(cc.rsync_argv(["--archive"], "ssh", src, dest,
                                                    filters=[cc.DIRECTORIES_ONLY] + FILTERS)))
    assert rc == 0, err
    assert cc.creates_dest(out.splitlines())
    made = sorted(os.path.relpath(os.path.join(d, n), dest) for d, dirs, files in os.walk(dest) for n in dirs + files)
    assert made == ["blobs", "refs", "snapshots", "snapshots/" + REV]
    assert all(os.path.isdir(os.path.join(dest, p)) for p in made)


def test_existing_destination_needs_no_directories_pass(capsys, tmp_path, src):
    dest = str(tmp_path / "dst")
    os.makedirs(dest)
    rc, res = run(capsys, src, dest, streams=3)
    assert rc == 0 and "directories" not in [s["name"] for s in res["streams"]]
    assert tree(dest) == tree(src)


def test_check_mode_lists_and_writes_nothing(capsys, tmp_path, src):
    dest = str(tmp_path / "dst")
    os.makedirs(dest)
    rc, res = run(capsys, src, dest, check=True)
    assert rc == 0 and res["changed"] and any(line.startswith(">f") for line in res["stdout_lines"])
    assert os.listdir(dest) == []


def test_resume_sends_only_what_differs(capsys, tmp_path, src):
    dest = str(tmp_path / "dst")
    os.makedirs(dest)
    assert run(capsys, src, dest)[0] == 0
    blob = sorted(pathlib.Path(dest, "blobs").iterdir(), key=lambda p: -p.stat().st_size)[0]
    data = blob.read_bytes()
    blob.write_bytes(data[: len(data) // 3])  # an interrupted copy left by --partial
    rc, res = run(capsys, src, dest)
    assert rc == 0 and res["changed"]
    assert res["bytes_to_send"] == len(data)
    assert blob.read_bytes() == data


def test_bad_cipher_and_streams(capsys, tmp_path, src):
    rc, res = run(capsys, src, str(tmp_path), cipher="aes128-gcm@openssh.com -oProxyCommand=x")
    assert rc == 1 and "checkpoint_scp_cipher" in res["msg"]
    rc, res = run(capsys, src, str(tmp_path), streams=0)
    assert rc == 1 and "checkpoint_scp_streams" in res["msg"]


def test_unreachable_target_is_diagnosed(capsys, tmp_path, src):
    rc, res = run(capsys, src, "root@127.0.0.1:x", ssh_command="ssh -p 1 -o BatchMode=yes -o ConnectTimeout=2")
    assert rc == 1 and res["failed"]
    assert "interrupted" in res["msg"] and "the dry run stopped" in res["msg"] and "SSH login failed" in res["msg"], res["msg"]


def test_file_in_the_way_is_diagnosed(capsys, tmp_path, src):
    dest = tmp_path / "dst"
    largest = max(pathlib.Path(src, "blobs").iterdir(), key=lambda p: p.stat().st_size).name
    (dest / "blobs" / largest / "in-the-way").mkdir(parents=True)  # a non-empty directory where a blob goes
    rc, res = run(capsys, src, str(dest))
    assert rc == 1 and "the final pass stopped" in res["msg"] and "rc=23" in res["msg"], res["msg"]
    assert largest in res["msg"] and "run the playbook again" in res["msg"]


def test_stopped_stream_is_diagnosed_and_resumed(capsys, tmp_path, src, monkeypatch):
    dest = tmp_path / "dst"
    dest.mkdir()
    real_start = checkpoint_copy.start
    calls = []

    def start(argv):
        if any(a.startswith("--files-from=") and a.endswith("bucket-1") for a in argv):
            calls.append(argv)
            return real_start(["sh", "-c", "echo '>f+++++++++ blobs/x'; "
                               "echo 'rsync error: timeout in data send/receive (code 30)' >&2; exit 30"])
        return real_start(argv)

    monkeypatch.setattr(checkpoint_copy, "start", start)
    rc, res = run(capsys, src, str(dest))
    assert rc == 1 and calls
    assert "stream 2/3 stopped" in res["msg"] and "timeout" in res["msg"] and "last started: blobs/x" in res["msg"]
    assert "partial file" in res["msg"] and "run the playbook again" in res["msg"]
    assert [s["rc"] for s in res["streams"] if s["name"].startswith("stream")] == [0, 30, 0]
    assert "final pass" not in [s["name"] for s in res["streams"]]
    monkeypatch.setattr(checkpoint_copy, "start", real_start)
    rc, res = run(capsys, src, str(dest))  # the next run copies what the stopped stream left
    assert rc == 0 and res["changed"] and tree(str(dest)) == tree(src)


# The role's options since the receiver is an unprivileged rrsync with -munge: the snapshot's links arrive as
# regular files (a munged link would be broken), blobs/ stays behind, modes are fixed, owner/group/devices not kept.
ROLE_OPTIONS = ["--recursive", "--copy-links", "--times", "--perms", "--chmod=D0755,F0644", "--no-owner", "--no-group",
                "--no-devices", "--no-specials", "--sparse", "--partial", "--timeout=60"]
ROLE_FILTERS = ["--include=/refs/", "--include=/refs/main", "--include=/snapshots/", "--include=/snapshots/%s/***" % REV,
                "--exclude=*"]


def test_role_options_send_files_not_links_and_fix_modes(capsys, tmp_path, src):
    snap = pathlib.Path(src, "snapshots", REV)
    link = next(p for p in sorted(snap.iterdir()) if p.is_symlink())
    os.chmod(os.path.realpath(link), 0o4755)  # a setuid blob behind a snapshot link
    dest = tmp_path / "dst"
    dest.mkdir()
    rc, res = run(capsys, src, str(dest), rsync_options=ROLE_OPTIONS, filters=ROLE_FILTERS)
    assert rc == 0 and res["changed"], res
    assert not (dest / "blobs").exists()
    assert res["bytes"] == sum(os.stat(p).st_size for p in snap.iterdir()) + 40  # links count their referent; refs/main
    for dirpath, dirnames, filenames in os.walk(dest):
        for name in dirnames:
            assert os.lstat(os.path.join(dirpath, name)).st_mode & 0o7777 == 0o755
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            assert not os.path.islink(os.path.join(dirpath, name)) and st.st_mode & 0o7777 == 0o644, (name, oct(st.st_mode))
    for p in snap.iterdir():
        assert (dest / "snapshots" / REV / p.name).read_bytes() == p.read_bytes()
    rc, res = run(capsys, src, str(dest), rsync_options=ROLE_OPTIONS, filters=ROLE_FILTERS)
    assert rc == 0 and not res["changed"] and res["stdout_lines"] == [], res


def _flaky(monkeypatch, fail_times, rc, stderr):
    real_start = checkpoint_copy.start
    calls = []

    def start(argv):
        if any(a.startswith("--files-from=") and a.endswith("bucket-1") for a in argv):
            calls.append(argv)
            if len(calls) <= fail_times:
                return real_start(["sh", "-c", "echo '%s' >&2; exit %d" % (stderr, rc)])
        return real_start(argv)

    monkeypatch.setattr(checkpoint_copy, "start", start)
    return calls


def test_stream_failed_on_the_network_is_retried(capsys, tmp_path, src, monkeypatch):
    dest = tmp_path / "dst"
    dest.mkdir()
    calls = _flaky(monkeypatch, 1, 30, "rsync error: timeout in data send/receive (code 30)")
    # module.warn itself: where a warning goes (the result or the controller's display) depends on which ansible
    # modules this test process imported before.
    warned = []
    monkeypatch.setattr(AnsibleModule, "warn", lambda self, msg: warned.append(msg))
    rc, res = run(capsys, src, str(dest), retries=2, retry_delay=0)
    assert rc == 0 and res["changed"] and len(calls) == 2, res
    assert [s["attempts"] for s in res["streams"] if s["name"].startswith("stream")] == [1, 2, 1]
    assert any("attempt 2 of 3" in w for w in warned), warned
    assert tree(str(dest)) == tree(src)


def test_retries_run_out(capsys, tmp_path, src, monkeypatch):
    dest = tmp_path / "dst"
    dest.mkdir()
    calls = _flaky(monkeypatch, 9, 12, "rsync: connection unexpectedly closed")
    rc, res = run(capsys, src, str(dest), retries=2, retry_delay=0)
    assert rc == 1 and len(calls) == 3 and "stream 2/3 stopped" in res["msg"], res
    assert [s["attempts"] for s in res["streams"] if s["name"] == "stream 2/3"] == [3]


def test_refused_login_is_not_retried(capsys, tmp_path, src, monkeypatch):
    dest = tmp_path / "dst"
    dest.mkdir()
    calls = _flaky(monkeypatch, 9, 12, "u@h: Permission denied (publickey).")
    rc, res = run(capsys, src, str(dest), retries=2, retry_delay=0)
    assert rc == 1 and len(calls) == 1 and "SSH login failed" in res["msg"], res


def test_negative_retries_refused(capsys, tmp_path, src):
    rc, res = run(capsys, src, str(tmp_path), retries=-1)
    assert rc == 1 and "negative" in res["msg"]
