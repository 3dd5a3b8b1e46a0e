"""events.GroupEvents folds RECORDED ansible-runner event streams (fixtures/, see fixtures/README.md)."""

import copy

import pytest

from ansible_collections.dspark.cluster.plugins.action.tp_ranks import empty_result

from dspark_fleet.events import GroupEvents, image_id, phase_key

from conftest import fold, load_stream


@pytest.mark.parametrize("name, key", [
    ("Preflight - validate the inventory and reach every node", "preflight"),
    ("Docker runtime - engine, compose v2, NVIDIA toolkit and the serving image", "docker_runtime"),
    ("NFS export - share the source node's Hugging Face cache", "nfs_export"),
    ("Serve - start every group head first", "serve"),
    ("Status - every rank's container", "status"),
    ("a play without a dash", "a_play_without_a_dash"),
    ("", "play"),
])
def test_phase_key(name, key):
    assert phase_key(name) == key


def test_converged_run_phases_changes_and_proof():
    state = fold("site_converged")
    assert list(state.phases) == ["preflight", "docker_runtime", "serve"]
    phases = state.phases_view()
    assert [phases[k]["changed"] for k in phases] == [0, 2, 1]
    assert phases["docker_runtime"]["changed_tasks"] == [{"task": "Install the engine", "hosts": ["ok-head", "ok-worker"]}]
    assert phases["serve"]["tasks"] == 2
    # Durations: play start to the next play's start, the last one to the stats event; they add up.
    total = sum(p["duration_s"] for p in phases.values())
    assert all(p["duration_s"] > 0 for p in phases.values())
    assert total == pytest.approx(state.last_time - phases["preflight"]["started"], abs=0.01)
    assert phases["preflight"]["ended"] == phases["docker_runtime"]["started"]
    assert state.changed_total() == 3
    assert state.failure_view() is None
    assert state.failures == []            # the ignored failure is not one
    proof = state.tp_ranks
    assert proof["ok"] is True and proof["host"] == "ok-head"
    assert proof["registered_ranks"] == [{"rank": 0, "node": "ok-head"}, {"rank": 1, "node": "ok-worker"}]
    assert proof["world_size"] == 2 and proof["elapsed_s"] == 2.25 and proof["ready_at"] > 0
    assert image_id(proof) == "sha256:" + "ab12" * 16
    assert isinstance(state.pid, int)
    assert state.stats["changed"] == {"ok-head": 2, "ok-worker": 1}
    assert state.phase_log[0][1] == "preflight" and [entry[1] for entry in state.phase_log] == list(state.phases)


def test_tp_ranks_failure_shows_the_diagnosis_and_the_rescue_fail_task():
    state = fold("site_tp_ranks_failed")
    failure = state.failure_view()
    assert failure["summary"].startswith("tp_ranks on bad-head: TP group grp_bad (2 ranks) is not serving")
    diagnosis = failure["tp_ranks"]["diagnosis"]
    assert diagnosis == [{"code": "worker_never_joined", "rank": 1, "node": "bad-worker",
                          "cause": "rank 1 never registered", "fix": "check the fabric between the head and bad-worker",
                          "severity": "error"}]
    assert failure["tp_ranks"]["missing_ranks"] == [{"rank": 1, "node": "bad-worker"}]
    tasks = failure["failed_tasks"]
    assert [t["task"] for t in tasks] == ["Wait until every tensor-parallel rank registered and the API generates",
                                          "Report the failure"]
    assert [t["rescued"] for t in tasks] == [True, False]
    assert tasks[0]["action"] == "dspark.cluster.tp_ranks"
    assert failure["final_task"]["task"] == "Report the failure"
    assert failure["final_task"]["msg"].startswith("group grp_bad did not start: TP group grp_bad")
    assert state.tp_ranks["ok"] is False


def test_check_mode_lists_what_would_change():
    state = fold("site_check")
    phases = state.phases_view()
    assert phases["docker_runtime"]["changed_tasks"] == [{"task": "Install the engine", "hosts": ["ok-head", "ok-worker"]}]
    assert phases["serve"]["changed_tasks"] == [{"task": "Start the rank", "hosts": ["ok-head"]}]
    assert state.tp_ranks is None          # tp_ranks skips itself in check mode
    assert state.failure_view() is None


def test_status_of_a_serving_group():
    state = fold("status_serving")
    assert state.serving is True
    assert sorted(state.status) == ["ok-head", "ok-worker"]
    head = state.status["ok-head"]
    assert head["container"]["state"] == "running" and head["api_models"] == ["fake-model"]
    assert state.status["ok-worker"]["api_models"] is None


def test_status_of_a_group_that_does_not_serve():
    state = fold("status_not_serving")
    assert state.serving is False
    assert state.status["down-head"]["container"] == {"state": "absent"}
    failure = state.failure_view()
    assert failure["summary"] == "Check that the group serves on down-head: group grp_down is not serving"


def test_real_modules_unreachable_rescued_ignored_and_final_failure():
    state = fold("shapes")
    failure = state.failure_view()
    tasks = failure["failed_tasks"]
    rows = [(t["task"], t["host"], t["unreachable"], t["rescued"]) for t in tasks]
    assert rows == [
        ("Ping every node", "unreachable", True, False),
        ("A failing command (rescued)", "shape-head", False, True),
        ("A failing command (rescued)", "shape-worker", False, True),
        ("A failing command on the head", "shape-head", False, True),
        ("Report the failure", "shape-head", False, False),
    ]
    assert "Connection refused" in tasks[0]["msg"]
    assert tasks[3]["msg"] == "non-zero return code: the rank died"   # stderr of the failed command
    assert not any(t["task"] == "An ignored failure" for t in tasks)
    # The first failure that stands (the unreachable node) is the summary; the last one that stands ended the run.
    assert failure["summary"].startswith("Ping every node on unreachable:")
    assert failure["final_task"]["task"] == "Report the failure"
    assert state.phases_view()["serve"]["changed"] == 2
    assert list(state.phases) == ["fabric", "serve"]


def test_preflight_failure_message():
    state = fold("preflight_bad_input")
    assert state.failure_view()["failed_tasks"][0]["msg"] == "bad input: input-head set fake_bad_input"


# --------------------------------------------------------------------------- tp_ranks result shape


def _tp_ranks_event(kind, res):
    """A recorded tp_ranks runner event with `res` replaced (the event skeleton is real)."""
    name = "site_converged" if kind == "runner_on_ok" else "site_tp_ranks_failed"
    for event in load_stream(name)["events"]:
        if event["event"] == kind and event["event_data"].get("task_action") == "dspark.cluster.tp_ranks":
            event = copy.deepcopy(event)
            event["event_data"]["res"] = res
            return event
    raise AssertionError("no tp_ranks event in " + name)


def test_tp_ranks_ok_with_the_real_result_keys():
    res = empty_result()                   # the real action's keys, then what _outcome() sets on success
    res.update(registered_ranks=[{"rank": 0, "node": "spark-head", "evidence": "x", "world_size": 2, "tp_rank": 0,
                                  "init_method": "tcp://10.0.0.1:25000"},
                                 {"rank": 1, "node": "spark-worker", "evidence": "y", "world_size": 2, "tp_rank": 1,
                                  "init_method": "tcp://10.0.0.1:25000"}],
               world_size=2, api_ready=True, generation_ok=True, elapsed=41.2, ready_at=1795000041.5,
               containers={"spark-head": {"name": "dspark-vllm", "state": "running", "image": "sha256:" + "1" * 64},
                           "spark-worker": {"name": "dspark-vllm", "state": "running", "image": "sha256:" + "1" * 64}},
               msg="TP group lab_pair ready after 41.2 s", logs={"rank0-spark-head": ["secret-free but long"]})
    state = GroupEvents()
    state.feed(_tp_ranks_event("runner_on_ok", res))
    proof = state.tp_ranks
    assert proof["registered_ranks"] == [{"rank": 0, "node": "spark-head"}, {"rank": 1, "node": "spark-worker"}]
    assert (proof["world_size"], proof["elapsed_s"], proof["ready_at"]) == (2, 41.2, 1795000041.5)
    assert image_id(proof) == "sha256:" + "1" * 64
    assert "logs" not in proof


def test_tp_ranks_failure_with_the_real_result_keys_and_no_image():
    res = empty_result()
    res.update(failed=True, world_size=None, elapsed=1800.0, msg="TP group lab_pair (2 ranks) is not serving",
               missing_ranks=[{"rank": 1, "node": "spark-worker"}],
               diagnosis=[{"code": "nccl_error", "rank": 1, "node": "spark-worker", "cause": "NCCL failed",
                           "fix": "check NCCL_IB_HCA", "evidence": "line", "severity": "error"}],
               containers={"spark-head": {"state": "running"}, "spark-worker": {"state": "exited"}})
    state = GroupEvents()
    state.feed(_tp_ranks_event("runner_on_failed", res))
    failure = state.failure_view()
    assert failure["tp_ranks"]["diagnosis"][0]["code"] == "nccl_error"
    assert failure["failed_tasks"][0]["msg"] == "TP group lab_pair (2 ranks) is not serving"
    assert image_id(state.tp_ranks) is None


def test_images_that_differ_give_no_image_id():
    assert image_id({"images": {"a": "sha256:1", "b": "sha256:2"}}) is None
    assert image_id(None) is None


def test_events_without_times_or_data_do_not_break_the_fold():
    state = GroupEvents()
    assert state.feed({"event": "playbook_on_play_start", "event_data": {"play": "Serve - x"}}) is True
    state.feed({"event": "verbose", "stdout": "hello"})
    state.feed({"event": "runner_on_failed", "event_data": {"task": "t", "host": "h", "res": {"rc": 2}}})
    assert state.failure_view()["failed_tasks"][0]["msg"] == "exited with rc 2"
    assert state.phases_view()["serve"]["duration_s"] == 0.0
