"""docker_runtime_info module (plugins/module_utils/docker_runtime_info.py): the reads of the docker_runtime role in one
run, against fake files and a fake run_command."""

import hashlib
import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.filter.dockerd_restart_reason import FilterModule
from ansible_collections.dspark.cluster.plugins.module_utils import docker_runtime_info as info
from ansible_collections.dspark.cluster.plugins.modules import docker_runtime_info

SHOW = ("ActiveState=active\nActiveEnterTimestamp=Tue 2026-12-01 05:41:01.250000 UTC\nNeedDaemonReload=no\n"
        "UnitFileState=enabled\n")


def fake(answers):
    """run_command answering by the argv's first words; records every call."""
    calls = []

    def run(argv):
        calls.append(list(argv))
        for prefix, answer in answers.items():
            if tuple(argv[:len(prefix)]) == prefix:
                return answer
        raise AssertionError("unexpected command %r" % (argv,))
    run.calls = calls
    return run


HEALTHY = {
    ("systemctl", "show"): (0, SHOW, ""),
    (info.DOCKER_CLI, "ps"): (0, "serve-rank0\nother\n", ""),
    (info.DOCKER_CLI, "info"): (0, "false\n", ""),
    (info.DOCKER_CLI, "compose"): (0, "2.33.1\n", ""),
}


def test_a_converged_node_is_read_in_one_go(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}))
    run = fake(HEALTHY)
    state = info.read_state(run, str(daemon), [str(daemon), str(tmp_path / "absent.conf")], exists=lambda path: True)
    assert state["cli"] is True
    assert state["daemon_json"]["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert state["config_stats"][0] == {"item": str(daemon), "stat": {"exists": True, "mtime": os.stat(str(daemon)).st_mtime}}
    assert state["config_stats"][1] == {"item": str(tmp_path / "absent.conf"), "stat": {"exists": False}}
    assert state["unit"] == SHOW and state["running"] == ["serve-rank0", "other"] and state["live_restore"] is False
    assert state["compose_version"] == "2.33.1" and state["compose_problem"] == ""
    assert ["systemctl", "show", "docker.service", "--timestamp=us+utc",
            "--property=ActiveState,ActiveEnterTimestamp,NeedDaemonReload,UnitFileState"] in run.calls


def test_daemon_json_digest_and_mode_let_the_role_skip_an_unchanged_write(tmp_path):
    daemon = tmp_path / "daemon.json"
    text = json.dumps({"log-driver": "json-file"}, indent=4)
    daemon.write_text(text)
    os.chmod(str(daemon), 0o644)
    state = info.read_state(fake(HEALTHY), str(daemon), [], exists=lambda path: True)
    assert state["daemon_json_file"] == {"sha256": hashlib.sha256(text.encode()).hexdigest(), "mode": "0644"}
    os.chmod(str(daemon), 0o600)
    assert info.file_digest(str(daemon))["mode"] == "0600"
    assert info.read_state(fake(HEALTHY), str(tmp_path / "absent.json"), [], exists=lambda path: True)["daemon_json_file"] is None
    assert info.file_digest(str(tmp_path)) is None


def test_docker_group_users_are_existing_listed_members(monkeypatch):
    import grp
    import pwd
    groups = {"docker": grp.struct_group(("docker", "x", 999, ["spark", "ghost", "admin"]))}
    monkeypatch.setattr(grp, "getgrnam", lambda name: groups[name])
    monkeypatch.setattr(pwd, "getpwnam", lambda name: {"spark": 1, "admin": 2}[name])
    assert info.docker_group_users() == ["admin", "spark"]
    assert info.docker_group_users("absent") == []


def test_the_image_is_looked_up_by_its_reference():
    calls = []

    def run(argv):
        calls.append(argv)
        if argv[1:3] == ["image", "inspect"]:
            return (0, "sha256:" + "a" * 64 + "\n", "") if argv[-1] == "reg/x@sha256:" + "b" * 64 else (1, "", "No such image")
        return fake(HEALTHY)(argv)

    assert info.image_id(run, "reg/x@sha256:" + "b" * 64) == "sha256:" + "a" * 64
    assert info.image_id(run, "reg/other:1") == ""
    state = info.read_state(run, "/nonexistent/daemon.json", [], exists=lambda path: True, image="reg/x@sha256:" + "b" * 64)
    assert state["image_id"] == "sha256:" + "a" * 64
    assert info.read_state(run, "/nonexistent/daemon.json", [], exists=lambda path: True)["image_id"] == ""


def test_the_stats_feed_the_restart_reason_filter(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text("{}")
    os.utime(str(daemon), (2000000000, 2000000000))  # after the start above
    state = info.read_state(fake(HEALTHY), str(daemon), [str(daemon)], exists=lambda path: True)
    reason = FilterModule().filters()["dockerd_restart_reason"](state["unit"], state["config_stats"])
    assert "before %s last changed" % daemon in reason


def test_without_the_cli_nothing_is_asked_of_dockerd(tmp_path):
    run = fake({})
    state = info.read_state(run, str(tmp_path / "daemon.json"), [str(tmp_path / "daemon.json")], exists=lambda path: False)
    assert run.calls == []
    assert state["cli"] is False and state["daemon_json"] == {} and state["unit"] == "" and state["running"] == []


def test_a_daemon_that_does_not_answer_runs_nothing(tmp_path):
    answers = dict(HEALTHY)
    answers[(info.DOCKER_CLI, "ps")] = (1, "", "Cannot connect to the Docker daemon")
    answers[(info.DOCKER_CLI, "info")] = (1, "", "Cannot connect to the Docker daemon")
    state = info.read_state(fake(answers), str(tmp_path / "d.json"), [], exists=lambda path: True)
    assert state["running"] == [] and state["live_restore"] is False


def test_live_restore_is_read(tmp_path):
    answers = dict(HEALTHY)
    answers[(info.DOCKER_CLI, "info")] = (0, "true\n", "")
    assert info.read_state(fake(answers), str(tmp_path / "d.json"), [], exists=lambda path: True)["live_restore"] is True


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_an_unreadable_daemon_json_stops_with_the_fix(tmp_path, text):
    daemon = tmp_path / "daemon.json"
    daemon.write_text(text)
    with pytest.raises(info.StateError, match="is not valid JSON, so the runtimes registered in it cannot be kept"):
        info.read_state(fake(HEALTHY), str(daemon), [], exists=lambda path: True)


@pytest.mark.parametrize("answer", [(0, "1.29.2\n", ""), (1, "", "docker: 'compose' is not a docker command.")])
def test_compose_v2_is_required(tmp_path, answer):
    answers = dict(HEALTHY)
    answers[(info.DOCKER_CLI, "compose")] = answer
    run = fake(answers)
    state = info.read_state(run, str(tmp_path / "d.json"), [], exists=lambda path: True)
    assert state["compose_problem"].startswith("`docker compose version --short` exited %d" % answer[0])
    params = {"daemon_json": str(tmp_path / "d.json"), "files": [], "require_compose_v2": True}
    with pytest.raises(info.StateError, match="compose v2 does not answer as a docker plugin"):
        docker_runtime_info.run(params, run)
    assert docker_runtime_info.run(dict(params, require_compose_v2=False), run)["changed"] is False


def test_main_in_check_mode_changes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(info, "DOCKER_CLI", str(tmp_path / "no-docker"))
    (tmp_path / "daemon.json").write_text('{"log-driver": "json-file"}')
    args = {"daemon_json": str(tmp_path / "daemon.json"), "files": [str(tmp_path / "daemon.json")], "_ansible_check_mode": True}
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            docker_runtime_info.main()
    assert exit_info.value.code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["changed"] is False and result["cli"] is False
    assert result["daemon_json"] == {"log-driver": "json-file"}
