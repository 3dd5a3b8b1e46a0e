"""The SCP receiver against an honest and a hostile rsync sender, without sshd (issue #13 points 4 and 6).

The target's side is the real rrsync with the role's flags (`-wo -munge -no-del -no-lock`, DIR = the model's
directory), started by a local `-e` wrapper that does what sshd does with the key's forced command: it sets
SSH_ORIGINAL_COMMAND to the command rsync asked for. Run as root, the wrapper drops to `nobody` (setpriv) as the
role's unprivileged `checkpoint_scp_user` would be; run as another user it receives as that user.

Shown: the role's copy (checkpoint_copy with the role's fixed rsync options) gives regular files 0644 / directories
0755 owned by the receiver and a re-run changes nothing; a hostile sender with its own options (symlinks out, then
files through them; a setuid file; a device node; paths above DIR; --delete) changes nothing outside the model
directory, and what it leaves inside is exactly what the role's "only a hostile sender makes" check lists.
"""

import grp
import hashlib
import importlib.util
import itertools
import json
import os
import pathlib
import pwd
import re
import shutil
import stat
import subprocess
import tempfile

import pytest
import yaml

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.module_utils import checkpoint
from ansible_collections.dspark.cluster.plugins.modules import checkpoint_copy

ROOT = pathlib.Path(__file__).resolve().parents[4]
RRSYNC = "/usr/bin/rrsync"
SETPRIV = shutil.which("setpriv")
AS_ROOT = os.geteuid() == 0

_spec = importlib.util.spec_from_file_location("fake_checkpoint", str(ROOT / "lab" / "fake_checkpoint.py"))
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)

MODEL = "org/Fake"
REV = "0123456789abcdef0123456789abcdef01234567"
VARS = yaml.safe_load((ROOT / "roles" / "checkpoint" / "vars" / "main.yml").read_text())

pytestmark = [
    pytest.mark.skipif(shutil.which("rsync") is None or not os.access(RRSYNC, os.X_OK), reason="rsync/rrsync not installed"),
    pytest.mark.skipif(AS_ROOT and SETPRIV is None, reason="root without setpriv cannot receive as another user"),
]


def role_rrsync_flags(streams=4):
    # vars/main.yml: "-wo -munge -no-del{{ ' -no-lock' if checkpoint_scp_streams | int > 1 else '' }}"
    text = VARS["_checkpoint_rrsync_flags"]
    assert text.startswith("-wo -munge -no-del{{"), text
    return "-wo -munge -no-del" + (" -no-lock" if streams > 1 else "")


def role_rsync_options():
    fixed = [o.replace("{{ checkpoint_rsync_timeout | int }}", "60") for o in VARS["_checkpoint_rsync_fixed"]]
    assert "--copy-links" in fixed and "--chmod=D0755,F0644" in fixed and "--no-devices" in fixed
    defaults = yaml.safe_load((ROOT / "roles" / "checkpoint" / "defaults" / "main.yml").read_text())
    return fixed + defaults["checkpoint_rsync_options"]


def role_filters():
    return [f.replace("{{ dspark_model_revision }}", REV) for f in VARS["_checkpoint_filters"]]


def role_hostile_check(model_dir):
    """What scp_verify.yml's verification (checkpoint_manifest with hostile_scan) lists as entries only a hostile
    sender makes: the role must ask for the scan, and the module's scan is module_utils' hostile_entries."""
    tasks = yaml.safe_load((ROOT / "roles" / "checkpoint" / "tasks" / "scp_verify.yml").read_text())
    task = next(t for t in tasks if t.get("name", "").startswith("Verify the copy against the source manifest"))
    assert task["dspark.cluster.checkpoint_manifest"]["hostile_scan"] is True
    return checkpoint.hostile_entries(model_dir)


@pytest.fixture
def site():
    """/tmp/<x>/ (0755 so `nobody` can reach DIR): source cache, target cache with the model dir owned by the
    receiver, a neighbour model and an outside directory that nothing may touch."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="dspark-hostile-", dir="/tmp"))
    os.chmod(base, 0o755)
    fake.generate(str(base / "src"), model=MODEL, revision=REV, shards=3, shard_size=64 * 1024, sparse_size=0, blobs=True)
    hub = base / "dst" / "hub"
    model_dir = hub / "models--org--Fake"
    model_dir.mkdir(parents=True)
    (hub / "models--org--Other").mkdir()
    (hub / "models--org--Other" / "config.json").write_text("{}")
    (base / "outside").mkdir()
    (base / "outside" / "secret").write_text("untouched")
    for d in (base / "dst", hub):
        os.chmod(d, 0o755)
    if AS_ROOT:
        uid, gid = pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid
        os.chown(model_dir, uid, gid)
        drop = "%s --reuid=%d --regid=%d --clear-groups " % (SETPRIV, uid, gid)
    else:
        uid, gid, drop = os.getuid(), os.getgid(), ""
    wrapper = base / "fake-sshd"
    # rsync -e runs: <wrapper> [ssh options] [-l user] <host> rsync --server ... ; sshd would run the key's command
    # with the client's command in SSH_ORIGINAL_COMMAND (one string, as here).
    wrapper.write_text('#!/bin/sh\nwhile [ $# -gt 0 ] && [ "$1" != rsync ]; do shift; done\n'
                       'SSH_ORIGINAL_COMMAND="$*" HOME=/nonexistent exec %s%s %s %s\n'
                       % (drop, RRSYNC, role_rrsync_flags(), model_dir))
    os.chmod(wrapper, 0o755)
    yield dict(base=base, src=base / "src" / "hub" / "models--org--Fake", model_dir=model_dir, uid=uid,
               wrapper=str(wrapper))
    shutil.rmtree(base)


def outside_state(base, model_dir):
    """Every entry of the target's side (the cache and the outside directory) except the model directory: type,
    mode, owner, times, link value or content digest."""
    out = {}
    for dirpath, dirnames, filenames in itertools.chain(os.walk(base / "dst"), os.walk(base / "outside")):
        if pathlib.Path(dirpath) == model_dir:
            dirnames[:] = []
            continue
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            if pathlib.Path(full) == model_dir:
                continue
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                what = "-> " + os.readlink(full)
            elif stat.S_ISREG(st.st_mode):
                what = hashlib.sha256(pathlib.Path(full).read_bytes()).hexdigest()
            else:
                what = ""
            out[os.path.relpath(full, base)] = (oct(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns, what)
    return out


def hostile(site, args):
    """A sender with its own options, through the key's forced rrsync."""
    return subprocess.run(["rsync"] + args, cwd=site["base"], env=dict(os.environ, LC_ALL="C"),
                          capture_output=True, text=True, timeout=60, check=False)


def copy(capsys, site, check=False):
    args = dict(src=str(site["src"]), dest="dspark-ckpt@target:.", revision=REV, streams=3, filters=role_filters(),
                rsync_options=role_rsync_options(), ssh_command=site["wrapper"], connect_timeout=0, alive_interval=0,
                retries=0, _ansible_check_mode=check)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            checkpoint_copy.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_role_copy_through_rrsync_gives_plain_readable_files_and_is_idempotent(capsys, site):
    before = outside_state(site["base"], site["model_dir"])
    rc, res = copy(capsys, site)
    assert rc == 0 and res["changed"], res.get("msg", res)
    snap = site["src"] / "snapshots" / REV
    for entry in snap.iterdir():
        got = site["model_dir"] / "snapshots" / REV / entry.name
        assert got.is_file() and not got.is_symlink() and got.read_bytes() == entry.read_bytes()
    assert (site["model_dir"] / "refs" / "main").read_text().strip() == REV
    assert not (site["model_dir"] / "blobs").exists()
    for dirpath, dirnames, filenames in os.walk(site["model_dir"]):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            assert st.st_uid == site["uid"], name
            assert stat.S_IMODE(st.st_mode) == (0o755 if stat.S_ISDIR(st.st_mode) else 0o644), (name, oct(st.st_mode))
            assert stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode), name
    assert role_hostile_check(str(site["model_dir"])) == []
    assert outside_state(site["base"], site["model_dir"]) == before
    rc, res = copy(capsys, site)
    assert rc == 0 and not res["changed"] and res["stdout_lines"] == [], res
    rc, res = copy(capsys, site, check=True)
    assert rc == 0 and not res["changed"], res


def test_hostile_sender_changes_nothing_outside_the_model_directory(site):
    base, model_dir = site["base"], site["model_dir"]
    evil = base / "evil"
    evil.mkdir()
    os.symlink(str(base / "outside"), evil / "abs")                  # an absolute link out
    os.symlink("../../../outside", evil / "rel")                      # a relative link out of DIR
    os.symlink("../models--org--Other", evil / "neighbour")           # into the next model
    (evil / "suid").write_bytes(b"#!/bin/sh\nid\n")
    os.chmod(evil / "suid", 0o6755)                                    # setuid + setgid
    (evil / "sgid-dir").mkdir()
    os.chmod(evil / "sgid-dir", 0o2777)
    before = outside_state(base, model_dir)
    e = ["-e", site["wrapper"]]

    # 1. the links, with the sender's -a (links, perms, owner, group, devices, specials)
    hostile(site, ["-a"] + e + ["evil/", "x:."])
    # 2. files through those links, as a second session
    through = base / "through"
    for name in ("abs", "rel", "neighbour"):
        (through / name).mkdir(parents=True)
        (through / name / "secret").write_text("pwned")
        (through / name / "config.json").write_text("pwned")
    hostile(site, ["-a", "--keep-dirlinks"] + e + ["through/", "x:."])
    # 3. a device node (the sender only reads /dev/null's metadata) and a FIFO-less special: -D
    hostile(site, ["-aD"] + e + ["/dev/null", "x:devnull"])
    # 4. paths above DIR, absolute paths, --delete
    for args in (["-a", "evil/suid", "x:../"], ["-a", "evil/suid", "x:../../../outside/"],
                 ["-a", "evil/suid", "x:%s/" % (base / "outside")], ["-a", "--delete", "through/abs/", "x:."]):
        res = hostile(site, args[:1] + e + args[1:])
        assert res.returncode != 0, (args, res.stdout, res.stderr)

    assert outside_state(base, model_dir) == before
    assert (base / "outside" / "secret").read_text() == "untouched"
    assert (base / "dst" / "hub" / "models--org--Other" / "config.json").read_text() == "{}"

    # Inside: every link munged (leads nowhere), no device, everything owned by the receiver.
    found = {}
    for dirpath, dirnames, filenames in os.walk(model_dir):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            found[os.path.relpath(full, model_dir)] = st
            assert st.st_uid == site["uid"], full
            assert not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)), full
            if stat.S_ISLNK(st.st_mode):
                assert os.readlink(full).startswith("/rsyncd-munged/"), (full, os.readlink(full))
                assert not os.path.exists(full), full
    assert {"abs", "rel", "neighbour"} <= set(found) and "devnull" not in found  # no device node, not even a file
    # The role's check lists exactly what the hostile sender left: munged links, setuid/setgid and writable entries.
    listed = role_hostile_check(str(model_dir))
    names = {re.split(r"\s+", line, maxsplit=2)[2] for line in listed}
    assert {str(model_dir / n) for n in ("abs", "rel", "neighbour", "suid", "sgid-dir")} <= names, listed
