"""Inputs fingerprints and --resume decisions."""

import json

import pytest

from dspark_fleet import fingerprint, resume
from dspark_fleet.report import SCHEMA_ID

MEMBERS = {"a0": {"dspark_rank": 0, "dspark_image": "img@sha256:1"}, "a1": {"dspark_rank": 1}}


def fp(members=None, extra=None, tags=None, code="c" * 64, group="pair_a"):
    digest = fingerprint.extra_vars_digest(extra or [])
    return fingerprint.group_fingerprint(group, MEMBERS if members is None else members, digest, tags, code)


def test_fingerprint_is_stable_and_sees_every_input():
    base = fp()
    assert base == fp() and base.startswith("sha256:") and len(base) == 71
    # key order does not matter; values, members, extra vars, tags, code and the group do
    assert fp(members={"a1": {"dspark_rank": 1}, "a0": {"dspark_image": "img@sha256:1", "dspark_rank": 0}}) == base
    assert fp(members={"a0": {"dspark_rank": 0, "dspark_image": "img@sha256:2"}, "a1": {"dspark_rank": 1}}) != base
    assert fp(members={"a0": {"dspark_rank": 0, "dspark_image": "img@sha256:1"}}) != base
    assert fp(extra=["serve_force_restart=true"]) != base
    assert fp(tags="serve") != base
    assert fp(code="d" * 64) != base
    assert fp(group="pair_b") != base


def test_fingerprint_holds_no_value():
    secret = "hunter2-api-key"
    value = fp(members={"a0": {"serve_api_keys": [secret]}}, extra=["token=" + secret])
    assert secret not in value


def test_extra_vars_file_counts_by_content(tmp_path):
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text("a: 1\n")
    first = fingerprint.extra_vars_digest(["@" + str(vars_file)])
    vars_file.write_text("a: 2\n")
    assert fingerprint.extra_vars_digest(["@" + str(vars_file)]) != first
    with pytest.raises(fingerprint.ExtraVarsError, match="missing.yml"):
        fingerprint.extra_vars_digest(["@" + str(tmp_path / "missing.yml")])


def test_code_digest_follows_the_code(tmp_path):
    (tmp_path / "site.yml").write_text("---\n")
    (tmp_path / "roles" / "serve" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "serve" / "tasks" / "main.yml").write_text("- name: a\n")
    (tmp_path / "plugins" / "__pycache__").mkdir(parents=True)
    (tmp_path / "plugins" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (tmp_path / "inventories").mkdir()
    (tmp_path / "inventories" / "hosts.yml").write_text("all: {}\n")
    assert fingerprint.code_files(str(tmp_path)) == ["roles/serve/tasks/main.yml", "site.yml"]
    first = fingerprint.code_digest(str(tmp_path))
    (tmp_path / "inventories" / "hosts.yml").write_text("all: {hosts: {x: {}}}\n")   # not code
    (tmp_path / "plugins" / "__pycache__" / "x.pyc").write_bytes(b"\1")
    assert fingerprint.code_digest(str(tmp_path)) == first
    (tmp_path / "roles" / "serve" / "tasks" / "main.yml").write_text("- name: b\n")
    assert fingerprint.code_digest(str(tmp_path)) != first


# --------------------------------------------------------------------------- resume


def previous(groups, subcommand="reprovision"):
    return {"schema": SCHEMA_ID, "command": {"subcommand": subcommand}, "groups": groups}


def test_resume_decisions():
    same, other = fp(), fp(tags="serve")
    before = previous({
        "done": {"result": "converged", "fingerprint": same},
        "done_before": {"result": "skipped", "fingerprint": same},   # converged in an earlier run
        "changed": {"result": "converged", "fingerprint": other},
        "failed": {"result": "failed", "fingerprint": same},
        "cancelled": {"result": "cancelled", "fingerprint": same},
        "waiting": {"result": "not_started", "fingerprint": same},
    })
    names = ["done", "done_before", "changed", "failed", "cancelled", "waiting", "new"]
    decisions = resume.decide(before, dict((n, same) for n in names))
    assert dict((n, d[0]) for n, d in decisions.items()) == {
        "done": True, "done_before": True, "changed": False, "failed": False, "cancelled": False, "waiting": False,
        "new": False}
    assert decisions["failed"][1] == "previous result failed"
    assert decisions["changed"][1] == "inputs changed since it converged"
    assert decisions["new"][1] == "not in the previous report"


def test_load_previous(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(previous({"a": {"result": "converged"}})))
    assert resume.load_previous(str(path))["groups"]["a"]["result"] == "converged"


@pytest.mark.parametrize("content, message", [
    (None, "cannot read"),
    ("{not json", "not JSON"),
    (json.dumps({"schema": "other/1"}), "not a dspark-fleet report"),
    (json.dumps(previous({}, subcommand="status")), "not of 'reprovision'"),
    (json.dumps({"schema": SCHEMA_ID, "command": {"subcommand": "reprovision"}}), "has no groups"),
])
def test_unusable_previous_reports(tmp_path, content, message):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(resume.ResumeError, match=message):
        resume.load_previous(str(path))
