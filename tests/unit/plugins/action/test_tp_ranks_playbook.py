"""tp_ranks under ansible-playbook: the real TaskExecutor, member connections and the tp_api_probe module on the head.

Two members on the `local` connection plugin, a fake `docker` CLI on PATH answering from fixture logs, a fake vLLM
API on the loopback, and a play with `become: true` through the tests' become plugin `fake_root` (no sudo here): each
member's docker commands must run under the task's become with that member's own become user.
Runs with the ansible-playbook of the Python running the tests (so also on another ansible-core's venv).
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "unit" / "plugins" / "plugin_utils" / "fixtures" / "vllm"
BECOME_PLUGINS = ROOT / "tests" / "unit" / "plugins" / "become_plugins"
SERVED = "deepseek-v4-flash-0731"
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"

FAKE_DOCKER = r'''#!PYTHON
"""docker inspect / docker logs of the containers whose logs lie in $FAKE_DOCKER_DIR/<name>.log."""
import json, os, sys
args = sys.argv[1:]
name = args[-1]
with open(os.path.join(os.environ["FAKE_DOCKER_DIR"], "calls.log"), "a") as calls:
    calls.write("%s %s %s\n" % (os.environ.get("DSPARK_FAKE_BECAME", "-"), args[0], name))
path = os.path.join(os.environ["FAKE_DOCKER_DIR"], name + ".log")
if not os.path.exists(path):
    sys.stderr.write("Error: No such container: %s\n" % name)
    sys.exit(1)
if args[0] == "inspect":
    print(json.dumps({"Id": name * 4, "Name": "/" + name, "RestartCount": 0, "Image": "sha256:" + "ab" * 32,
                      "State": {"Status": "running", "Running": True, "ExitCode": 0,
                                "StartedAt": "2026-11-29T18:39:00.000000000Z"}}))
    sys.exit(0)
assert args[0] == "logs" and "--timestamps" in args
lines = [line for line in open(path).read().splitlines()[1:] if line.strip()]
for index, line in enumerate(lines):
    print("2026-11-29T18:40:%02d.%09dZ %s" % (index // 10, index, line))
'''


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen = []

    def log_message(self, *args):
        return

    def reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.seen.append(("GET", self.path, self.headers.get("Authorization")))
        self.reply({"data": [{"id": SERVED}]} if self.path == "/v1/models" else {})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append(("POST", self.path, self.headers.get("Authorization")))
        self.reply({"choices": [{"message": {"content": "OK"}, "finish_reason": "stop"}]})


@pytest.fixture
def api_port():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Api.seen = []
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="no ansible-playbook next to this Python")
def test_healthy_pair_through_ansible_playbook(tmp_path, api_port):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER.replace("PYTHON", sys.executable))
    docker.chmod(0o755)
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(FIXTURES / "head_healthy_v0251.log", logs / "c-head.log")
    shutil.copy(FIXTURES / "worker_healthy_v0251.log", logs / "c-worker.log")
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "dspark_group": "pair_t",
              "dspark_tensor_parallel_size": 2, "dspark_gpus_per_node": 1, "dspark_api_port": api_port}
    inventory = {"all": {"children": {"pair_t": {"hosts": {"t-head": dict(common, dspark_rank=0),
                                                           "t-worker": dict(common, dspark_rank=1,
                                                                            ansible_become_user="op2")}}}}}
    (tmp_path / "hosts.json").write_text(json.dumps(inventory))
    out = tmp_path / "result.json"
    (tmp_path / "play.yml").write_text(textwrap.dedent("""\
        - hosts: t-head
          gather_facts: false
          become: true
          become_method: fake_root
          become_user: op1
          tasks:
            - dspark.cluster.tp_ranks:
                group: pair_t
                containers: {t-head: c-head, t-worker: c-worker}
                served_model_name: %s
                api_key: s3cret
                timeout: 60
                poll_interval: 0.2
              delegate_to: t-head
              register: tp
            - ansible.builtin.copy:
                content: "{{ tp | to_json }}"
                dest: %s
              become: false
        """ % (SERVED, out)))
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ.get("PATH", "")), FAKE_DOCKER_DIR=str(logs),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_REMOTE_TMP=str(tmp_path / "rtmp"), ANSIBLE_BECOME_PLUGINS=str(BECOME_PLUGINS))
    proc = subprocess.run([str(PLAYBOOK_BIN), "-i", str(tmp_path / "hosts.json"), str(tmp_path / "play.yml")],
                          cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert not result.get("failed"), result["msg"]
    assert [(r["rank"], r["node"]) for r in result["registered_ranks"]] == [(0, "t-head"), (1, "t-worker")]
    assert result["world_size"] == 2 and result["api_ready"] is True and result["generation_ok"] is True
    assert result["diagnosis"] == [] and result["ready_at"] is not None
    assert result["msg"].startswith("TP group pair_t ready after ")
    assert set(result["containers"]) == {"t-head", "t-worker"}
    assert result["containers"]["t-worker"]["image"] == "sha256:" + "ab" * 32
    # The probe module ran on the head's loopback with the key, once generating; the key is never in the result.
    assert [s for s in Api.seen if s[0] == "POST"] == [("POST", "/v1/chat/completions", "Bearer s3cret")]
    assert "s3cret" not in out.read_text() and "s3cret" not in proc.stdout
    # Every docker command ran under the task's become, with each member's own become user (the worker's from its
    # inventory variables, the head's from the play).
    calls = set(tuple(line.split()) for line in (logs / "calls.log").read_text().splitlines())
    assert calls == {("op1", "inspect", "c-head"), ("op1", "logs", "c-head"),
                     ("op2", "inspect", "c-worker"), ("op2", "logs", "c-worker")}
