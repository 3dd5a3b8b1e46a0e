"""haproxy_stat: parsing HAProxy 3.0's runtime API answers (captured from the fleet lab's router), the combined
server view, waiting, and the socket client against a fake admin socket."""

import os
import socket
import threading
from pathlib import Path

import pytest

from ansible_collections.dspark.cluster.plugins.module_utils import haproxy_stat as hs

FIXTURES = Path(__file__).parent / "fixtures" / "haproxy"
STAT = (FIXTURES / "show_stat.csv").read_text()
STATE = (FIXTURES / "show_servers_state.txt").read_text()


def test_parse_stat_servers_of_the_backend_only():
    stat = hs.parse_stat(STAT, "dspark")
    assert sorted(stat) == ["pair_a", "pair_b", "trio_c"]
    assert stat["pair_b"]["status"] == "DRAIN"
    assert stat["pair_a"]["scur"] == 0 and stat["pair_a"]["lastchg"] == 293
    # "* L7OK" (a check running now) reads as its last result.
    assert stat["pair_a"]["check_status"] == "L7OK"
    assert stat["trio_c"]["addr"] == "10.232.0.15:8888"
    assert hs.parse_stat(STAT, "other") == {}
    assert hs.backend_exists(STAT, "dspark") and not hs.backend_exists(STAT, "dspark_api")


def test_parse_servers_state():
    state = hs.parse_servers_state(STATE, "dspark")
    assert state["pair_b"]["admin_state"] == 8 and state["pair_b"]["op_state"] == 2
    assert state["pair_a"] == {"op_state": 2, "admin_state": 0, "weight_configured": 1, "weight_current": 1,
                               "address": "10.232.0.11", "port": 8888}


def test_unexpected_answers_raise():
    with pytest.raises(hs.HAProxyError):
        hs.parse_stat("Unknown command\n", "dspark")
    with pytest.raises(hs.HAProxyError):
        hs.parse_servers_state("Permission denied\n", "dspark")


def test_combine_rotation_and_admin_states():
    servers = {s["name"]: s for s in hs.combine(hs.parse_stat(STAT, "dspark"), hs.parse_servers_state(STATE, "dspark"))}
    assert servers["pair_a"]["in_rotation"] and servers["pair_a"]["admin"] == "ready" and servers["pair_a"]["healthy"]
    assert not servers["pair_b"]["in_rotation"] and servers["pair_b"]["admin"] == "drain"
    assert servers["pair_b"]["admin_flags"] == ["drain"] and servers["pair_b"]["healthy"]
    assert servers["trio_c"]["address"] == "10.232.0.15" and servers["trio_c"]["port"] == 8888


@pytest.mark.parametrize("op_state, admin, weight, healthy, in_rotation, admin_name", [
    (2, 0, 1, True, True, "ready"),
    (0, 0, 1, False, False, "ready"),       # health check failing
    (2, 0x01, 1, True, False, "maint"),     # set server state maint
    (2, 0x04, 1, True, False, "maint"),     # disabled in the configuration
    (0, 0x08, 1, False, False, "drain"),    # drained and down (being reprovisioned)
    (2, 0x09, 1, True, False, "maint"),     # maintenance wins over drain
    (2, 0, 0, True, False, "ready"),        # weight 0
    (1, 0, 1, False, True, "ready"),        # starting (slowstart): takes a share
])
def test_in_rotation_rules(op_state, admin, weight, healthy, in_rotation, admin_name):
    server = hs.combine({"g": {"scur": 0}}, {"g": {"op_state": op_state, "admin_state": admin, "weight_current": weight}})[0]
    assert (server["healthy"], server["in_rotation"], server["admin"]) == (healthy, in_rotation, admin_name)


def _servers(sessions):
    return [{"name": "g", "sessions": sessions, "healthy": sessions == 0, "in_rotation": False}]


def test_wait_for_server_until_no_sessions():
    answers = iter([3, 2, 0])
    now = [0.0]
    servers, server, waited, timed_out = hs.wait_for_server(
        lambda: _servers(next(answers)), "g", "no_sessions", 10, 1,
        clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert server["sessions"] == 0 and not timed_out and waited == 2.0


def test_wait_for_server_times_out_without_failing():
    now = [0.0]
    dummy, server, waited, timed_out = hs.wait_for_server(
        lambda: _servers(1), "g", "no_sessions", 3, 1, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert timed_out and server["sessions"] == 1 and waited == 3.0


def test_wait_for_unknown_server_returns_none():
    assert hs.wait_for_server(lambda: _servers(0), "x", "healthy", 5, 1)[1] is None
    with pytest.raises(ValueError):
        hs.condition_met(_servers(0)[0], "bogus")


@pytest.fixture
def fake_socket(tmp_path):
    """A unix socket that answers `show stat` and `show servers state dspark` like HAProxy (one command each)."""
    path = str(tmp_path / "admin.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(5)
    seen = []

    def serve():
        while True:
            try:
                conn, dummy = server.accept()
            except OSError:
                return
            with conn:
                command = conn.recv(4096).decode().strip()
                seen.append(command)
                conn.sendall({"show stat": STAT, "show servers state dspark": STATE}.get(command, "Unknown command.\n").encode())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path, seen
    server.close()


def test_read_servers_over_the_socket(fake_socket):
    path, seen = fake_socket
    servers = hs.read_servers(path, "dspark")
    assert [s["name"] for s in servers] == ["pair_a", "pair_b", "trio_c"]
    assert seen == ["show stat", "show servers state dspark"]
    assert hs.read_servers(path, "nope") is None


def test_query_without_haproxy(tmp_path):
    with pytest.raises(hs.HAProxyError, match="show stat"):
        hs.query(str(tmp_path / "absent.sock"), "show stat", timeout=1)
    assert not os.path.exists(str(tmp_path / "absent.sock"))
