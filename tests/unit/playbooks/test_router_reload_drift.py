"""The router role's reload after an aborted run (issue #26 point 8), its own tasks under real Ansible, on the controller.

The tasks of roles/router/tasks/haproxy_apply.yml that judge and record (read the unit, read the files, read the record,
decide, the debug that notifies `Reload HAProxy`, flush_handlers, read again, write the record) are taken from the role
file by name and run in order around a stand-in for the configuration write (a copy that notifies the handler, as the
template does), with a stand-in handler, a fake `systemctl` on PATH and every path under a temporary directory (owner
and group dropped from the record's copy so that it runs as any user). Asserted: a fresh router reloads once and is
recorded; a second run and a --check run change nothing; a run that writes a new file and dies before its handler
leaves the old record, and the next run (its write now unchanged) reloads, naming the file, and records it; --check on
a stale router reports the reload and writes no record; a HAProxy that is not running is never reloaded; systemd's
NeedDaemonReload is passed on. What HAProxy does on a reload is the fleet lab's part (tests/fleet/test_router.py).
"""

import hashlib
import json
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TASKS = os.path.join(ROOT, "roles", "router", "tasks", "haproxy_apply.yml")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
RECAP = re.compile(r"^localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
BEFORE = ["Read whether HAProxy runs and whether systemd loaded its unit files since they changed",
          "Read HAProxy's configuration files as they are before this run writes them",
          "Read the record of what HAProxy last loaded",
          "Note whether HAProxy runs an older configuration than its files hold",
          "Reload HAProxy because it runs an older configuration than its files hold"]
AFTER = ["Reload HAProxy now when its configuration changed",
         "Read HAProxy's configuration files as HAProxy runs them now",
         "Record what HAProxy loaded"]
RELOAD = "CHAR reload"


def role_tasks(names):
    with open(TASKS, encoding="utf-8") as handle:
        tasks = {task["name"]: task for task in yaml.safe_load(handle)}
    out = []
    for name in names:
        task = dict(tasks[name])
        if "ansible.builtin.copy" in task:
            task["ansible.builtin.copy"] = {k: v for k, v in task["ansible.builtin.copy"].items() if k not in ("owner", "group")}
        out.append(task)
    return out


def setup(tmp):
    write = [{"name": "Stand-in for the configuration write", "ansible.builtin.copy": {
        "dest": "{{ router_config_file }}", "content": "{{ char_config }}\n", "mode": "0644"}, "notify": "Reload HAProxy"},
        {"name": "Stand-in for a run that dies here", "ansible.builtin.fail": {"msg": "CHAR aborted"},
         "when": "char_abort | default(false) | bool"},
        {"name": "Reload systemd after a drop-in change", "ansible.builtin.debug": {"msg": "CHAR daemon-reload"},
         "when": "_router_drift.daemon_reload"}]
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"_router_live": True, "router_config_file": os.path.join(tmp, "haproxy.cfg"),
                      "_router_tls_pem": os.path.join(tmp, "tls", "router.pem"),
                      "router_loaded_stamp": os.path.join(tmp, "loaded.json")},
             "tasks": role_tasks(BEFORE) + write + role_tasks(AFTER),
             "handlers": [{"name": "Reload HAProxy", "ansible.builtin.debug": {"msg": RELOAD}, "changed_when": True}]}]
    with open(os.path.join(tmp, "play.yml"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(play, handle, sort_keys=False)
    os.makedirs(os.path.join(tmp, "bin"))
    systemctl = os.path.join(tmp, "bin", "systemctl")
    with open(systemctl, "w", encoding="utf-8") as handle:
        handle.write("#!/bin/sh\ncat %s\n" % os.path.join(tmp, "unit"))
    os.chmod(systemctl, 0o755)


def run(tmp, config, *args, state="active", daemon_reload="no", abort=False):
    with open(os.path.join(tmp, "unit"), "w", encoding="utf-8") as handle:
        handle.write("ActiveState=%s\nNeedDaemonReload=%s\n" % (state, daemon_reload))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_STDOUT_CALLBACK="default", PATH=os.path.join(tmp, "bin") + os.pathsep + os.environ["PATH"])
    extra = {"char_config": config, "char_abort": abort, "ansible_python_interpreter": sys.executable}
    command = [ANSIBLE_PLAYBOOK, "-i", "localhost,", "-e", json.dumps(extra), *args, os.path.join(tmp, "play.yml")]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    recap = RECAP.search(output)
    assert recap, output[-4000:]
    return done.returncode, int(recap.group(2)), output


def record(tmp):
    with open(os.path.join(tmp, "loaded.json"), encoding="utf-8") as handle:
        return json.load(handle)["loaded"]


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def test_reload_survives_an_aborted_run(tmp_path):
    tmp = str(tmp_path)
    cfg, pem = os.path.join(tmp, "haproxy.cfg"), os.path.join(tmp, "tls", "router.pem")
    setup(tmp)

    # A fresh router: no record, the configuration written: one reload, then the record.
    rc, changed, output = run(tmp, "v1")
    assert rc == 0 and output.count(RELOAD) == 1, output[-4000:]
    assert "there is no record of what HAProxy last loaded" in " ".join(output.split())
    assert record(tmp) == {cfg: sha256("v1\n"), pem: None}
    rc, changed, output = run(tmp, "v1")
    assert (rc, changed) == (0, 0) and RELOAD not in output, output[-4000:]
    rc, changed, output = run(tmp, "v1", "--check", "--diff")
    assert (rc, changed) == (0, 0) and RELOAD not in output, output[-4000:]

    # A run writes v2 and dies before its handler: no reload, the record still says v1.
    rc, changed, output = run(tmp, "v2", abort=True)
    assert rc != 0 and "CHAR aborted" in output and RELOAD not in output
    assert record(tmp)[cfg] == sha256("v1\n")
    # --check on the stale router: the reload is reported (and why), nothing is recorded.
    rc, changed, output = run(tmp, "v2", "--check")
    assert rc == 0 and changed >= 1 and output.count(RELOAD) == 1, output[-4000:]
    said = " ".join(output.split())          # the result printer folds long lines
    assert "HAProxy runs an older configuration than its files hold: %s (loaded: sha256 %s" % (cfg, sha256("v1\n")[:12]) in said
    assert record(tmp)[cfg] == sha256("v1\n")
    # The next run: its write changes nothing, yet HAProxy is reloaded once and v2 recorded.
    rc, changed, output = run(tmp, "v2")
    assert rc == 0 and output.count(RELOAD) == 1, output[-4000:]
    assert "TASK [Stand-in for the configuration write]" in output and record(tmp)[cfg] == sha256("v2\n")
    rc, changed, output = run(tmp, "v2")
    assert (rc, changed) == (0, 0), output[-4000:]

    # Not running: never reloaded (starting reads the files); the record follows the files.
    rc, changed, output = run(tmp, "v3", abort=True)
    rc, changed, output = run(tmp, "v3", state="inactive")
    assert rc == 0 and RELOAD not in output and record(tmp)[cfg] == sha256("v3\n"), output[-4000:]

    # systemd's NeedDaemonReload reaches the drop-in step.
    rc, changed, output = run(tmp, "v3", daemon_reload="yes")
    assert rc == 0 and "CHAR daemon-reload" in output and RELOAD not in output, output[-4000:]
