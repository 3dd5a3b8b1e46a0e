"""report: the JSON validates against the shipped schema, the Markdown renders, writes are atomic."""

import json
import os

import pytest

from dspark_fleet import report
from dspark_fleet.scheduler import CANCELLED, CONVERGED, FAILED, NOT_STARTED, OK, SKIPPED

from conftest import fold

jsonschema = pytest.importorskip("jsonschema")

FP = "sha256:" + "0" * 64
MEMBERS = [{"host": "h0", "rank": 0}, {"host": "h1", "rank": 1}]


def meta(subcommand="reprovision"):
    return {
        "command": {"subcommand": subcommand, "argv": ["dspark-fleet", subcommand, "-i", "inv", "-e", "<redacted>"],
                    "playbook": "site.yml",
                    "options": {"groups": [], "parallel": 2, "canary": 1, "max_failed": None, "tags": None,
                                "check": subcommand == "plan", "resume": None},
                    "extra_vars": {"count": 1, "sha256": "a" * 64}},
        "inventory": "/inv/hosts.yml", "project_dir": "/repo", "code_sha256": "b" * 64, "artifacts_dir": "/art",
        "started": 1795000000.0, "finished": 1795000100.5, "interrupted": False, "stop_reason": None,
        "preflight": {"result": "ok", "msg": None, "artifacts_dir": "/art/preflight", "stdout": "/art/preflight/stdout",
                      "duration_s": 2.0},
    }


def entry(name, result, stream=None, **kwargs):
    events = fold(stream) if stream else None
    started = events.first_time - 1 if events else None
    finished = events.last_time + 0.5 if events else None
    logs = {"artifacts_dir": "/art/groups/" + name, "stdout": "/art/groups/%s/stdout" % name} if events else None
    return report.group_entry(name, result, FP, MEMBERS, "deepseek-ai/DeepSeek-V4-Flash-0731", "9" * 40,
                              events=events, started=started, finished=finished, logs=logs,
                              runner={"status": "successful", "rc": 0} if events else None,
                              memory_kib=60000 if events else None, **kwargs)


def validate(doc):
    jsonschema.validate(doc, report.load_schema(), format_checker=jsonschema.FormatChecker())


def reprovision_report():
    groups = {
        "grp_ok": entry("grp_ok", CONVERGED, "site_converged"),
        "grp_bad": entry("grp_bad", FAILED, "site_tp_ranks_failed"),
        "grp_shapes": entry("grp_shapes", FAILED, "shapes"),
        "grp_cut": entry("grp_cut", CANCELLED, error="cancelled (interrupted by SIGINT)"),
        "grp_same": entry("grp_same", SKIPPED, skip_reason="converged before with the same inputs fingerprint",
                          previous={"report": "/old.json", "result": "converged", "finished": None, "image_id": None}),
        "grp_later": entry("grp_later", NOT_STARTED),
    }
    return report.build(meta(), groups, 1)


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(report.load_schema())


def test_reprovision_report_validates_and_counts():
    doc = reprovision_report()
    validate(doc)
    assert doc["schema"] == "dspark-fleet-report/1"
    assert doc["totals"] == {"groups": 6, "converged": 1, "ok": 0, "failed": 2, "cancelled": 1, "skipped": 1,
                             "not_started": 1, "running": 0}
    ok = doc["groups"]["grp_ok"]
    assert ok["image_id"] == "sha256:" + "ab12" * 16 and ok["changed"] == 3
    assert ok["tp_ranks"]["ready_at_iso"].endswith("Z") and ok["failure"] is None
    assert ok["phases"]["docker_runtime"]["changed"] == 2
    assert ok["head"] == "h0" and ok["duration_s"] > 0
    bad = doc["groups"]["grp_bad"]
    assert bad["tp_ranks"] is None and bad["failure"]["tp_ranks"]["diagnosis"][0]["code"] == "worker_never_joined"
    assert doc["groups"]["grp_cut"]["failure"]["summary"].startswith("cancelled")
    json.dumps(doc)                         # plain JSON


def test_status_and_plan_reports_validate():
    status = report.build(meta("status"), {"up": entry("up", OK, "status_serving"),
                                           "down": entry("down", FAILED, "status_not_serving")}, 1)
    validate(status)
    up = status["groups"]["up"]["status"]
    assert up["serving"] is True
    assert up["ranks"][0] == {"host": "ok-head", "rank": 0, "state": "running", "exit_code": 0, "restarts": 0,
                              "image": "sha256:" + "ab12" * 16, "api_models": ["fake-model"]}
    assert status["groups"]["up"]["image_id"] == "sha256:" + "ab12" * 16
    assert status["groups"]["down"]["status"]["serving"] is False
    plan = report.build(meta("plan"), {"grp_ok": entry("grp_ok", OK, "site_check")}, 0)
    validate(plan)


def test_an_interim_report_validates():
    groups = {"a": entry("a", "running", "site_converged"), "b": entry("b", NOT_STARTED)}
    doc = report.build(dict(meta(), finished=None), groups, None, complete=False)
    validate(doc)
    assert doc["finished"] is None and doc["duration_s"] is None
    assert "not final" in report.to_markdown(doc)


def test_markdown_renders_every_part():
    text = report.to_markdown(reprovision_report())
    assert text.startswith("# dspark-fleet reprovision\n")
    assert "| 6 | 1 | 0 | 2 | 1 | 1 | 1 |" in text                     # totals
    assert "| grp_ok | **converged** |" in text and "ab12ab12ab12" in text
    assert "deepseek-ai/DeepSeek-V4-Flash-0731@999999999999" in text
    assert "| worker_never_joined | 1 | bad-worker | rank 1 never registered |" in text
    assert "Ended by: Report the failure on bad-head" in text
    assert "shape-head (rescued)" in text and "unreachable (unreachable)" in text
    assert "skipped: converged before with the same inputs fingerprint" in text
    assert "| 0 | ok-head | ab12ab12ab12 |" in text                     # the proof's ranks
    assert "/art/groups/grp_bad/stdout" in text
    assert "controller memory peak (ansible-playbook): 59 MiB" in text
    assert "\r" not in text


def test_markdown_of_plan_and_status():
    plan = report.to_markdown(report.build(meta("plan"), {"grp_ok": entry("grp_ok", OK, "site_check")}, 0))
    assert "- docker_runtime: Install the engine (ok-head, ok-worker)" in plan
    status = report.to_markdown(report.build(meta("status"), {"down": entry("down", FAILED, "status_not_serving")}, 1))
    assert "Serving: **no**" in status and "| down-head | 0 | absent |" in status


def test_short_image():
    assert report.short_image("sha256:0123456789abcdef") == "0123456789ab"
    assert report.short_image("repo/image:tag") == "repo/image:tag"
    assert report.short_image(None) is None


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "out" / "report.json"
    doc = reprovision_report()
    assert report.write(doc, str(path)) == (str(path), str(tmp_path / "out" / "report.md"))
    before = path.read_text()
    assert json.loads(before)["exit_code"] == 1

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        report.write(dict(doc, exit_code=0), str(path))
    assert path.read_text() == before                 # the old report, whole
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.json", "report.md"]   # no temporary left


def test_markdown_path():
    assert report.markdown_path("/a/report.json") == "/a/report.md"
    assert report.markdown_path("/a/report") == "/a/report.md"
