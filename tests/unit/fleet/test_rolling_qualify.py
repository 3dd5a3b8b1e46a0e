"""`reprovision --rolling` qualifies each group (playbooks/qualify.yml --limit <group>) before draining it: the
RollingRunner against a fake runner (qualified, not qualified, unreachable, failed without a task, cancelled), the
RollingScheduler's slots, and the real CLI + ansible-runner on the fake project (fake_qualify, fake router)."""

import json
import shutil

import pytest

from dspark_fleet import cli, rolling, runner_exec
from dspark_fleet.runner_exec import RunResult
from dspark_fleet.scheduler import CONVERGED, FAILED

from test_e2e import load, run_cli, write_inventory
from test_qualify_cmd import UNREACHABLE_MSG, check, event, fact_event
from test_rolling import FakeRunner, site_spec

PORT_FIX = "docker rm -f foo, or set dspark_port to a free port"


# --------------------------------------------------------------------------- RollingRunner, no Ansible


class QualifyingRunner(FakeRunner):
    """FakeRunner, plus qualify.yml: its events as `mode` says (qualified, fail, dark, broken, cancel)."""

    def __init__(self, mode="qualified", **kwargs):
        super().__init__(**kwargs)
        self.mode = mode
        self.specs = {}

    def __call__(self, spec, event_handler=None, cancel_callback=None):
        name = spec.playbook.rsplit("/", 1)[-1]
        self.specs[name] = spec
        if name != "qualify.yml":
            return super().__call__(spec, event_handler, cancel_callback)
        self.calls.append(name)
        stream = [dict(event("playbook_on_start"), pid=4242),
                  event("playbook_on_play_start", play="Preflight"),
                  event("playbook_on_play_start", play="Qualify - measure every node and judge the group"),
                  event("playbook_on_task_start", task="Note this node's checks")]
        status = "successful"
        head = [check("docker", "pass"), check("ranks", "pass", scope="group")]
        if self.mode in ("qualified", "cancel_after"):
            stream += [fact_event("h0", "grp", head), fact_event("h1", "grp", [check("docker", "pass")])]
        elif self.mode == "fail":
            stream += [fact_event("h0", "grp", head + [check("disk", "warn", "low", "free some")]),
                       fact_event("h1", "grp", [check("port", "fail", "held by container foo", PORT_FIX),
                                                check("mtu", "fail", "1500 < 9000", "set the MTU")]),
                       event("runner_on_failed", host="h1", task="Fail when a check failed",
                             res={"msg": "2 check(s) failed: held by container foo; 1500 < 9000"})]
            status = "failed"
        elif self.mode == "dark":
            stream += [fact_event("h0", "grp", head),
                       event("runner_on_unreachable", host="h1", task="Note this node's checks",
                             res={"msg": UNREACHABLE_MSG, "unreachable": True})]
            status = "failed"
        elif self.mode == "broken":
            stream = [event("playbook_on_start")]
            status = "failed"
        elif self.mode == "cancel":
            status = "canceled"
        stream.append(event("playbook_on_stats"))
        for item in stream:
            event_handler(item)
        return RunResult(status=status, rc={"successful": 0, "canceled": None}.get(status, 2))


MEMBERS = [{"host": "h0", "rank": 0}, {"host": "h1", "rank": 1}]


def run_qualifying(tmp_path, fake, cancel=lambda: False, **kwargs):
    from dspark_fleet.events import GroupEvents
    runner = rolling.RollingRunner(fake, "/project", extra_vars=["x=1"], qualify=True,
                                   members=lambda group: MEMBERS, **kwargs)
    events = GroupEvents()
    result = runner(site_spec(tmp_path), event_handler=events.feed, cancel_callback=cancel)
    return runner, result, events


def test_a_qualified_group_is_drained_and_reprovisioned(tmp_path):
    fake = QualifyingRunner()
    runner, result, events = run_qualifying(tmp_path, fake)
    assert fake.calls == ["qualify.yml", "router_drain.yml", "site.yml", "router_enable.yml"]
    assert result.status == "successful" and not runner.in_rotation("grp")
    qspec = fake.specs["qualify.yml"]
    assert qspec.ident == "grp.qualify" and qspec.limit == "grp" and qspec.playbook == "/project/playbooks/qualify.yml"
    assert qspec.args == ["-e", "x=1"]                       # the reprovision's extra vars, no router vars
    assert qspec.artifact_dir == str(tmp_path / "groups" / "grp.qualify")
    view = runner.qualify_view("grp")
    assert view["verdict"] == "qualified" and view["summary"] == "3 checks on 2 nodes" and view["failing"] == []
    assert view["logs"] == {"artifacts_dir": qspec.artifact_dir, "stdout": qspec.stdout_path}
    assert view["runner"] == {"status": "successful", "rc": 0}
    assert runner.rotation["grp"]["back_in_rotation"] is True
    # The group's events see the step as one phase (both plays), never its facts; the pid for a second Ctrl-C.
    assert list(events.phases)[0] == "qualify_before_the_drain" and events.phases["qualify_before_the_drain"][
        "tasks"] == 1
    assert events.qualify == {} and events.failures == [] and events.pid == 4242


def test_a_group_not_qualified_is_never_drained(tmp_path):
    fake = QualifyingRunner("fail")
    runner, result, events = run_qualifying(tmp_path, fake)
    assert fake.calls == ["qualify.yml"]                     # no drain, no site.yml, no enable
    assert result.status == "failed" and runner.in_rotation("grp")
    assert result.error == ("not qualified, left in rotation untouched: h1 port s: held by container foo. Fix: "
                            + PORT_FIX + " (and 1 more failing check)")
    rotation = runner.rotation["grp"]
    assert rotation["drained"] is False and rotation["drain"] is None and rotation["back_in_rotation"] is None
    assert not rotation["left_out"] and rotation["note"] == "never drained (not qualified), still in rotation"
    view = runner.qualify_view("grp")
    assert view["verdict"] == "not qualified"
    assert [(c["host"], c["check"], c["fix"]) for c in view["failing"]] == [
        ("h1", "port", PORT_FIX), ("h1", "mtu", "set the MTU")]           # the warning is not failing
    assert view["hosts"]["h0"]["state"] == "qualified" and view["counts"]["warn"] == 1
    # Its failed task becomes the group's (the progress line, the report's failed tasks).
    failure = events.failure_view()
    assert failure["failed_tasks"][0]["host"] == "h1" and failure["failed_tasks"][0]["phase"] == \
        "qualify_before_the_drain"


def test_an_unreachable_host_leaves_the_group_untouched(tmp_path):
    fake = QualifyingRunner("dark")
    runner, result, events = run_qualifying(tmp_path, fake)
    assert fake.calls == ["qualify.yml"] and result.status == "failed" and runner.in_rotation("grp")
    assert result.error == "not qualified (unreachable), left in rotation untouched: h1: " + UNREACHABLE_MSG
    view = runner.qualify_view("grp")
    assert view["verdict"] == "unreachable" and view["hosts"]["h1"]["error"] == UNREACHABLE_MSG
    assert events.failure_view()["failed_tasks"][0]["unreachable"] is True


def test_a_failed_qualify_run_leaves_the_group_untouched(tmp_path):
    fake = QualifyingRunner("broken")
    runner, result, _out = run_qualifying(tmp_path, fake)
    assert fake.calls == ["qualify.yml"] and result.status == "failed" and runner.in_rotation("grp")
    assert result.error.startswith("not qualified (playbooks/qualify.yml failed), left in rotation untouched: "
                                   "ansible-playbook ended with status failed (rc 2) without a failed task")
    assert runner.qualify_view("grp")["verdict"] == "failed"


@pytest.mark.parametrize("mode, word", [("cancel", "while"), ("cancel_after", "after")])
def test_a_cancel_around_the_qualify_step_changes_nothing(tmp_path, mode, word):
    fake = QualifyingRunner(mode)
    runner, result, _out = run_qualifying(tmp_path, fake, cancel=lambda: mode == "cancel_after")
    assert fake.calls == ["qualify.yml"] and result.status == "canceled"
    assert result.error == "cancelled %s qualifying, before the drain (nothing was changed)" % word
    assert not runner.in_rotation("grp") and runner.rotation["grp"]["drained"] is False


def test_without_the_step_nothing_is_qualified(tmp_path):
    fake = QualifyingRunner("fail")
    runner = rolling.RollingRunner(fake, "/project", extra_vars=["x=1"])     # --no-qualify
    assert runner(site_spec(tmp_path)).status == "successful"
    assert fake.calls == ["router_drain.yml", "site.yml", "router_enable.yml"] and runner.qualify_view("grp") is None


# --------------------------------------------------------------------------- RollingScheduler


def test_a_group_left_in_rotation_holds_no_slot_but_counts_as_failed():
    untouched = set()
    sched = rolling.RollingScheduler(["a", "b", "c", "d"], parallel=1, max_failed=2, in_rotation=untouched.__contains__)
    assert sched.take() == ["a"]
    untouched.add("a")
    sched.finish("a", FAILED)                    # not qualified: still in rotation
    assert sched.blocked() is None and sched.take() == ["b"]
    sched.finish("b", CONVERGED)
    assert sched.take() == ["c"]
    sched.finish("c", FAILED)                    # drained, then failed: out of rotation, holds the only slot
    assert sched.take() == [] and sched.done()
    assert sched.blocked() == "max-failed reached: 2 group(s) failed (--max-failed 2)"
    sched = rolling.RollingScheduler(["a", "b", "c"], parallel=1, in_rotation=lambda g: False)
    sched.take()
    sched.finish("a", FAILED)
    assert sched.take() == [] and sched.blocked() == (
        "max-unavailable reached: a failed and stay(s) out of rotation (--max-unavailable 1)")


# --------------------------------------------------------------------------- the CLI on the fake project


def test_rolling_skips_a_group_not_qualified_and_goes_on(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {"fake_qualify": "fail"}, "g2": {"fake_qualify": "warn"},
                                                   "g3": {}}, router=True)
    art = tmp_path / "a"
    code = run_cli(["reprovision", "-i", inv, "--rolling", "--max-unavailable", "1", "--artifacts", str(art),
                    "-e", "fleet_test_secret=hunter2"], fake_project)
    out, err = capsys.readouterr()
    assert code == 1, out + err
    doc = load(art / "report.json")
    assert doc["command"]["options"]["qualify_before_drain"] is True
    g1, g2, g3 = (doc["groups"][g] for g in ("g1", "g2", "g3"))
    # g1: qualified first, found not qualified: never drained, never reprovisioned, still in rotation.
    assert g1["result"] == "failed"
    assert list(g1["phases"]) == ["qualify_before_the_drain"]
    assert not (art / "groups" / "g1.drain").exists() and not (art / "groups" / "g1").exists()
    assert g1["rotation"]["drained"] is False and g1["rotation"]["back_in_rotation"] is None
    assert not g1["rotation"]["left_out"]
    summary = "g1-worker port 8000: held by container foo. Fix: " + PORT_FIX
    assert g1["failure"]["summary"] == "not qualified, left in rotation untouched: " + summary
    assert g1["qualify"]["verdict"] == "not qualified" and g1["qualify"]["summary"] == summary
    assert [(c["host"], c["check"], c["verdict"]) for c in g1["qualify"]["failing"]] == [("g1-worker", "port", "fail")]
    assert g1["qualify"]["logs"]["stdout"] == str(art / "groups" / "g1.qualify" / "stdout")
    assert g1["logs"] == g1["qualify"]["logs"]               # its only run
    command = json.loads((art / "groups" / "g1.qualify" / "command").read_text())["command"]
    assert command[command.index("--limit") + 1] == "g1" and "hunter2" not in " ".join(command)
    assert any(c.startswith("@") and "/.runner/extravars/" in c for c in command), command
    # g1 never left rotation: the one --max-unavailable slot is free for g2, then g3.
    for group in (g2, g3):
        assert group["result"] == "converged" and group["qualify"]["verdict"] == "qualified"
        assert list(group["phases"])[:2] == ["qualify_before_the_drain", "router_drain"]
        assert group["rotation"]["back_in_rotation"] is True
    assert g2["qualify"]["counts"]["warn"] == 1
    assert doc["stop_reason"] is None
    # The console and the Markdown say why.
    assert "not qualified, left in rotation untouched: " + summary in out
    assert "log: %s" % (art / "groups" / "g1.qualify" / "stdout") in out
    assert "each qualified first (playbooks/qualify.yml)" in err
    md = (art / "report.md").read_text()
    assert "Qualify before the drain: **not qualified**: " + summary in md
    assert "FAILED: not qualified, left in rotation untouched" in md
    assert "| g1-worker | port | 8000 | container foo | free | fail |" in md
    assert "hunter2" not in (art / "report.json").read_text() + md


def test_a_group_not_qualified_counts_for_max_failed(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {"fake_qualify": "fail"}, "g2": {}}, router=True)
    code = run_cli(["reprovision", "-i", inv, "--rolling", "--max-failed", "1", "--artifacts", str(tmp_path / "a")],
                   fake_project)
    capsys.readouterr()
    assert code == 1
    doc = load(tmp_path / "a" / "report.json")
    assert doc["groups"]["g1"]["result"] == "failed" and doc["groups"]["g2"]["result"] == "not_started"
    assert doc["stop_reason"] == "max-failed reached: 1 group(s) failed (--max-failed 1)"


def test_an_unreachable_member_during_qualify(tmp_path, fake_project, venv_path, capsys, monkeypatch):
    real = runner_exec.run_playbook
    seen = []

    def runner(spec, event_handler=None, cancel_callback=None):
        seen.append((spec.ident, spec.playbook.rsplit("/", 1)[-1]))
        if spec.ident != "g1.qualify":
            return real(spec, event_handler=event_handler, cancel_callback=cancel_callback)
        for item in [event("playbook_on_start"), event("playbook_on_play_start", play="Qualify - every node"),
                     event("playbook_on_task_start", task="Note this node's checks"),
                     fact_event("g1-head", "g1", [check("docker", "pass")]),
                     event("runner_on_unreachable", host="g1-worker", task="Note this node's checks",
                           res={"msg": UNREACHABLE_MSG, "unreachable": True}), event("playbook_on_stats")]:
            event_handler(item)
        return RunResult(status="failed", rc=4)
    monkeypatch.setattr(runner_exec, "run_playbook", runner)
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {}, "g2": {}}, router=True)
    code = run_cli(["reprovision", "-i", inv, "--rolling", "--artifacts", str(tmp_path / "a")], fake_project)
    out = capsys.readouterr().out
    assert code == 1
    assert [item[0] for item in seen if item[0].startswith("g1")] == ["g1.qualify"]          # nothing else for g1
    doc = load(tmp_path / "a" / "report.json")
    g1 = doc["groups"]["g1"]
    assert g1["result"] == "failed" and g1["qualify"]["verdict"] == "unreachable"
    assert g1["failure"]["summary"] == ("not qualified (unreachable), left in rotation untouched: g1-worker: "
                                        + UNREACHABLE_MSG)
    assert g1["failure"]["failed_tasks"][0]["unreachable"] is True
    assert g1["qualify"]["hosts"]["g1-worker"]["state"] == "unreachable"
    assert doc["groups"]["g2"]["result"] == "converged"                        # g1 held no slot
    assert "not qualified (unreachable)" in out


def test_no_qualify_skips_the_step(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {"fake_qualify": "fail"}, "g2": {}}, router=True)
    art = tmp_path / "a"
    code = run_cli(["reprovision", "-i", inv, "--rolling", "--no-qualify", "--artifacts", str(art)], fake_project)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    doc = load(art / "report.json")
    assert doc["command"]["options"]["qualify_before_drain"] is False
    for name in ("g1", "g2"):
        group = doc["groups"][name]
        assert group["result"] == "converged" and "qualify" not in group
        assert list(group["phases"])[0] == "router_drain"
        assert not (art / "groups" / (name + ".qualify")).exists()
    assert "qualified first" not in err


@pytest.mark.parametrize("argv, message", [
    (["--no-qualify"], "--no-qualify only apply with --rolling"),
    (["--no-qualify", "--drain-timeout", "5"], "--drain-timeout, --no-qualify only apply with --rolling"),
])
def test_no_qualify_without_rolling_exits_2(tmp_path, fake_project, venv_path, capsys, argv, message):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {}, "g2": {}}, router=True)
    code = run_cli(["reprovision", "-i", inv, "--artifacts", str(tmp_path / "a")] + argv, fake_project)
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "a").exists()


def test_rolling_needs_the_qualify_playbook_unless_no_qualify(tmp_path, fake_project, venv_path, capsys):
    project = tmp_path / "project"
    shutil.copytree(fake_project, project)
    (project / "playbooks" / "qualify.yml").unlink()
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {}, "g2": {}}, router=True)
    code = cli.main(["reprovision", "-i", inv, "--rolling", "--project-dir", str(project), "--plain",
                     "--artifacts", str(tmp_path / "a")])
    err = capsys.readouterr().err
    assert code == 2 and "has no playbooks/qualify.yml, which --rolling runs before draining" in err
    assert "--no-qualify skips it" in err and not (tmp_path / "a").exists()


def test_help_and_docstrings_name_no_qualify(capsys):
    assert cli.main(["reprovision", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--no-qualify" in out and "playbooks/qualify.yml" in out
    assert "--no-qualify" in cli.__doc__ and "--no-qualify" in rolling.__doc__
