"""The real CLI and ansible-runner against the fake project (fakeproject/: every host local, a fake tp_ranks).

No lab: each group's site.yml takes about two seconds here.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml

from conftest import load_report, run_cli

jsonschema = pytest.importorskip("jsonschema")

load = load_report


def alive_with_argument(text, wait=5.0):
    """Whether a live, non-zombie process has `text` in its command line after up to `wait` seconds."""
    deadline = time.time() + wait
    while True:
        found = False
        for entry in os.listdir("/proc"):
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as handle:
                    args = handle.read().decode(errors="replace").split("\0")
                with open("/proc/%s/stat" % entry, encoding="ascii", errors="replace") as handle:
                    state = handle.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if text in args and state != "Z":
                found = True
        if not found or time.time() >= deadline:
            return found
        time.sleep(0.2)


def write_inventory(path, groups, router=False):
    """groups: {name: extra group vars}; two local hosts each (<name>-head rank 0, <name>-worker rank 1); with
    `router`, a host router-1 in dspark_router (the fake router playbooks)."""
    children = {}
    for name, extra in groups.items():
        children[name] = {"vars": dict({"dspark_group": name}, **extra),
                          "hosts": {name + "-head": {"dspark_rank": 0}, name + "-worker": {"dspark_rank": 1}}}
    tops = {"dspark": {"vars": {"dspark_model": "org/model", "dspark_model_revision": "f" * 40},
                       "children": children}}
    if router:
        tops["dspark_router"] = {"hosts": {"router-1": {}}}
    # The fake router playbooks write their report with the copy module: this Python runs it.
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    path.write_text(yaml.safe_dump({"all": {"vars": local, "children": tops}}, sort_keys=False))
    return str(path)


def test_reprovision_then_resume(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"grp_ok": {}, "grp_bad": {"fake_fail": "serve"}})
    first = tmp_path / "first"
    code = run_cli(["reprovision", "-i", inv, "--parallel", "2", "--artifacts", str(first),
                    "-e", "fleet_test_secret=hunter2"], fake_project)
    out, err = capsys.readouterr()
    assert code == 1, out + err
    doc = load(first / "report.json")
    assert (first / "report.md").is_file()
    assert doc["exit_code"] == 1 and doc["complete"] is True
    assert doc["preflight"]["result"] == "ok"
    assert doc["totals"]["converged"] == 1 and doc["totals"]["failed"] == 1
    ok, bad = doc["groups"]["grp_ok"], doc["groups"]["grp_bad"]
    assert ok["result"] == "converged"
    assert [r["node"] for r in ok["tp_ranks"]["registered_ranks"]] == ["grp_ok-head", "grp_ok-worker"]
    assert ok["image_id"] == "sha256:" + "ab12" * 16
    assert (ok["model"], ok["model_revision"]) == ("org/model", "f" * 40)
    assert list(ok["phases"]) == ["preflight", "docker_runtime", "serve"]
    assert os.path.getsize(ok["logs"]["stdout"]) > 0
    assert "PLAY [Serve - start every group" in open(ok["logs"]["stdout"], encoding="utf-8").read()
    assert ok["controller_memory_peak_kib"] is None or ok["controller_memory_peak_kib"] > 1000
    assert bad["result"] == "failed"
    assert bad["failure"]["tp_ranks"]["diagnosis"][0]["node"] == "grp_bad-worker"
    assert bad["failure"]["final_task"]["task"] == "Report the failure"
    assert "hunter2" not in (first / "report.json").read_text() + (first / "report.md").read_text()
    assert "grp_bad" in out and "log: %s" % bad["logs"]["stdout"] in out
    assert "PLAY [" not in out + err and "TASK [" not in out + err     # no Ansible output on the terminal

    # Fix grp_bad; resume: grp_ok is skipped (same inputs), grp_bad runs again and converges.
    write_inventory(tmp_path / "hosts.yml", {"grp_ok": {}, "grp_bad": {}})
    second = tmp_path / "second"
    code = run_cli(["reprovision", "-i", inv, "--resume", str(first / "report.json"), "--artifacts", str(second),
                    "-e", "fleet_test_secret=hunter2"], fake_project)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    doc = load(second / "report.json")
    assert doc["groups"]["grp_ok"]["result"] == "skipped"
    assert doc["groups"]["grp_ok"]["previous"]["result"] == "converged"
    assert doc["groups"]["grp_bad"]["result"] == "converged"
    assert not (second / "groups" / "grp_ok").exists()
    assert "grp_ok: skip" in err and "grp_bad: redo (previous result failed)" in err


def test_global_validation_failure_exits_2_and_runs_no_group(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"grp_a": {}, "grp_b": {"fake_bad_input": True}})
    code = run_cli(["reprovision", "-i", inv, "--artifacts", str(tmp_path / "art")], fake_project)
    err = capsys.readouterr().err
    assert code == 2
    assert "the global validation failed" in err and "bad input: grp_b-head, grp_b-worker set fake_bad_input" in err
    doc = load(tmp_path / "art" / "report.json")
    assert doc["exit_code"] == 2 and doc["preflight"]["result"] == "failed"
    assert doc["totals"]["not_started"] == 2
    assert not (tmp_path / "art" / "groups").exists()
    command = json.loads((tmp_path / "art" / "preflight" / "command").read_text())["command"]
    assert "grp_a,grp_b" in command
    # Extra vars (here the preflight's own) go through a private file, never the command line.
    assert "preflight_check_reachability" not in " ".join(command)
    assert any(c.startswith("@") and "/.runner/extravars/" in c for c in command), command


def test_status_and_plan(tmp_path, fake_project, venv_path, capsys):
    inv = write_inventory(tmp_path / "hosts.yml", {"grp_up": {}, "grp_down": {"fake_fail": "status"}})
    code = run_cli(["status", "-i", inv, "--parallel", "2", "--artifacts", str(tmp_path / "st")], fake_project)
    out = capsys.readouterr().out
    assert code == 1
    lines = [line.split() for line in out.splitlines()]
    assert ["group", "node", "rank", "container", "restarts", "image", "API", "models", "serving"] in lines
    assert ["grp_up", "grp_up-head", "0", "running", "0", "ab12ab12ab12", "fake-model", "yes"] in lines
    assert ["grp_up", "grp_up-worker", "1", "running", "0", "ab12ab12ab12", "-"] in lines
    assert ["grp_down", "grp_down-head", "0", "absent", "-", "-", "-", "no"] in lines
    doc = load(tmp_path / "st" / "report.json")
    assert doc["groups"]["grp_up"]["result"] == "ok" and doc["groups"]["grp_down"]["result"] == "failed"

    code = run_cli(["plan", "-i", inv, "--groups", "grp_up", "--artifacts", str(tmp_path / "pl")], fake_project)
    out = capsys.readouterr().out
    assert code == 0
    assert "grp_up: ok, 2 task(s) would change" in out
    assert "docker_runtime Install the engine (grp_up-head, grp_up-worker)" in " ".join(out.split("  "))
    command = json.loads((tmp_path / "pl" / "groups" / "grp_up" / "command").read_text())["command"]
    assert "--check" in command and "--diff" in command and "--limit" in command


def test_sigint_cancels_and_writes_the_report(tmp_path, fake_project, venv_path):
    inv = write_inventory(tmp_path / "hosts.yml", {"grp_slow": {"fake_delay": 120}, "grp_next": {}})
    art = tmp_path / "art"
    argv = [sys.executable, "-m", "dspark_fleet", "reprovision", "-i", inv, "--artifacts", str(art),
            "--project-dir", str(fake_project), "--plain"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(90, proc.kill)            # never hang the test suite
    watchdog.start()
    start = time.time()
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.split()[:3] == ["grp_slow", line.split()[1], "phase"] and "serve" in line:
            break
        assert time.time() - start < 60, "".join(seen)
    time.sleep(0.5)                          # inside the fake tp_ranks' sleep
    proc.send_signal(signal.SIGINT)
    stderr = proc.communicate(timeout=30)[1]
    watchdog.cancel()
    assert time.time() - start < 60
    assert proc.returncode == 1, "".join(seen) + stderr
    assert "interrupted by SIGINT: no new group starts; cancelling grp_slow" in stderr
    doc = load(art / "report.json")
    assert doc["interrupted"] is True and doc["stop_reason"] == "interrupted by SIGINT"
    assert doc["groups"]["grp_slow"]["result"] == "cancelled"
    assert doc["groups"]["grp_next"]["result"] == "not_started"
    # ansible-playbook is gone: ansible-runner killed its process group
    # ansible-runner's finished events carry the pid; a cancelled run also leaves "<uuid>-partial.json" files
    # without it, whose names may sort first.
    events = art / "groups" / "grp_slow" / "job_events"
    pids = {json.loads((events / name).read_text()).get("pid") for name in os.listdir(events)}
    pids.discard(None)
    assert len(pids) == 1, pids
    pid = pids.pop()
    assert not os.path.exists("/proc/%d" % pid) or "zombie" in open("/proc/%d/status" % pid).read().lower()
    # ...and so are its workers (ansible-core's workers call setsid(): a killpg of the main process misses them).
    assert not alive_with_argument(str(inv)), "an ansible-playbook process of the cancelled run is still alive"
