"""lab/lab.sh's and lab/registry.sh's waits against a fake Docker: each waits on its condition up to a deadline set in
the environment, fails at once (and says why) when the container it waits for stopped, retries the idempotent node
setup, and names the variable to raise when a deadline runs out (issue #30 point 2).

The scripts are sourced (they run `main` only when executed), a stub `docker` (and `dockerd`, `pgrep`) first on PATH.
"""

import http.server
import pathlib
import socket
import subprocess
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
LAB_SH = ROOT / "lab" / "lab.sh"
REGISTRY_SH = ROOT / "lab" / "registry.sh"

# The fake engine: every answer comes from a file in $FAKE. A file of several lines is a sequence: each call takes
# the first line and the last one stays (boot: starting, starting, running).
FAKE_DOCKER = r"""#!/bin/bash
echo "docker $*" >>"$FAKE/calls"
next() {  # next NAME: the next answer of a sequence file
  local f=$FAKE/$1 first rest
  [[ -e $f ]] || return 0
  first=$(head -n 1 "$f"); rest=$(tail -n +2 "$f")
  [[ -n $rest ]] && printf '%s\n' "$rest" >"$f"
  printf '%s\n' "$first"
}
case "$1 $2" in
  "info "*) [[ -e $FAKE/engine ]] ;;
  "container inspect")
    case $4 in
      *State.Status*) state=$(next state); [[ $state == gone ]] && exit 1; echo "$state" ;;
      *ExitCode*) echo "exit code 255" ;;
    esac ;;
  "logs "*) echo "the container's last words" ;;
  "exec "*)
    case "$*" in
      *is-system-running) next boot ;;
      *"bash -c"*) out=$(next setup); echo "${out#* }"; exit "${out%% *}" ;;
      *"sh -c"*) echo "systemd: starting"; echo "jobs still waiting:"; echo "1 dev-fabric.device start running" ;;
    esac ;;
esac
"""


class Fake:
    """A PATH with the stub docker, and $FAKE holding its answers."""

    def __init__(self, tmp_path):
        self.dir = tmp_path / "fake"
        self.dir.mkdir()
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.state = tmp_path / "state"
        self.stub("docker", FAKE_DOCKER)
        self.stub("pgrep", "#!/bin/sh\nexit 1\n")  # no other dockerd on this fake machine
        self.env = {"PATH": "%s:/usr/bin:/bin" % self.bin, "FAKE": str(self.dir), "HOME": str(tmp_path)}

    def stub(self, name, text):
        path = self.bin / name
        path.write_text(text)
        path.chmod(0o755)

    def answers(self, name, *lines):
        (self.dir / name).write_text("".join(line + "\n" for line in lines))

    def run(self, script, code, timeout=60, **env):
        """Source SCRIPT in bash, then run CODE; (rc, stdout, stderr, seconds)."""
        prelude = 'source "%s"; STATE="%s"; KEY="%s/key"; ' % (script, self.state, self.state)
        started = time.monotonic()
        result = subprocess.run(["bash", "-c", prelude + code], env=dict(self.env, **env), capture_output=True,
                                text=True, timeout=timeout, check=False)
        return result.returncode, result.stdout, result.stderr, time.monotonic() - started

    def lab(self, code, **env):
        return self.run(LAB_SH, "load_timeouts; " + code, **env)


@pytest.fixture
def fake(tmp_path):
    return Fake(tmp_path)


def test_the_boot_wait_ends_when_systemd_has_booted(fake):
    fake.answers("state", "running")
    fake.answers("boot", "starting", "starting", "running")
    rc, out, err, dummy = fake.lab('wait_node n1 "$BOOT_TIMEOUT" LAB_BOOT_TIMEOUT "n1 booting" systemd_settled n1; '
                                   'echo "state $BOOT_STATE"')
    assert rc == 0, err
    assert out.strip() == "state running"


def test_a_container_that_stops_during_the_wait_fails_at_once_with_its_state_and_log(fake):
    fake.answers("state", "running", "exited")
    fake.answers("boot", "starting")
    rc, dummy, err, seconds = fake.lab('wait_node n1 "$BOOT_TIMEOUT" LAB_BOOT_TIMEOUT "n1 booting" systemd_settled n1')
    assert rc == 1
    assert seconds < 10  # not the 300 s deadline
    assert "container n1 is exited (exit code 255): it stopped while lab.sh waited for it" in err
    assert "n1| the container's last words" in err


def test_a_container_that_disappears_fails_at_once(fake):
    fake.answers("state", "gone")
    fake.answers("boot", "starting")
    rc, dummy, err, dummy = fake.lab('wait_node n1 10 LAB_SSH_TIMEOUT "ssh of n1" false')
    assert rc == 1
    assert "container n1 disappeared while lab.sh waited for it" in err


def test_maintenance_mode_is_hopeless_and_says_what_systemd_waits_for(fake):
    fake.answers("state", "running")
    fake.answers("boot", "maintenance")
    rc, dummy, err, seconds = fake.lab('wait_node n1 "$BOOT_TIMEOUT" LAB_BOOT_TIMEOUT "n1 booting" systemd_settled n1')
    assert rc == 1 and seconds < 10
    assert "n1 booting: systemd in n1 is 'maintenance'" in err
    assert "n1| 1 dev-fabric.device start running" in err


def test_a_deadline_that_runs_out_names_its_variable_and_shows_the_pending_jobs(fake):
    fake.answers("state", "running")
    fake.answers("boot", "starting")
    rc, dummy, err, dummy = fake.lab('wait_node n1 "$BOOT_TIMEOUT" LAB_BOOT_TIMEOUT "n1 booting" systemd_settled n1',
                                     LAB_BOOT_TIMEOUT="1")
    assert rc == 1
    assert "timed out after 1s waiting for n1 booting (a slower machine: raise LAB_BOOT_TIMEOUT)" in err
    assert "jobs still waiting:" in err


def test_deadlines_have_generous_defaults_and_refuse_what_is_not_seconds(fake):
    rc, out, dummy, dummy = fake.lab('echo "$BOOT_TIMEOUT $SSH_TIMEOUT $PING_TIMEOUT $DOCKERD_TIMEOUT $LOCK_TIMEOUT"')
    assert rc == 0
    boot, ssh, ping, dockerd, lock = map(int, out.split())
    assert boot >= 300 and ssh >= 120 and ping >= 60 and dockerd >= 120 and lock >= 1800
    rc, out, dummy, dummy = fake.lab('echo "$SSH_TIMEOUT"', LAB_SSH_TIMEOUT="999")
    assert out.strip() == "999"
    rc, dummy, err, dummy = fake.lab("true", LAB_PING_TIMEOUT="1m")
    assert rc == 1 and "LAB_PING_TIMEOUT must be a number of seconds, not '1m'" in err


def setup_code():
    return ('mkdir -p "$STATE"; : >"$KEY.pub"; FABRIC_IP[n1]=192.168.100.1; FABRIC_IF[n1]=fab0; MTU[n1]=9000; '
            'setup_node n1')


def test_a_failed_node_setup_is_run_again(fake):
    fake.answers("state", "running")
    fake.answers("boot", "running")
    fake.answers("setup", "1 Job for ssh.service canceled.", "0 ")
    rc, out, err, dummy = fake.lab(setup_code())
    assert rc == 0, err
    assert "setting up n1 failed (try 1 of 3), trying again: Job for ssh.service canceled." in out
    assert sum("bash -c" in line for line in (fake.dir / "calls").read_text().splitlines()) == 2


def test_a_node_setup_that_keeps_failing_is_reported_with_its_last_output(fake):
    fake.answers("state", "running")
    fake.answers("boot", "running")
    fake.answers("setup", "1 fab0 has MTU 1500, expected 9000")
    rc, dummy, err, dummy = fake.lab(setup_code(), LAB_SETUP_TRIES="2")
    assert rc == 1
    assert "setting up n1 failed 2 times; the last time: fab0 has MTU 1500, expected 9000" in err


def test_a_degraded_boot_names_the_failed_units(fake):
    fake.answers("state", "running")
    fake.answers("boot", "degraded")
    fake.answers("setup", "0 ")
    rc, out, err, dummy = fake.lab(setup_code())
    assert rc == 0, err
    assert "WARNING: n1 booted degraded; failed units:" in out and "n1| jobs still waiting:" in out


def test_a_dockerd_that_exits_fails_at_once_with_its_log(fake):
    fake.stub("dockerd", "#!/bin/sh\necho 'failed to start daemon: pid file found'\nexit 1\n")
    rc, dummy, err, seconds = fake.lab("ensure_engine")
    assert rc == 1 and seconds < 20
    assert "dockerd exited without answering" in err
    assert "pid file found" in err


def test_a_slow_dockerd_is_waited_for(fake):
    fake.stub("dockerd", '#!/bin/sh\nsleep 2\n: >"$FAKE/engine"\nsleep 3\n')
    rc, out, err, dummy = fake.lab("ensure_engine")
    assert rc == 0, err
    assert "starting dockerd" in out


def test_a_dockerd_that_never_answers_names_its_variable(fake):
    fake.stub("dockerd", "#!/bin/sh\nsleep 5\n")
    rc, dummy, err, dummy = fake.lab("ensure_engine", LAB_DOCKERD_TIMEOUT="1")
    assert rc == 1
    assert "dockerd did not answer within 1s" in err and "raise LAB_DOCKERD_TIMEOUT" in err


def test_a_waiter_for_the_lab_lock_is_told_who_holds_it(fake):
    fake.state.mkdir()
    holder = subprocess.Popen(["bash", "-c", 'source "%s"; STATE="%s"; load_timeouts; lock up -i pair; exec sleep 30'
                               % (LAB_SH, fake.state)], env=fake.env)  # pylint: disable=consider-using-with
    try:
        for _attempt in range(100):
            if (fake.state / "lock.holder").exists():
                break
            time.sleep(0.1)
        rc, out, err, dummy = fake.lab("lock down -i fleet", LAB_LOCK_TIMEOUT="1")
    finally:
        holder.kill()
        holder.wait()
    assert rc == 1
    assert "waiting (up to 1s, LAB_LOCK_TIMEOUT) for lab.sh up -i pair (pid %d" % holder.pid in out
    assert "lab.sh up -i pair (pid %d" % holder.pid in err and "raise LAB_LOCK_TIMEOUT" in err
    rc, dummy, err, dummy = fake.lab("lock down -i fleet; cat \"$STATE/lock.holder\"")
    assert rc == 0, err


# --- lab/registry.sh ------------------------------------------------------------------------------------------------

def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def registry(fake, code, **env):
    return fake.run(REGISTRY_SH, code, **dict({"REGISTRY_HOST_PORT": str(free_port())}, **env))


def test_a_registry_that_exited_fails_at_once_with_its_log(fake):
    fake.answers("state", "exited")
    rc, dummy, err, seconds = registry(fake, "wait_ready")
    assert rc == 1 and seconds < 10
    assert "dspark-lab-registry is exited (exit code 255) instead of answering" in err
    assert "the container's last words" in err


def test_a_registry_that_never_answers_names_its_variable(fake):
    fake.answers("state", "running")
    rc, dummy, err, dummy = registry(fake, "wait_ready", REGISTRY_READY_TIMEOUT="1")
    assert rc == 1
    assert "does not answer on http://127.0.0.1:" in err and "after 1s" in err and "REGISTRY_READY_TIMEOUT" in err


class V2(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802  (http.server's name)
        self.send_response(200 if self.path == "/v2/" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_registry_that_answers_late_is_waited_for(fake):
    fake.answers("state", "running")
    port = free_port()
    server = http.server.HTTPServer(("127.0.0.1", port), V2)
    server.timeout = 0.1
    stop = threading.Event()

    def serve_late():
        if not stop.wait(2):  # nothing answers for 2 s (the connections wait in the backlog)
            while not stop.is_set():
                server.handle_request()

    thread = threading.Thread(target=serve_late)
    thread.start()
    try:
        rc, dummy, err, seconds = registry(fake, "wait_ready", REGISTRY_HOST_PORT=str(port))
    finally:
        stop.set()
        thread.join()
        server.server_close()
    assert rc == 0, err
    assert seconds >= 1.5
