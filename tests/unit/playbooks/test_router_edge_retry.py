"""A group that just died costs no request through the router: the router and the heads' edges as real HAProxies, each
configured by its own plan (_router_plan, _serve_edge), the router in front of two edges.

While nothing listens behind an edge (its engine stopped or restarting, and the router's health check has not yet
taken the group out), the edge answers the router 425 with `X-Dspark-Edge: engine-unreachable`, and the router retries
the request on the other group: the client gets the other group's answer. A request the engine itself answered (vLLM's
own 503 of a dead engine) is never retried: it may have generated. With no group left, the client gets 503 with the
edge's header, never 425. What a router's retry cannot keep (a body over tune.bufsize) is answered 503 at once.

Same test-process changes as test_router_haproxy.py and test_serve_edge_haproxy.py (no chroot/user/group, the log on
stdout); the edges trust 127.0.0.1 as their router, where the router's connections come from.
"""

import time

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_edge
from test_router_haproxy import HAPROXY, Backend, free_port, request, server_state, start_router
from test_serve_edge_haproxy import settings as edge_settings
from test_serve_edge_haproxy import start as start_edge
from test_serve_edge_haproxy import wait_listening

pytestmark = pytest.mark.skipif(
    HAPROXY is None, reason="no haproxy binary (apt-get install haproxy; tests/ci/prereqs.sh test installs it)")

KEY = "retry-sentinel-key-0123456789abcdef"
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


def edge(work, engine_port):
    """An edge whose router is 127.0.0.1 (where the test router connects from): its port and process."""
    work.mkdir()
    port = free_port()
    values = edge_settings(work, engine_port, port, keys=(KEY,))
    values["trusted"] = [("dspark_router host router", "127.0.0.1")]
    plan = _serve_edge.plan(values)
    assert "http-after-response set-status 425" in plan["config"], plan["config"]
    proc = start_edge(work, plan)
    wait_listening(port)
    return port, proc


def router(work, servers):
    """The router over `servers` (name, port): health checks that never take a group out within a test (fall 100),
    so that a request meets a dead group as it does before its check fails. (port, settings, process, log)."""
    port, values, proc, log, dummy = start_router(
        work, [{"name": name, "head": name, "address": "127.0.0.1", "port": p} for name, p in servers],
        router_health_interval=1, router_health_fast_interval=1, router_health_fall=100, router_health_rise=1,
        router_hard_stop_after=5, router_metrics_port=0)
    wait_listening(port)
    return port, values, proc, log


def stat(values, name):
    return server_state(values["router_admin_socket"], values["router_backend_name"], name)


def chat(port, body=BODY):
    return request(port, "/v1/chat/completions", method="POST", key=KEY, headers=["Content-Type: application/json"],
                   body=body)


@pytest.fixture
def stack(tmp_path):
    """Start edges and a router; everything stopped at the end."""
    procs, logs = [], []

    def make(*heads):
        """heads: (name, Backend): an edge per head, in front of its Backend."""
        servers = []
        for name, backend in heads:
            port, proc = edge(tmp_path / name, backend.port)
            procs.append(proc)
            servers.append((name, port))
        (tmp_path / "router").mkdir()
        port, values, proc, log = router(tmp_path / "router", servers)
        procs.append(proc)
        logs.append(log)
        return port, values

    yield make
    for proc in procs:
        proc.kill()
        proc.wait()
    for log in logs:
        log.close()


def wait_up(values, names):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(stat(values, n)["status"].startswith("UP") for n in names):
            return
        time.sleep(0.1)
    raise AssertionError({n: stat(values, n)["status"] for n in names})


def kill_engine(backend):
    """The engine behind an edge stops: nothing listens on its port any more."""
    backend.server.shutdown()
    backend.server.server_close()


def test_a_request_meeting_a_dead_group_is_answered_by_the_other(stack):
    doomed, live = Backend(), Backend()
    port, values = stack(("dead", doomed), ("live", live))
    wait_up(values, ("dead", "live"))
    kill_engine(doomed)
    answers = [chat(port) for dummy in range(6)]
    assert [a[0] for a in answers] == [200] * 6, answers
    assert {a[1].get("x-dspark-group") for a in answers} == {"live"}, answers
    assert len(live.client_requests()) == 6
    # Not the balance's luck: the dead group was still in rotation, took requests and the router sent them on.
    dead = stat(values, "dead")
    assert dead["status"].startswith("UP") and int(dead["wredis"]) >= 1, dead


def test_the_engines_own_503_is_not_retried(stack):
    engine, live = Backend(api_status=503), Backend()
    port, values = stack(("dead_engine", engine), ("live", live))
    wait_up(values, ("dead_engine", "live"))
    answers = [chat(port) for dummy in range(4)]
    refused = [a for a in answers if a[0] == 503]
    assert refused and all(a[1].get("x-dspark-group") == "dead_engine" and "x-dspark-edge" not in a[1]
                           for a in refused), answers
    # Each request the engine answered reached it once, and none of those went on to the other group.
    assert len(engine.client_requests()) == len(refused)
    assert len(live.client_requests()) == len(answers) - len(refused)
    assert int(stat(values, "dead_engine")["wredis"]) == 0


def test_with_no_group_left_the_client_gets_503_with_the_edges_header(stack):
    doomed = Backend()
    port, values = stack(("dead", doomed))
    wait_up(values, ("dead",))
    kill_engine(doomed)
    status, headers, body = chat(port)
    assert status == 503 and headers.get("x-dspark-edge") == "engine-unreachable", (status, headers, body)
    assert b"engine behind the API edge does not answer" in body


def test_a_body_over_the_buffer_is_not_kept_for_a_retry(stack):
    doomed, live = Backend(), Backend()
    port, values = stack(("dead", doomed), ("live", live))
    wait_up(values, ("dead", "live"))
    kill_engine(doomed)
    big = b'{"model": "m", "messages": [{"role": "user", "content": "%s"}]}' % (b"x" * 40000)
    answers = [chat(port, big) for dummy in range(4)]
    statuses = [a[0] for a in answers]
    # leastconn alternates between idle groups: some reach the dead one, and those are not retried.
    assert set(statuses) <= {200, 503} and 503 in statuses, statuses
    assert all(a[1].get("x-dspark-edge") == "engine-unreachable" for a in answers if a[0] == 503), answers
    assert len(live.client_requests()) == statuses.count(200)
