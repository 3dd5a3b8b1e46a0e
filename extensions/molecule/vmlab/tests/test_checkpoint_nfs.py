"""Verify the NFS half of the vmlab scenario: the worker (rank 1) exports its cache, the head mounts it.

Checked independently of the roles, on the real kernels: the export (clients, options, NFSv4 only), the mount on the
head (nfs4, read-only, the options, the fstab entry), writes refused, root_squash and the token, the snapshot
identical on both sides (sha256 of every file), a non-client refused, an empty or out-of-fabric client list failing
before any change, nfsd listening on the fabric address only, export drift applied from state (no handler), nfsd
never restarted under a mounted client (warn, or fail on request), unreadable files reported and
fixed on request, and a dead server diagnosed without a persisted fstab entry (last: it leaves the head unmounted).
"""

import hashlib
import json
import os
import pathlib
import re
import shlex
import subprocess
import tempfile

import pytest
import testinfra
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[4]
VMLAB = ROOT / "inventories" / "vmlab"
LAB_STATE = pathlib.Path(os.environ.get("DSPARK_LAB_STATE", ROOT / ".lab"))
KEY = LAB_STATE / "id_ed25519"
SSH_ARGS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
# One kept SSH connection per VM for these checks (testinfra's ControlPersist, 60 s): a new login costs an emulated
# guest about a second of CPU (docs/design-lab.md). No check here depends on a fresh login. Each checkout has its own
# sockets, named by its lab state and the VM's port (short enough for a socket path; no "%": testinfra formats it).
CONTROL_PATH = os.path.join(tempfile.gettempdir(), "dspark-vmlab-%s-" % hashlib.sha256(
    str(LAB_STATE.resolve()).encode()).hexdigest()[:8])
FLEET = yaml.safe_load((VMLAB / "group_vars" / "dspark.yml").read_text())
PAIR = yaml.safe_load((VMLAB / "hosts.yml").read_text())["all"]["children"]["dspark"]["children"]["vm_pair"]
HOSTS = PAIR["hosts"]
CACHE = FLEET["dspark_hf_cache"]
MODEL_DIR = "%s/hub/models--%s" % (CACHE, FLEET["dspark_model"].replace("/", "--"))
SNAPSHOT = "%s/snapshots/%s" % (MODEL_DIR, FLEET["dspark_model_revision"])
HEAD_ADDR = HOSTS["spark-head"]["dspark_fabric_address"]
WORKER_ADDR = HOSTS["spark-worker"]["dspark_fabric_address"]
SRC = "%s:%s" % (WORKER_ADDR, CACHE)
OPTS = "ro,nosuid,nodev,vers=4.2,nconnect=8,rsize=1048576,wsize=1048576,hard,timeo=600,_netdev,nofail"
EXPORTS = "/etc/exports.d/dspark.exports"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def vm(name):
    port = HOSTS[name]["ansible_port"]
    host = testinfra.get_host("ssh://spark@127.0.0.1:%d" % port, sudo=True, ssh_identity_file=str(KEY),
                              ssh_extra_args=SSH_ARGS, controlpath="%s%d" % (CONTROL_PATH, port))
    host.name = name
    return host


@pytest.fixture(scope="module")
def head():
    return vm("spark-head")


@pytest.fixture(scope="module")
def worker():
    return vm("spark-worker")


def playbook(name, *extra):
    """Run playbooks/<name> on the VM lab like the scenario does; (rc, output without colours)."""
    env = dict(os.environ, ANSIBLE_PIPELINING="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               DSPARK_LAB_STATE=str(LAB_STATE), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(VMLAB / "hosts.yml"),
           str(ROOT / "playbooks" / name)] + list(extra)
    proc = subprocess.run(cmd, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=600, check=False)
    return proc.returncode, ANSI.sub("", proc.stdout)


def test_export_v4_only_to_the_head_only(worker):
    state = worker.run("exportfs -v; echo ---; cat /proc/fs/nfsd/versions; echo ---; "
                       "systemctl is-active nfs-server; systemctl is-enabled nfs-server; cat %s" % EXPORTS)
    assert state.rc == 0, state.stderr
    exportfs, versions, rest = state.stdout.split("---\n")
    words = exportfs.split()
    assert words[0] == CACHE and len(words) == 2, exportfs  # one export, one client
    client, options = re.match(r"^([^(]+)\((.*)\)$", words[1]).groups()
    assert client == HEAD_ADDR
    for option in ("ro", "sync", "no_subtree_check", "root_squash"):
        assert option in options.split(",")
    served = versions.split()
    assert not [v for v in served if v.startswith("+2") or v.startswith("+3")], versions
    assert "+4.2" in served
    assert rest.splitlines()[:2] == ["active", "enabled"]
    assert "%s %s(ro,sync,no_subtree_check,root_squash)" % (CACHE, HEAD_ADDR) in rest


def test_head_mount_read_only_nfs4_with_options_and_fstab(head):
    mount = head.run("findmnt -n -o SOURCE,FSTYPE,OPTIONS --mountpoint %s; grep -F ' %s ' /etc/fstab" % (CACHE, CACHE))
    assert mount.rc == 0, mount.stderr
    live, fstab = mount.stdout.splitlines()[:2]
    source, fstype, options = live.split()
    assert (source, fstype) == (SRC, "nfs4")
    opts = dict(o.partition("=")[::2] for o in options.split(","))
    assert "ro" in opts and "hard" in opts
    assert "nosuid" in opts and "nodev" in opts  # issue #13: nothing on the export gains privileges or opens a device
    assert opts["vers"] == "4.2" and opts["nconnect"] == "8" and opts["timeo"] == "600"
    # The server lowers rsize/wsize to its maximum block size (256 KiB on a 2 GiB VM); 1 MiB is what was asked.
    assert 0 < int(opts["rsize"]) <= 1048576 and 0 < int(opts["wsize"]) <= 1048576
    assert fstab.split() == [SRC, CACHE, "nfs4", OPTS, "0", "0"]


def test_writes_refused_root_squashed_token_unreadable(head, worker):
    write = head.run("touch %s/written-by-head; echo x > %s/hub/x" % (CACHE, CACHE))
    assert write.rc != 0 and "Read-only file system" in write.stderr
    token = head.run("cat %s/token" % CACHE)
    assert token.rc != 0 and "Permission denied" in token.stderr
    assert "hf_FAKE" not in token.stdout
    # Root on the head is squashed to the anonymous user: even a root-owned 0600 file is out of reach.
    assert head.run("test -r %s/token" % CACHE).rc != 0
    assert head.file("%s/token" % CACHE).mode == 0o600
    src = worker.file("%s/token" % CACHE)
    assert (src.user, src.group, src.mode) == ("root", "root", 0o600)
    assert head.run("cat %s/config.json" % SNAPSHOT).rc == 0


def test_snapshot_identical_through_the_mount(head, worker):
    cmd = "cd %s && find -L . -type f -print0 | sort -z | xargs -0 sha256sum" % shlex.quote(SNAPSHOT)
    theirs, ours = worker.run(cmd), head.run(cmd)
    assert theirs.rc == 0 and ours.rc == 0, ours.stderr
    assert len(theirs.stdout.splitlines()) == 9
    assert ours.stdout == theirs.stdout
    manifest = head.run("ls /var/lib/dspark/checkpoint/*.state.json")
    assert manifest.rc == 0
    # The verified stamps the serve role requires (issue #13 point 5): one per node, the same manifest digest.
    stamps = [node.run("cat /var/lib/dspark/checkpoint/*.verified.json") for node in (head, worker)]
    assert all(s.rc == 0 for s in stamps) and stamps[0].stdout == stamps[1].stdout


def test_non_client_refused(worker):
    # The worker's own fabric address is a fabric host outside the client list (the head's address only).
    probe = worker.run("d=$(mktemp -d); timeout 40 mount -t nfs4 -o ro,soft,retry=0 %s \"$d\"; rc=$?; "
                       "findmnt -n \"$d\" && umount \"$d\"; rmdir \"$d\"; exit $rc" % SRC)
    assert probe.rc != 0
    assert "access denied" in probe.stderr or "No such file" in probe.stderr, probe.stderr


@pytest.mark.parametrize("clients, expected", [
    ([], ["nfs_export_clients=[]", "never opened to *"]),
    # Clients outside the fabric network (issue #13) are refused on the controller before any node is read: that rule
    # is tested by tests/badinputs/nfs_clients.yml (site.yml) and test_nfs_plan.py, not here (~1 min per emulated run).
])
def test_bad_client_list_fails_before_any_change(worker, clients, expected):
    before = worker.run("sha256sum %s /etc/nfs.conf.d/dspark.conf; exportfs -s" % EXPORTS).stdout
    rc, out = playbook("nfs_export.yml", "-e", json.dumps({"nfs_export_clients": clients}))
    assert rc != 0
    for text in expected:
        assert text in flat(out), out[-3000:]
    assert "Fix:" in out
    assert "changed=0" in out.split("PLAY RECAP")[-1]
    assert worker.run("sha256sum %s /etc/nfs.conf.d/dspark.conf; exportfs -s" % EXPORTS).stdout == before


def test_nfsd_listens_on_the_fabric_address_only(worker):
    """Issue #13: nfs.conf [nfsd] host= binds nfsd to the exporting node's fabric address, nothing else."""
    assert "host=%s" % WORKER_ADDR in worker.file("/etc/nfs.conf.d/dspark.conf").content_string.splitlines()
    listen = worker.run("ss -Hltn 'sport = :2049'")
    assert listen.rc == 0, listen.stderr
    assert sorted(line.split()[3] for line in listen.stdout.splitlines()) == ["%s:2049" % WORKER_ADDR], listen.stdout
    assert worker.run("timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/2049'").rc != 0


@pytest.mark.lab_extended
def test_export_drift_is_applied_by_the_next_run_without_a_handler(worker):
    """Issue #13 point 5: the file is unchanged but the kernel's table is not (a run that died before exportfs -ra,
    or a hand-made export): the next run compares `exportfs -s` with the file and re-exports (the next test's last run,
    on the same export, asserts changed=0)."""
    stray = "192.168.100.99"
    worker.run_expect([0], "exportfs -o ro,root_squash,sync,no_subtree_check %s:%s" % (stray, CACHE))
    assert stray in worker.run("exportfs -s").stdout
    rc, out = playbook("nfs_export.yml")
    assert rc == 0, out[-3000:]
    assert "changed=1" in out.split("PLAY RECAP")[-1], out[-3000:]
    assert stray not in worker.run("exportfs -s").stdout


def flat(out):
    """Playbook output with YAML's line folding undone (long messages wrap at about 80 columns)."""
    return " ".join(out.split())


def nfsd_started(worker):
    return worker.run("systemctl show -p ActiveEnterTimestampMonotonic --value nfs-server").stdout.strip()


@pytest.mark.lab_extended
def test_v4_only_setting_never_restarts_nfsd_under_a_mounted_client(head, worker):
    conf = "/etc/nfs.conf.d/dspark.conf"
    started = nfsd_started(worker)
    worker.run_expect([0], "rm %s" % conf)
    rc, out = playbook("nfs_export.yml")  # default: warn
    assert rc == 0, out[-3000:]
    assert "WARNING spark-worker: nfsd serves 1 client(s), so it was not restarted" in flat(out)
    assert worker.file(conf).exists
    worker.run_expect([0], "rm %s" % conf)
    rc, out = playbook("nfs_export.yml", "-e", "nfs_export_on_live_clients=fail")
    assert rc != 0
    assert "nfsd serves 1 NFSv4 client(s)" in flat(out) and "Nothing was restarted." in flat(out)
    assert nfsd_started(worker) == started
    assert head.run("cat %s/config.json" % SNAPSHOT).rc == 0  # the client never stalled
    rc, out = playbook("nfs_export.yml")
    assert rc == 0 and "changed=0" in out.split("PLAY RECAP")[-1], out[-3000:]


@pytest.mark.lab_extended
def test_unreadable_files_are_reported(head, worker):
    """What root_squash makes of a 0600 shard, and the warning that says so; the shard's mode is put back by hand. The
    fix on request (nfs_export_fix_permissions: chmod o+rx of the cache root, o+rX of hub/; the token stays 0600) ran
    here until session 15 and is not run by `make test` now (CI time: one emulated run)."""
    shard = "%s/model-00001-of-00004.safetensors" % SNAPSHOT
    worker.run_expect([0], "chmod 0600 \"$(readlink -f %s)\"" % shard)
    try:
        assert head.run("cat %s >/dev/null" % shard).rc != 0  # squashed root cannot read it
        rc, out = playbook("nfs_export.yml")
        assert rc == 0, out[-3000:]
        assert "WARNING spark-worker: 1 path(s) under %s are not world-readable" % CACHE in flat(out)
        assert "nfs_export_fix_permissions: true" in flat(out)
    finally:
        worker.run_expect([0], "chmod 0644 \"$(readlink -f %s)\"" % shard)
    assert head.run("cat %s >/dev/null" % shard).rc == 0
    assert worker.file("%s/token" % CACHE).mode == 0o600


def test_dead_server_diagnosed_and_nothing_persisted(head, worker):
    """Last: the head is left unmounted and the worker's nfs-server stopped (destroy follows)."""
    head.run_expect([0], "umount %s && sed -i '\\| %s nfs4 |d' /etc/fstab" % (CACHE, CACHE))
    worker.run_expect([0], "systemctl stop nfs-server")
    rc, out = playbook("checkpoint.yml")
    assert rc != 0
    assert "cannot mount the export %s of spark-worker" % SRC in out
    assert "NFS server %s" % WORKER_ADDR in out and "Fix: start the NFS server on spark-worker" in out
    assert "Nothing was written to /etc/fstab" in out
    assert head.run("grep -F ' %s ' /etc/fstab" % CACHE).rc == 1
    assert head.run("findmnt --mountpoint %s" % CACHE).rc == 1
    assert head.run("ls -d /run/dspark-nfs-probe.* 2>/dev/null").stdout == ""
