"""`dspark-fleet watch` end to end: the real CLI and ansible-runner against a copy of the fake project (every host
local, a fake tp_ranks) with a verify.yml that fails while a marker file says the group is dead, and a serve.yml
that removes the marker (unless the group is set to crash on every start). No lab; a few seconds a run."""

import json
import os
import shutil
import signal
import sys
import threading
import time

import pytest

from dspark_fleet import cli, locks

from test_e2e import write_inventory

VERIFY = """---
- name: Verify - fake
  hosts: dspark
  gather_facts: false
  tasks:
    - name: Prove every tensor-parallel rank registered and the API generates
      dspark.cluster.tp_ranks:
        group: "{{ dspark_group }}"
        fail: "{{ (fake_state ~ '/' ~ dspark_group ~ '.dead') is exists }}"
      when: dspark_rank | int == 0
"""
LOGS = """---
- name: Logs - fake
  hosts: dspark
  gather_facts: false
  tasks:
    - name: Make the group's log directory
      ansible.builtin.file:
        path: "{{ serve_failure_logs_dir }}/{{ dspark_group }}"
        state: directory
        mode: "0700"
    - name: Save this rank's logs on the controller
      ansible.builtin.copy:
        content: "logs of {{ inventory_hostname }}\\n"
        dest: "{{ serve_failure_logs_dir }}/{{ dspark_group }}/{{ inventory_hostname }}.log"
        mode: "0600"
"""
SERVE = """---
- name: Serve - fake
  hosts: dspark
  gather_facts: false
  tasks:
    - name: Start the group (it comes back unless it crashes on every start)
      ansible.builtin.file:
        path: "{{ fake_state }}/{{ dspark_group }}.dead"
        state: absent
      when: dspark_rank | int == 0 and not (fake_crash | default(false)) and serve_force_restart | bool
    - name: Wait until every tensor-parallel rank registered and the API generates
      dspark.cluster.tp_ranks:
        group: "{{ dspark_group }}"
        fail: "{{ fake_crash | default(false) }}"
      when: dspark_rank | int == 0
"""


def project(tmp_path, fake_project):
    copy = tmp_path / "project"
    shutil.copytree(fake_project, copy)
    (copy / "playbooks" / "verify.yml").write_text(VERIFY)
    (copy / "playbooks" / "logs.yml").write_text(LOGS)
    (copy / "playbooks" / "serve.yml").write_text(SERVE)
    return copy


def run_watch(tmp_path, copy, inv, *args):
    state = tmp_path / "state"
    code = cli.main(["watch", "-i", inv, "--project-dir", str(copy), "--plain", "--state-dir", str(state),
                     "-e", json.dumps({"fake_state": str(tmp_path), "ansible_python_interpreter": sys.executable})] + list(args))
    records = [json.loads(line) for line in (state / "journal.jsonl").read_text().splitlines()]
    return code, records


def test_watch_once_restarts_the_dead_group_only(tmp_path, fake_project, capsys):
    copy = project(tmp_path, fake_project)
    inv = write_inventory(tmp_path / "hosts.yml", {"grp_a": {}, "grp_b": {}})
    (tmp_path / "grp_a.dead").write_text("")
    code, records = run_watch(tmp_path, copy, inv, "--once", "--artifacts", str(tmp_path / "art"))
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    by_group = [(r["group"], r["action"]) for r in records if r["group"]]
    # One verify.yml run checks both groups; grp_a's failed proof does not touch grp_b (isolation), then grp_a alone
    # is followed up.
    assert by_group == [("grp_a", "check"), ("grp_b", "check"), ("grp_a", "logs"), ("grp_a", "restart")]
    assert records[2]["ok"] is True and records[2]["summary"] is None
    check = records[1]
    assert check["log"] == str(tmp_path / "art" / "round00001" / "all-groups" / "check" / "stdout")
    assert check["ok"] is False and "worker_never_joined" in check["summary"]
    assert check["diagnosis"][0]["node"] == "grp_a-worker"
    logs = [r for r in records if r["action"] == "logs"][0]
    assert logs["ok"], logs
    assert logs["dir"] == str(tmp_path / "art" / "round00001" / "grp_a" / "rank-logs" / "grp_a")
    assert sorted(p.name for p in (tmp_path / "art" / "round00001" / "grp_a" / "rank-logs" / "grp_a").iterdir()) == [
        "grp_a-head.log", "grp_a-worker.log"]
    assert not (tmp_path / "grp_a.dead").exists()
    assert "grp_a: restarting the group as one unit (attempt 1 of at most 3 in 6 h)" in out.err


def test_a_crash_loop_is_given_up_and_status_shows_it(tmp_path, fake_project, capsys):
    copy = project(tmp_path, fake_project)
    inv = write_inventory(tmp_path / "hosts.yml", {"grp_a": {"fake_crash": True}})
    (tmp_path / "grp_a.dead").write_text("")
    code, records = run_watch(tmp_path, copy, inv, "--rounds", "3", "--interval", "0.1", "--max-restarts", "1",
                              "--artifacts", str(tmp_path / "art"))
    assert code == 1
    actions = [r["action"] for r in records if r["group"]]
    assert actions == ["check", "logs", "restart", "check", "give_up", "check", "failed"], actions
    assert "cap 1" in [r for r in records if r["action"] == "give_up"][0]["reason"]
    code = cli.main(["status", "-i", inv, "--project-dir", str(copy), "--plain", "--state-dir",
                     str(tmp_path / "state"), "--artifacts", str(tmp_path / "status")])
    out = capsys.readouterr().out
    assert "Supervisor journal" in out and "FAILED: 1 restart(s) in the last 6 h (cap 1)" in out, out


def test_a_locked_group_is_not_touched(tmp_path, fake_project):
    copy = project(tmp_path, fake_project)
    inv = write_inventory(tmp_path / "hosts.yml", {"grp_a": {}})
    (tmp_path / "grp_a.dead").write_text("")
    held = locks.GroupLock(str(tmp_path / "state"), "grp_a", "reprovision")
    assert held.acquire()
    try:
        code, records = run_watch(tmp_path, copy, inv, "--once", "--artifacts", str(tmp_path / "art"))
    finally:
        held.release()
    assert code == 1
    assert [r["action"] for r in records if r["group"]] == ["locked"]
    assert (tmp_path / "grp_a.dead").exists()


def test_reprovision_holds_the_group_lock_while_it_runs(tmp_path, fake_project):
    """The fake site.yml's serve play checks the lock file from inside the run: held, by reprovision."""
    copy = project(tmp_path, fake_project)
    (copy / "playbooks" / "serve.yml").write_text("""---
- name: Serve - fake, checks that the group's lock is held
  hosts: dspark
  gather_facts: false
  tasks:
    - name: Read the lock file
      ansible.builtin.assert:
        that: "'reprovision' in lookup('ansible.builtin.file', fake_lock_dir ~ '/locks/' ~ dspark_group ~ '.lock')"
""")
    inv = write_inventory(tmp_path / "hosts.yml", {"grp_a": {}})
    state = tmp_path / "state"
    code = cli.main(["reprovision", "-i", inv, "--project-dir", str(copy), "--plain", "--state-dir", str(state),
                     "--artifacts", str(tmp_path / "art"), "-e", json.dumps({"fake_lock_dir": str(state)})])
    assert code == 0
    lock = locks.GroupLock(str(state), "grp_a", "watch")
    assert lock.acquire()                              # released at the end
    lock.release()


def stop_after_first_check(state):
    """SIGTERM to this process (cli.main's handler) once the journal holds a check: the watch is then between rounds."""
    def poll():
        journal = state / "journal.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if journal.exists() and '"action": "check"' in journal.read_text():
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.1)
    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("rounds,expect", [([], 0), (["--rounds", "5"], 1)])
def test_a_signal_ends_the_service_with_0_and_a_counted_run_with_its_health(tmp_path, fake_project, rounds, expect):
    """The service (no --once/--rounds) stopped by systemd ends with 0 even with a broken group, so that a stop leaves
    the unit inactive, not failed; a counted run keeps its health as its exit code."""
    copy = project(tmp_path, fake_project)
    inv = write_inventory(tmp_path / "hosts.yml", {"grp_a": {"fake_crash": True}})
    (tmp_path / "grp_a.dead").write_text("")
    thread = stop_after_first_check(tmp_path / "state")
    code, records = run_watch(tmp_path, copy, inv, "--interval", "60", "--max-restarts", "1",
                              "--artifacts", str(tmp_path / "art"), *rounds)
    thread.join(timeout=5)
    assert code == expect
    assert records[-1]["action"] == "watch_stop" and records[-1]["reason"] == "interrupted by SIGTERM", records[-1]
    assert [r["ok"] for r in records if r["action"] == "check"][:1] == [False], records
