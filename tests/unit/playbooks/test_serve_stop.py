"""roles/serve/tasks/stop_rank.yml under real Ansible with a fake `docker` (issue #46): a rank's sidecar engines stop
before its main engine and LMCache's server, as the recipe's stop script does, wanted or left over (found by their
label); a sidecar restarted alone stops only its own container."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_stop")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def stop(tmp_path, containers, extra=None):
    """(rc, output, the fake docker's calls); containers: name -> 'engine' (a sidecar's label) or 'main'."""
    for name, kind in containers.items():
        (tmp_path / name).write_text(kind + "\n")
    command = [ANSIBLE_PLAYBOOK, os.path.join(HERE, "play.yml"), "-i", "spark-head,",
               "-e", "ansible_connection=local", "-e", "ansible_python_interpreter=" + sys.executable,
               "-e", "fake_docker_bin=" + HERE, "-e", "fake_docker_dir=" + str(tmp_path),
               "-e", "stop_tasks=" + os.path.join(ROOT, "roles", "serve", "tasks", "stop_rank.yml")]
    if extra:
        command += ["-e", json.dumps(extra)]
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300, check=False)
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return run.returncode, run.stdout + run.stderr, calls


def stopped(calls):
    return [call.split()[-1] for call in calls if call.startswith("stop ")]


def test_sidecar_engines_stop_before_the_main_engine_and_lmcache(tmp_path):
    rc, out, calls = stop(tmp_path, {"dspark-vllm-vl": "engine", "dspark-vllm-old": "engine", "dspark-vllm": "main",
                                     "dspark-lmcache": "main"})
    assert rc == 0, out[-3000:]
    assert stopped(calls)[2:] == ["dspark-vllm", "dspark-lmcache"], calls
    assert sorted(stopped(calls)[:2]) == ["dspark-vllm-old", "dspark-vllm-vl"], calls
    assert calls[0].startswith("ps --all --filter label=dspark.cluster/engine --format {{.Names}}"), calls
    assert sorted(os.listdir(tmp_path)) == ["calls"]


def test_a_sidecar_restarted_alone_stops_only_its_own_container(tmp_path):
    rc, out, calls = stop(tmp_path, {"dspark-vllm-vl": "engine", "dspark-vllm": "main"},
                          {"_serve_stop_containers": ["dspark-vllm-vl"]})
    assert rc == 0, out[-3000:]
    assert stopped(calls) == ["dspark-vllm-vl"] and not any(call.startswith("ps ") for call in calls), calls
    assert sorted(os.listdir(tmp_path)) == ["calls", "dspark-vllm"]


def test_a_rank_without_sidecars_stops_as_before(tmp_path):
    rc, out, calls = stop(tmp_path, {"dspark-vllm": "main"})
    assert rc == 0, out[-3000:]
    assert stopped(calls) == ["dspark-vllm"], calls
