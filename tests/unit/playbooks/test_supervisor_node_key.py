"""The supervisor's key on the nodes (issue #41) against a real sshd: the authorized_keys line that
playbooks/supervisor.yml prints (plugin_utils._supervisor_unit.node_key) is read by OpenSSH as meant - the key logs in
from an address of its from= list and is refused from any other ("not from a permitted host"), and restrict,pty
keeps it usable for a command while refusing remote forwarding.

sshd runs unprivileged on a free port of 127.0.0.1 (as `nobody` under root, else as the test's own user, who is then
the user logged in as), with its own host key, config and authorized_keys in a temporary directory; its log says
which key was accepted or refused. Skipped without an sshd binary (DSPARK_TEST_SSHD, else sshd in PATH or /usr/sbin;
the package openssh-server has it, but installing it starts a service: `apt-get download openssh-server` and
`dpkg -x` give the binary alone).
"""

import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _supervisor_unit as su

SSHD = os.environ.get("DSPARK_TEST_SSHD") or shutil.which("sshd") or shutil.which("sshd", path="/usr/sbin:/usr/local/sbin")
SSH = shutil.which("ssh")
KEYGEN = shutil.which("ssh-keygen")
pytestmark = pytest.mark.skipif(not (SSHD and SSH and KEYGEN),
                                reason="no sshd, ssh or ssh-keygen (DSPARK_TEST_SSHD names an sshd binary)")
NOBODY = 65534


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def sshd():
    # Not tmp_path: its parents are 0700 to root, and sshd runs as nobody under root.
    work = tempfile.mkdtemp(prefix="dspark-node-key-")
    os.chmod(work, 0o755)
    root = os.geteuid() == 0
    user = "nobody" if root else getpass.getuser()
    for name in ("host_key", "client_key"):
        subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "dspark-fleet@test", "-f",
                        os.path.join(work, name)], check=True, timeout=30)
    if root:
        os.chown(os.path.join(work, "host_key"), NOBODY, NOBODY)
    port = free_port()
    config = os.path.join(work, "sshd_config")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write("Port %d\nListenAddress 127.0.0.1\nHostKey %s/host_key\nAuthorizedKeysFile %s/authorized_keys\n"
                     "StrictModes no\nUsePAM yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                     "PidFile none\nLogLevel VERBOSE\n" % (port, work, work))
    command = [SSHD, "-D", "-e", "-f", config]
    if root:
        command = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"] + command
    log = open(os.path.join(work, "sshd.log"), "w", encoding="utf-8")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while "Server listening" not in open(log.name, encoding="utf-8").read():
            assert proc.poll() is None and time.monotonic() < deadline, open(log.name, encoding="utf-8").read()
            time.sleep(0.05)
        yield {"work": work, "port": port, "user": user, "log": log.name}
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def login(sshd, line, source, *options):
    """Install ``line`` as the only authorized key, connect from ``source`` running `true`: sshd's log of it, and
    the client's exit code and error output."""
    with open(os.path.join(sshd["work"], "authorized_keys"), "w", encoding="utf-8") as handle:
        handle.write(line + "\n")
    os.chmod(os.path.join(sshd["work"], "authorized_keys"), 0o644)
    before = len(open(sshd["log"], encoding="utf-8").read())
    command = [SSH, "-i", os.path.join(sshd["work"], "client_key"), "-b", source, "-p", str(sshd["port"]),
               "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
               "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", *options, "%s@127.0.0.1" % sshd["user"], "true"]
    # stdin from /dev/null: ssh sets its stdin non-blocking, and on pytest's own stdin that flag would outlive it and
    # make every later ansible-playbook of the session refuse to run ("requires blocking IO").
    run = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False, stdin=subprocess.DEVNULL)
    time.sleep(0.2)
    return open(sshd["log"], encoding="utf-8").read()[before:], run.returncode, run.stderr


def printed_line(sshd, addresses):
    """The line the playbook prints, for the test's client key."""
    with open(os.path.join(sshd["work"], "client_key.pub"), encoding="utf-8") as handle:
        public = handle.read()
    found = su.unit({"supervisor_user": "dspark-fleet", "supervisor_project_dir": "/srv/d", "supervisor_venv": "/srv/d/.venv",
                     "supervisor_inventory": "/srv/inv.yml", "supervisor_state_dir": "/var/lib/dspark-fleet",
                     "supervisor_interval": 60, "supervisor_max_restarts": 3, "supervisor_window_hours": 6,
                     "supervisor_backoff_base": 30, "supervisor_parallel": 1, "supervisor_keep_rounds": 50,
                     "supervisor_keep_days": 14, "supervisor_service_enabled": True,
                     "supervisor_node_key_from": addresses}, host_address="", public_key=public)
    assert found["problems"] == [] and found["node_key_line"].endswith(public.strip())
    return found["node_key_line"]


@pytest.mark.parametrize("addresses", [["127.0.0.2"], ["127.0.0.2/31"], ["10.9.9.9", "127.0.0.2"]])
def test_the_key_logs_in_from_its_addresses_only(sshd, addresses):
    line = printed_line(sshd, addresses)
    accepted = login(sshd, line, "127.0.0.2")[0]
    assert "Accepted publickey for %s from 127.0.0.2" % sshd["user"] in accepted, accepted
    refused, code, error = login(sshd, line, "127.0.0.5")
    assert "not from a permitted host" in refused and "Accepted publickey" not in refused, refused
    assert code == 255 and "Permission denied" in error, (code, error)


def test_the_same_key_without_from_logs_in_from_anywhere(sshd):
    """The control: what from= takes away (the key of #41's review, root on every node from any address)."""
    line = printed_line(sshd, ["127.0.0.2"]).split(" ", 1)[1]
    assert "Accepted publickey for %s from 127.0.0.5" % sshd["user"] in login(sshd, line, "127.0.0.5")[0]


@pytest.mark.parametrize("restricted", [True, False])
def test_restrict_refuses_remote_forwarding(sshd, restricted):
    line = printed_line(sshd, ["127.0.0.2"])
    if not restricted:                                          # the control: the same key with from= alone
        line = line.replace(",restrict,pty", "")
    log, code, error = login(sshd, line, "127.0.0.2", "-o", "ExitOnForwardFailure=yes",
                             "-R", "127.0.0.1:%d:127.0.0.1:9" % free_port())
    assert "Accepted publickey" in log, log
    assert ("remote port forwarding failed" in error) == restricted, (code, error, log)
