"""watch's round (issue #40): one verify.yml run over every group the watch holds, split per group by host. The split
and the per-group verdict as pure functions, then the supervisor on the fake runner of test_watch.py: isolation (one
group's failure never marks another broken), locked groups left out of the run, a broken group followed up as before,
serving groups' locks released before the broken ones are restarted."""

import os

from dspark_fleet import journal, locks, watch
from dspark_fleet.events import SplitEvents
from dspark_fleet.runner_exec import RunResult

from test_watch import POLICY, FakeRunner, actions, make_watch, task_failed

MEMBERS = {"a": ["a0", "a1"], "b": ["b0", "b1", "b2"], "c": ["c0", "c1"]}


def play(name="Verify - proof"):
    return [{"event": "playbook_on_play_start", "event_data": {"play": name}},
            {"event": "playbook_on_task_start", "event_data": {"task": "Prove"}}]


def proof_ok(head, ranks=2):
    return {"event": "runner_on_ok", "event_data": {
        "host": head, "task": "Prove", "task_action": "dspark.cluster.tp_ranks",
        "res": {"registered_ranks": [{"rank": r, "node": head} for r in range(ranks)], "world_size": ranks}}}


def proof_failed(head, node, msg="rank 1 is not running (exited 137)"):
    return {"event": "runner_on_failed", "event_data": {
        "host": head, "task": "Prove", "task_action": "dspark.cluster.tp_ranks",
        "res": {"failed": True, "msg": msg,
                "diagnosis": [{"code": "container_exited", "rank": 1, "node": node, "cause": "exit 137",
                               "first_failure": True, "exit_code": 137}]}}}


def rescued_on(host):
    """A later task on the head (verify.yml's rescue, its status read, its final fail)."""
    return [{"event": "runner_on_ok", "event_data": {"host": host, "task": "Mark every member", "res": {}}},
            {"event": "runner_on_failed",
             "event_data": {"host": host, "task": "Fail the group whose proof failed", "res": {"msg": "group does not serve"}}}]


def stats():
    return [{"event": "playbook_on_stats", "event_data": {"ok": {}, "failures": {}}}]


# --------------------------------------------------------------------------- pure: the split and the verdict


def fold(events, groups=("a", "b"), members=None):
    split = SplitEvents(groups, watch.host_groups(members or MEMBERS, groups))
    for event in events:
        split.feed(event)
    return split


def test_the_split_gives_each_group_its_hosts_events_and_every_group_the_runs_own():
    split = fold(play() + [proof_failed("a0", "a1"), proof_ok("b0", 3)] + rescued_on("a0") + stats())
    a, b = split.groups["a"], split.groups["b"]
    assert a.tp_ranks["ok"] is False and b.tp_ranks["ok"] is True and b.tp_ranks["world_size"] == 3
    assert [f["host"] for f in a.failures] == ["a0", "a0"] and b.failures == []
    assert a.phase == b.phase == "verify" and a.stats is not None and b.stats is not None
    assert set(a.host_seen) == {"a0"} and set(b.host_seen) == {"b0"}


def test_a_host_of_no_group_in_the_run_is_dropped_and_one_group_takes_every_host():
    split = fold(play() + [proof_failed("c0", "c1")], groups=("a", "b"))
    assert split.groups["a"].failures == [] and split.groups["b"].failures == []
    alone = SplitEvents(["g"], {})
    for event in play() + [proof_ok("h0")]:
        alone.feed(event)
    assert alone.groups["g"].tp_ranks["ok"] is True


def test_judge_group_isolates_a_group_from_another_groups_failure():
    split = fold(play() + [proof_failed("a0", "a1"), proof_ok("b0", 3)] + rescued_on("a0") + stats())
    run = RunResult(status="failed", rc=2)
    a = watch.judge_group(run, split.groups["a"])
    b = watch.judge_group(run, split.groups["b"])
    assert b == {"ok": True, "summary": None, "diagnosis": None, "failed_tasks": []}
    assert a["ok"] is False and a["summary"].startswith("rank 1 on a1 failed first (container exit code 137)")
    assert a["diagnosis"][0]["node"] == "a1"


def test_judge_group_a_group_without_its_own_proof_in_a_failed_run_is_broken():
    split = fold(play() + [proof_failed("a0", "a1")])
    b = watch.judge_group(RunResult(status="failed", rc=2), split.groups["b"])
    assert b["ok"] is False and "ended with status failed" in b["summary"]
    # a run that ended in error (no events at all) breaks every group
    for group in ("a", "b"):
        verdict = watch.judge_group(RunResult(status="error", rc=None, error="cannot start"), fold([]).groups[group])
        assert verdict["ok"] is False and verdict["summary"] == "cannot start"


def test_judge_group_a_proof_with_a_standing_failure_of_its_own_is_broken():
    unreachable = {"event": "runner_on_unreachable", "event_data": {"host": "b1", "task": "Read", "res": {"msg": "x"}}}
    split = fold(play() + [proof_ok("b0", 3), unreachable])
    assert watch.judge_group(RunResult(status="failed", rc=4), split.groups["b"])["ok"] is False


# --------------------------------------------------------------------------- the supervisor on the fake runner


def two_groups(tmp_path, script, groups=("a", "b"), routers=()):
    w, runner, said, clock = make_watch(tmp_path, script, groups=groups, routers=routers)
    w.members = MEMBERS
    return w, runner, said, clock


def test_one_run_checks_every_group_and_a_serving_round_runs_nothing_else(tmp_path):
    w, runner, said, clock = two_groups(tmp_path, {("a,b", "check"): [("successful", play() + [
        proof_ok("a0"), proof_ok("b0", 3)] + stats())]})
    w.round(1)
    assert [(c[0], c[1], c[2]) for c in runner.calls] == [("a,b", "check", "verify.yml")]
    assert runner.calls[0][3] == ["-e", "@x.yml"]
    assert actions(tmp_path, "a") == ["check"] and actions(tmp_path, "b") == ["check"]
    records = [r for r in journal.read(str(tmp_path / "journal.jsonl")) if r["action"] == "check"]
    assert all(r["ok"] and r["summary"] is None and r["log"] is None and "duration_s" in r for r in records)
    assert w.health == {"a": "ok", "b": "ok"}
    assert not os.path.exists(str(tmp_path / "art" / "round00001"))         # nothing left of a serving round


def test_isolation_one_groups_failure_never_marks_another_broken(tmp_path):
    w, runner, said, clock = two_groups(tmp_path, {
        ("a,b", "check"): [("failed", play() + [proof_failed("a0", "a1"), proof_ok("b0", 3)]
                            + rescued_on("a0") + stats())],
        ("a", "logs"): [("successful", [])],
        ("a", "restart"): [("successful", [proof_ok("a0")])],
    })
    w.round(1)
    assert [(c[0], c[1]) for c in runner.calls] == [("a,b", "check"), ("a", "logs"), ("a", "restart")]
    assert actions(tmp_path, "a") == ["check", "logs", "restart"]
    assert actions(tmp_path, "b") == ["check"]
    checks = dict((r["group"], r) for r in journal.read(str(tmp_path / "journal.jsonl")) if r["action"] == "check")
    assert checks["b"]["ok"] is True and checks["b"]["summary"] is None and checks["b"]["diagnosis"] is None
    assert checks["a"]["ok"] is False and checks["a"]["summary"].startswith("rank 1 on a1 failed first")
    assert checks["a"]["diagnosis"][0]["node"] == "a1"
    assert checks["a"]["log"] == os.path.join(str(tmp_path), "art", "round00001", "all-groups", "check", "stdout")
    assert w.health == {"a": "ok", "b": "ok"}
    assert "b: serving" in said and any(s.startswith("a: NOT serving: rank 1 on a1") for s in said)


def test_locked_groups_are_left_out_of_the_run(tmp_path):
    w, runner, said, clock = make_watch(tmp_path, {("a,c", "check"): [("successful", play() + [
        proof_ok("a0"), proof_ok("c0")])]}, groups=("a", "b", "c"))
    w.members = MEMBERS
    held = locks.GroupLock(str(tmp_path), "b", "reprovision")
    assert held.acquire()
    try:
        w.round(1)
    finally:
        held.release()
    assert [(c[0], c[1]) for c in runner.calls] == [("a,c", "check")]
    assert actions(tmp_path, "b") == ["locked"] and actions(tmp_path, "a") == actions(tmp_path, "c") == ["check"]
    assert w.health == {"a": "ok", "b": "locked", "c": "ok"}


def test_every_group_locked_runs_nothing(tmp_path):
    w, runner, said, clock = two_groups(tmp_path, {})
    held = [locks.GroupLock(str(tmp_path), g, "reprovision") for g in ("a", "b")]
    assert all(lock.acquire() for lock in held)
    try:
        w.round(1)
    finally:
        for lock in held:
            lock.release()
    assert runner.calls == [] and w.health == {"a": "locked", "b": "locked"}


def test_serving_groups_locks_are_released_before_a_broken_group_is_restarted(tmp_path):
    seen = {}

    class Probe(FakeRunner):
        def __call__(self, spec, event_handler=None, cancel_callback=None):
            if spec.ident == "restart":
                probe = locks.GroupLock(str(tmp_path), "b", "probe")
                seen["b free during a's restart"] = probe.acquire()
                probe.release()
                probe = locks.GroupLock(str(tmp_path), "a", "probe")
                seen["a free during a's restart"] = probe.acquire()
                probe.release()
            return super().__call__(spec, event_handler, cancel_callback)

    w, runner, said, clock = two_groups(tmp_path, {})
    w.runner = Probe({("a,b", "check"): [("failed", play() + [proof_failed("a0", "a1"), proof_ok("b0", 3)]
                                          + rescued_on("a0"))],
                      ("a", "logs"): [("successful", [])],
                      ("a", "restart"): [("successful", [proof_ok("a0")])]})
    w.round(1)
    assert seen == {"b free during a's restart": True, "a free during a's restart": False}
    assert locks.GroupLock(str(tmp_path), "a", "x").acquire()          # released at the end of the round


def test_a_broken_group_is_still_drained_restarted_and_put_back(tmp_path):
    w, runner, said, clock = two_groups(tmp_path, {
        ("a,b", "check"): [("failed", play() + [proof_ok("a0"), proof_failed("b0", "b1")] + rescued_on("b0"))],
        (None, "drain"): [("successful", [])],
        ("b", "logs"): [("successful", [])],
        ("b", "restart"): [("successful", [proof_ok("b0", 3)])],
        (None, "enable"): [("successful", [])],
    }, routers=["router-1"])
    w.round(1)
    assert actions(tmp_path, "b") == ["check", "drain", "logs", "restart", "enable"]
    assert actions(tmp_path, "a") == ["check"]
    restart = [r for r in journal.read(str(tmp_path / "journal.jsonl")) if r["action"] == "restart"][0]
    assert restart["ok"] and restart["attempt"] == 1 and restart["because"].startswith("rank 1 on b1 failed first")
    assert w.health == {"a": "ok", "b": "ok"}


def test_a_run_that_could_not_start_breaks_every_group_it_checked(tmp_path):
    w, runner, said, clock = two_groups(tmp_path, {
        ("a,b", "check"): [("error", [])],
        ("a", "logs"): [("successful", [])], ("a", "restart"): [("failed", task_failed("still down"))],
        ("b", "logs"): [("successful", [])], ("b", "restart"): [("failed", task_failed("still down"))],
    })
    w.round(1)
    assert actions(tmp_path, "a") == actions(tmp_path, "b") == ["check", "logs", "restart"]
    assert w.health == {"a": "broken", "b": "broken"}


def test_a_group_drained_by_the_supervisor_that_serves_is_put_back_in_its_thread(tmp_path):
    w, runner, said, clock = two_groups(tmp_path, {
        ("a,b", "check"): [("successful", play() + [proof_ok("a0"), proof_ok("b0", 3)])],
        (None, "enable"): [("successful", [])]}, routers=["router-1"])
    w.record("drain", "a", ok=True)
    w.round(1)
    assert actions(tmp_path, "a") == ["drain", "check", "enable"] and actions(tmp_path, "b") == ["check"]
    assert w.states["a"]["drained"] is None


def test_the_crash_loop_cap_still_holds_with_a_neighbour_serving(tmp_path):
    fails = [("failed", play() + [proof_failed("a0", "a1"), proof_ok("b0", 3)] + rescued_on("a0"))] * 4
    w, runner, said, clock = two_groups(tmp_path, {("a,b", "check"): fails, ("a", "logs"): [("successful", [])] * 3,
                                                   ("a", "restart"): [("failed", task_failed("down"))] * 3})
    w.policy = watch.Policy(max_restarts=1, window_s=3600, backoff_base_s=1, backoff_max_s=1)
    for step in range(3):
        clock.t += 100
        w.round(step + 1)
    assert actions(tmp_path, "a") == ["check", "logs", "restart", "check", "give_up", "check", "failed"]
    assert actions(tmp_path, "b") == ["check"] * 3
    assert w.health == {"a": "failed", "b": "ok"}
    assert POLICY.max_restarts == 3                       # the shared policy was not touched
