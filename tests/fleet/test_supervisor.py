"""The supervisor (`dspark-fleet watch`) on the SIMULATED fleet lab: a killed rank, a group that wedges while it
serves, a rank that crashes on every start, and a group held by a reprovision. The serving image is the lab SIMULATOR, not vLLM. (A rebooted node, whose
rank must not start alone, ran here until session 15: about 300 s of CI; the compose file's `restart: "no"` is unit-
tested. Its helpers, the boot wait and the fabric NIC's rename after a restart, are in the git history of fleetlab.py.)

Needs the fleet lab up and serving (`make lab-fleet`, then site.yml); the lab is shared: run it alone
(`make supervisortest`). Every test leaves its group serving again (serve.yml --limit <group>).
"""

import os
import signal
import time

import pytest

import routerlab

from fleetlab import (GROUPS, INVENTORY, chat, container_id, faulty_inventory, fleet, journal, kill_rank, node,
                      rank_state, restore, start_fleet, wait_for)

GROUP = "pair_b"
WORKER = "spark-b1"
# No wall-clock bound (a loaded CI machine is no measure: 250 s once against 240 allowed); the time is printed.


@pytest.fixture
def state(tmp_path):
    """A fresh state dir (locks + journal) per test."""
    return tmp_path / "state"


def watch(state, *args, inventory=INVENTORY, timeout=1500):
    return fleet("watch", "-i", inventory, "--groups", GROUP, "--plain", "--state-dir", state,
                 "--artifacts", state / ("watch-%d" % time.time_ns()), *args, timeout=timeout)


def in_rotation(group=GROUP):
    return routerlab.router_servers().get(group, {}).get("in_rotation")


def actions(state, group=GROUP):
    return [r for r in journal(state / "journal.jsonl") if r.get("group") == group]


def test_a_killed_worker_rank_is_restored_by_watch(state):
    ok, text = chat(GROUP)
    if not ok:
        restore(GROUP)
    rc, out = kill_rank(WORKER)
    assert rc == 0, out
    died = time.monotonic()
    rc, out = watch(state, "--once")
    took = time.monotonic() - died
    print("\nkilled rank -> serving again (watch --once): %.1f s" % took)
    assert rc == 0, out[-4000:]
    records = actions(state)
    # The lab has a router: the broken group leaves its rotation while it is restarted, then goes back.
    assert [r["action"] for r in records] == ["check", "drain", "logs", "restart", "enable"], records
    check, drain, logs, restart, enable = records
    assert drain["ok"] and enable["ok"], (drain, enable)
    assert in_rotation()
    assert check["ok"] is False and check["summary"], check
    # Root cause first (issue #29): the killed worker leads the summary, the head's errors are its consequences.
    assert check["summary"].startswith("rank 1 on %s failed first (container exit code 137" % WORKER), check
    first = [d for d in check["diagnosis"] if d.get("first_failure")]
    assert [(d["rank"], d["node"], d.get("exit_code")) for d in first][:1] == [(1, WORKER, 137)], check
    assert all(d.get("consequence_of") is not None for d in check["diagnosis"]
               if d.get("node") != WORKER and d.get("severity") == "fatal"), check
    assert logs["ok"] and restart["ok"] and restart["attempt"] == 1 and restart["because"] == check["summary"]
    assert rank_state(WORKER)[0] == "running"
    ok, text = chat(GROUP)
    assert ok, text


def test_a_group_that_wedges_while_it_serves_is_restarted_as_a_unit(state):
    """#29 item 7: the head stops answering completions while its process lives and /health stays 200 (the SIMULATOR's
    DSPARK_SIM_WEDGE_FILE, touched inside the running container). The router's health check (GET /health) cannot
    see it; the supervisor's check (one generation, bounded) calls the group wedged, takes it out of rotation,
    restarts it as one unit (every rank's container new) and puts it back."""
    env = node(GROUPS[GROUP][0], "docker inspect --format '{{json .Config.Env}}' dspark-vllm")[1]
    if not chat(GROUP)[0] or "DSPARK_SIM_WEDGE_FILE=/tmp/dspark-sim-wedge" not in env:
        restore(GROUP)                                                       # serving, with the lab's wedge file
    before = {host: container_id(host) for host in GROUPS[GROUP]}
    rc, out, err = node(GROUPS[GROUP][0], "docker exec dspark-vllm touch /tmp/dspark-sim-wedge")
    assert rc == 0, out + err
    ok, text = chat(GROUP)
    assert not ok, text                                                 # the completion hangs until its timeout
    assert in_rotation()                                                # /health still answers 200
    wedged = time.monotonic()
    rc, out = watch(state, "--once")
    print("\nwedged group -> serving again (watch --once): %.1f s" % (time.monotonic() - wedged))
    assert rc == 0, out[-4000:]
    records = actions(state)
    assert [r["action"] for r in records] == ["check", "drain", "logs", "restart", "enable"], records
    check = records[0]
    assert check["ok"] is False and "wedged" in check["summary"], check
    after = {host: container_id(host) for host in GROUPS[GROUP]}
    assert all(after[h] and after[h].split()[0] != (before[h] or "").split()[0] for h in after), (before, after)
    assert in_rotation()
    ok, text = chat(GROUP)
    assert ok, text


def test_a_rank_that_crashes_on_every_start_stops_at_the_cap(state, tmp_path):
    bad = faulty_inventory(tmp_path, WORKER, {"DSPARK_SIM_CRASH_AFTER": "2"})
    try:
        kill_rank(WORKER)
        # A cap of one restart (CI time: each failed restart is a serve.yml run; the backoff between restarts and a
        # cap of several are the unit tests' (test_watch.py, test_watch_e2e.py)).
        rc, out = watch(state, "--rounds", "3", "--interval", "1", "--max-restarts", "1", "--backoff-base", "1",
                        inventory=bad)
        assert rc == 1, out[-4000:]
        seq = [r["action"] for r in actions(state)]
        assert seq.count("restart") == 1, seq
        assert "give_up" in seq and seq.index("give_up") > max(i for i, a in enumerate(seq) if a == "restart"), seq
        assert seq[-1] in ("give_up", "failed"), seq
        give_up = [r for r in actions(state) if r["action"] == "give_up"][0]
        assert "cap 1" in give_up["reason"], give_up
        assert seq.count("drain") == 1 and "enable" not in seq, seq
        assert not in_rotation() and routerlab.router_servers()[GROUP]["admin"] == "drain"   # a failed group stays out
        assert all(not r["ok"] for r in actions(state) if r["action"] == "restart")
        # the status table shows the group failed, with its restarts, from the journal
        rc, out = fleet("status", "-i", INVENTORY, "--groups", GROUP, "--plain", "--state-dir", state,
                        "--artifacts", state / "status")
        assert "Supervisor journal" in out and "FAILED: 1 restart(s)" in out, out[-3000:]
    finally:
        restore(GROUP)


def test_watch_leaves_a_group_alone_while_a_reprovision_holds_it(state, tmp_path):
    lock_file = state / "locks" / (GROUP + ".lock")
    # The fabric phase alone (a reprovision holds the lock the same way for every phase; in the container lab fabric
    # only checks the links, and nothing is restarted): CI time.
    proc = start_fleet("reprovision", "-i", INVENTORY, "--groups", GROUP, "--tags", "fabric", "--plain",
                       "--state-dir", state, "--artifacts", tmp_path / "reprovision", log=tmp_path / "reprovision.log")
    stopped = False
    try:
        held = wait_for(lambda: lock_file.exists() and '"reprovision"' in lock_file.read_text(), 600, 0.5)
        assert held, (tmp_path / "reprovision.log").read_text()[-3000:]
        # Paused while it holds the lock (a stopped process keeps its flock): otherwise a fast reprovision can end
        # before watch looks, and the test would race it. It goes on, as it was, once watch is done.
        os.kill(proc.pid, signal.SIGSTOP)
        stopped = True
        rc, out = watch(state, "--once")
        still = lock_file.read_text()
        assert rc == 1, out[-3000:]
        records = actions(state)
        assert [r["action"] for r in records] == ["locked"], records
        assert records[0]["holder"]["purpose"] == "reprovision" and records[0]["holder"]["pid"] == proc.pid
        assert '"reprovision"' in still                   # the reprovision still held it when watch was done
    finally:
        if stopped:
            os.kill(proc.pid, signal.SIGCONT)
        proc.wait(timeout=1500)
    assert proc.returncode == 0, (tmp_path / "reprovision.log").read_text()[-3000:]
    rc, out = watch(state, "--once")
    assert rc == 0, out[-4000:]
    ok, text = chat(GROUP)
    assert ok, text
