"""Rollback to the last proven image and revision (issue #29 item 6): the record (proven.py), the RollingRunner's
rollback against a fake runner, the scheduler's stop, the report, and the real CLI + ansible-runner on the fake
project (a group whose new image never becomes ready: fake_fail_image)."""

import json
import os
from types import SimpleNamespace

import pytest

from dspark_fleet import proven, report, rolling
from dspark_fleet.runner_exec import RunResult, RunSpec

from conftest import load_report, run_cli
from test_e2e import write_inventory

OLD = {"image": "reg/vllm:1", "model": "org/model", "revision": "a" * 40, "unresolved": {}}
NEW = {"image": "reg/vllm:2", "model": "org/model", "revision": "a" * 40, "unresolved": {}}
IMAGE_ID = "sha256:" + "cd34" * 16


class FakeInventory:
    def __init__(self, head_vars):
        self.head_vars = head_vars

    def head_var(self, group, name):  # pylint: disable=unused-argument
        return self.head_vars.get(name)


# --------------------------------------------------------------------------- the configuration and the record


def test_config_of_takes_the_last_extra_var_over_the_inventory(tmp_path):
    inv = FakeInventory({"dspark_image": "reg/vllm:1", "dspark_model": "org/model", "dspark_model_revision": "r1"})
    assert proven.config_of(inv, "g") == {"image": "reg/vllm:1", "model": "org/model", "revision": "r1",
                                          "unresolved": {}}
    (tmp_path / "vars.yml").write_text("dspark_model_revision: r3\n")
    config = proven.config_of(inv, "g", ["dspark_image=reg/vllm:2", '{"dspark_image": "reg/vllm:3"}',
                                         "@" + str(tmp_path / "vars.yml"), "other=1"])
    assert (config["image"], config["revision"]) == ("reg/vllm:3", "r3")


def test_templates_and_vaulted_values_are_unresolved():
    inv = FakeInventory({"dspark_image": "{{ lookup('file', 'x') }}",
                         "dspark_model_revision": json.dumps({"__ansible_vault": "$ANSIBLE_VAULT;1.1"})})
    config = proven.config_of(inv, "g")
    assert config["image"] is None and config["revision"] is None
    assert config["unresolved"] == {"dspark_image": "a Jinja template",
                                    "dspark_model_revision": "not a plain value (vaulted?)"}


def test_store_round_trip(tmp_path):
    store = proven.Store(str(tmp_path))
    assert store.load("g1") is None
    doc = store.save("g1", OLD, {"ok": True, "images": {"n1": IMAGE_ID}}, run="/a/g1", now=1000.0)
    assert store.path("g1") == str(tmp_path / "proven" / "g1.json")
    assert store.load("g1") == doc and doc["image_id"] == IMAGE_ID and doc["proven_at_iso"].startswith("1970-")
    assert not [n for n in os.listdir(tmp_path / "proven") if n != "g1.json"]     # no temporary file left
    (tmp_path / "proven" / "g2.json").write_text("{broken")
    assert store.load("g2") is None
    with pytest.raises(ValueError):
        store.path("../etc")


@pytest.mark.parametrize("config, record, enabled, go, why", [
    (NEW, dict(OLD), True, True, None),
    (NEW, None, True, False, "no record of a proven image and revision"),
    (OLD, dict(OLD), True, False, "the failed run used the last proven image, model and revision"),
    (NEW, dict(OLD), False, False, "rollback turned off (--no-rollback)"),
    (NEW, dict(OLD, image=None, unresolved={"dspark_image": "a Jinja template"}), True, False,
     "the last proven dspark_image cannot be replayed (dspark_image: a Jinja template)"),
])
def test_decide(config, record, enabled, go, why):
    decided, reason = proven.decide(config, record, enabled)
    assert decided is go
    assert (reason is None) if why is None else (why in reason)


def test_decide_with_tags():
    assert proven.decide(NEW, dict(OLD), tags="preflight, serve") == (True, None)
    decided, reason = proven.decide(NEW, dict(OLD), tags="docker_runtime")
    assert not decided and reason.startswith("--tags docker_runtime: the run does not reach the tp_ranks proof")


# --------------------------------------------------------------------------- RollingRunner, no Ansible


def tp_ranks_event(ok):
    return {"event": "runner_on_ok" if ok else "runner_on_failed",
            "event_data": {"task": "Wait", "host": "grp-head", "task_action": "dspark.cluster.tp_ranks",
                           "res": {"registered_ranks": [{"rank": 0, "node": "grp-head"}], "world_size": 1,
                                   "containers": {"grp-head": {"image": IMAGE_ID}}, "msg": "never ready"}}}


class FakeRunner:
    """site.yml (ident grp) and its rollback (grp.rollback) with their own outcomes; a successful one proves."""

    def __init__(self, outcomes=None):
        self.outcomes = outcomes or {}      # ident (grp, grp.rollback, grp.enable, ...) -> status
        self.calls = []
        self.specs = {}

    def __call__(self, spec, event_handler=None, cancel_callback=None):
        self.calls.append(spec.ident)
        self.specs[spec.ident] = spec
        status = self.outcomes.get(spec.ident, "successful")
        name = spec.playbook.rsplit("/", 1)[-1]
        if name.startswith("router_") and status == "successful":
            extra = json.loads(spec.args[-1])
            step = {"router_drain.yml": {"started_at": "100", "finished_at": "102", "sessions_at_start": "1",
                                         "sessions_left": "0", "bound_hit": "False", "waited_seconds": "2"},
                    "router_enable.yml": {"started_at": "110", "finished_at": "112"}}[name]
            with open(extra["router_report_file"], "w", encoding="utf-8") as handle:
                json.dump({"router-1": step}, handle)
        if name == "site.yml" and event_handler is not None:
            event_handler({"event": "playbook_on_start", "pid": 4242})
            event_handler({"event": "playbook_on_play_start", "event_data": {"play": "Serve - start"}})
            event_handler(tp_ranks_event(status == "successful"))
        return RunResult(status=status, rc=0 if status == "successful" else 2)


def site_spec(tmp_path):
    return RunSpec(ident="grp", playbook="/project/site.yml", inventory="/inv", project_dir="/project",
                   artifacts_dir=str(tmp_path / "groups"), private_dir=str(tmp_path / ".runner"), limit="grp",
                   args=["-e", "dspark_image=reg/vllm:2"])


def run_rolling(tmp_path, fake, record=None, config=None, **kwargs):
    store = proven.Store(str(tmp_path / "state"))
    if record is not None:
        store.save("grp", record, {"ok": True, "images": {"n": "sha256:old"}}, now=1000.0)
    runner = rolling.RollingRunner(fake, "/project", extra_vars=["dspark_image=reg/vllm:2"], store=store,
                                   configs={"grp": config or NEW}, **kwargs)
    seen = []
    result = runner(site_spec(tmp_path), event_handler=seen.append, cancel_callback=lambda: False)
    return SimpleNamespace(result=result, runner=runner, store=store, seen=seen)


def test_failed_new_image_is_rolled_back_proven_and_put_back(tmp_path):
    fake = FakeRunner(outcomes={"grp": "failed"})
    ran = run_rolling(tmp_path, fake, record=OLD)
    result, runner, store, seen = ran.result, ran.runner, ran.store, ran.seen
    assert fake.calls == ["grp.drain", "grp", "grp.rollback", "grp.enable"]
    args = fake.specs["grp.rollback"].args
    assert args[:2] == ["-e", "dspark_image=reg/vllm:2"]                  # the run's own vars first, the record last
    assert json.loads(args[-1]) == {"dspark_image": "reg/vllm:1", "dspark_model": "org/model",
                                    "dspark_model_revision": "a" * 40}
    assert fake.specs["grp.rollback"].limit == "grp"
    assert result.status == "failed" and "rolled back to the last proven image reg/vllm:1" in result.error
    view = runner.rollback_view("grp")
    assert view["attempted"] and view["result"] == "rolled_back" and view["image_id"] == IMAGE_ID
    assert view["from"]["image"] == "reg/vllm:2" and view["to"]["image"] == "reg/vllm:1"
    assert "image differ(s)" in view["reason"] and view["logs"]["stdout"].endswith("grp.rollback/stdout")
    rotation = runner.rotation["grp"]
    assert rotation["back_in_rotation"] and not rotation["left_out"] and rotation["out_of_rotation_s"] == 12.0
    assert "rolled back to its last proven image and revision" in rotation["note"]
    assert runner.roll_stopped().startswith("the roll stops: grp failed its proof")
    assert store.load("grp")["image"] == "reg/vllm:1" and store.load("grp")["proven_at"] > 1000.0   # proven again
    # The rollback's plays are the group's phase "rollback"; its tp_ranks results are not the group's.
    plays = [e["event_data"]["play"] for e in seen if e["event"] == "playbook_on_play_start"]
    assert plays == ["Serve - start", "Rollback - Serve - start"]
    assert sum(1 for e in seen if e["event"].startswith("runner_on")) == 1
    text = report.rollback_text(view)
    assert text.startswith("rolled back, proven and back in rotation (from image reg/vllm:2")


def test_a_proven_run_is_recorded_and_nothing_is_rolled_back(tmp_path):
    fake = FakeRunner()
    ran = run_rolling(tmp_path, fake, record=OLD)
    result, runner, store = ran.result, ran.runner, ran.store
    assert result.status == "successful" and runner.rollback_view("grp") is None and runner.roll_stopped() is None
    assert store.load("grp")["image"] == "reg/vllm:2" and store.load("grp")["image_id"] == IMAGE_ID


def test_no_record_no_rollback(tmp_path):
    fake = FakeRunner(outcomes={"grp": "failed"})
    ran = run_rolling(tmp_path, fake)
    result, runner = ran.result, ran.runner
    assert fake.calls == ["grp.drain", "grp"] and result.status == "failed"
    view = runner.rollback_view("grp")
    assert not view["attempted"] and view["result"] == "not_attempted" and view["to"] is None
    assert "no record of a proven image and revision" in view["reason"]
    assert runner.rotation["grp"]["left_out"] and runner.roll_stopped() is None


def test_same_config_no_rollback(tmp_path):
    fake = FakeRunner(outcomes={"grp": "failed"})
    ran = run_rolling(tmp_path, fake, record=NEW)
    runner = ran.runner
    assert fake.calls == ["grp.drain", "grp"]
    assert "nothing to go back to" in runner.rollback_view("grp")["reason"]


def test_failed_rollback_stays_drained(tmp_path):
    fake = FakeRunner(outcomes={"grp": "failed", "grp.rollback": "failed"})
    ran = run_rolling(tmp_path, fake, record=OLD)
    result, runner, store = ran.result, ran.runner, ran.store
    assert fake.calls == ["grp.drain", "grp", "grp.rollback"]            # never put back
    view = runner.rollback_view("grp")
    assert view["attempted"] and view["result"] == "failed" and "ended failed (rc 2)" in view["error"]
    rotation = runner.rotation["grp"]
    assert rotation["left_out"] and not rotation["back_in_rotation"] and "it stays drained" in rotation["note"]
    assert "FAILED too" in result.error
    assert runner.roll_stopped().endswith("the rollback to the last proven one failed too, it stays drained")
    assert store.load("grp")["proven_at"] == 1000.0                      # the record is unchanged
    assert "LEFT OUT OF ROTATION" in report.rollback_text(view)


def test_rollback_proven_but_health_check_fails(tmp_path):
    fake = FakeRunner(outcomes={"grp": "failed", "grp.enable": "failed"})
    ran = run_rolling(tmp_path, fake, record=OLD)
    runner = ran.runner
    assert runner.rollback_view("grp")["result"] == "proven_left_out" and runner.rotation["grp"]["left_out"]


def test_no_rollback_option(tmp_path):
    fake = FakeRunner(outcomes={"grp": "failed"})
    ran = run_rolling(tmp_path, fake, record=OLD, rollback=False)
    runner = ran.runner
    assert fake.calls == ["grp.drain", "grp"]
    assert runner.rollback_view("grp")["reason"] == "rollback turned off (--no-rollback)"


def test_cancelled_run_is_not_rolled_back(tmp_path):
    fake = FakeRunner(outcomes={"grp": "canceled"})
    ran = run_rolling(tmp_path, fake, record=OLD)
    runner = ran.runner
    assert fake.calls == ["grp.drain", "grp"] and runner.rollback_view("grp") is None


def test_a_rollback_stops_the_roll():
    reason = []
    sched = rolling.RollingScheduler(["a", "b", "c"], parallel=1, in_rotation=lambda g: g == "a",
                                     roll_stopped=lambda: reason[0] if reason else None)
    assert sched.take() == ["a"]
    reason.append("the roll stops: a was rolled back")
    sched.finish("a", "failed")
    assert sched.take() == [] and sched.done() and sched.blocked() == "the roll stops: a was rolled back"


# --------------------------------------------------------------------------- the CLI on the fake project


def test_roll_with_a_bad_image_rolls_group_2_back_and_stops(tmp_path, fake_project, venv_path, capsys):
    state = tmp_path / "state"
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {}, "g2": {"fake_fail_image": "reg/vllm:2"}, "g3": {}},
                          router=True)
    # First: a plain reprovision with the inventory's image proves and records every group.
    common = ["--state-dir", str(state), "-e", '{"dspark_image": "reg/vllm:1"}']
    code = run_cli(["reprovision", "-i", inv, "--parallel", "3", "--artifacts", str(tmp_path / "a")] + common,
                   fake_project)
    assert code == 0, capsys.readouterr()
    store = proven.Store(str(state))
    assert [store.load(g)["image"] for g in ("g1", "g2", "g3")] == ["reg/vllm:1"] * 3
    # Then a roll to reg/vllm:2: g1 proves it, g2 never becomes ready with it.
    code = run_cli(["reprovision", "-i", inv, "--rolling", "--no-qualify", "--artifacts", str(tmp_path / "b"),
                    "-e", "dspark_image=reg/vllm:2"] + common[:2], fake_project)
    out, err = capsys.readouterr()
    assert code == 1, out + err
    doc = load_report(tmp_path / "b" / "report.json")
    assert doc["command"]["options"]["rollback"] is True
    g1, g2, g3 = (doc["groups"][g] for g in ("g1", "g2", "g3"))
    assert g1["result"] == "converged" and "rollback" not in g1 and store.load("g1")["image"] == "reg/vllm:2"
    assert g2["result"] == "failed" and g2["rotation"]["back_in_rotation"] is True
    rollback = g2["rollback"]
    assert rollback["attempted"] and rollback["result"] == "rolled_back"
    assert (rollback["from"]["image"], rollback["to"]["image"]) == ("reg/vllm:2", "reg/vllm:1")
    assert list(g2["phases"])[-2:] == ["rollback", "router_enable"]
    assert store.load("g2")["image"] == "reg/vllm:1"
    assert g3["result"] == "not_started" and store.load("g3")["image"] == "reg/vllm:1"
    assert doc["stop_reason"] == ("the roll stops: g2 failed its proof with a new image or revision; rolled back "
                                  "to the last proven one, proven and back in rotation")
    assert "rollback: rolled back, proven and back in rotation (from image reg/vllm:2" in out
    markdown = (tmp_path / "b" / "report.md").read_text()
    assert "- **rollback**: rolled back, proven and back in rotation" in markdown
    assert "the roll stops: g2" in markdown
    assert "PLAY [Serve - start every group" in open(rollback["logs"]["stdout"], encoding="utf-8").read()


def test_no_rollback_needs_rolling(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {}, "g2": {}}, router=True)
    code = run_cli(["reprovision", "-i", inv, "--no-rollback", "--artifacts", str(tmp_path / "a")], fake_project)
    assert code == 2 and "--no-rollback only apply with --rolling" in capsys.readouterr().err
