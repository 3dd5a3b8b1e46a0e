"""rdma_bandwidth module: main() with ib_write_bw answered by a fake subprocess.run."""

import json
import os
import signal
import tempfile
import subprocess

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.modules import rdma_bandwidth

RESULT = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
          " 65536      454           0.000000            0.079265            0.000151\n")
REFUSED = "Couldn't connect to 192.168.100.2:18515\nUnable to open file descriptor for socket connection\n"


@pytest.fixture
def fake(monkeypatch):
    state = {"answers": [], "calls": []}

    def run(cmd, **kwargs):
        state["calls"].append((cmd, kwargs))
        answer = state["answers"].pop(0)
        if answer == "timeout":
            raise subprocess.TimeoutExpired(cmd, kwargs["timeout"], output=b"waiting for client")
        rc, out = answer
        return subprocess.CompletedProcess(cmd, rc, stdout=out.encode())

    monkeypatch.setattr(rdma_bandwidth.subprocess, "run", run)
    monkeypatch.setattr(rdma_bandwidth.time, "sleep", lambda s: None)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, **kw: "/usr/bin/" + name)
    return state


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            rdma_bandwidth.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


CLIENT = {"device": "rocep1s0f1", "gid_index": 1, "server_address": "192.168.100.2", "duration": 3,
          "min_gbits": 0.01}


def test_client_retries_until_the_server_listens(capsys, fake):
    fake["answers"] = [(1, REFUSED), (1, REFUSED), (0, RESULT)]
    rc, out = run(capsys, CLIENT)
    assert rc == 0 and out["changed"] is False
    assert out["mode"] == "client" and out["attempts"] == 3
    assert out["gbits_average"] == 0.079265 and out["meets_threshold"] is True
    assert out["cmd"] == ["/usr/bin/ib_write_bw", "-d", "rocep1s0f1", "-i", "1", "-x", "1", "-F", "--report_gbits",
                          "-D", "3", "-s", "65536", "-p", "18515", "192.168.100.2"]
    assert fake["calls"][0][1]["timeout"] == 63


def test_client_below_threshold_warns(capsys, fake, monkeypatch):
    # Record warn() calls: once controller code is imported, ansible-core 2.19 sends module warnings to
    # Display instead of the result JSON.
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, msg: warnings.append(msg))
    fake["answers"] = [(0, RESULT)]
    rc, out = run(capsys, dict(CLIENT, min_gbits=80))
    assert rc == 0 and out["meets_threshold"] is False
    assert warnings == ["RDMA write bandwidth from rocep1s0f1 to 192.168.100.2 is 0.079 Gb/s, below 80.0 Gb/s"]


def test_client_gives_up_when_the_server_never_answers(capsys, fake, monkeypatch):
    clock = iter([0, 0, 200, 200])
    monkeypatch.setattr(rdma_bandwidth.time, "time", lambda: next(clock))
    fake["answers"] = [(1, REFUSED), (1, REFUSED)]
    rc, out = run(capsys, dict(CLIENT, timeout=120))
    assert rc == 1 and out["attempts"] == 2
    assert "could not reach the server at 192.168.100.2:18515 within 120 s" in out["msg"]


def test_client_other_failure_is_not_retried(capsys, fake):
    fake["answers"] = [(1, "Couldn't get context for the device\n")]
    rc, out = run(capsys, CLIENT)
    assert rc == 1 and out["attempts"] == 1
    assert out["msg"].startswith("ib_write_bw client on rocep1s0f1 exit 1 without a result")


def test_extra_arguments_go_before_the_server_address(capsys, fake):
    fake["answers"] = [(0, RESULT), (0, RESULT)]
    rc, out = run(capsys, dict(CLIENT, extra_args=["--qp-timeout", "20"]))
    assert rc == 0 and out["cmd"][-3:] == ["--qp-timeout", "20", "192.168.100.2"]
    rc, out = run(capsys, {"device": "rocep1s0f1", "gid_index": 3, "extra_args": ["--tclass=106"]})
    assert rc == 0 and out["mode"] == "server" and out["cmd"][-3:] == ["-p", "18515", "--tclass=106"]


def test_server_reports_and_times_out(capsys, fake):
    fake["answers"] = [(0, RESULT)]
    rc, out = run(capsys, {"device": "rocep1s0f1", "gid_index": 3, "tcp_port": 18600, "timeout": 90})
    assert rc == 0 and out["mode"] == "server" and out["cmd"][-2:] == ["-p", "18600"]
    assert fake["calls"][0][1]["timeout"] == 90
    fake["answers"] = ["timeout"]
    rc, out = run(capsys, {"device": "rocep1s0f1", "gid_index": 3, "timeout": 90})
    assert rc == 1 and out["msg"] == "ib_write_bw server on rocep1s0f1 (port 18515) got no client within 90 s"


def test_missing_perftest(capsys, monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, **kw: None)
    rc, out = run(capsys, CLIENT)
    assert rc == 1 and "install perftest" in out["msg"]


# --------------------------------------------------------------------------- background servers (real processes)

def fake_ib_write_bw(tmp_path, body):
    script = tmp_path / "ib_write_bw"
    script.write_text("#!/bin/sh\necho \"$@\" > %s/args\n%s\n" % (tmp_path, body))
    script.chmod(0o755)
    return str(script)


SERVER = {"device": "rocep1s0f1", "gid_index": 3, "tcp_port": 18600, "timeout": 30, "background": True}


@pytest.fixture
def logs(monkeypatch, tmp_path):
    """The module's temporary directory, this test's own (another test run may use /tmp at the same time)."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def test_a_background_server_returns_at_once_and_keeps_running_in_its_own_session(capsys, tmp_path, logs):
    rc, out = run(capsys, dict(SERVER, executable=fake_ib_write_bw(tmp_path, "exec sleep 60")))
    try:
        assert rc == 0 and out["changed"] is False and out["mode"] == "server", out
        pid = out["pid"]
        # The timeout wrapper leads its own session (no terminal, no signal from the task's process group) ...
        assert os.getsid(pid) == pid
        cmdline = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")
        assert [c.decode() for c in cmdline[:3]] == ["/usr/bin/timeout", "--kill-after=10", "30"], cmdline
        # The server's log was unlinked: nothing is left behind in the temporary directory.
        assert not list(logs.iterdir())
        # ... and the server runs with the arguments the client side expects.
        assert (tmp_path / "args").read_text().split() == [
            "-d", "rocep1s0f1", "-i", "1", "-x", "3", "-F", "--report_gbits", "-D", "5", "-s", "65536", "-p", "18600"]
        assert out["cmd"][1:] == (tmp_path / "args").read_text().split()
    finally:
        os.killpg(out["pid"], signal.SIGTERM)


def test_a_background_server_that_exits_at_start_fails_with_its_output(capsys, tmp_path, logs):
    rc, out = run(capsys, dict(SERVER, executable=fake_ib_write_bw(tmp_path, "echo \"Couldn't get context\"; exit 1")))
    assert rc == 1 and out["mode"] == "server"
    assert out["msg"] == "ib_write_bw server on rocep1s0f1 (port 18600) exited at start: Couldn't get context"
    assert not list(logs.iterdir())


def test_background_is_refused_for_a_client(capsys, tmp_path):
    rc, out = run(capsys, dict(CLIENT, background=True, executable=fake_ib_write_bw(tmp_path, "exit 0")))
    assert rc == 1 and "background applies to the server only" in out["msg"]
    assert not (tmp_path / "args").exists()
