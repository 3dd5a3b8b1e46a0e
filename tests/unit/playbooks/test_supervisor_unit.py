"""The supervisor's unit (issue #26): the filter dspark.cluster.supervisor_unit's checks and quoting, and
playbooks/supervisor.yml run for real by the venv's ansible-playbook in check mode with diff against this machine
(nothing is changed: no user, no unit file), whose rendered unit then passes `systemd-analyze verify` and holds the
sandbox. `systemd-analyze security --offline` is printed for the record (pytest -s)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _supervisor_unit as su

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
KEY_TEXT = "-----BEGIN OPENSSH PRIVATE KEY----- not-a-real-key-7f3a9c -----END OPENSSH PRIVATE KEY-----"


def values(**changes):
    out = {
        "supervisor_user": "dspark-fleet", "supervisor_project_dir": "/srv/dspark", "supervisor_venv": "/srv/dspark/.venv",
        "supervisor_inventory": "/srv/inv/prod/hosts.yml", "supervisor_state_dir": "/var/lib/dspark-fleet",
        "supervisor_groups": [], "supervisor_interval": 60, "supervisor_max_restarts": 3, "supervisor_window_hours": 6,
        "supervisor_backoff_base": 30, "supervisor_parallel": 1, "supervisor_keep_rounds": 50, "supervisor_keep_days": 14,
        "supervisor_vault_password_file": "", "supervisor_ssh_private_key": "", "supervisor_ssh_known_hosts": "",
        "supervisor_service_enabled": True,
    }
    out.update(changes)
    return out


# --------------------------------------------------------------------------- the filter


def test_defaults_give_the_command_line_and_environment():
    got = su.unit(values(supervisor_ssh_private_key="/home/me/.ssh/k", supervisor_groups=["pair_*", "trio_[ab]"],
                         supervisor_vault_password_file="/etc/dspark/vault-pass"))
    assert got["problems"] == []
    assert got["exec_start"] == (
        "/srv/dspark/.venv/bin/dspark-fleet watch --plain -i /srv/inv/prod/hosts.yml --groups \"pair_*\" "
        "--groups \"trio_[ab]\" --interval 60 --max-restarts 3 --window 6 --backoff-base 30 --parallel 1 "
        "--keep-rounds 50 --keep-days 14 --vault-password-file /etc/dspark/vault-pass")
    assert got["environment"] == (
        '"DSPARK_FLEET_STATE_DIR=/var/lib/dspark-fleet" "PYTHONUNBUFFERED=1" "HOME=/var/lib/dspark-fleet" '
        '"ANSIBLE_HOME=/var/lib/dspark-fleet/ansible" "ANSIBLE_LOCAL_TEMP=/var/lib/dspark-fleet/ansible/tmp" '
        '"ANSIBLE_PRIVATE_KEY_FILE=/var/lib/dspark-fleet/.ssh/id_nodes"')
    assert got["key_path"] == "/var/lib/dspark-fleet/.ssh/id_nodes"
    assert "ANSIBLE_PRIVATE_KEY_FILE" not in su.unit(values())["environment"]


@pytest.mark.parametrize("arg, quoted", [
    ("plain/path-1.yml", "plain/path-1.yml"),
    ("pair_*", '"pair_*"'),
    ("a b", '"a b"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("back\\slash", '"back\\\\slash"'),
    ("100%", '"100%%"'),
    ("$HOME", '"$$HOME"'),
    (";", '";"'),
    ("", '""'),
])
def test_quote(arg, quoted):
    assert su.quote(arg) == quoted


def test_quote_refuses_control_characters():
    with pytest.raises(ValueError):
        su.quote("a\nb")


# (changes, the problem's start): each bad value is named with the variable, its value and the fix.
BAD = [
    ({"supervisor_inventory": ""}, "supervisor_inventory is '': set it to an absolute path"),
    ({"supervisor_inventory": "inv/hosts.yml"}, "supervisor_inventory is 'inv/hosts.yml': not an absolute path"),
    ({"supervisor_inventory": "/srv/inv\nExecStartPre=/bin/sh"}, "supervisor_inventory is '/srv/inv\\nExecStartPre=/bin/sh': it holds a newline"),
    ({"supervisor_inventory": "/srv/my inv/hosts.yml"}, "supervisor_inventory is '/srv/my inv/hosts.yml': only letters"),
    ({"supervisor_inventory": "/srv/inv/%h.yml"}, "supervisor_inventory is '/srv/inv/%h.yml': only letters"),
    ({"supervisor_venv": "/srv/dspark/../x"}, "supervisor_venv is '/srv/dspark/../x': not a normalised path"),
    ({"supervisor_venv": "/srv//dspark"}, "supervisor_venv is '/srv//dspark': not a normalised path"),
    ({"supervisor_project_dir": "/srv/dspark/"}, "supervisor_project_dir is '/srv/dspark/': not a normalised path"),
    ({"supervisor_user": "root"}, "supervisor_user is 'root': the supervisor runs unprivileged"),
    ({"supervisor_user": "Bad User"}, "supervisor_user is 'Bad User': a user name is"),
    ({"supervisor_state_dir": "/var/lib"}, "supervisor_state_dir is '/var/lib': the playbook gives it to dspark-fleet"),
    ({"supervisor_state_dir": "/opt"}, "supervisor_state_dir is '/opt': the playbook gives it"),
    ({"supervisor_state_dir": "/srv/dspark/state"}, "supervisor_state_dir is '/srv/dspark/state', inside supervisor_project_dir"),
    ({"supervisor_inventory": "/var/lib/dspark-fleet/hosts.yml"},
     "supervisor_state_dir is '/var/lib/dspark-fleet' and supervisor_inventory ('/var/lib/dspark-fleet/hosts.yml') is inside it"),
    ({"supervisor_vault_password_file": "vault"}, "supervisor_vault_password_file is 'vault': not an absolute path"),
    ({"supervisor_groups": "pair_a"}, "supervisor_groups is 'pair_a': must be a list"),
    ({"supervisor_groups": ["pair_a", "x --once"]}, "supervisor_groups has 'x --once': a group name"),
    ({"supervisor_groups": ["a;b"]}, "supervisor_groups has 'a;b'"),
    ({"supervisor_interval": 0}, "supervisor_interval is 0: must be from 1 to 86400"),
    ({"supervisor_interval": "60s"}, "supervisor_interval is '60s': must be a whole number from 1 to 86400"),
    ({"supervisor_interval": 1.5}, "supervisor_interval is 1.5 (float): must be a whole number"),
    ({"supervisor_max_restarts": -1}, "supervisor_max_restarts is -1: must be from 0 to 1000"),
    ({"supervisor_parallel": 65}, "supervisor_parallel is 65: must be from 1 to 64"),
    ({"supervisor_keep_days": 0}, "supervisor_keep_days is 0: must be from 1 to 3650"),
    ({"supervisor_service_enabled": "false"}, "supervisor_service_enabled is 'false': must be true or false"),
    ({"supervisor_ssh_private_key": "/k\n"}, "supervisor_ssh_private_key is '/k\\n': the path of a file"),
    ({"supervisor_node_key_from": "10.0.0.5"}, "supervisor_node_key_from is '10.0.0.5': must be a list"),
    ({"supervisor_node_key_from": ["ctrl.example.org"]},
     "supervisor_node_key_from has 'ctrl.example.org', which is not an IP address or network (CIDR)"),
    ({"supervisor_node_key_from": ["10.0.0.5/24"]},
     "supervisor_node_key_from has '10.0.0.5/24', which has bits set past its prefix length; fix: write the network, "
     "10.0.0.0/24"),
    ({"supervisor_node_key_from": ["10.0.0.0/8", "0.0.0.0/0"]}, "supervisor_node_key_from has '0.0.0.0/0', which is every"),
    ({"supervisor_node_key_from": ["::/0"]}, "supervisor_node_key_from has '::/0', which is every"),
    ({"supervisor_node_key_from": ['10.0.0.5",command="sh']}, "supervisor_node_key_from has '10.0.0.5\",command=\"sh'"),
    ({"supervisor_node_key_from": ["10.0.0.*"]}, "supervisor_node_key_from has '10.0.0.*', which is not an IP"),
    ({"supervisor_node_key_from": ["10.0.0.1,10.0.0.2"]}, "supervisor_node_key_from has '10.0.0.1,10.0.0.2', which is not"),
    ({"supervisor_node_key_from": [None]}, "supervisor_node_key_from has None (NoneType), which is not"),
]


@pytest.mark.parametrize("changes, problem", BAD)
def test_a_bad_value_is_named(changes, problem):
    got = su.unit(values(**changes))
    assert len(got["problems"]) == 1, got["problems"]
    assert got["problems"][0].startswith(problem), got["problems"][0]
    assert "exec_start" not in got


PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPc0bWl4ZWRUZXN0S2V5T25seUZvclRoZVVuaXRUZXN0cw dspark-fleet@ctrl"


@pytest.mark.parametrize("given, host, options, note", [
    # Empty: this host's address (dspark_mgmt_address, else ansible_host) when it is one the nodes could see.
    ([], "10.232.0.201", 'from="10.232.0.201",restrict,pty', "this host's address 10.232.0.201"),
    (None, "fd00::7", 'from="fd00::7",restrict,pty', "this host's address fd00::7"),
    ([], "127.0.0.1", "", "is not an IP address the nodes could see"),
    ([], "ctrl.example.org", "", "'ctrl.example.org') is not an IP address"),
    ([], "", "", "set supervisor_node_key_from"),
    # Given: as written (a network kept with its prefix), several joined; the host's address is only compared.
    (["10.232.0.0/24", "fd00::7"], "10.232.0.201", 'from="10.232.0.0/24,fd00::7",restrict,pty', None),
    ([" 10.1.0.5 "], "ctrl.example.org", 'from="10.1.0.5",restrict,pty', None),
    (["10.1.0.5"], "10.232.0.201", 'from="10.1.0.5",restrict,pty', "WARNING: this host's address 10.232.0.201"),
])
def test_the_node_key_line_limits_the_key_to_the_supervisor(given, host, options, note):
    got = su.unit(values(supervisor_node_key_from=given), host_address=host, public_key=PUBLIC_KEY + "\n")
    assert got["problems"] == []
    assert got["node_key_options"] == options
    assert got["node_key_line"] == "%s %s" % (options or 'from="<supervisor addresses>",restrict,pty', PUBLIC_KEY)
    assert got["node_key_message"][1] == got["node_key_line"]
    notes = got["node_key_message"][2:]
    assert (note is None and notes == []) or (note is not None and len(notes) == 1 and note in notes[0]), notes


def test_a_public_key_file_that_is_not_one_key_line_gives_a_placeholder():
    for text in ("", "not a key", PUBLIC_KEY + "\n" + PUBLIC_KEY, 'command="sh" ' + PUBLIC_KEY):
        got = su.node_key({}, "10.0.0.5", text)[1]
        assert got["node_key_line"] == 'from="10.0.0.5",restrict,pty ' + su.PUBLIC_KEY_PLACEHOLDER % "KEY", text
        assert bool(text) == any(".pub file is not one OpenSSH public key line" in n for n in got["node_key_message"])


def test_every_problem_at_once_and_numbers_from_extra_vars():
    assert len(su.unit(values(supervisor_user="root", supervisor_inventory="", supervisor_parallel=0))["problems"]) == 3
    assert su.unit(values(supervisor_interval="30"))["exec_start"].count("--interval 30 ") == 1


# --------------------------------------------------------------------------- the playbook, in check mode


def run_playbook(tmp_path, extra):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    binary = venv / "bin" / "dspark-fleet"
    binary.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(binary, 0o755)
    key = tmp_path / "nodes_key"
    key.write_text(KEY_TEXT + "\n")
    inventory = tmp_path / "controller.yml"
    inventory.write_text(json.dumps({"dspark_supervisor": {"hosts": {"controller": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False}}}}))
    variables = {"supervisor_inventory": "/srv/inv/prod/hosts.yml", "supervisor_venv": str(venv),
                 "supervisor_ssh_private_key": str(key), "supervisor_groups": ["pair_*"],
                 "supervisor_state_dir": str(tmp_path / "state")}
    variables.update(extra)
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    run = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inventory), os.path.join(ROOT, "playbooks", "supervisor.yml"),
                          "--check", "--diff", "-e", json.dumps(variables)],
                         cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300, check=False)
    return run, json.loads(run.stdout) if run.stdout.startswith("{") else None


def task_results(doc):
    return dict((task["task"]["name"], task["hosts"]["controller"]) for play in doc["plays"] for task in play["tasks"])


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("supervisor")
    run, doc = run_playbook(tmp_path, {})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return tmp_path, run, doc


def test_check_mode_changes_nothing(rendered):
    tmp_path, run, doc = rendered
    assert KEY_TEXT not in run.stdout + run.stderr
    assert not (tmp_path / "state").exists()
    results = task_results(doc)
    assert results["Write the unit file"]["changed"]
    if not os.path.exists("/etc/systemd/system/dspark-fleet-watch.service"):
        assert results["Start, restart (the unit changed since its last start) or stop the service"]["skipped"]
    # A user that does not exist yet cannot own the state dir or the key in check mode: those tasks wait for it.
    assert results["Install the nodes' SSH key for the service user"]["skipped"]


def test_the_key_is_never_shown(tmp_path):
    """With an existing user (daemon) the key's copy runs in check mode: censored, its content nowhere."""
    run, doc = run_playbook(tmp_path, {"supervisor_user": "daemon"})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    result = task_results(doc)["Install the nodes' SSH key for the service user"]
    assert result.get("censored") and result["changed"], result
    assert KEY_TEXT not in run.stdout + run.stderr and "not-a-real-key" not in run.stdout + run.stderr
    assert not (tmp_path / "state").exists()


def unit_text(doc):
    diff = task_results(doc)["Write the unit file"]["diff"]
    return (diff[0] if isinstance(diff, list) else diff)["after"]


def test_the_unit_holds_the_sandbox_and_the_checked_values(rendered):
    tmp_path, _run, doc = rendered
    text = unit_text(doc)
    lines = text.splitlines()
    assert "{%" not in open(os.path.join(ROOT, "playbooks", "templates", "dspark-fleet-watch.service.j2"),
                            encoding="utf-8").read()
    for line in ("User=dspark-fleet", "Group=dspark-fleet", "NoNewPrivileges=yes", "ProtectSystem=strict",
                 "ReadWritePaths=%s" % (tmp_path / "state"), "ProtectHome=read-only", "PrivateTmp=yes",
                 "PrivateDevices=yes", "PrivateMounts=yes", "ProtectKernelTunables=yes", "ProtectKernelModules=yes", "ProtectControlGroups=yes",
                 "RestrictSUIDSGID=yes", "LockPersonality=yes", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
                 "CapabilityBoundingSet=", "UMask=0077", "RestartPreventExitStatus=3"):
        assert line in lines, line
    start = [line for line in lines if line.startswith("ExecStart=")]
    assert start == ["ExecStart=%s/venv/bin/dspark-fleet watch --plain -i /srv/inv/prod/hosts.yml --groups \"pair_*\" "
                     "--interval 60 --max-restarts 3 --window 6 --backoff-base 30 --parallel 1 --keep-rounds 50 "
                     "--keep-days 14" % tmp_path]
    assert '"ANSIBLE_PRIVATE_KEY_FILE=%s/state/.ssh/id_nodes"' % tmp_path in text


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="no systemd-analyze")
def test_systemd_analyze_verify_accepts_the_unit(rendered):
    tmp_path, _run, doc = rendered
    unit = tmp_path / "dspark-fleet-watch.service"
    unit.write_text(unit_text(doc))
    verify = subprocess.run([SYSTEMD_ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=120,
                            check=False)
    # Unknown keys and bad values are only warnings (rc 0): any output about the unit file fails the test.
    complaints = [line for line in (verify.stdout + verify.stderr).splitlines() if unit.name in line or "ignoring" in line]
    assert verify.returncode == 0 and not complaints, verify.stdout + verify.stderr
    security = subprocess.run([SYSTEMD_ANALYZE, "security", "--offline=yes", "--no-pager", str(unit)],
                              capture_output=True, text=True, timeout=120, check=False)
    print("\n" + security.stdout[-6000:] + security.stderr[-2000:])
    overall = [line for line in security.stdout.splitlines() if "Overall exposure level" in line]
    assert overall and float(overall[0].split("level for ")[1].split(":")[1].split()[0]) < 4.0, overall


def test_a_bad_value_stops_the_run_before_anything(tmp_path):
    run, doc = run_playbook(tmp_path, {"supervisor_user": "root", "supervisor_inventory": "relative/hosts.yml",
                                       "supervisor_node_key_from": ["ctrl.example.org"]})
    assert run.returncode != 0
    results = task_results(doc)
    assert list(results) == ["Check the inputs"]
    msg = results["Check the inputs"]["msg"]
    assert "supervisor_user is 'root'" in msg and "supervisor_inventory is 'relative/hosts.yml'" in msg
    assert "supervisor_node_key_from has 'ctrl.example.org', which is not an IP address" in msg


KEY_LINE_TASK = "Show the line for the supervisor's key in the nodes' authorized_keys (from= its addresses only)"


def test_the_run_prints_the_authorized_keys_line_with_from(tmp_path):
    """Issue #41: the key's .pub beside it and this host's dspark_mgmt_address give the exact line, printed last."""
    (tmp_path / "nodes_key.pub").write_text(PUBLIC_KEY + "\n")
    run, doc = run_playbook(tmp_path, {"dspark_mgmt_address": "10.232.0.201"})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    results = task_results(doc)
    assert list(results)[-1] == KEY_LINE_TASK and not results[KEY_LINE_TASK].get("changed")
    msg = results[KEY_LINE_TASK]["msg"]
    assert msg[1] == 'from="10.232.0.201",restrict,pty ' + PUBLIC_KEY, msg
    assert KEY_TEXT not in run.stdout + run.stderr


def test_without_an_address_the_run_prints_a_placeholder_and_how_to_set_it(rendered):
    tmp_path, dummy, doc = rendered
    msg = task_results(doc)[KEY_LINE_TASK]["msg"]
    assert msg[1] == 'from="<supervisor addresses>",restrict,pty ' + su.PUBLIC_KEY_PLACEHOLDER % (tmp_path / "nodes_key"), msg
    assert "set supervisor_node_key_from" in msg[2]
