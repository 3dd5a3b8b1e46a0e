"""Two routers share their limit tables (issue #42): two real HAProxies on the role's configuration with peers
(_router_vrrp.haproxy_settings through _router_plan.haproxy), as two routers behind one service address are.

One router takes the requests at a time (the service address's holder); when the address moves, the other must know
what the first counted. Requests without a valid key from one client address (router_unauthenticated_rate, 4 per 10 s
here), counted on router A, are counted on router B too: B refuses that address after the rest of the allowance, not
after a fresh one. Without peers (the control) B starts from nothing: the test would fail. Same test-process changes
as test_router_haproxy.py (no chroot/user/group, the log on stdout); both routers and their peers on 127.0.0.1.
"""

import time

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_plan, _router_vrrp
from test_router_haproxy import HAPROXY, Backend, admin, free_port, request, server_state, start_router

pytestmark = pytest.mark.skipif(
    HAPROXY is None, reason="no haproxy binary (apt-get install haproxy; tests/ci/prereqs.sh test installs it)")

UNAUTHENTICATED = 4
SOURCE = "127.0.0.31"
GROUPS = {"all": ["ra", "rb"], "dspark_router": ["ra", "rb"]}


def routers(tmp_path, backend, peers=True):
    """Routers ra and rb over one backend, with peers (or without): [(name, port, settings, process, log)]."""
    hostvars = {"ra": {"dspark_mgmt_address": "127.0.0.1"}, "rb": {"dspark_mgmt_address": "127.0.0.1"}}
    peer_ports = {"ra": free_port(), "rb": free_port()}
    out = []
    for name in ("ra", "rb"):
        work = tmp_path / name
        work.mkdir()
        ha = _router_vrrp.haproxy_settings({"router_vip": "127.0.0.1/8", "router_peers_port": 1}, name, GROUPS, hostvars)
        # One host here: each peer on its own port (on routers of their own, router_peers_port is one port).
        ha["peers"] = [(peer, address, peer_ports[peer]) for peer, address, dummy in ha["peers"]] if peers else []
        port, settings, proc, log, config = start_router(
            work, [{"name": "pair_a", "head": "a0", "address": "127.0.0.1", "port": backend.port}], ha=ha,
            router_health_interval=1, router_health_fast_interval=1, router_health_rise=1, router_hard_stop_after=5,
            router_metrics_port=0, router_unauthenticated_rate=UNAUTHENTICATED)
        assert ("peers %s" % _router_plan.PEERS_NAME in config) == peers and ("transparent" in config)
        out.append((name, port, settings, proc, log))
    deadline = time.monotonic() + 10
    for name, port, settings, proc, log in out:
        while True:
            assert proc.poll() is None, (tmp_path / name / "haproxy.log").read_text()
            state = server_state(settings["router_admin_socket"], settings["router_backend_name"], "pair_a") \
                if (tmp_path / name / "admin.sock").exists() else None
            if state and state["status"] == "UP":
                break
            assert time.monotonic() < deadline, state
            time.sleep(0.1)
    return out


def stop(started):
    for dummy, dummy2, dummy3, proc, log in started:
        proc.terminate()
        proc.wait(10)
        log.close()


def refused(port):
    return request(port, "/v1/models", key="refuse-%f-0123456789abcdef" % time.monotonic(), source=SOURCE)[0]


def source_entry(settings):
    """The client address's entry of router's per-source table, as `show table` prints it ('' when absent)."""
    return next((line for line in admin(settings["router_admin_socket"], "show table %s" % _router_plan.SOURCE_TABLE_NAME)
                 .splitlines() if SOURCE in line), "")


@pytest.mark.parametrize("peers, on_b", [(True, [401, 401, 429]), (False, [401, 401, 401, 401, 401, 429])],
                         ids=["peers", "control without peers"])
def test_a_client_counted_on_one_router_is_counted_on_the_other(tmp_path, peers, on_b):
    backend = Backend()
    started = routers(tmp_path, backend, peers)
    try:
        (dummy, port_a, dummy2, dummy3, dummy4), (dummy5, port_b, settings_b, dummy6, dummy7) = started
        assert [refused(port_a) for dummy in range(3)] == [401] * 3
        if peers:
            # The peers protocol pushes the entry within moments; wait for it before the address "moves".
            deadline = time.monotonic() + 5
            while "gpc0_rate(10000)=3" not in source_entry(settings_b):
                assert time.monotonic() < deadline, source_entry(settings_b)
                time.sleep(0.05)
        else:
            assert source_entry(settings_b) == ""
        assert [refused(port_b) for dummy in range(len(on_b))] == on_b
    finally:
        stop(started)
        backend.server.shutdown()
