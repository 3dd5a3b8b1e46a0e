"""playbooks/supervisor.yml run for real against a fake root: the unit and the restart stamp in tmp_path, a fake
`systemctl` first on PATH (it records each call and which unit content a (re)start ran with), the existing user
`daemon` as the service user and the user/group creation skipped (--skip-tags supervisor_user), so nothing on this
machine changes. Proves: a first run installs and starts; a second run and a check-mode run change nothing; a run
that aborts after writing a changed unit (the restart fails) still gets the service restarted on the new unit by
the next run; the marker for dspark-fleet reprovision (/etc/dspark-fleet/supervisor.json) is written root-owned 0644
and removed once service_enabled false stops and disables the service."""

import hashlib
import json
import os
import stat
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
SYSTEMD_TASK = "Start, restart (the unit changed since its last start) or stop the service"

FAKE_SYSTEMCTL = """#!%s
import hashlib, json, os, sys
state_dir = os.environ["FAKE_SYSTEMCTL_DIR"]
path = os.path.join(state_dir, "state.json")
state = json.load(open(path)) if os.path.exists(path) else {"loaded": None, "running": None, "enabled": False}
args = [a for a in sys.argv[1:] if not a.startswith("-")]
with open(os.path.join(state_dir, "calls.log"), "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
def digest():
    with open(os.environ["FAKE_UNIT"], "rb") as handle:
        return hashlib.sha1(handle.read()).hexdigest()
verb = args[0] if args else ""
rc = 0
if verb == os.environ.get("FAKE_FAIL"):
    sys.stderr.write("fake failure of %%s\\n" %% verb)
    sys.exit(1)
if verb == "daemon-reload":
    state["loaded"] = digest() if os.path.exists(os.environ["FAKE_UNIT"]) else None
elif verb == "show":
    if state["loaded"] is None:
        print("LoadState=not-found\\nActiveState=inactive")
    else:
        print("LoadState=loaded\\nActiveState=%%s" %% ("active" if state["running"] else "inactive"))
elif verb == "is-enabled":
    print("enabled" if state["enabled"] else "disabled")
    rc = 0 if state["enabled"] else 1
elif verb in ("enable", "disable"):
    state["enabled"] = verb == "enable"
elif verb in ("start", "restart"):
    state["running"] = state["loaded"]
elif verb == "stop":
    state["running"] = None
json.dump(state, open(path, "w"))
sys.exit(rc)
""" % sys.executable


@pytest.fixture
def fake_root(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(FAKE_SYSTEMCTL)
    os.chmod(systemctl, 0o755)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "dspark-fleet").write_text("#!/bin/sh\nexit 0\n")
    os.chmod(venv / "bin" / "dspark-fleet", 0o755)
    (tmp_path / "systemd").mkdir()
    (tmp_path / "key").write_text("not a key\n")
    (tmp_path / "controller.yml").write_text(json.dumps({"dspark_supervisor": {"hosts": {"controller": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False}}}}))
    return tmp_path


def play(root, check=False, fail=None, **extra):
    variables = {"supervisor_inventory": "/srv/inv/prod/hosts.yml", "supervisor_venv": str(root / "venv"),
                 "supervisor_user": "daemon", "supervisor_state_dir": str(root / "state"),
                 "supervisor_ssh_private_key": str(root / "key"),
                 "_supervisor_unit_path": str(root / "systemd" / "dspark-fleet-watch.service"),
                 "_supervisor_stamp_path": str(root / "started"),
                 "_supervisor_marker_path": str(root / "etc" / "dspark-fleet" / "supervisor.json")}
    variables.update(extra)
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_CALLBACK_RESULT_FORMAT="json",
                   PATH=str(root / "bin") + os.pathsep + os.environ.get("PATH", ""),
                   FAKE_SYSTEMCTL_DIR=str(root), FAKE_UNIT=variables["_supervisor_unit_path"], FAKE_FAIL=fail or "")
    command = [ANSIBLE_PLAYBOOK, "-i", str(root / "controller.yml"), os.path.join(ROOT, "playbooks", "supervisor.yml"),
               "--skip-tags", "supervisor_user", "-e", json.dumps(variables)] + (["--check", "--diff"] if check else [])
    run = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300, check=False)
    doc = json.loads(run.stdout) if run.stdout.startswith("{") else None
    assert doc is not None, run.stdout[-3000:] + run.stderr[-3000:]
    results = dict((t["task"]["name"], t["hosts"]["controller"]) for p in doc["plays"] for t in p["tasks"])
    return run.returncode, doc["stats"]["controller"], results


def fake_state(root):
    with open(root / "state.json", encoding="utf-8") as handle:
        return json.load(handle)


def installed(root):
    with open(root / "systemd" / "dspark-fleet-watch.service", "rb") as handle:
        return hashlib.sha1(handle.read()).hexdigest()


def calls(root):
    return (root / "calls.log").read_text().splitlines()


def actions(root, since=0):
    return [c.split()[0] for c in calls(root)[since:] if c.split()[0] not in ("show", "is-enabled")]


def test_install_rerun_check_abort_and_disable(fake_root):
    root = fake_root
    rc, stats, results = play(root)
    assert rc == 0, results
    assert actions(root) == ["daemon-reload", "enable", "start"]
    assert fake_state(root) == {"loaded": installed(root), "running": installed(root), "enabled": True}
    assert (root / "started").read_text() == installed(root) + "\n"
    assert stat.S_IMODE(os.stat(root / "state" / ".ssh" / "id_nodes").st_mode) == 0o600
    assert "ExecStart=%s/venv/bin/dspark-fleet watch --plain" % root in (
        root / "systemd" / "dspark-fleet-watch.service").read_text()
    # The marker dspark-fleet reprovision reads (its state dir and user), root-owned 0644.
    marker = root / "etc" / "dspark-fleet" / "supervisor.json"
    info = os.stat(marker)
    assert stat.S_IMODE(info.st_mode) == 0o644 and info.st_uid == 0 and info.st_gid == 0
    state = str(root / "state")
    assert json.loads(marker.read_text()) == {
        "schema": "dspark-fleet-supervisor/1", "unit": "dspark-fleet-watch.service", "user": "daemon",
        "state_dir": state, "inventory": "/srv/inv/prod/hosts.yml", "project_dir": ROOT,
        "command": "%s/venv/bin/dspark-fleet" % root,
        "environment": {"DSPARK_FLEET_STATE_DIR": state, "HOME": state, "ANSIBLE_HOME": state + "/ansible",
                        "ANSIBLE_LOCAL_TEMP": state + "/ansible/tmp",
                        "ANSIBLE_PRIVATE_KEY_FILE": state + "/.ssh/id_nodes"}}

    # A second run and a check-mode run change nothing.
    before = len(calls(root))
    rc, stats, results = play(root)
    assert rc == 0 and stats["changed"] == 0, [n for n, r in results.items() if r.get("changed")]
    assert actions(root, before) == []
    rc, stats, results = play(root, check=True)
    assert rc == 0 and stats["changed"] == 0, [n for n, r in results.items() if r.get("changed")]

    # A changed value; the run aborts at the restart: the new unit is on disk, the service still runs the old one.
    old = installed(root)
    rc, stats, results = play(root, fail="restart", supervisor_interval=30)
    assert rc != 0 and results[SYSTEMD_TASK].get("failed")
    assert installed(root) != old and fake_state(root)["running"] != installed(root)
    assert (root / "started").read_text() == old + "\n"
    # Check mode sees the pending restart; the next real run does it, on the new unit.
    rc, stats, results = play(root, check=True, supervisor_interval=30)
    assert rc == 0 and results[SYSTEMD_TASK]["changed"] and results["Write the unit file"]["changed"] is False
    before = len(calls(root))
    rc, stats, results = play(root, supervisor_interval=30)
    assert rc == 0 and results[SYSTEMD_TASK]["changed"]
    assert actions(root, before) == ["daemon-reload", "restart"]
    assert fake_state(root)["running"] == installed(root) and (root / "started").read_text() == installed(root) + "\n"
    rc, stats, results = play(root, supervisor_interval=30)
    assert rc == 0 and stats["changed"] == 0

    # Disabled: stopped and disabled, the unit left in place, the marker removed (reprovision no longer refers to it).
    before = len(calls(root))
    rc, stats, results = play(root, supervisor_interval=30, supervisor_service_enabled=False)
    assert rc == 0
    assert actions(root, before) == ["disable", "stop"]
    assert fake_state(root)["running"] is None and fake_state(root)["enabled"] is False
    assert not marker.exists() and (root / "systemd" / "dspark-fleet-watch.service").exists()
