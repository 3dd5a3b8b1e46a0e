"""tp_api_probe module: main() end to end against a fake vLLM API on the loopback, and its HTTP client (module_utils)."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.module_utils import tp_api_probe as client
from ansible_collections.dspark.cluster.plugins.modules import tp_api_probe

SERVED = "deepseek-v4-flash-0731"


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    behaviour = {}

    def log_message(self, *args):
        return

    def reply(self, status, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.behaviour.setdefault("auth", []).append(self.headers.get("Authorization"))
        if self.path == "/health":
            return self.reply(self.behaviour.get("health", 200), b"")
        models = self.behaviour.get("models", {"object": "list", "data": [{"id": SERVED}]})
        return self.reply(200, models)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.behaviour.setdefault("posts", []).append(body)
        if self.behaviour.get("chat") == "hang":
            threading.Event().wait(3)
            return None
        if self.behaviour.get("chat") == "no_choices":
            return self.reply(200, {"object": "chat.completion", "choices": []})
        return self.reply(200, {"choices": [{"message": {"role": "assistant", "content": None,
                                                         "reasoning_content": "OK"}, "finish_reason": "length"}]})


@pytest.fixture
def api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Api.behaviour = {}
    yield server.server_address[1], Api.behaviour
    server.shutdown()
    server.server_close()


def run_main(args, capsys, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            tp_api_probe.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_main_probes_and_generates_once(api, capsys):
    port, behaviour = api
    code, result = run_main({"port": port, "model": SERVED, "generate": True, "api_key": "s3cret"}, capsys)
    assert code == 0 and result["changed"] is False
    assert result["health"]["status"] == 200 and result["models"]["ids"] == [SERVED]
    assert result["chat"]["choices"] == 1 and result["chat"]["content"] == "OK"
    assert result["chat"]["finish_reason"] == "length"
    assert behaviour["posts"] == [{"model": SERVED, "max_tokens": 16,
                                   "messages": [{"role": "user", "content": "Reply with OK."}]}]
    assert set(behaviour["auth"]) == {"Bearer s3cret"}
    assert "s3cret" not in json.dumps(result)


def test_main_in_check_mode_reads_the_same_way(api, capsys):
    port, behaviour = api
    code, result = run_main({"port": port, "model": SERVED}, capsys, check_mode=True)
    assert code == 0 and result["changed"] is False and result["models"]["ids"] == [SERVED]
    assert "chat" not in result and "posts" not in behaviour


def test_main_rejects_a_port_out_of_range(capsys):
    code, result = run_main({"port": 70000, "model": SERVED}, capsys)
    assert code == 1 and "port=70000" in result["msg"]


def test_no_generation_when_the_model_is_not_listed(api):
    port, behaviour = api
    behaviour["models"] = {"data": [{"id": "other"}, "junk"]}
    res = client.probe({"port": port, "model": SERVED, "generate": True, "generation_timeout": 5, "max_tokens": 16,
                        "prompt": "p", "health_timeout": 5, "models_timeout": 5})
    assert res["models"]["ids"] == ["other"] and "chat" not in res and "posts" not in behaviour


def test_unexpected_answers_keep_their_text(api):
    port, behaviour = api
    behaviour["models"] = {"detail": "Not Found"}
    behaviour["health"] = 503
    behaviour["chat"] = "no_choices"
    res = client.probe({"port": port, "model": SERVED, "generate": True, "generation_timeout": 5, "max_tokens": 16,
                        "prompt": "p", "health_timeout": 5, "models_timeout": 5})
    assert res["health"]["status"] == 503 and res["models"]["ids"] is None
    assert json.loads(res["models"]["text"]) == {"detail": "Not Found"}


def test_a_hanging_generation_asks_health_again(api):
    port, behaviour = api
    behaviour["chat"] = "hang"
    res = client.probe({"port": port, "model": SERVED, "generate": True, "generation_timeout": 0.5, "max_tokens": 16,
                        "prompt": "p", "health_timeout": 5, "models_timeout": 5})
    assert res["chat"]["timed_out"] is True and res["chat"]["status"] is None and res["chat"]["choices"] is None
    assert res["health_after"] == {"status": 200, "error": None, "timed_out": False,
                                   "seconds": res["health_after"]["seconds"]}


def test_refused_connection_is_a_result():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    res = client.probe({"port": port, "model": SERVED, "generate": True, "generation_timeout": 1, "max_tokens": 1,
                        "prompt": "p", "health_timeout": 1, "models_timeout": 1})
    assert res["health"]["status"] is None and "refused" in res["health"]["error"].lower()
    assert res["models"]["ids"] is None and "chat" not in res
