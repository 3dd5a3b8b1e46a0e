"""watch: backoff and cap as pure functions, and the supervisor's decisions from recorded check results
(a fake runner plays the events a check, a log collection or a restart would send; no Ansible, no lab)."""

import json
import os
import types

import pytest

from dspark_fleet import journal, locks, watch
from dspark_fleet.runner_exec import RunResult, RunSpec

POLICY = watch.Policy(max_restarts=3, window_s=6 * 3600, backoff_base_s=30, backoff_max_s=100)


# --------------------------------------------------------------------------- pure


def test_backoff_doubles_up_to_the_max():
    assert [watch.backoff_delay(n, POLICY) for n in range(6)] == [0, 30, 60, 100, 100, 100]


def test_restarts_in_window():
    assert watch.restarts_in_window([0, 100, 21000, 21600], 21650, 6 * 3600) == [100, 21000, 21600]


def state(**kw):
    out = journal.new_state()
    out.update(kw)
    return out


@pytest.mark.parametrize("check_ok, st, now, expect", [
    (True, state(), 10, ("ok", None)),
    (True, state(failed={"reason": "cap"}), 10, ("recovered", "serves again")),
    (False, state(), 10, ("restart", 1)),                                   # first restart at once
    (False, state(restarts=[100], attempts=1), 120, ("backoff", 130)),      # 30 s after the first
    (False, state(restarts=[100], attempts=1), 131, ("restart", 2)),
    (False, state(restarts=[100, 131], attempts=2), 180, ("backoff", 191)),  # then 60 s
    (False, state(restarts=[100, 131, 200], attempts=3), 10000, ("give_up", None)),
    (False, state(restarts=[0, 1, 2], attempts=0), 6 * 3600 + 3, ("restart", 1)),  # the window slid
    (False, state(failed={"reason": "needs a reboot"}), 10, ("failed", "needs a reboot")),
])
def test_decide(check_ok, st, now, expect):
    action, detail = watch.decide(check_ok, st, now, POLICY)
    assert action == expect[0]
    if expect[0] == "give_up":
        assert "3 restart(s) in the last 6 h (cap 3)" in detail
    else:
        assert detail == expect[1]


def test_needs_reboot_is_found_in_any_failed_task():
    assert watch.needs_reboot("x", [{"msg": "spark-b1: memory not reclaimed: the node needs a reboot"}])
    assert not watch.needs_reboot("tp_ranks: rank 1 missing", [])


# --------------------------------------------------------------------------- the supervisor on a fake runner


def tp_ok():
    return [{"event": "runner_on_ok", "event_data": {"host": "h0", "task": "Prove", "task_action": "dspark.cluster.tp_ranks",
                                                     "res": {"registered_ranks": [{"rank": 0, "node": "h0"}],
                                                             "world_size": 2}}}]


def tp_failed(msg="rank 1 on h1 is not running (exited 137)"):
    return [{"event": "runner_on_failed", "event_data": {
        "host": "h0", "task": "Prove", "task_action": "dspark.cluster.tp_ranks",
        "res": {"failed": True, "msg": msg,
                "diagnosis": [{"code": "container_exited", "rank": 1, "node": "h1", "cause": "exit 137"}]}}}]


def task_failed(msg):
    return [{"event": "runner_on_failed", "event_data": {"host": "h1", "task": "Check memory", "res": {"msg": msg}}}]


class FakeRunner:
    """Answers each run from `script[(group, ident)]`: a list of (status, events) consumed in order."""

    def __init__(self, script):
        self.script = dict((k, list(v)) for k, v in script.items())
        self.calls = []

    def __call__(self, spec, event_handler=None, cancel_callback=None):
        self.calls.append((spec.limit, spec.ident, os.path.basename(spec.playbook), list(spec.args)))
        status, events = self.script[(spec.limit, spec.ident)].pop(0)
        for event in events:
            event_handler(event)
        return RunResult(status=status, rc=0 if status == "successful" else 2)


def make_watch(tmp_path, script, groups=("g",), policy=POLICY, now=None, routers=(), no_router=False):
    def spec(ident, folder, playbook, limit, extra):
        return RunSpec(ident=ident, playbook=os.path.join(str(tmp_path), playbook), inventory="inv",
                       project_dir=str(tmp_path), artifacts_dir=folder, private_dir=str(tmp_path), limit=limit,
                       args=extra)

    clock = now or types.SimpleNamespace(t=1000.0)
    runner = FakeRunner(script)
    said = []
    w = watch.Watch(list(groups), spec, str(tmp_path / "art"), policy,
                    journal.Journal(str(tmp_path / "journal.jsonl"), clock=lambda: clock.t), str(tmp_path), said.append,
                    extra_vars=["@x.yml"], router=watch.uses_router(no_router, list(routers)), runner=runner,
                    clock=lambda: clock.t)
    w.clock_holder = clock
    return w, runner, said, clock


def actions(tmp_path, group="g"):
    return [r["action"] for r in journal.read(str(tmp_path / "journal.jsonl")) if r["group"] == group]


def test_a_serving_group_is_left_alone(tmp_path):
    w, runner, said, clock = make_watch(tmp_path, {("g", "check"): [("successful", tp_ok())]})
    w.round(1)
    assert [c[2] for c in runner.calls] == ["verify.yml"]
    assert runner.calls[0][3] == ["-e", "@x.yml"]
    assert actions(tmp_path) == ["check"] and w.health == {"g": "ok"}
    assert not os.path.exists(os.path.join(str(tmp_path), "art", "round00001", "g", "check"))


def test_a_dead_rank_gets_logs_then_one_restart_of_the_group(tmp_path):
    w, runner, said, clock = make_watch(tmp_path, {
        ("g", "check"): [("failed", tp_failed())],
        ("g", "logs"): [("successful", [])],
        ("g", "restart"): [("successful", tp_ok())],
    })
    w.round(1)
    assert [c[2] for c in runner.calls] == ["verify.yml", "logs.yml", "serve.yml"]
    assert runner.calls[2][3] == ["-e", "@x.yml", "-e", watch.FORCE_RESTART]
    assert "serve_failure_logs_dir" in runner.calls[1][3][-1]
    records = journal.read(str(tmp_path / "journal.jsonl"))
    assert [r["action"] for r in records] == ["check", "logs", "restart"]
    assert records[0]["ok"] is False and "exited 137" in records[0]["summary"]
    assert records[0]["diagnosis"][0]["node"] == "h1"
    assert records[2]["ok"] is True and records[2]["attempt"] == 1 and "exited 137" in records[2]["because"]
    assert w.health == {"g": "ok"}


def test_a_crash_loop_backs_off_then_stops_at_the_cap(tmp_path):
    fails = [("failed", tp_failed())] * 10
    w, runner, said, clock = make_watch(tmp_path, {("g", "check"): fails, ("g", "logs"): [("successful", [])] * 5,
                                                   ("g", "restart"): [("successful", tp_ok())] * 5})
    timeline = []
    for step, at in enumerate([1000, 1010, 1031, 1040, 1092, 1100]):
        clock.t = at
        w.round(step + 1)
        timeline.append(actions(tmp_path)[-1])
    # restart at once; 30 s backoff; restart; 60 s backoff; restart (3rd); cap reached -> give up
    assert timeline == ["restart", "backoff", "restart", "backoff", "restart", "give_up"]
    assert w.health == {"g": "failed"}
    clock.t = 1200
    w.round(7)
    assert actions(tmp_path)[-1] == "failed"
    assert sum(1 for c in runner.calls if c[1] == "restart") == 3
    give_up = [r for r in journal.read(str(tmp_path / "journal.jsonl")) if r["action"] == "give_up"][0]
    assert "cap 3" in give_up["reason"]


def test_state_survives_a_restart_of_the_supervisor(tmp_path):
    script = {("g", "check"): [("failed", tp_failed())], ("g", "logs"): [("successful", [])],
              ("g", "restart"): [("successful", tp_ok())]}
    w = make_watch(tmp_path, script)[0]
    clock = w.clock_holder
    w.round(1)
    w2, runner2 = make_watch(tmp_path, {("g", "check"): [("failed", tp_failed())]}, now=clock)[:2]
    clock.t += 5
    w2.round(1)
    assert actions(tmp_path)[-1] == "backoff"                   # the journal's restart counts
    assert [c[1] for c in runner2.calls] == ["check"]


def test_needs_a_reboot_is_never_retried(tmp_path):
    w, runner, said, clock = make_watch(tmp_path, {
        ("g", "check"): [("failed", tp_failed())] * 3,
        ("g", "logs"): [("successful", [])],
        ("g", "restart"): [("failed", task_failed("spark-b1: 9000 MiB free of 100000 MiB: the node needs a reboot"))],
    })
    w.round(1)
    clock.t += 10000
    w.round(2)
    assert actions(tmp_path) == ["check", "logs", "restart", "needs_reboot", "check", "failed"]
    assert sum(1 for c in runner.calls if c[1] == "restart") == 1
    assert w.health == {"g": "failed"}


def test_a_failed_group_that_serves_again_is_recovered(tmp_path):
    w = make_watch(tmp_path, {("g", "check"): [("successful", tp_ok())]})[0]
    w.record("give_up", "g", reason="cap")
    w.round(1)
    assert actions(tmp_path) == ["give_up", "check", "recovered"]
    assert w.states["g"]["failed"] is None


def test_a_locked_group_is_left_alone(tmp_path):
    w, runner, said, clock = make_watch(tmp_path, {("b", "check"): [("successful", tp_ok())]}, groups=("a", "b"))
    held = locks.GroupLock(str(tmp_path), "a", "reprovision")
    assert held.acquire()
    try:
        w.round(1)
    finally:
        held.release()
    assert [c[0] for c in runner.calls] == ["b"]
    assert actions(tmp_path, "a") == ["locked"] and actions(tmp_path, "b") == ["check"]
    record = [r for r in journal.read(str(tmp_path / "journal.jsonl")) if r["action"] == "locked"][0]
    assert record["holder"]["purpose"] == "reprovision"
    assert w.health == {"a": "locked", "b": "ok"}
    # the watch released its own lock of b
    assert locks.GroupLock(str(tmp_path), "b", "x").acquire()


def test_status_prints_the_journal_summary(tmp_path):
    j = journal.Journal(str(tmp_path / "j.jsonl"), clock=lambda: 1000.0)
    j.write("check", "g", ok=False, summary="rank 1 dead",
            diagnosis=[{"code": "container_exited", "rank": 1, "node": "h1", "cause": "exit 137"}])
    j.write("restart", "g", ok=True, attempt=1)
    j.write("give_up", "h", reason="3 restart(s) in the last 6 h (cap 3)")
    lines = []
    assert watch.print_journal_summary(["g", "h", "i"], str(tmp_path / "j.jsonl"), out=lines.append, now=1001.0)
    text = "\n".join(lines)
    assert "restarts (6 h)" in text and "rank 1 dead" in text and "container_exited (rank 1 on h1)" in text
    assert "FAILED: 3 restart(s)" in text
    row_i = [line for line in lines if line.startswith("i ")][0]
    assert row_i.split()[1:3] == ["-", "0"]
    assert not watch.print_journal_summary(["g"], str(tmp_path / "none.jsonl"), out=lines.append)


def test_a_rescued_status_failure_does_not_decide_when_tp_ranks_proves_the_group():
    from dspark_fleet.events import GroupEvents
    events = GroupEvents()
    for event in [{"event": "runner_on_failed", "event_data": {"host": "h0", "task": "Check that the group serves",
                                                               "res": {"msg": "not serving"}}}] + tp_ok():
        events.feed(event)
    assert watch.judge_run(RunResult(status="successful", rc=0), events)["ok"] is True
    events = GroupEvents()
    for event in tp_failed():
        events.feed(event)
    verdict = watch.judge_run(RunResult(status="failed", rc=2), events)
    assert verdict["ok"] is False and "exited 137" in verdict["summary"] and verdict["diagnosis"][0]["rank"] == 1


# --------------------------------------------------------------------------- with a router


def router_calls(runner):
    return [(c[0], c[1], json.loads(c[3][-1])) for c in runner.calls if c[1] in ("drain", "enable")]


def test_a_broken_group_leaves_the_router_while_it_is_restarted(tmp_path):
    w, runner, said, clock = make_watch(tmp_path, {
        ("g", "check"): [("failed", tp_failed())],
        (None, "drain"): [("successful", [])],
        ("g", "logs"): [("successful", [])],
        ("g", "restart"): [("successful", tp_ok())],
        (None, "enable"): [("successful", [])],
    }, routers=["router-1"])
    w.round(1)
    assert actions(tmp_path) == ["check", "drain", "logs", "restart", "enable"]
    assert router_calls(runner) == [
        (None, "drain", {"router_target_group": "g", "router_drain_timeout": 0, "router_drain_on_timeout": "continue"}),
        (None, "enable", {"router_target_group": "g"})]
    assert w.states["g"]["drained"] is None and w.health == {"g": "ok"}
    assert "g: taken out of the router's rotation while it is broken" in said
    assert "g: back in the router's rotation" in said


def test_a_crash_loop_is_drained_once_and_stays_out(tmp_path):
    w, runner, said, clock = make_watch(tmp_path, {
        ("g", "check"): [("failed", tp_failed())] * 3,
        (None, "drain"): [("successful", [])],
        ("g", "logs"): [("successful", [])] * 3,
        ("g", "restart"): [("failed", tp_failed())] * 3,
    }, routers=["router-1"], policy=watch.Policy(max_restarts=1, window_s=3600, backoff_base_s=1, backoff_max_s=1))
    for step in range(3):
        clock.t += 100
        w.round(step + 1)
    assert actions(tmp_path) == ["check", "drain", "logs", "restart", "check", "give_up", "check", "failed"]
    assert w.states["g"]["drained"] is not None                 # stays out of rotation while failed


def test_a_group_drained_by_the_supervisor_goes_back_once_it_serves(tmp_path):
    w, runner, said, clock = make_watch(tmp_path, {("g", "check"): [("successful", tp_ok())] * 2,
                                                   (None, "enable"): [("failed", task_failed("health check")),
                                                                      ("successful", [])]},
                                        routers=["router-1"])
    w.record("drain", "g", ok=True)
    w.round(1)
    assert actions(tmp_path)[-1] == "enable" and w.states["g"]["drained"] is not None   # failed: tried again
    w.round(2)
    assert actions(tmp_path) == ["drain", "check", "enable", "check", "enable"]
    assert w.states["g"]["drained"] is None


def test_a_group_drained_by_hand_is_left_drained(tmp_path):
    w, runner, said, clock = make_watch(tmp_path, {("g", "check"): [("successful", tp_ok())]}, routers=["router-1"])
    w.round(1)
    assert actions(tmp_path) == ["check"] and router_calls(runner) == []


def test_a_refused_drain_is_journaled_and_the_restart_goes_on(tmp_path):
    w, runner, said, clock = make_watch(tmp_path, {
        ("g", "check"): [("failed", tp_failed())],
        (None, "drain"): [("failed", task_failed("Refusing to drain g on router-1: it is the last group in rotation"))],
        ("g", "logs"): [("successful", [])],
        ("g", "restart"): [("successful", tp_ok())],
    }, routers=["router-1"])
    w.round(1)
    records = journal.read(str(tmp_path / "journal.jsonl"))
    assert [r["action"] for r in records] == ["check", "drain", "logs", "restart"]
    assert records[1]["ok"] is False and "last group in rotation" in records[1]["summary"]


def test_no_router_leaves_the_router_alone(tmp_path):
    w, runner, said, clock = make_watch(tmp_path, {
        ("g", "check"): [("failed", tp_failed())], ("g", "logs"): [("successful", [])],
        ("g", "restart"): [("successful", tp_ok())]}, routers=["router-1"], no_router=True)
    w.round(1)
    assert actions(tmp_path) == ["check", "logs", "restart"]
