"""`reprovision --rolling`: the RollingRunner's order and outcomes against a fake runner, its report helpers, the
scheduler's held slots, and the real CLI + ansible-runner on the fake project (fake router playbooks)."""

import json

import pytest

from dspark_fleet import report, rolling
from dspark_fleet.runner_exec import RunResult, RunSpec
from dspark_fleet.scheduler import CONVERGED, FAILED, Scheduler

from test_e2e import load, run_cli, write_inventory


# --------------------------------------------------------------------------- RollingRunner, no Ansible


class FakeRunner:
    """Records each run's playbook and writes the router report the real playbooks would."""

    def __init__(self, outcomes=None, drain=None, cancel_after=None):
        self.outcomes = outcomes or {}      # playbook basename -> status
        self.drain = drain if drain is not None else {"bound_hit": False, "sessions_left": 0}
        self.calls = []
        self.clock = 100.0

    def __call__(self, spec, event_handler=None, cancel_callback=None):
        name = spec.playbook.rsplit("/", 1)[-1]
        self.calls.append(name)
        status = self.outcomes.get(name, "successful")
        extra = json.loads(spec.args[-1]) if name.startswith("router_") else {}
        if name == "router_drain.yml" and status != "refused":
            self.clock += 1
            started = self.clock
            self.clock += 2
            result = {"started_at": str(started), "finished_at": str(self.clock), "sessions_at_start": "3",
                      "sessions_left": str(self.drain["sessions_left"]), "bound_hit": str(self.drain["bound_hit"]),
                      "waited_seconds": "2.0"}
            assert extra["router_drain_on_timeout"] == "continue"
            with open(extra["router_report_file"], "w", encoding="utf-8") as handle:
                json.dump({"router-1": result}, handle)
        if name == "router_enable.yml" and status == "successful":
            self.clock += 10
            with open(extra["router_report_file"], "w", encoding="utf-8") as handle:
                json.dump({"router-1": {"started_at": self.clock - 5, "finished_at": self.clock}}, handle)
        if name.startswith("router_"):
            assert spec.limit is None and extra["router_target_group"] == "grp"
        return RunResult(status="failed" if status == "refused" else status, rc=0 if status == "successful" else 2)


def site_spec(tmp_path):
    return RunSpec(ident="grp", playbook="/project/site.yml", inventory="/inv", project_dir="/project",
                   artifacts_dir=str(tmp_path / "groups"), private_dir=str(tmp_path / ".runner"), limit="grp",
                   args=["-e", "x=1"])


def run_rolling(tmp_path, fake, cancel=lambda: False, **kwargs):
    runner = rolling.RollingRunner(fake, "/project", extra_vars=["x=1"], **kwargs)
    result = runner(site_spec(tmp_path), event_handler=None, cancel_callback=cancel)
    return result, runner.rotation["grp"]


def test_drain_then_site_then_enable(tmp_path):
    fake = FakeRunner()
    result, rotation = run_rolling(tmp_path, fake, drain_timeout=30)
    assert fake.calls == ["router_drain.yml", "site.yml", "router_enable.yml"]
    assert result.status == "successful"
    assert rotation["drained"] and rotation["back_in_rotation"] and not rotation["left_out"]
    assert rotation["out_of_rotation_s"] == 12.0                     # drain start 101 -> enable end 113
    assert rotation["drain"]["sessions_at_start"] == 3 and rotation["drain"]["bound_hit"] is False


def test_drain_timeout_and_user_vars_reach_the_router_playbooks(tmp_path):
    seen = []

    def runner(spec, event_handler=None, cancel_callback=None):
        seen.append((spec.ident, spec.args))
        return FakeRunner()(spec, event_handler, cancel_callback)
    run_rolling(tmp_path, runner, drain_timeout=45)
    drain_ident, drain_args = seen[0]
    assert drain_ident == "grp.drain" and drain_args[:2] == ["-e", "x=1"]
    assert json.loads(drain_args[-1])["router_drain_timeout"] == 45
    assert seen[1] == ("grp", ["-e", "x=1"])                         # site.yml keeps its own spec
    assert seen[2][0] == "grp.enable" and "router_drain_timeout" not in json.loads(seen[2][1][-1])


def test_failed_reprovision_stays_out_of_rotation(tmp_path):
    fake = FakeRunner(outcomes={"site.yml": "failed"})
    result, rotation = run_rolling(tmp_path, fake)
    assert fake.calls == ["router_drain.yml", "site.yml"]             # never put back
    assert result.status == "failed"
    assert rotation["left_out"] and not rotation["back_in_rotation"] and rotation["out_of_rotation_s"] is None
    assert "left out of rotation: reprovisioning did not complete" in rotation["note"]


def test_failed_health_check_stays_out(tmp_path):
    fake = FakeRunner(outcomes={"router_enable.yml": "failed"})
    result, rotation = run_rolling(tmp_path, fake)
    assert result.status == "failed" and rotation["left_out"]
    assert "health check did not pass" in rotation["note"]


@pytest.mark.parametrize("policy, calls, status, back", [
    ("fail", ["router_drain.yml", "router_enable.yml"], "failed", True),
    ("continue", ["router_drain.yml", "site.yml", "router_enable.yml"], "successful", True),
])
def test_drain_bound_hit(tmp_path, policy, calls, status, back):
    fake = FakeRunner(drain={"bound_hit": True, "sessions_left": 2})
    result, rotation = run_rolling(tmp_path, fake, on_drain_timeout=policy)
    assert fake.calls == calls and result.status == status
    assert rotation["back_in_rotation"] is back and rotation["drain"]["bound_hit"] is True
    if policy == "fail":
        assert "drain bound hit: 2 open session(s) still on grp" in result.error
        assert "put back in rotation untouched" in rotation["note"] and "cut_sessions" not in rotation
    else:
        assert rotation["cut_sessions"] == 2
        assert "2 request(s) still open at the drain bound, cut by the restart" in report.rotation_text(rotation)


def test_refused_drain_changes_nothing(tmp_path):
    fake = FakeRunner(outcomes={"router_drain.yml": "refused"})
    result, rotation = run_rolling(tmp_path, fake)
    assert fake.calls == ["router_drain.yml"] and result.status == "failed"
    assert rotation["drained"] is False and rotation["back_in_rotation"] is None and not rotation["left_out"]


def test_cancel_after_the_drain_puts_the_group_back(tmp_path):
    fake = FakeRunner()
    result, rotation = run_rolling(tmp_path, fake, cancel=lambda: len(fake.calls) >= 1)
    assert fake.calls == ["router_drain.yml", "router_enable.yml"]
    assert result.status == "canceled" and rotation["back_in_rotation"]


def test_bad_policy():
    with pytest.raises(ValueError):
        rolling.RollingRunner(FakeRunner(), "/p", on_drain_timeout="cut")


# --------------------------------------------------------------------------- pure helpers and the scheduler


def test_drain_view_takes_the_worst_router():
    view = rolling.drain_view({
        "r1": {"started_at": "10.0", "finished_at": "12.0", "bound_hit": "False", "sessions_at_start": "1",
               "sessions_left": "0", "waited_seconds": "2"},
        "r2": {"started_at": "9.5", "finished_at": "15.0", "bound_hit": True, "sessions_at_start": 2,
               "sessions_left": 1, "waited_seconds": 5.5}})
    assert view == {"routers": ["r1", "r2"], "bound_hit": True, "sessions_at_start": 3, "sessions_left": 1,
                    "waited_s": 5.5, "started_at": 9.5, "finished_at": 15.0}
    assert rolling.drain_view({}) is None
    assert rolling.out_of_rotation_seconds({"r": {"started_at": 9.5}}, {"r": {"finished_at": "20"}}) == 10.5
    assert rolling.out_of_rotation_seconds({}, {"r": {"finished_at": 1}}) is None


def test_read_router_report(tmp_path):
    assert rolling.read_router_report(tmp_path / "missing.json") == {}
    (tmp_path / "bad.json").write_text("not json")
    assert rolling.read_router_report(tmp_path / "bad.json") == {}
    (tmp_path / "list.json").write_text("[1]")
    assert rolling.read_router_report(tmp_path / "list.json") == {}


def test_held_slots_stop_the_roll():
    sched = Scheduler(["a", "b", "c", "d"], parallel=2, hold_failed=True)
    assert sched.take() == ["a", "b"]
    sched.finish("a", FAILED)
    assert sched.take() == []                      # a is still out of rotation: one slot left, b holds it
    sched.finish("b", CONVERGED)
    assert sched.take() == ["c"]
    sched.finish("c", FAILED)
    assert sched.take() == [] and sched.done()
    assert sched.blocked() == "max-unavailable reached: a, c failed and stay(s) out of rotation (--max-unavailable 2)"


def test_rotation_text():
    assert report.rotation_text({"back_in_rotation": True, "out_of_rotation_s": 12.5, "drain": None}) == \
        "out of rotation 12.5 s"
    text = report.rotation_text({"back_in_rotation": False, "left_out": True, "note": "why",
                                 "drain": {"bound_hit": True, "sessions_left": 2, "waited_s": 30}})
    assert text == "drain bound hit (2 open session(s) after 30 s), LEFT OUT OF ROTATION, why"


# --------------------------------------------------------------------------- the CLI on the fake project


def test_rolling_takes_one_group_at_a_time(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {}, "g2": {}, "g3": {}}, router=True)
    code = run_cli(["reprovision", "-i", inv, "--rolling", "--artifacts", str(tmp_path / "a")], fake_project)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    doc = load(tmp_path / "a" / "report.json")
    assert doc["command"]["options"]["rolling"] is True and doc["command"]["options"]["max_unavailable"] == 1
    groups = doc["groups"]
    for name in ("g1", "g2", "g3"):
        group = groups[name]
        assert group["result"] == "converged" and group["tp_ranks"]["ok"]
        assert list(group["phases"])[:2] == ["qualify_before_the_drain", "router_drain"]     # qualified first
        assert list(group["phases"])[-1] == "router_enable" and group["qualify"]["verdict"] == "qualified"
        assert "serve" in group["phases"]
        assert group["rotation"]["back_in_rotation"] and group["rotation"]["out_of_rotation_s"] >= 0
        assert "%s " % name in out and "out of rotation" in out
    # The next group is drained only after the previous one is back.
    for first, second in (("g1", "g2"), ("g2", "g3")):
        assert groups[first]["phases"]["router_enable"]["ended"] <= groups[second]["phases"]["router_drain"]["started"]
    assert "rolling through the router: at most 1 group(s) out of rotation at once" in err


def test_rolling_failure_leaves_the_group_out_and_stops(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {"fake_fail": "serve"}, "g2": {}, "g3": {}},
                          router=True)
    code = run_cli(["reprovision", "-i", inv, "--rolling", "--artifacts", str(tmp_path / "a")], fake_project)
    out = capsys.readouterr().out
    assert code == 1
    doc = load(tmp_path / "a" / "report.json")
    g1 = doc["groups"]["g1"]
    assert g1["result"] == "failed" and g1["rotation"]["left_out"] and "router_enable" not in g1["phases"]
    assert doc["groups"]["g2"]["result"] == "not_started" and doc["groups"]["g3"]["result"] == "not_started"
    assert doc["stop_reason"].startswith("max-unavailable reached: g1 failed")
    assert "LEFT OUT OF ROTATION" in out
    assert "router: " in (tmp_path / "a" / "report.md").read_text()


def test_rolling_bound_hit_puts_back_and_refusal_changes_nothing(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {"fake_drain": "sessions=2"}, "g2": {"fake_drain": "refuse"},
                                                   "g3": {}}, router=True)
    code = run_cli(["reprovision", "-i", inv, "--rolling", "--max-unavailable", "2", "--max-failed", "3",
                    "--artifacts", str(tmp_path / "a")], fake_project)
    capsys.readouterr()
    assert code == 1
    doc = load(tmp_path / "a" / "report.json")
    g1, g2 = doc["groups"]["g1"], doc["groups"]["g2"]
    assert g1["result"] == "failed" and "drain bound hit: 2 open session(s)" in g1["failure"]["summary"]
    assert g1["rotation"]["back_in_rotation"] and "serve" not in g1["phases"]
    assert g2["result"] == "failed" and "last group in rotation" in g2["failure"]["summary"]
    assert g2["rotation"]["drained"] is False and g2["rotation"]["drain"] is None
    assert doc["groups"]["g3"]["result"] == "not_started"              # both slots held by failures


@pytest.mark.parametrize("argv, inventory_groups, router, message", [
    (["--rolling"], {"g1": {}, "g2": {}}, False, "--rolling needs the router: the inventory has no host in group"),
    (["--rolling"], {"g1": {}}, True, "--rolling needs at least two serving groups behind the router"),
    (["--rolling", "--max-unavailable", "2"], {"g1": {}, "g2": {}}, True,
     "--max-unavailable 2 would leave no group in rotation: the router serves 2 group(s) (g1, g2). Use at most 1"),
    (["--rolling", "--parallel", "2"], {"g1": {}, "g2": {}}, True, "--rolling takes its parallelism from"),
    (["--max-unavailable", "1", "--drain-timeout", "5"], {"g1": {}, "g2": {}}, True,
     "--max-unavailable, --drain-timeout only apply with --rolling"),
])
def test_rolling_usage_errors(tmp_path, fake_project, venv_path, capsys, argv, inventory_groups, router, message):
    inv = write_inventory(tmp_path / "hosts.yml", inventory_groups, router=router)
    code = run_cli(["reprovision", "-i", inv, "--artifacts", str(tmp_path / "a")] + argv, fake_project)
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "a").exists()
