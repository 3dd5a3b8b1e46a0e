"""reprovision and the installed supervisor's marker (supervisor.py, issue #26): no marker, the supervisor's state
dir and user, or --ignore-supervisor: the run goes on (a fake runner in place of ansible-runner); another state dir
or user, or a marker that cannot be read: exit 2 with the fix, before anything runs (no ansible-inventory, no
playbook). watch and the read-only subcommands are never refused."""

import json
import os

import pytest
import yaml

from conftest import load_report, run_cli
from dspark_fleet import runner_exec, supervisor
from dspark_fleet.runner_exec import RunResult

jsonschema = pytest.importorskip("jsonschema")

SUPERVISOR_STATE = "/var/lib/dspark-fleet"


def write_inventory(path):
    tops = {"dspark": {"vars": {"dspark_model": "org/model", "dspark_model_revision": "f" * 40}, "children": {
        "g1": {"vars": {"dspark_group": "g1"}, "hosts": {"g1-head": {"dspark_rank": 0}, "g1-worker": {"dspark_rank": 1}}}}}}
    path.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local"}, "children": tops}}))
    return str(path)


def write_marker(path, state_dir=SUPERVISOR_STATE, user="dspark-fleet", **extra):
    doc = {"schema": "dspark-fleet-supervisor/1", "unit": "dspark-fleet-watch.service", "user": user,
           "state_dir": state_dir, "inventory": "/srv/dspark/inv/hosts.yml", "project_dir": "/srv/dspark",
           "command": "/srv/dspark/.venv/bin/dspark-fleet",
           "environment": {"DSPARK_FLEET_STATE_DIR": state_dir, "HOME": state_dir,
                           "ANSIBLE_HOME": state_dir + "/ansible", "ANSIBLE_LOCAL_TEMP": state_dir + "/ansible/tmp",
                           "ANSIBLE_PRIVATE_KEY_FILE": state_dir + "/.ssh/id_nodes"}}
    doc.update(extra)
    path.write_text(json.dumps(doc))
    return path


class FakeRunner:
    """Every run (preflight, then each group) succeeds at once; records the --limit of each."""

    def __init__(self):
        self.limits = []

    def __call__(self, spec, event_handler=None, cancel_callback=None):
        self.limits.append(spec.limit)
        os.makedirs(spec.artifact_dir, exist_ok=True)
        for kind in ("playbook_on_start", "playbook_on_stats"):
            event_handler({"event": kind, "created": "2026-01-01T00:00:00+00:00", "event_data": {}})
        return RunResult(status="successful", rc=0)


@pytest.fixture
def fake(monkeypatch):
    runner = FakeRunner()
    monkeypatch.setattr(runner_exec, "run_playbook", runner)
    return runner


@pytest.fixture
def marker(tmp_path, monkeypatch):
    path = tmp_path / "etc" / "supervisor.json"
    path.parent.mkdir()
    monkeypatch.setenv(supervisor.MARKER_ENV, str(path))
    return path


def reprovision(tmp_path, fake_project, *extra):
    inv = write_inventory(tmp_path / "hosts.yml")
    art = tmp_path / "art"
    return run_cli(["reprovision", "-i", inv, "--artifacts", str(art)] + list(extra), fake_project), art


def test_no_marker_runs_as_before(tmp_path, fake_project, venv_path, fake, capsys):
    code, art = reprovision(tmp_path, fake_project)
    assert code == 0, capsys.readouterr()
    assert fake.limits == ["g1", "g1"]                                     # preflight, then the group
    assert load_report(art / "report.json")["command"]["options"]["ignore_supervisor"] is False


def test_the_supervisors_state_dir_and_user_run(tmp_path, fake_project, venv_path, fake, marker, capsys, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("DSPARK_FLEET_STATE_DIR", str(state))
    write_marker(marker, state_dir=str(state), user=supervisor.current_user())
    code, _art = reprovision(tmp_path, fake_project)
    assert code == 0, capsys.readouterr()
    assert fake.limits == ["g1", "g1"]
    assert os.path.isfile(state / "locks" / "g1.lock")                     # the supervisor's locks


def test_another_state_dir_is_refused_before_anything_runs(tmp_path, fake_project, fake, marker, capsys):
    write_marker(marker)
    code, art = reprovision(tmp_path, fake_project)       # no venv_path: not even ansible-inventory may run
    err = capsys.readouterr().err
    assert code == 2 and fake.limits == [] and not art.exists()
    assert err.count("\n") == 1 and err.startswith("dspark-fleet: error: a supervisor is installed: ")
    assert "this run's state dir is %s, the supervisor's (dspark-fleet-watch.service, user dspark-fleet, per %s) " \
           "is %s" % (os.environ["DSPARK_FLEET_STATE_DIR"], marker, SUPERVISOR_STATE) in err
    assert ("`sudo -u dspark-fleet env DSPARK_FLEET_STATE_DIR=/var/lib/dspark-fleet HOME=/var/lib/dspark-fleet "
            "ANSIBLE_HOME=/var/lib/dspark-fleet/ansible ANSIBLE_LOCAL_TEMP=/var/lib/dspark-fleet/ansible/tmp "
            "ANSIBLE_PRIVATE_KEY_FILE=/var/lib/dspark-fleet/.ssh/id_nodes /srv/dspark/.venv/bin/dspark-fleet "
            "reprovision ...`") in err
    assert "systemctl stop dspark-fleet-watch.service) and pass --ignore-supervisor" in err


def test_the_state_dir_option_counts_and_another_user_is_refused(tmp_path, fake_project, fake, marker, capsys):
    state = tmp_path / "state"
    write_marker(marker, state_dir=str(state), user="dspark-fleet")
    code, _art = reprovision(tmp_path, fake_project, "--state-dir", str(state) + "/")
    err = capsys.readouterr().err
    assert code == 2 and fake.limits == []
    assert "this run is user %s, the supervisor" % supervisor.current_user() in err
    assert "could not be opened by the supervisor" in err and "sudo -u dspark-fleet env" in err


def test_ignore_supervisor_runs_and_is_recorded(tmp_path, fake_project, venv_path, fake, marker, capsys):
    write_marker(marker)
    code, art = reprovision(tmp_path, fake_project, "--ignore-supervisor")
    err = capsys.readouterr().err
    assert code == 0, err
    assert fake.limits == ["g1", "g1"]
    assert "--ignore-supervisor: any supervisor (%s) is not consulted" % marker in err
    doc = load_report(art / "report.json")
    assert doc["command"]["options"]["ignore_supervisor"] is True
    assert "--ignore-supervisor" in doc["command"]["argv"]


@pytest.mark.parametrize("content, why", [
    ("{not json", "it is not JSON"),
    ("[]", "it is not a JSON object"),
    (json.dumps({"user": "dspark-fleet", "state_dir": "relative"}), "its 'state_dir' is \"relative\", not an absolute"),
    (json.dumps({"state_dir": "/var/lib/dspark-fleet"}), "its 'user' is null, not a user name"),
    (b"\xff\xfe", "cannot read it"),
])
def test_a_malformed_marker_is_refused_with_the_reason(tmp_path, fake_project, fake, marker, capsys, content, why):
    if isinstance(content, bytes):
        marker.write_bytes(content)
    else:
        marker.write_text(content)
    code, _art = reprovision(tmp_path, fake_project)
    err = capsys.readouterr().err
    assert code == 2 and fake.limits == []
    assert err.startswith("dspark-fleet: error: the supervisor's marker %s is unusable: %s" % (marker, why))
    assert "Traceback" not in err and "rerun playbooks/supervisor.yml" in err and "--ignore-supervisor" in err


def test_an_unreadable_marker(tmp_path, marker):
    marker.mkdir()                                              # reading a directory fails (as root too)
    message = supervisor.check("reprovision", str(tmp_path), environ={supervisor.MARKER_ENV: str(marker)})
    assert message.startswith("the supervisor's marker %s is unusable: cannot read it: " % marker)


@pytest.mark.parametrize("subcommand", ["watch", "plan", "status", "qualify"])
def test_watch_and_read_only_subcommands_are_not_refused(tmp_path, subcommand):
    marker = write_marker(tmp_path / "m.json")
    assert supervisor.check(subcommand, str(tmp_path / "elsewhere"), environ={supervisor.MARKER_ENV: str(marker)}) \
        is None
    assert supervisor.check("reprovision", str(tmp_path / "elsewhere"),
                            environ={supervisor.MARKER_ENV: str(marker)}) is not None


def test_the_default_marker_path():
    assert supervisor.marker_path({}) == "/etc/dspark-fleet/supervisor.json"
