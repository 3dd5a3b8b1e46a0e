"""reprovision's stages without the CLI: plain values in (a Selection, Options, a RunRecord), plain values out
(the groups to skip, the preflight and router sections, the scheduler, the report's entries and record), and the
whole pipeline on a fake runner."""

import hashlib
import io
import json
import os
from dataclasses import replace

import pytest

from dspark_fleet import group_runs, inventory, progress, reprovision, rolling, run_record, runner_exec
from dspark_fleet.interrupts import Interrupts
from dspark_fleet.orchestrator import GroupRun
from dspark_fleet.report import SCHEMA_ID
from dspark_fleet.runner_exec import RunResult
from dspark_fleet.scheduler import CONVERGED, FAILED, OK, Scheduler
from dspark_fleet.selection import Options, Rolling, Selection

from conftest import load_report

GROUPS = ("g1", "g2")


def make_selection(tmp_path, groups=GROUPS, routers=(), **changes):
    """A Selection as select() would make it of two-member groups (no ansible-inventory, no project)."""
    data = {"dspark": {"children": list(groups)}, "_meta": {"hostvars": {}}}
    for group in groups:
        data[group] = {"hosts": [group + "-head", group + "-worker"]}
        data["_meta"]["hostvars"].update({group + "-head": {"dspark_rank": 0, "dspark_model": "org/m"},
                                          group + "-worker": {"dspark_rank": 1}})
    inv = inventory.Inventory(data)
    project = tmp_path / "project"
    (project / "playbooks").mkdir(parents=True, exist_ok=True)
    (project / "playbooks" / "router.yml").write_text("---\n")
    artifacts = str(tmp_path / "art")
    sel = Selection(
        subcommand="reprovision", started=1000.0, project_dir=str(project), env_add={}, inventory="/inv.yml", inv=inv,
        patterns=[], groups=list(groups), every_group=list(groups), routers=list(routers),
        members=dict((g, [{"host": h, "rank": inv.rank(h)} for h in inv.ordered_members(g)]) for g in groups),
        models=dict((g, ("org/m", None)) for g in groups), fingerprints=dict((g, fingerprint(g)) for g in groups),
        configs={}, extra_vars=("x=1",), extra_digest="d" * 64, tags=None, code="c" * 64,
        state_dir=str(tmp_path / "state"), artifacts=artifacts, report_path=os.path.join(artifacts, "report.json"))
    return replace(sel, **changes)


def fingerprint(group):
    return "sha256:" + hashlib.sha256(group.encode()).hexdigest()


def event(kind, **data):
    return {"event": kind, "event_data": data}


def proof(head):
    return event("runner_on_ok", host=head, task="Prove", task_action="dspark.cluster.tp_ranks",
                 res={"registered_ranks": [{"rank": 0, "node": head}], "world_size": 1})


class FakeRunner:
    """runner_exec.run_playbook's stand-in: each run by its ident, `fail` names the idents that fail."""

    def __init__(self, fail=()):
        self.fail = set(fail)
        self.calls = []

    def __call__(self, spec, event_handler=None, cancel_callback=None):
        self.calls.append((spec.ident, os.path.basename(spec.playbook), spec.limit, list(spec.args)))
        if spec.ident in self.fail:
            event_handler(event("runner_on_failed", host=(spec.limit or "r").split(",")[0] + "-head", task="Check",
                                res={"msg": "bad input"}))
            return RunResult(status="failed", rc=2)
        if spec.ident in GROUPS:
            event_handler(proof(spec.ident + "-head"))
        return RunResult(status="successful", rc=0)


@pytest.fixture
def fake(monkeypatch):
    runner = FakeRunner()
    monkeypatch.setattr(runner_exec, "run_playbook", runner)
    return runner


def quiet():
    return progress.make(io.StringIO(), force_plain=True)


# --------------------------------------------------------------------------- the resume decision


def test_no_resume_skips_nothing():
    assert reprovision.resume_decision(None, {"g1": fingerprint("g1")}, None) == ({}, [])


def test_resume_skips_what_converged_with_the_same_inputs():
    previous = {"groups": {"g1": {"result": "converged", "fingerprint": fingerprint("g1"), "finished": "t1",
                                  "image_id": "i"},
                           "g2": {"result": "converged", "fingerprint": fingerprint("old")},
                           "g3": {"result": "failed", "fingerprint": fingerprint("g3")}}}
    now = dict((g, fingerprint(g)) for g in ("g1", "g2", "g3", "g4"))
    skipped, lines = reprovision.resume_decision(previous, now, "/r.json")
    assert skipped == {"g1": ("converged before with the same inputs fingerprint",
                              {"report": "/r.json", "result": "converged", "finished": "t1", "image_id": "i"})}
    assert lines == ["g1: skip (converged before with the same inputs fingerprint)",
                     "g2: redo (inputs changed since it converged)", "g3: redo (previous result failed)",
                     "g4: redo (not in the previous report)"]


# --------------------------------------------------------------------------- the scheduler


def test_the_scheduler_takes_parallel_canary_and_max_failed():
    scheduler = reprovision.scheduler_for(["a", "b", "c"], Options(parallel=2, canary=1, max_failed=1))
    assert isinstance(scheduler, Scheduler) and not isinstance(scheduler, rolling.RollingScheduler)
    assert (scheduler.parallel, scheduler.canaries, scheduler.max_failed) == (2, ["a"], 1)
    assert scheduler.take() == ["a"]


def test_rolling_takes_its_parallelism_from_max_unavailable(tmp_path):
    opts = Options(parallel=1, canary=0, rolling=Rolling(max_unavailable=2, drain_timeout=None,
                                                         on_drain_timeout="fail", qualify_first=False, rollback=True))
    roller = reprovision.rolling_runner(make_selection(tmp_path), opts.rolling, None)
    scheduler = reprovision.scheduler_for(["a", "b", "c"], opts, roller)
    assert isinstance(scheduler, rolling.RollingScheduler) and scheduler.parallel == 2
    assert scheduler.take() == ["a", "b"]


# --------------------------------------------------------------------------- preflight and the router


def test_preflight_validates_every_group_once_and_says_why_it_failed(tmp_path, fake):
    sel = make_selection(tmp_path)
    fake.fail = {"preflight"}
    section = reprovision.preflight(sel, Interrupts(), quiet())
    assert fake.calls == [("preflight", "preflight.yml", "g1,g2", ["-e", "x=1", "-e", reprovision.PREFLIGHT_VARS])]
    assert section["result"] == FAILED and section["msg"] == "g1-head: bad input"
    assert section["stdout"] == os.path.join(sel.artifacts, "preflight", "stdout")


def test_the_router_is_left_alone_without_a_router_host(tmp_path, fake):
    section = reprovision.router(make_selection(tmp_path), False, None, Interrupts(), quiet())
    assert section["result"] == "skipped" and "no host in group dspark_router" in section["reason"]
    assert fake.calls == []


def test_the_router_converges_after_every_group_but_not_after_a_stop(tmp_path, fake):
    sel = make_selection(tmp_path, routers=["r1"])
    section = reprovision.router(sel, False, None, Interrupts(), quiet())
    assert section["result"] == CONVERGED and section["hosts"] == ["r1"]
    assert fake.calls == [("router", "router.yml", "dspark_router", ["-e", "x=1"])]
    stopped = reprovision.router(sel, False, "max-failed reached", Interrupts(), quiet())
    assert stopped["result"] == "skipped" and "max-failed reached" in stopped["reason"] and len(fake.calls) == 1


# --------------------------------------------------------------------------- entries and the record


def test_entries_of_skipped_not_started_and_run_groups(tmp_path):
    sel = make_selection(tmp_path, groups=("g1", "g2", "g3"))
    run = GroupRun("g2", sel.spec("g2", str(tmp_path), "site.yml", "g2", []))
    run.started, run.finished, run.result = 1.0, 2.0, "cancelled"
    run.run_result = RunResult(status="canceled", rc=None)
    entries = group_runs.entries(sel, {"g2": run}, "interrupted by SIGINT", {"g1": ("same inputs", {"result": "x"})})
    results = [(g, e["result"]) for g, e in entries.items()]
    assert results == [("g1", "skipped"), ("g2", "cancelled"), ("g3", "not_started")]
    assert entries["g1"]["skip_reason"] == "same inputs" and entries["g1"]["previous"] == {"result": "x"}
    assert entries["g2"]["failure"]["summary"] == "cancelled (interrupted by SIGINT)"
    assert entries["g3"]["members"] == [{"host": "g3-head", "rank": 0}, {"host": "g3-worker", "rank": 1}]
    assert entries["g3"]["members"] is not sel.members["g3"]


def test_the_record_names_the_options_never_a_value(tmp_path):
    sel = make_selection(tmp_path)
    opts = Options(parallel=1, canary=0, resume="/r.json",
                   rolling=Rolling(max_unavailable=1, drain_timeout=5, on_drain_timeout="fail", qualify_first=True,
                                   rollback=False))
    record = run_record.start(sel, opts, ["reprovision", "-i", "inv", "-e", "token=secret", "--rolling"])
    assert record.command["argv"] == ["dspark-fleet", "reprovision", "-i", "inv", "-e", "<redacted>", "--rolling"]
    assert record.command["options"]["rolling"] is True and record.command["options"]["rollback"] is False
    assert (record.command["options"]["max_unavailable"], record.command["options"]["resume"]) == (1, "/r.json")
    assert record.command["extra_vars"] == {"count": 1, "sha256": "d" * 64} and record.started == sel.started


def test_finish_fails_a_run_whose_report_cannot_be_written(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    record = replace(run_record.start(make_selection(tmp_path), Options(parallel=1), []),
                     report_path=str(tmp_path / "file" / "report.json"))
    assert run_record.finish(record, {}, 0) == 1
    assert "cannot write the report" in capsys.readouterr().err


# --------------------------------------------------------------------------- the pipeline


def test_a_failed_validation_changes_nothing_and_exits_2(tmp_path, fake, capsys):
    sel = make_selection(tmp_path)
    runner_exec.prepare(sel.artifacts)
    fake.fail = {"preflight"}
    record = run_record.start(sel, Options(parallel=1, canary=0), ["reprovision"])
    assert reprovision.run(sel, Options(parallel=1, canary=0), record, Interrupts(), quiet()) == 2
    assert [c[0] for c in fake.calls] == ["preflight"]
    doc = load_report(sel.report_path)
    assert doc["exit_code"] == 2 and doc["stop_reason"] == "the global validation (playbooks/preflight.yml) failed"
    assert doc["finished"] and [g["result"] for g in doc["groups"].values()] == ["not_started", "not_started"]
    assert "g1-head: bad input" in capsys.readouterr().err


def test_the_pipeline_runs_every_group_then_the_router(tmp_path, fake, capsys):
    sel = make_selection(tmp_path, routers=["r1"])
    runner_exec.prepare(sel.artifacts)
    opts = Options(parallel=2, canary=0)
    assert reprovision.run(sel, opts, run_record.start(sel, opts, ["reprovision"]), Interrupts(), quiet()) == 0
    assert [c[0] for c in fake.calls] == ["preflight", "g1", "g2", "router"] or \
        [c[0] for c in fake.calls] == ["preflight", "g2", "g1", "router"]
    doc = load_report(sel.report_path)
    assert doc["schema"] == SCHEMA_ID and doc["complete"] and doc["exit_code"] == 0
    assert doc["preflight"]["result"] == OK and doc["router"]["result"] == CONVERGED
    assert [g["result"] for g in doc["groups"].values()] == [CONVERGED, CONVERGED]
    assert "reprovision: 2 group(s): converged 2" in capsys.readouterr().out
    assert sorted(os.listdir(os.path.join(sel.state_dir, "locks"))) == ["g1.lock", "g2.lock"]


def test_resume_with_every_group_converged_runs_no_validation(tmp_path, fake):
    sel = make_selection(tmp_path)
    runner_exec.prepare(sel.artifacts)
    previous = {"groups": dict((g, {"result": "converged", "fingerprint": sel.fingerprints[g]}) for g in GROUPS)}
    opts = Options(parallel=1, canary=0, resume="/r.json", previous=previous)
    assert reprovision.run(sel, opts, run_record.start(sel, opts, ["reprovision"]), Interrupts(), quiet()) == 0
    assert fake.calls == []
    doc = json.loads(open(sel.report_path, encoding="utf-8").read())
    assert doc["preflight"] is None and [g["result"] for g in doc["groups"].values()] == ["skipped", "skipped"]
