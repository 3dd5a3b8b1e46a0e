"""reprovision converges the router after the groups when the run speaks for the whole fleet (router_step)."""

from datetime import datetime

import pytest

from conftest import load_report, run_cli
from dspark_fleet import router_step
from test_e2e import write_inventory

pytest.importorskip("jsonschema")

ALL = ["g1", "g2", "g3"]


@pytest.mark.parametrize("kwargs, run, words", [
    ({}, True, "covers every group"),
    ({"rolling": True, "selected": ["g1"]}, True, "--rolling keeps"),
    ({"selected": ["g1", "g2"]}, False, "--groups selects 2 of 3 group(s) (not g3)"),
    ({"routers": []}, False, "no host in group dspark_router"),
    ({"tags": "serve"}, False, "--tags serve limits what runs"),
    ({"interrupted": True, "rolling": True}, False, "interrupted"),
    ({"subcommand": "plan"}, False, "only reprovision"),
])
def test_decide(kwargs, run, words):
    args = dict({"subcommand": "reprovision", "routers": ["r1"], "selected": ALL, "every_group": ALL,
                 "rolling": False, "tags": None, "interrupted": False}, **kwargs)
    decided, reason = router_step.decide(**args)
    assert decided is run and words in reason


def test_reprovision_converges_the_router_after_every_group(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {}, "g2": {}}, router=True)
    code = run_cli(["reprovision", "-i", inv, "--artifacts", str(tmp_path / "a")], fake_project)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    doc = load_report(tmp_path / "a" / "report.json")
    router = doc["router"]
    assert router["result"] == "converged" and router["hosts"] == ["router-1"] and router["changed"] == 1
    assert "covers every group" in router["reason"] and router["logs"]["stdout"].endswith("/router/stdout")
    # After the groups: the router's run started when the last group had finished.
    assert all(g["finished"] <= doc["finished"] for g in doc["groups"].values())
    assert "router: converged on router-1, changed 1" in out
    assert "## Router (playbooks/router.yml)" in (tmp_path / "a" / "report.md").read_text()


def test_a_failed_router_fails_the_run_and_says_where(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {}, "g2": {}}, router=True)
    text = (tmp_path / "hosts.yml").read_text().replace("router-1: {}", "router-1: {fake_router_fail: true}")
    (tmp_path / "hosts.yml").write_text(text)
    code = run_cli(["reprovision", "-i", inv, "--artifacts", str(tmp_path / "a")], fake_project)
    out = capsys.readouterr().out
    assert code == 1
    doc = load_report(tmp_path / "a" / "report.json")
    assert doc["exit_code"] == 1 and doc["totals"]["converged"] == 2      # the groups serve; the endpoint does not
    assert doc["router"]["result"] == "failed" and "HAProxy refused the configuration" in doc["router"]["error"]
    assert "router: failed: " in out


def test_a_subset_leaves_the_router_alone(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {}, "g2": {}}, router=True)
    code = run_cli(["reprovision", "-i", inv, "--groups", "g1", "--artifacts", str(tmp_path / "a")], fake_project)
    out = capsys.readouterr().out
    assert code == 0
    doc = load_report(tmp_path / "a" / "report.json")
    assert doc["router"]["result"] == "skipped" and "left alone" in doc["router"]["reason"]
    assert not (tmp_path / "a" / "router").exists()
    assert "router: not converged (--groups selects 1 of 2 group(s) (not g2)" in out


def test_without_a_router_the_report_says_so(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {}})
    assert run_cli(["reprovision", "-i", inv, "--artifacts", str(tmp_path / "a")], fake_project) == 0
    capsys.readouterr()
    doc = load_report(tmp_path / "a" / "report.json")
    assert doc["router"]["result"] == "skipped" and "no host in group dspark_router" in doc["router"]["reason"]


def test_a_failed_group_still_gets_the_endpoint(tmp_path, fake_project, venv_path, capsys):
    # The router serves the groups that pass its health check: a failed group is marked down there.
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {"fake_fail": "serve"}, "g2": {}}, router=True)
    code = run_cli(["reprovision", "-i", inv, "--parallel", "2", "--artifacts", str(tmp_path / "a")], fake_project)
    capsys.readouterr()
    assert code == 1
    doc = load_report(tmp_path / "a" / "report.json")
    assert doc["groups"]["g1"]["result"] == "failed" and doc["router"]["result"] == "converged"


def test_rolling_configures_the_router_before_the_first_drain(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {}, "g2": {}}, router=True)
    code = run_cli(["reprovision", "-i", inv, "--rolling", "--no-qualify", "--artifacts", str(tmp_path / "a")],
                   fake_project)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    doc = load_report(tmp_path / "a" / "report.json")
    assert doc["router"]["result"] == "converged" and "--rolling keeps" in doc["router"]["reason"]
    router_log = tmp_path / "a" / "router" / "stdout"
    first_drain = min(datetime.fromisoformat(g["phases"]["router_drain"]["started"]).timestamp()
                      for g in doc["groups"].values())
    assert router_log.stat().st_mtime <= first_drain      # its run had ended when the first group was drained
    assert err.index("router: converging router-1") < err.index("rolling through the router")


def test_rolling_drains_nothing_when_the_router_cannot_be_configured(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"g1": {}, "g2": {}}, router=True)
    text = (tmp_path / "hosts.yml").read_text().replace("router-1: {}", "router-1: {fake_router_fail: true}")
    (tmp_path / "hosts.yml").write_text(text)
    code = run_cli(["reprovision", "-i", inv, "--rolling", "--no-qualify", "--artifacts", str(tmp_path / "a")],
                   fake_project)
    capsys.readouterr()
    assert code == 1
    doc = load_report(tmp_path / "a" / "report.json")
    assert doc["router"]["result"] == "failed"
    assert all(g["result"] == "not_started" for g in doc["groups"].values())
    assert "no group was drained" in doc["stop_reason"]
