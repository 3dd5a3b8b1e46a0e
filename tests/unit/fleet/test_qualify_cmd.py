"""dspark-fleet qualify: the real CLI over the fake project (fakeproject/playbooks/qualify.yml sets qualify_result
from fake_qualify), and over a fake runner (events of an unreachable host, a run that failed without a task)."""

import json
import os
import threading
from datetime import datetime, timezone

import pytest
import yaml

from conftest import load_report, run_cli
from dspark_fleet import cli, qualify, runner_exec
from dspark_fleet.runner_exec import RunResult

jsonschema = pytest.importorskip("jsonschema")

load = load_report


def write_inventory(path, groups):
    """groups: {name: extra group vars}; two local hosts each (<name>-head rank 0, <name>-worker rank 1)."""
    children = {}
    for name, extra in groups.items():
        children[name] = {"vars": dict({"dspark_group": name}, **extra),
                          "hosts": {name + "-head": {"dspark_rank": 0}, name + "-worker": {"dspark_rank": 1}}}
    tops = {"dspark": {"vars": {"dspark_model": "org/model", "dspark_model_revision": "f" * 40},
                       "children": children}}
    path.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local"}, "children": tops}},
                                   sort_keys=False))
    return str(path)


def lines_of(out):
    return [line.strip() for line in out.splitlines()]


# --------------------------------------------------------------------------- the fake project


def test_qualify_over_the_fake_project(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {
        "g_ok": {}, "g_fail": {"fake_qualify": "fail"}, "g_error": {"fake_qualify": "error"},
        "g_warn": {"fake_qualify": "warn"}})
    art = tmp_path / "art"
    code = run_cli(["qualify", "-i", inv, "--artifacts", str(art), "-e", "fleet_test_secret=hunter2"], fake_project)
    out, err = capsys.readouterr()
    assert code == 1, out + err
    doc = load(art / "report.json")
    assert doc["exit_code"] == 1 and doc["command"]["subcommand"] == "qualify"
    assert doc["command"]["playbook"] == "playbooks/qualify.yml"
    assert doc["command"]["options"]["parallel"] == 4           # every group at once
    assert doc["preflight"] is None and not (art / "preflight").exists()
    groups = doc["groups"]

    ok = groups["g_ok"]["qualify"]
    assert groups["g_ok"]["result"] == "ok"
    assert ok["verdict"] == "qualified" and ok["summary"] == "9 checks on 2 nodes"
    assert (ok["checks"], ok["nodes"]) == (9, 2)
    assert ok["counts"] == {"pass": 7, "fail": 0, "warn": 0, "info": 2, "skip": 0}
    head = ok["hosts"]["g_ok-head"]
    assert head["rank"] == 0 and head["ok"] is True and head["problems"] == []
    assert [c["scope"] for c in head["checks"]] == ["node"] * 4 + ["group"]    # the head's group-scope check
    assert len(ok["hosts"]["g_ok-worker"]["checks"]) == 4
    assert ok["hosts"]["g_ok-worker"]["checks"][2]["value"] == 120               # values keep their type

    bad = groups["g_fail"]["qualify"]
    assert groups["g_fail"]["result"] == "failed"          # the play's last task failed on the worker
    assert bad["verdict"] == "not qualified"
    assert bad["hosts"]["g_fail-head"]["state"] == "qualified"
    worker = bad["hosts"]["g_fail-worker"]
    assert worker["state"] == "not qualified" and worker["ok"] is False
    assert worker["counts"]["fail"] == 1 and len(worker["checks"]) == 4
    assert worker["problems"] == [{"check": "port", "subject": "8000", "value": "container foo", "threshold": "free",
                                   "verdict": "fail", "message": "held by container foo",
                                   "fix": "docker rm -f foo, or set dspark_port to a free port",
                                   "variable": "dspark_port", "scope": "node"}]
    assert bad["summary"] == ("g_fail-worker port 8000: held by container foo. "
                              "Fix: docker rm -f foo, or set dspark_port to a free port")

    error = groups["g_error"]["qualify"]
    assert error["verdict"] == "failed" and error["checks"] == 0
    assert error["hosts"]["g_error-head"]["state"] == "failed"
    assert error["summary"] == ("g_error-head, g_error-worker: Read what the checks need: "
                                "cannot read the node's state: fake error")

    warn = groups["g_warn"]["qualify"]
    assert warn["verdict"] == "qualified" and warn["counts"]["warn"] == 1
    assert warn["hosts"]["g_warn-head"]["problems"][0]["message"] == "120 GiB free, the model needs 100"

    # The console: one line per group, then the report's paths.
    lines = lines_of(out)
    assert "qualify: 4 group(s): 2 qualified, 1 not qualified, 1 failed" in lines
    assert "g_ok qualified (9 checks on 2 nodes)" in lines
    assert "g_warn qualified (9 checks on 2 nodes, 1 warning)" in lines
    assert ("g_fail NOT qualified: g_fail-worker port 8000: held by container foo. "
            "Fix: docker rm -f foo, or set dspark_port to a free port") in lines
    assert any(line.startswith("g_error FAILED: g_error-head, g_error-worker: Read what") for line in lines)
    assert "Report: %s (Markdown: %s)" % (art / "report.json", art / "report.md") in lines
    assert lines.index("g_ok qualified (9 checks on 2 nodes)") < lines.index(
        "Report: %s (Markdown: %s)" % (art / "report.json", art / "report.md"))
    assert "PLAY [" not in out + err

    # The Markdown: a table of the failing and warning checks per group; the passing ones counted.
    md = (art / "report.md").read_text()
    assert "# dspark-fleet qualify" in md
    assert "Qualify: **not qualified**" in md and "Qualify: **qualified**: 9 checks on 2 nodes" in md
    assert "| host | check | subject | value | threshold | verdict | message | Fix |" in md
    assert ("| g_fail-worker | port | 8000 | container foo | free | fail | held by container foo | "
            "docker rm -f foo, or set dspark_port to a free port (variable `dspark_port`) |") in md
    assert "| g_warn-head | disk | /var/lib/docker | 120 | 50 | warn | 120 GiB free, the model needs 100 |" in md
    assert "6 passing not listed" in md and "7 passing: the JSON report keeps every check" in md
    assert "docker 27.3.1" not in md                      # a passing check is counted, not listed
    assert "hunter2" not in (art / "report.json").read_text() + md

    # Each run: qualify.yml with --limit <group>, the extra vars as given.
    command = json.loads((art / "groups" / "g_fail" / "command").read_text())["command"]
    assert command[command.index("--limit") + 1] == "g_fail"
    assert any(c.endswith("playbooks/qualify.yml") for c in command)
    # The extra vars went through a private file (removed after the run), never the command line.
    assert "hunter2" not in " ".join(command)
    assert any(c.startswith("@") and "/.runner/extravars/" in c for c in command), command


def test_qualified_groups_exit_0_and_an_explicit_parallel_wins(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g_a": {}, "g_b": {"fake_qualify": "warn"},
                                                   "g_c": {"fake_qualify": "fail"}})
    code = run_cli(["qualify", "-i", inv, "--groups", "g_a,g_b", "--parallel", "1", "--artifacts",
                    str(tmp_path / "art")], fake_project)
    out = capsys.readouterr().out
    assert code == 0, out
    doc = load(tmp_path / "art" / "report.json")
    assert doc["exit_code"] == 0 and doc["command"]["options"]["parallel"] == 1
    assert list(doc["groups"]) == ["g_a", "g_b"]
    assert all(g["qualify"]["verdict"] == "qualified" for g in doc["groups"].values())
    assert "qualify: 2 group(s): 2 qualified" in lines_of(out)


# --------------------------------------------------------------------------- a fake runner


def stamp():
    return datetime.now(timezone.utc).isoformat()


def event(kind, **data):
    return {"event": kind, "created": stamp(), "event_data": data}


def check(name, verdict, message="", fix=None, scope=None, value=1):
    out = {"check": name, "subject": "s", "value": value, "threshold": 1, "verdict": verdict, "message": message,
           "fix": fix, "variable": None}
    if scope:
        out["scope"] = scope
    return out


def fact_event(host, group, checks):
    fact = {"host": host, "group": group, "ok": all(c["verdict"] != "fail" for c in checks), "checks": checks}
    return event("runner_on_ok", host=host, task="Note this node's checks", task_action="ansible.builtin.set_fact",
                 res={"changed": False, "ansible_facts": {"qualify_result": fact}})


UNREACHABLE_MSG = "Failed to connect to the host via ssh: ssh: connect to host 10.0.0.3 port 22: No route to host"


class FakeRunner:
    """Plays a stream per group (by --limit); every run waits until all `together` runs started."""

    def __init__(self, together):
        self.barrier = threading.Barrier(together, timeout=20)
        self.specs = []
        self.lock = threading.Lock()

    def __call__(self, spec, event_handler=None, cancel_callback=None):
        with self.lock:
            self.specs.append(spec)
        self.barrier.wait()                     # BrokenBarrierError (the run errors) unless all run at once
        os.makedirs(spec.artifact_dir, exist_ok=True)
        group = spec.limit
        stream = [event("playbook_on_start"), event("playbook_on_play_start", play="Qualify - every node"),
                  event("playbook_on_task_start", task="Note this node's checks")]
        head, worker = group + "-head", group + "-worker"
        status = "successful"
        if group == "g_up":
            stream += [fact_event(head, group, [check("a", "pass"), check("b", "skip"),
                                                check("ranks", "pass", scope="group")]),
                       fact_event(worker, group, [check("a", "pass"), check("b", "pass")])]
        elif group == "g_dark":
            stream += [fact_event(head, group, [check("a", "pass"), check("b", "pass")]),
                       event("runner_on_unreachable", host=worker, task="Note this node's checks",
                             res={"msg": UNREACHABLE_MSG, "unreachable": True})]
            status = "failed"
        elif group == "g_broken":               # ansible-playbook failed before any task (e.g. a syntax error)
            with open(spec.stdout_path, "w", encoding="utf-8") as handle:
                handle.write("ERROR! couldn't resolve module/action 'dspark.cluster.qualify_node'\n")
            stream = [event("playbook_on_start")]
            status = "failed"
        elif group == "g_odd":                  # a verdict this tool does not know counts as failing
            stream += [fact_event(head, group, [check("a", "pass"), check("new", "error", "odd", "do X")]),
                       fact_event(worker, group, [check("a", "pass", value={"k": [1, 2]})])]
        stream.append(event("playbook_on_stats"))
        for item in stream:
            event_handler(item)
        return RunResult(status=status, rc=0 if status == "successful" else 2 if group != "g_broken" else 4)


def test_unreachable_and_failed_without_facts_run_all_groups_at_once(tmp_path, fake_project, venv_path, capsys,
                                                                     monkeypatch):
    groups = ["g_up", "g_dark", "g_broken", "g_odd"]
    runner = FakeRunner(together=len(groups))
    monkeypatch.setattr(runner_exec, "run_playbook", runner)
    inv = write_inventory(tmp_path / "hosts.yml", dict((g, {}) for g in groups))
    art = tmp_path / "art"
    code = run_cli(["qualify", "-i", inv, "--artifacts", str(art)], fake_project)
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert sorted(s.limit for s in runner.specs) == sorted(groups)        # one run per group, at the same time
    assert all(s.playbook.endswith("playbooks/qualify.yml") for s in runner.specs)
    doc = load(art / "report.json")
    assert doc["command"]["options"]["parallel"] == 4
    verdicts = dict((g, e["qualify"]["verdict"]) for g, e in doc["groups"].items())
    assert verdicts == {"g_up": "qualified", "g_dark": "unreachable", "g_broken": "failed", "g_odd": "not qualified"}

    up = doc["groups"]["g_up"]["qualify"]
    assert up["summary"] == "5 checks on 2 nodes" and up["counts"]["skip"] == 1

    dark = doc["groups"]["g_dark"]["qualify"]
    assert dark["hosts"]["g_dark-head"]["state"] == "qualified"
    assert dark["hosts"]["g_dark-worker"] == {"rank": 1, "state": "unreachable", "ok": False,
                                              "counts": {"pass": 0, "fail": 0, "warn": 0, "info": 0, "skip": 0},
                                              "problems": [], "checks": [], "error": UNREACHABLE_MSG}
    assert dark["summary"] == "g_dark-worker: " + UNREACHABLE_MSG

    broken = doc["groups"]["g_broken"]["qualify"]
    assert broken["checks"] == 0 and broken["hosts"]["g_broken-head"]["state"] == "no result"
    assert "couldn't resolve module/action" in broken["summary"]
    assert "without a failed task" in broken["summary"]

    odd = doc["groups"]["g_odd"]["qualify"]
    assert odd["counts"]["error"] == 1 and odd["hosts"]["g_odd-head"]["state"] == "not qualified"
    assert odd["summary"] == "g_odd-head new s: odd. Fix: do X"

    lines = lines_of(out)
    assert "g_up qualified (5 checks on 2 nodes)" in lines
    assert "g_dark UNREACHABLE: g_dark-worker: " + UNREACHABLE_MSG in lines
    assert any(line.startswith("g_broken FAILED: ansible-playbook ended with status failed (rc 4)") for line in lines)
    assert "log: %s" % (art / "groups" / "g_broken" / "stdout") in lines
    md = (art / "report.md").read_text()
    assert "| g_dark-worker | 1 | unreachable | 0 | 0 | 0 | 0 | 0 | %s |" % UNREACHABLE_MSG in md
    assert "| g_odd-head | new | s | 1 | 1 | error | odd | do X |" in md
    assert "Qualify: **failed**" in md


# --------------------------------------------------------------------------- usage and units


def test_missing_qualify_playbook_and_unknown_group_exit_2(tmp_path, fake_project, venv_path, capsys):
    project = tmp_path / "project"
    project.mkdir()
    (project / "ansible.cfg").write_text("[defaults]\n")
    (project / "site.yml").write_text("---\n[]\n")
    inv = write_inventory(tmp_path / "hosts.yml", {"g_a": {}})
    code = cli.main(["qualify", "-i", inv, "--project-dir", str(project), "--artifacts", str(tmp_path / "a1")])
    assert code == 2 and "has no playbooks/qualify.yml" in capsys.readouterr().err
    code = run_cli(["qualify", "-i", inv, "--groups", "pair_*", "--artifacts", str(tmp_path / "a2")], fake_project)
    assert code == 2 and "no serving group matches 'pair_*'" in capsys.readouterr().err
    assert not (tmp_path / "a1" / "groups").exists() and not (tmp_path / "a2" / "groups").exists()


def test_help_lists_qualify(capsys):
    assert cli.main(["--help"]) == 0
    assert "qualify" in capsys.readouterr().out
    assert cli.main(["qualify", "--help"]) == 0
    out = capsys.readouterr().out
    assert "playbooks/qualify.yml" in out and "--parallel N" in out
    assert "qualify" in cli.__doc__


def _entry(result, members=("h0", "h1"), failure=None):
    return {"result": result, "members": [{"host": h, "rank": i} for i, h in enumerate(members)],
            "failure": failure}


class _Facts:
    def __init__(self, facts):
        self.qualify = facts


def test_section_rules():
    ok = {"host": "h0", "group": "g", "ok": True, "checks": [check("a", "pass"), "not a check"]}
    # A host whose fact says not ok is not qualified even without a failing check.
    view = qualify.section(_entry("failed"), _Facts({"h0": ok, "h1": dict(ok, ok=False, checks=[])}))
    assert view["verdict"] == "not qualified" and view["summary"] == "h1: its qualify_result is not ok"
    assert view["hosts"]["h0"]["checks"][0]["scope"] == "node" and view["checks"] == 1
    # A run that ended ok but left a member without a result is not qualified either: failed.
    view = qualify.section(_entry("ok"), _Facts({"h0": ok}))
    assert view["verdict"] == "failed" and view["hosts"]["h1"]["state"] == "no result"
    assert view["summary"] == "no qualify_result from h1 (does the playbook set it?)"
    # Never run, cancelled.
    assert qualify.section(_entry("not_started"), None)["verdict"] == "not_started"
    assert qualify.section(_entry("cancelled"), _Facts({"h0": ok}))["verdict"] == "cancelled"
    # A failing check outranks an unreachable member.
    failure = {"failed_tasks": [{"host": "h1", "task": "t", "msg": "down", "unreachable": True, "rescued": False}]}
    view = qualify.section(_entry("failed", failure=failure),
                           _Facts({"h0": dict(ok, ok=False, checks=[check("p", "fail", "held", "free it")])}))
    assert view["verdict"] == "not qualified" and view["hosts"]["h1"]["state"] == "unreachable"
    assert qualify.exit_code({"g": {"qualify": view}}) == 1
    assert qualify.exit_code({"g": {"qualify": {"verdict": "qualified"}}}) == 0
