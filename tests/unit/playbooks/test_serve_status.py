"""playbooks/status.yml's tasks (roles/serve/tasks/status.yml) under real Ansible with a fake `docker` (issue #29
item 2): a rank whose container was killed is named first, with its exit code, and the other ranks' failures as its
consequences; `host=exited` stays in the states (tests/real asserts it)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_status")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
IMAGE = "sha256:" + "a" * 64


def status(tmp_path, containers, extra=()):
    """ansible-playbook's output (whitespace collapsed) and rc; containers: name -> docker inspect line or None."""
    for name, line in containers.items():
        if line is not None:
            (tmp_path / name).write_text(line + "\n")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    spark-head: {dspark_rank: 0}\n    spark-r1: {dspark_rank: 1}\n")
    command = [ANSIBLE_PLAYBOOK, os.path.join(HERE, "play.yml"), "-i", str(inventory),
               "-e", "ansible_connection=local", "-e", "ansible_python_interpreter=" + sys.executable,
               "-e", "fake_docker_bin=" + HERE, "-e", "fake_docker_dir=" + str(tmp_path),
               "-e", "status_tasks=" + os.path.join(ROOT, "roles", "serve", "tasks", "status.yml")]
    for item in extra:
        command += ["-e", item]
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300, check=False)
    return run.returncode, " ".join((run.stdout + run.stderr).split())


def test_a_killed_worker_is_named_first_with_its_exit_code(tmp_path):
    rc, out = status(tmp_path, {
        "spark-head": "running 0 0 %s false 0001-01-01T00:00:00Z" % IMAGE,
        "spark-r1": "exited 137 0 %s false 2026-12-01T16:07:19.2048Z" % IMAGE})
    assert rc != 0, out[-3000:]
    assert ("group pair is not serving: rank 1 on spark-r1 failed first: its container exited (137, killed) at "
            "2026-12-01T16:07:19.204800000Z; rank 0 on spark-head: lost its peer rank 1 (consequence); states "
            "spark-head=running, spark-r1=exited (137, killed);") in out, out[-3000:]
    assert "spark-r1=exited" in out
    # The inspect format the role passes (one line: the fields split on whitespace).
    assert (tmp_path / "spark-r1.argv").read_text().splitlines() == [
        "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}} {{.Image}} "
        "{{.State.OOMKilled}} {{.State.FinishedAt}}", "spark-r1"]


def test_the_container_that_ended_first_leads_when_both_ended(tmp_path):
    rc, out = status(tmp_path, {
        "spark-head": "exited 1 0 %s false 2026-12-01T16:07:24Z" % IMAGE,
        "spark-r1": "exited 143 0 %s false 2026-12-01T16:07:19.5Z" % IMAGE})
    assert rc != 0
    assert ("rank 1 on spark-r1 failed first: its container exited (143) at 2026-12-01T16:07:19.500000000Z; rank 0 "
            "on spark-head: lost its peer rank 1 (consequence); states spark-head=exited (1), "
            "spark-r1=exited (143);") in out, out[-3000:]


def test_an_oom_killed_head_and_an_absent_worker(tmp_path):
    rc, out = status(tmp_path, {"spark-head": "exited 137 0 %s true 2026-12-01T16:07:24Z" % IMAGE, "spark-r1": None})
    assert rc != 0
    assert ("rank 0 on spark-head failed first: its container exited (137, killed) at 2026-12-01T16:07:24.000000000Z; "
            "rank 1 on spark-r1: lost its peer rank 0 (consequence); states spark-head=exited (137, killed), "
            "spark-r1=absent;") in out, out[-3000:]


def test_no_first_failure_when_the_containers_cannot_tell(tmp_path):
    rc, out = status(tmp_path, {"spark-head": "exited 1 0 %s false 2026-12-01T16:07:24Z" % IMAGE,
                                "spark-r1": "exited 1 0 %s false 2026-12-01T16:07:24Z" % IMAGE})
    assert rc != 0
    assert "group pair is not serving: states spark-head=exited (1), spark-r1=exited (1);" in out, out[-3000:]
    assert "failed first:" not in out


def test_the_group_status_reaches_the_job_artifacts_before_the_failure(tmp_path, monkeypatch):
    """set_stats (AWX's job artifacts, ansible-runner's playbook_on_stats) carries the failed group too: it is handed
    over before the assert that fails the run."""
    monkeypatch.setenv("ANSIBLE_SHOW_CUSTOM_STATS", "1")
    rc, out = status(tmp_path, {
        "spark-head": "running 0 0 %s false 0001-01-01T00:00:00Z" % IMAGE,
        "spark-r1": "exited 137 0 %s false 2026-12-01T16:07:19.2048Z" % IMAGE})
    assert rc != 0
    stats = out[out.index("CUSTOM STATS:"):]
    # ansible.cfg's callback_result_format = yaml, whitespace collapsed.
    assert "RUN: dspark_status: pair:" in stats, stats
    assert "serving: false" in stats and "first_failure: ended: true exit_code: '137'" in stats, stats
    assert "host: spark-r1 killed: true" in stats, stats


def test_an_lmcache_server_down_or_unhealthy_is_named(tmp_path):
    """#45: with serve_lmcache, each rank's server is read beside its engine; one that stopped or fails its health
    check is named in the group's failure (the engines run)."""
    running = "running 0 0 %s false 0001-01-01T00:00:00Z" % IMAGE
    rc, out = status(tmp_path, {"spark-head": running, "spark-r1": running, "lmc-spark-head": "running unhealthy",
                                "lmc-spark-r1": "running healthy"},
                     extra=["serve_lmcache=true", "serve_lmcache_container_name=lmc-{{ inventory_hostname }}"])
    assert rc != 0
    assert "LMCache server down or unhealthy on spark-head." in out, out[-3000:]
    assert (tmp_path / "lmc-spark-r1.argv").read_text().splitlines() == [
        "inspect", "--format", "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}", "lmc-spark-r1"]
    (tmp_path / "b").mkdir()
    rc, out = status(tmp_path / "b", {"spark-head": running, "spark-r1": running, "lmc-spark-head": "running healthy"},
                     extra=["serve_lmcache=true", "serve_lmcache_container_name=lmc-{{ inventory_hostname }}"])
    assert "LMCache server down or unhealthy on spark-r1." in out, out[-3000:]
