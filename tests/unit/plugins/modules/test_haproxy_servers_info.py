"""haproxy_servers_info module: run() with a fake reader, main() end to end against a fake admin socket."""

import json
import socket
import threading
from pathlib import Path

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.modules import haproxy_servers_info

FIXTURES = Path(__file__).parents[1] / "module_utils" / "fixtures" / "haproxy"

PARAMS = {"socket": "/x.sock", "backend": "dspark", "server": None, "wait_for": "none", "timeout": 0, "interval": 0.01}


def reader_of(*answers):
    answers = list(answers)

    def read(dummy_socket, dummy_backend):
        return answers.pop(0) if len(answers) > 1 else answers[0]
    return read


def server(name, sessions=0, healthy=True, in_rotation=True):
    return {"name": name, "sessions": sessions, "healthy": healthy, "in_rotation": in_rotation}


def test_read_once():
    result = haproxy_servers_info.run(dict(PARAMS, server="b"), reader_of([server("a"), server("b", 2)]))
    assert result["changed"] is False and result["found"] is True
    assert result["server"]["sessions"] == 2 and len(result["servers"]) == 2 and result["timed_out"] is False


def test_backend_missing():
    result = haproxy_servers_info.run(PARAMS, reader_of(None))
    assert result["found"] is False and result["servers"] == [] and result["server"] is None


def test_wait_until_healthy():
    result = haproxy_servers_info.run(dict(PARAMS, server="a", wait_for="healthy", timeout=5),
                                      reader_of([server("a", healthy=False)], [server("a", healthy=False)], [server("a")]))
    assert result["server"]["healthy"] and not result["timed_out"]


def test_wait_times_out():
    result = haproxy_servers_info.run(dict(PARAMS, server="a", wait_for="no_sessions", timeout=0.05),
                                      reader_of([server("a", 3)]))
    assert result["timed_out"] is True and result["server"]["sessions"] == 3 and result["waited"] >= 0.05


@pytest.fixture
def admin_socket(tmp_path):
    path = str(tmp_path / "admin.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(5)
    answers = {"show stat": (FIXTURES / "show_stat.csv").read_text(),
               "show servers state dspark": (FIXTURES / "show_servers_state.txt").read_text()}

    def serve():
        while True:
            try:
                conn, dummy = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(answers.get(conn.recv(4096).decode().strip(), "Unknown command.\n").encode())

    threading.Thread(target=serve, daemon=True).start()
    yield path
    listener.close()


def test_main_end_to_end(admin_socket, capsys):
    with patch_module_args({"socket": admin_socket, "backend": "dspark", "server": "pair_b"}):
        with pytest.raises(SystemExit) as exit_info:
            haproxy_servers_info.main()
    assert exit_info.value.code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["server"]["admin"] == "drain" and result["server"]["in_rotation"] is False
    assert [s["name"] for s in result["servers"] if s["in_rotation"]] == ["pair_a", "trio_c"]


def test_main_fails_clearly_without_haproxy(tmp_path, capsys):
    with patch_module_args({"socket": str(tmp_path / "none.sock"), "backend": "dspark"}):
        with pytest.raises(SystemExit) as exit_info:
            haproxy_servers_info.main()
    assert exit_info.value.code == 1
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] and "Is HAProxy running" in result["msg"]
