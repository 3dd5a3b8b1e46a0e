"""lab/hf_endpoint/hf_endpoint.sh up | status | down on 127.0.0.1 (HF_ENDPOINT_BIND: no lab network, no Docker) with a
small model made here and an empty wheelhouse (HF_ENDPOINT_WHEELS: nothing downloaded): the files it writes for the
inventory, idempotence, a dead server noticed, a server that cannot start failing at once (not at the deadline), a
busy port named, and the token in no output, log or command line.
"""

import os
import pathlib
import signal
import socket
import stat
import subprocess
import time

import pytest
import yaml

from test_hf_endpoint import REPO_ID, REV, make_hub, request

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "lab" / "hf_endpoint" / "hf_endpoint.sh"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        dummy, self.model_dir, self.meta = make_hub(tmp_path / "model", big=4096)
        model = tmp_path / "model"
        (model / "repo_id").write_text(REPO_ID + "\n")
        (model / "revision").write_text(REV + "\n")
        (tmp_path / "wheels").mkdir()
        self.state = tmp_path / "state" / "t"
        self.port = free_port()
        self.env = dict(os.environ, HF_ENDPOINT_BIND="127.0.0.1", HF_ENDPOINT_LAB="t", HF_ENDPOINT_PORT=str(self.port),
                        HF_ENDPOINT_STATE=str(tmp_path / "state"), HF_ENDPOINT_MODEL=str(model),
                        HF_ENDPOINT_WHEELS=str(tmp_path / "wheels"), HF_ENDPOINT_READY_TIMEOUT="60")
        self.outputs = []

    def run(self, *args, **env):
        started = time.monotonic()
        done = subprocess.run(["bash", str(SCRIPT), *args], env=dict(self.env, **env), capture_output=True, text=True,
                              timeout=120, check=False)
        self.outputs.append(done.stdout + done.stderr)
        return done.returncode, done.stdout + done.stderr, time.monotonic() - started

    def pid(self):
        return int((self.state / "pid").read_text().split()[0])

    def token(self):
        return (self.state / "token").read_text().strip()


@pytest.fixture
def lab(tmp_path):
    lab = Lab(tmp_path)
    yield lab
    lab.run("down")


def test_up_writes_the_address_token_and_variables_and_is_idempotent(lab):
    rc, out, dummy = lab.run("up")
    assert rc == 0, out
    url = "http://127.0.0.1:%d" % lab.port
    assert (lab.state / "address").read_text().strip() == url
    assert stat.S_IMODE((lab.state / "token").stat().st_mode) == 0o600
    token = lab.token()
    assert token.startswith("hf_dsparkLabSentinel") and len(token) == 52
    variables = yaml.safe_load((lab.state / "vars.yml").read_text())
    assert variables["checkpoint_download"] is True
    assert variables["checkpoint_download_endpoint"] == url
    assert variables["checkpoint_allow_insecure_endpoint"] is True   # http with a token: refused without it (#41)
    assert variables["checkpoint_download_pip_index"] == url + "/simple/"
    assert variables["checkpoint_download_package"].startswith("huggingface_hub==")
    assert variables["dspark_model"] == REPO_ID and variables["dspark_model_revision"] == REV
    assert variables["checkpoint_hf_token"] == "{{ lookup('ansible.builtin.file', '%s') }}" % (lab.state / "token")
    status, dummy, body = request("%s/%s/resolve/%s/config.json" % (url, REPO_ID, REV), token=token)
    assert status == 200 and body == lab.meta["config.json"]["data"]
    assert request("%s/%s/resolve/%s/config.json" % (url, REPO_ID, REV), token=None)[0] == 401
    rc, out, dummy = lab.run("status")
    assert rc == 0 and " up pid %d %s serves %s@%s" % (lab.pid(), url, REPO_ID, REV) in out, out
    pid = lab.pid()
    rc, out, dummy = lab.run("up")
    assert rc == 0 and "already up (pid %d)" % pid in out and lab.pid() == pid and lab.token() == token, out
    cmdline = pathlib.Path("/proc/%d/cmdline" % pid).read_bytes()
    assert token.encode() not in cmdline
    rc, out, dummy = lab.run("down")
    assert rc == 0 and not lab.state.exists()
    deadline = time.monotonic() + 10
    while pathlib.Path("/proc/%d" % pid).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pathlib.Path("/proc/%d" % pid).exists() or b"hf_endpoint" not in pathlib.Path("/proc/%d/cmdline" % pid).read_bytes()
    rc, out, dummy = lab.run("status")
    assert rc == 1 and " down" in out
    for text in lab.outputs:
        assert token not in text


def test_a_dead_server_is_noticed_and_started_again(lab):
    assert lab.run("up")[0] == 0
    token, pid = lab.token(), lab.pid()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while b"hf_endpoint" in pathlib.Path("/proc/%d/cmdline" % pid).read_bytes() if pathlib.Path("/proc/%d" % pid).exists() else False:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    rc, out, dummy = lab.run("status")
    assert rc == 1, out
    rc, out, dummy = lab.run("up")
    assert rc == 0 and "starting the endpoint" in out and lab.pid() != pid and lab.token() == token, out


def test_a_server_that_cannot_start_fails_at_once_with_its_reason(lab):
    with open(lab.model_dir / "blobs" / lab.meta["config.json"]["etag"], "ab") as f:
        f.write(b"corrupt")
    rc, out, seconds = lab.run("up")
    assert rc != 0
    assert "exited instead of answering" in out and "is corrupt" in out, out
    assert seconds < 30  # not the 60 s deadline


def test_a_busy_port_is_named(lab):
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", lab.port))
        busy.listen(1)
        rc, out, dummy = lab.run("up")
    assert rc != 0 and "127.0.0.1:%d is already in use" % lab.port in out and "HF_ENDPOINT_PORT" in out, out


def test_no_model_names_the_fix(lab):
    rc, out, dummy = lab.run("up", HF_ENDPOINT_MODEL=str(lab.tmp / "nothing"))
    assert rc != 0 and "Fix: bash lab/model/make.sh" in out, out


def test_the_lock_pins_huggingface_hub_and_one_hash_per_wheel():
    text = (ROOT / "lab" / "hf_endpoint" / "requirements.txt").read_text()
    pins = [line.split()[0] for line in text.splitlines() if "==" in line]
    hashes = [line for line in text.splitlines() if "--hash=sha256:" in line]
    assert any(pin.startswith("huggingface_hub==") for pin in pins)
    assert len(pins) == len(hashes) > 5
