"""Two routers behind one service address (issue #42), on the fleet lab: spark-router and spark-router2, keepalived
moving 10.232.0.200 between them (inventories/lab-fleet/group_vars/dspark_router.yml).

Under load through the service address, the router that holds it dies three ways (routerlab.FAILURES): its HAProxy
killed, its container stopped, its frames dropped on the lab's bridge. Each time the address moves to the other router,
and the only requests that fail are those in flight on the router that died (a request sent meanwhile waits for TCP's
retransmission and reaches the new holder). A client's refused requests are counted across a move: the HAProxies
share their tables (peers). playbooks/router.yml with a changed configuration, under the same load, converges one
router at a time, the holder last, and no request fails. Every test leaves spark-router holding the address, as the
other fleet suites expect.
"""

import hashlib
import os
import time

import pytest

import loadclient
import routerlab as lab
from fleetlab import node, wait_for

RATE = 4.0


@pytest.fixture(scope="module", autouse=True)
def fleet_ready():
    problem = lab.fleet_problem()
    if problem is None:
        return
    if os.environ.get("DSPARK_LAB_REQUIRED") == "1":
        pytest.fail(problem, pytrace=False)
    pytest.skip(problem)


def active(name, unit):
    return lab.in_router(name, "systemctl is-active %s" % unit)[1].strip()


def under_load(break_it, seconds_before=4, seconds_after=8):
    """Load through the service address; `break_it()` after `seconds_before`; returns (records, the moment the break
    was done: the router is dead by then)."""
    load = loadclient.Load(lab.ROUTER_URL, count=int(RATE * 600), rate=RATE, api_key=lab.api_key(), timeout=30,
                           allowed_networks=lab.LOAD_NETWORKS).start()
    try:
        time.sleep(seconds_before)
        break_it()
        broken_at = time.time()
        time.sleep(seconds_after)
    finally:
        load.stop()
    return load.wait(120), broken_at


def assert_only_in_flight_failed(records, broken_at, what, grace=0.0):
    """Every failed request was in flight when the router died (sent before its death), or sent within `grace`
    seconds after it."""
    failed = [r for r in records if not r["ok"]]
    late = [r for r in failed if r["started"] > broken_at + grace]
    assert not late, late[:5]
    assert len(records) > RATE * 10, len(records)
    within = ", or sent within %.1f s" % grace if grace else ""
    print("\n%s: %d requests, %d failed (in flight%s)" % (what, len(records), len(failed), within))


def test_one_router_holds_the_address_and_the_other_has_its_tables():
    # The first router of the inventory (priority 150) took it at the converge (a lab where a run stopped halfway
    # through this file may have it elsewhere: systemctl restart keepalived on spark-router2).
    assert lab.holders() == ["spark-router"]
    for name in lab.ROUTERS:
        assert active(name, "haproxy") == active(name, "keepalived") == "active", name
    records = loadclient.run_load(lab.ROUTER_URL, 4, 20.0, api_key=lab.api_key(),
                                  allowed_networks=lab.LOAD_NETWORKS)[0]
    assert all(r["ok"] for r in records), records
    # The per-key table's entry (the SHA-256 of the key) reached the other router over the peers protocol.
    entry = hashlib.sha256(lab.api_key().encode()).hexdigest().upper()
    table = "echo 'show table dspark_api' | socat -t 2 stdio unix-connect:%s" % lab.SOCKET
    assert wait_for(lambda: entry in lab.in_router("spark-router2", table)[1].upper(), 10, 0.5)


def test_a_killed_haproxy_gives_the_address_away_and_comes_back_as_backup():
    """kill -9 of every HAProxy process: keepalived stops with it and the address moves; systemd restarts HAProxy, and
    keepalived with it, as the backup (no preemption: the address stays where it went). Between HAProxy's death and
    the address leaving (systemd stops keepalived, which hands it on) nothing listens on the port, and a connection
    that arrives then is refused: the full suite once saw one, sent at the kill; within 1 s here."""
    kill, dummy = lab.FAILURES["haproxy_killed"]
    records, broken_at = under_load(lambda: kill("spark-router"))
    assert lab.holders() == ["spark-router2"]
    assert_only_in_flight_failed(records, broken_at, "killed HAProxy", grace=1.0)
    assert wait_for(lambda: active("spark-router", "haproxy") == active("spark-router", "keepalived") == "active", 30,
                    0.5)
    time.sleep(3)
    assert lab.holders() == ["spark-router2"]


def test_a_stopped_router_gives_the_address_away():
    """The holder's container stopped (spark-router2 after the test above): the address moves back to spark-router."""
    assert lab.holders() == ["spark-router2"]
    stop, start = lab.FAILURES["router_stopped"]
    try:
        records, broken_at = under_load(lambda: stop("spark-router2"))
        assert lab.holders() == ["spark-router"]
        assert_only_in_flight_failed(records, broken_at, "stopped router")
    finally:
        start("spark-router2")
    assert wait_for(lambda: active("spark-router2", "keepalived") == "active", 60, 1)
    time.sleep(3)
    assert lab.holders() == ["spark-router"]


def test_a_router_whose_frames_are_dropped_loses_the_address():
    """Every frame of spark-router dropped on the lab's bridge: the other router hears no advert and takes the
    address. The cut-off router sees no group up either, so it gives the address up instead of answering 503 when the
    frames flow again (found by this test), and the address comes back to it only when asked."""
    cut, heal = lab.FAILURES["frames_dropped"]
    try:
        records, broken_at = under_load(lambda: cut("spark-router"), seconds_after=10)
        assert "spark-router2" in lab.holders()
        assert_only_in_flight_failed(records, broken_at, "dropped frames")
    finally:
        heal("spark-router")
    records = loadclient.run_load(lab.ROUTER_URL, 16, 4.0, api_key=lab.api_key(), allowed_networks=lab.LOAD_NETWORKS)[0]
    assert all(r["ok"] for r in records), [r.get("error") for r in records]
    assert lab.restore_first_router()


def test_a_clients_refused_requests_are_counted_across_a_move():
    """router_unauthenticated_rate (50 per 10 s per client address): 45 refused on spark-router, then the address
    moves (its HAProxy stopped, keepalived with it), and spark-router2 refuses that address after 6 more, not 50."""
    target = loadclient.check_target(lab.ROUTER_URL, lab.LOAD_NETWORKS)

    def refused(index):
        return loadclient.one_request(target, index, False, lab.MODEL, "refuse-%d-0123456789abcdef" % index, 10, 4)["status"]

    try:
        first = [refused(i) for i in range(45)]
        assert first == [401] * 45, first
        lab.in_router("spark-router", "systemctl stop haproxy")
        assert lab.wait_holder("spark-router2", 10), lab.holders()
        then = [refused(100 + i) for i in range(8)]
        assert then[:5] == [401] * 5 and then[-1] == 429, then
    finally:
        lab.in_router("spark-router", "systemctl start haproxy")
        assert lab.restore_first_router()


def converged_in_order(run):
    """The routers in the order router.yml converged them (serial: 1, a batch each)."""
    order = []
    for line in run.out.splitlines():
        if line.startswith("TASK [dspark.cluster.router : Validate") or "Validating arguments against arg spec" in line:
            order.append(None)
        elif order and order[-1] is None and line.startswith("ok: ["):
            order[-1] = line[len("ok: ["):].split("]")[0]
    return order


def test_the_routers_are_rolled_one_at_a_time_and_no_request_fails():
    """playbooks/router.yml with a change to HAProxy's configuration (router_timeout_queue), under load through the
    service address: spark-router2 first (it does not hold the address), spark-router last, each reloaded, not
    restarted, and the next one only once the one before could take the address. Then back, under load again."""
    assert lab.holders() == ["spark-router"]
    runs = []
    for args in (["-e", "router_timeout_queue=59"], []):
        records, dummy = under_load(lambda args=args: runs.append(lab.playbook("router.yml", *args)), seconds_after=2)
        run = runs[-1]
        assert run.rc == 0, run.tail()
        assert converged_in_order(run) == ["spark-router2", "spark-router"], run.tail()
        assert run.changed("spark-router") > 0 and run.changed("spark-router2") > 0, run.recap
        failed = [r for r in records if not r["ok"]]
        assert not failed and len(records) > RATE * 20, (len(records), failed[:5])
        print("\nrouter roll %s: %d requests through the service address, none failed, %.0f s"
              % (" ".join(args) or "(back)", len(records), run.seconds))
        assert lab.holders() == ["spark-router"]


CONNECT = ("python3 -c \"import socket; s = socket.socket(); s.settimeout(2)\n"
           "try:\n    s.connect(('%s', %d)); print('open')\nexcept socket.timeout: print('blocked')\n"
           "except OSError as e: print('error', e)\"")
# A VRRPv2 advert for router id 52 with priority 255 (it would take the address if let in), from a raw socket.
VRRP = ("python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_RAW, 112)\n"
        "s.sendto(bytes([0x21, 52, 255, 1, 1, 1, 0, 0, 10, 232, 0, 200, 0, 0, 0, 0, 0, 0, 0, 0]), ('%s', 0))\"")


def vrrp_dropped(router):
    """The packets counted by the router's 'VRRP from anyone else' rule."""
    listed = lab.in_router(router, "nft list table inet dspark_router")[1]
    line = next(l for l in listed.splitlines() if "VRRP from anyone else" in l)
    return int(line.split("packets")[1].split()[0])


def test_only_the_routers_reach_the_peers_port_and_speak_vrrp():
    """table inet dspark_router (router_firewall): spark-b0, a serving node on the same management network, cannot
    reach spark-router2's peers port, and its VRRP advert (priority 255) is dropped and counted; spark-router reaches
    the port (and the other tests prove that the routers' adverts and tables pass). A second run changes nothing."""
    address = {r["name"]: r["mgmt_ip"] for r in lab.labspec.spec_for(lab.INVENTORY)["routers"]}["spark-router2"]
    assert node("spark-b0", CONNECT % (address, 10000))[1].strip() == "blocked"
    assert lab.in_router("spark-router", CONNECT % (address, 10000))[1].strip() == "open"
    before = vrrp_dropped("spark-router2")
    rc, out, err = node("spark-b0", VRRP % address)
    assert rc == 0, out + err
    assert wait_for(lambda: vrrp_dropped("spark-router2") > before, 5, 0.5)
    time.sleep(2)
    assert lab.holders() == ["spark-router"]
    # Its directory does not lock others out of /etc/dspark (the monitor's Prometheus reads its web config there).
    assert lab.in_router("spark-router", "stat -c %a /etc/dspark/router")[1].strip() == "755"
    assert lab.in_router("spark-router", "stat -c %a /etc/dspark")[1].strip() in ("755", "750")
    # The counters moved: the next run still finds the table as it wants it (it compares it without them).
    run = lab.playbook("router.yml")
    assert run.rc == 0 and run.changed() == 0, (run.recap, run.tail())
