"""Verify the checkpoint_scp scenario: the worker's fake checkpoint reached the head byte for byte (in parallel
streams, the default), a re-run changes nothing and hashes nothing, a killed stream is diagnosed and the copy resumes,
--check lists a missing shard and copies nothing and the next run repairs it and a corrupted file (named), a shard
missing on the source fails the validation by name, the copy key is withdrawn after every run (passed or failed) and,
kept on request, restricted (unprivileged receiver, rrsync -munge confined to the model directory), a hostile sender
with the key changes nothing outside the model directory and
fails the next run, and the source tree was never modified. One stream (checkpoint_scp_streams=1) is proven by the
module's unit tests (real rsync)."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import time

import yaml
from labhosts import lab_node

ROOT = pathlib.Path(__file__).resolve().parents[4]
LAB = ROOT / "inventories" / "lab"
FACTS = yaml.safe_load((LAB / "group_vars" / "dspark.yml").read_text())
MODEL, REVISION, CACHE = FACTS["dspark_model"], FACTS["dspark_model_revision"], FACTS["dspark_hf_cache"]
FOLDER = "models--" + MODEL.replace("/", "--")
MODEL_DIR = "%s/hub/%s" % (CACHE, FOLDER)
SNAPSHOT = "%s/snapshots/%s" % (MODEL_DIR, REVISION)
MANIFEST = "/var/lib/dspark/checkpoint/%s-%s.json" % (FOLDER, REVISION)
SPARSE_SHARD = "model-00004-of-00004.safetensors"
DENSE_SHARD = "model-00002-of-00004.safetensors"
MISSING_SHARD = "model-00003-of-00004.safetensors"
STAMP = "/var/lib/dspark/checkpoint/%s-%s.verified.json" % (FOLDER, REVISION)
RECEIVER = "dspark-ckpt"
RECEIVER_KEYS = "/var/lib/%s/.ssh/authorized_keys" % RECEIVER
KEY_SSH = ("ssh -i /etc/dspark/checkpoint/id_ed25519 -o BatchMode=yes -o IdentitiesOnly=yes "
           "-o UserKnownHostsFile=/var/lib/dspark/checkpoint/known_hosts")
SOURCE, TARGET = lab_node("spark-worker"), lab_node("spark-head")
ENV = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")


def playbook(*extra, timeout=600):
    start = time.monotonic()
    run = subprocess.run([shutil.which("ansible-playbook") or "ansible-playbook", "-i", str(LAB / "hosts.yml"),
                          str(ROOT / "playbooks" / "checkpoint.yml"), *extra],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout, check=False)
    # The YAML callback wraps long messages: compare with single spaces.
    return run.returncode, " ".join((run.stdout + run.stderr).split()), time.monotonic() - start


def changed_counts(out):
    return [int(n) for n in re.findall(r"changed=(\d+)", out.split("PLAY RECAP")[-1])]


def manifest():
    return json.loads(SOURCE.check_output("cat %s", MANIFEST))


def target_digests():
    out = TARGET.check_output("cd %s && find . -type f -o -type l | sed 's|^./||' | sort | xargs -r sha256sum", SNAPSHOT)
    return dict((line.split(None, 1)[1], line.split(None, 1)[0]) for line in out.splitlines())


def assert_identical():
    wanted = dict((e["path"], e["sha256"]) for e in manifest()["entries"])
    assert target_digests() == wanted
    assert TARGET.check_output("cat %s/refs/main", MODEL_DIR).strip() == REVISION


def test_head_holds_an_identical_tree():
    entries = manifest()["entries"]
    assert len(entries) == 9 and any(e["path"] == SPARSE_SHARD and e["size"] == 1024 ** 3 for e in entries)
    assert_identical()
    # --sparse: the 1 GiB shard costs a few MiB on the target too.
    assert int(TARGET.check_output("stat -c %%b %s/%s", SNAPSHOT, SPARSE_SHARD)) * 512 < 64 * 1024 ** 2


def copy_key_entries():
    return [line for line in TARGET.file(RECEIVER_KEYS).content_string.splitlines()
            if "dspark.cluster checkpoint" in line]


def test_key_is_private_and_its_entry_restricted():
    key = SOURCE.file("/etc/dspark/checkpoint/id_ed25519")
    assert key.mode == 0o600 and key.user == "root"
    # checkpoint_scp_revoke_key (the default): the converge copied, then withdrew the key from the target.
    assert copy_key_entries() == []
    # Kept between runs on request: the entry a copy runs under, left in place (the hostile sender below uses it).
    rc, out, dummy = playbook("-e", "checkpoint_scp_revoke_key=false")
    assert rc == 0, out
    entries = copy_key_entries()
    assert len(entries) == 1
    # -no-lock: the parallel streams (checkpoint_scp_streams, default 4) are parallel rrsync sessions.
    # -munge: a link a sender makes leads nowhere; DIR: the model's directory, not hub/.
    assert entries[0].startswith(
        'restrict,from="192.168.100.2",command="/usr/bin/rrsync -wo -munge -no-del -no-lock %s"' % MODEL_DIR)
    # Not root any more: root's authorized_keys holds no checkpoint entry (an old one is removed).
    root_keys = TARGET.run("cat /root/.ssh/authorized_keys").stdout
    assert "dspark.cluster checkpoint" not in root_keys
    # The key does nothing else: a shell command is refused by the forced rrsync; root does not take the key.
    for user in (RECEIVER, "root"):
        # ssh's own exit status is printed, not returned: testinfra raises on 255 (a refused login).
        run = SOURCE.run("%s %s@192.168.100.1 id; echo exit=$?" % (KEY_SSH, user))  # no args: testinfra quotes none
        assert "uid=" not in run.stdout and "exit=0" not in run.stdout, (user, run.stdout, run.stderr)


def test_hostile_sender_with_the_key_changes_nothing_outside_the_model_directory():
    """What the issue asks for (#13 point 6), over the real sshd: the source's key, the sender's own options. The key
    is authorized (left by the test above, checkpoint_scp_revoke_key=false); the repair run at the end withdraws it."""
    assert len(copy_key_entries()) == 1
    outside = "find /etc /root /var/lib/dspark %s/hub -path %s -prune -o -printf '%%y %%m %%u %%p %%s %%T@\\n' | sort"
    before = TARGET.check_output(outside, CACHE, MODEL_DIR)
    SOURCE.check_output(
        "rm -rf /tmp/evil && mkdir -p /tmp/evil/through/abs /tmp/evil/through/rel && cd /tmp/evil && "
        "ln -s /etc links-abs && ln -s ../../../../../etc links-rel && "
        "printf '#!/bin/sh\\nid\\n' > suid && chmod 6755 suid && "
        "echo pwned > through/abs/pwned && echo pwned > through/rel/pwned")
    dest = "%s@192.168.100.1:" % RECEIVER
    # 1. links out, then files through them; 2. a setuid file; 3. a device node; 4. paths above DIR; --delete
    SOURCE.run("cd /tmp/evil && rsync -a -e %s links-abs links-rel suid %s.", KEY_SSH, dest)
    SOURCE.run("cd /tmp/evil && rsync -a --keep-dirlinks -e %s through/abs/ %slinks-abs/", KEY_SSH, dest)
    SOURCE.run("cd /tmp/evil && rsync -a --keep-dirlinks -e %s through/rel/ %slinks-rel/", KEY_SSH, dest)
    SOURCE.run("rsync -aD -e %s /dev/null %sdevnull", KEY_SSH, dest)
    for target in ("..", "../.."):
        run = SOURCE.run("cd /tmp/evil && rsync -a -e %s suid %s%s/", KEY_SSH, dest, target)
        assert run.rc != 0, (target, run.stdout, run.stderr)
    # rrsync reads an absolute path as one inside its directory: refused, or it lands in DIR/etc (checked below).
    for target in ("/etc", "/root"):
        run = SOURCE.run("cd /tmp/evil && rsync -a -e %s suid %s%s/", KEY_SSH, dest, target)
        assert run.rc != 0 or TARGET.file("%s%s/suid" % (MODEL_DIR, target)).exists, (target, run.stdout, run.stderr)
    run = SOURCE.run("mkdir -p /tmp/evil/empty && rsync -a --delete -e %s /tmp/evil/empty/ %s.", KEY_SSH, dest)
    assert run.rc != 0
    try:
        assert TARGET.check_output(outside, CACHE, MODEL_DIR) == before
        assert TARGET.run("test -e /etc/pwned").rc != 0
        for name in ("links-abs", "links-rel"):
            assert TARGET.check_output("readlink %s", "%s/%s" % (MODEL_DIR, name)).startswith("/rsyncd-munged/")
        assert TARGET.file(MODEL_DIR + "/suid").user == RECEIVER
        assert TARGET.run("test -c %s/devnull", MODEL_DIR).rc != 0
        assert_identical()
        # The next run names what only a hostile sender makes and drops the node's verified stamp (serve refuses).
        rc, out, dummy = playbook()
        assert rc != 0 and "never makes" in out and "links-abs" in out and "suid" in out, out
        assert not TARGET.file(STAMP).exists
    finally:
        TARGET.check_output("cd %s && rm -rf links-abs links-rel suid devnull etc root", MODEL_DIR)
        SOURCE.check_output("rm -rf /tmp/evil")
    rc, out, dummy = playbook()
    assert rc == 0, out
    assert TARGET.file(STAMP).exists
    assert_identical()
    assert copy_key_entries() == []                                     # withdrawn after the repair's copy


def test_receiver_is_unprivileged_and_the_files_plain_and_readable():
    account = TARGET.user(RECEIVER)
    assert account.exists and account.uid != 0 and account.home == "/var/lib/%s" % RECEIVER
    assert TARGET.file("%s/hub" % CACHE).user == "root"
    # Owner of everything in the model directory; files 0644, directories 0755; no links, no blobs/ (the snapshot's
    # links arrive as files: --copy-links), so the container and NFS's root_squash (others) can read them.
    out = TARGET.check_output("find %s -printf '%%y %%m %%u %%g %%P\\n'", MODEL_DIR)
    rows = [line.split(" ", 4) for line in out.splitlines()]
    assert rows and all(r[2] == RECEIVER and r[3] == RECEIVER for r in rows), out
    assert all((r[0], r[1]) in (("d", "755"), ("f", "644")) for r in rows), out
    assert not TARGET.file(MODEL_DIR + "/blobs").exists
    # A world-readable tree as nobody sees it.
    assert TARGET.run("setpriv --reuid=65534 --regid=65534 --clear-groups cat %s/config.json", SNAPSHOT).rc == 0


def test_rerun_changes_nothing_and_hashes_nothing():
    # The scenario's idempotence check (molecule.yml has no idempotence step): the first run after converge.
    # Fast because nothing is read again (no wall-clock bound here: a loaded CI machine is no measure; the
    # benchmarks in bench/ time it).
    rc, out, seconds = playbook()
    assert rc == 0, out
    assert changed_counts(out) == [0, 0], out
    print("re-run: %.1f s" % seconds)
    assert "0 hashed, 9 unchanged" in out, out


def test_killed_copy_resumes():
    TARGET.check_output("rm -f %s/%s", SNAPSHOT, SPARSE_SHARD)
    options = json.dumps({"checkpoint_rsync_options": ["--sparse", "--partial", "--bwlimit=20m"]})
    proc = subprocess.Popen([shutil.which("ansible-playbook") or "ansible-playbook", "-i", str(LAB / "hosts.yml"),
                             str(ROOT / "playbooks" / "checkpoint.yml"), "-e", options],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # Preflight, facts and the manifest come first: over 120 s once on a 2-core CI machine with every lane busy.
        deadline = time.monotonic() + 300
        # rsync writes the shard to a temporary file next to it (its size stays small: the middle is a hole).
        while TARGET.run("ls %s/.%s.*", SNAPSHOT, SPARSE_SHARD).rc != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("the copy of %s never started (playbook %s):\n%s" % (
                    SPARSE_SHARD, "exit %s" % proc.returncode if proc.poll() is not None else "still running",
                    proc.communicate()[0][-3000:]))
            time.sleep(0.5)
        time.sleep(4)  # about 80 MiB of the 1 GiB at --bwlimit=20m
        # The stream that copies the 1 GiB shard (the largest file: the first bucket, so the oldest rsync client).
        pid = SOURCE.check_output("pgrep -o -x rsync")
        SOURCE.check_output("kill %s", pid)
        out, dummy = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out
    out = " ".join(out.split())
    # The diagnosis names the stopped stream (with one file to send, the final pass carries it), rsync's reason and the fix.
    assert "The checkpoint copy was interrupted" in out and re.search(r"(stream 1/\d|the final pass) stopped", out), out
    assert "run the playbook again to resume" in out, out
    assert copy_key_entries() == []                                     # withdrawn after a failed run too
    # --partial kept what had arrived under the shard's own name; the next run resumes from it.
    partial = TARGET.run("stat -c %%s %s/%s", SNAPSHOT, SPARSE_SHARD)
    assert partial.rc == 0 and 0 < int(partial.stdout) < 1024 ** 3, "no partial file kept: %s" % out
    rc, out, seconds = playbook()
    assert rc == 0, out
    print("resume: %.1f s" % seconds)
    assert_identical()


def test_check_mode_lists_a_missing_shard_and_the_next_run_repairs_it_and_a_corrupt_byte():
    """One damaged target for both proofs (CI time: one playbook run less): a missing shard, and a byte of another
    corrupted with its size and mtime kept (rsync's quick check alone would never notice). --check lists the missing
    shard and changes nothing; the next run names the corrupt file, removes it and copies both again."""
    TARGET.check_output("rm -f %s/%s", SNAPSHOT, MISSING_SHARD)
    TARGET.check_output(
        "python3 -c \"import os,sys; p=sys.argv[1]; st=os.stat(p); f=open(p,'r+b'); f.seek(4096); b=f.read(1); "
        "f.seek(4096); f.write(bytes([b[0] ^ 255])); f.close(); os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))\" %s/%s",
        SNAPSHOT, DENSE_SHARD)
    corrupt = TARGET.check_output("sha256sum %s/%s", SNAPSHOT, DENSE_SHARD)
    verify = subprocess.run([shutil.which("ansible") or "ansible", "-i", str(LAB / "hosts.yml"), "spark-head", "-b",
                             "-m", "dspark.cluster.checkpoint_manifest", "-a",
                             "state=verified model=%s cache_dir=%s manifest_path=%s" % (MODEL, CACHE, MANIFEST)],
                            cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120, check=False)
    assert verify.returncode != 0 and "corrupt: %s (sha256" % DENSE_SHARD in verify.stdout, verify.stdout
    try:
        rc, out, dummy = playbook("--check", "-v")  # -v: the copy task's itemized list
        assert rc == 0, out
        assert TARGET.run("test -e %s/%s", SNAPSHOT, MISSING_SHARD).rc != 0, "--check copied the shard"
        # The key is not there for a dry run (checkpoint_scp_revoke_key): the verification's list says what is missing.
        assert MISSING_SHARD in out.split("Say what the copy would send")[1], out
        assert TARGET.check_output("sha256sum %s/%s", SNAPSHOT, DENSE_SHARD) == corrupt, "--check touched the file"
    finally:
        rc, out, dummy = playbook()
    assert rc == 0, out
    assert DENSE_SHARD in out.split("Remove corrupt files")[1], out
    assert_identical()


def test_shard_missing_on_the_source_is_named():
    SOURCE.check_output("mkdir -p /var/lib/dspark/aside && mv %s/%s /var/lib/dspark/aside/", SNAPSHOT, DENSE_SHARD)
    try:
        rc, out, dummy = playbook()
    finally:
        SOURCE.check_output("mv /var/lib/dspark/aside/%s %s/",
                            DENSE_SHARD, SNAPSHOT)
    assert rc != 0
    assert "lacks 1 shard(s)" in out and DENSE_SHARD in out and "Fix:" in out, out
    assert_identical()  # nothing was copied or removed on the head


def test_source_tree_is_unchanged():
    now = SOURCE.check_output(
        "find %s/hub \\( -type d -printf 'd %%P\\n' \\) -o -printf '%%y %%P %%s %%T@\\n' | sort", CACHE)
    before = SOURCE.check_output("cat /var/lib/dspark/source-tree.before")
    assert now == before
