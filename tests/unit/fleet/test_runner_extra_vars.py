"""Extra vars reach ansible-playbook through 0600 files, never its command line (issue #26 point 7): what
runner_exec.run_playbook hands to ansible-runner, the files' content and mode, and their removal after the run."""

import json
import os
import stat

import yaml

from dspark_fleet import runner_exec


def test_each_inline_value_becomes_a_private_file(tmp_path):
    args = ["--check", "-e", "a=1 b='two words'", "-e", '{"key": "hunter2", "n": 3}', "-e", "@/etc/x.yml",
            "--extra-vars=c=d", "--tags", "serve"]
    out, files = runner_exec.extra_vars_files(args, str(tmp_path / "ev"), "g1")
    assert out[:1] == ["--check"] and out[-2:] == ["--tags", "serve"]
    assert out.count("-e") == 4 and "-e" not in out[-2:]
    assert ["-e", "@/etc/x.yml"] == out[5:7]
    assert "hunter2" not in " ".join(out) and "a=1" not in " ".join(out)
    assert [os.path.basename(f) for f in files] == ["g1-1.yml", "g1-2.yml", "g1-3.yml"]
    for path in files:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert "@" + path in out
    docs = [yaml.safe_load(open(path, encoding="utf-8")) for path in files]
    assert docs == [{"a": "1", "b": "two words"}, {"key": "hunter2", "n": 3}, {"c": "d"}]


def test_a_value_that_is_not_key_value_is_passed_as_given(tmp_path):
    _out, files = runner_exec.extra_vars_files(["-e", "notkv"], str(tmp_path), "g")
    assert open(files[0], encoding="utf-8").read() == "notkv"


def test_run_playbook_passes_files_and_removes_them(tmp_path, monkeypatch):
    seen = {}

    class Finished:
        status, rc = "successful", 0

    def fake_run(**kwargs):
        seen["cmdline"] = kwargs["cmdline"]
        path = kwargs["cmdline"].split("@", 1)[1].split()[0]
        seen["path"], seen["content"] = path, open(path, encoding="utf-8").read()
        return Finished()

    monkeypatch.setattr(runner_exec.ansible_runner, "run", fake_run)
    private = runner_exec.prepare(str(tmp_path / "art"))
    spec = runner_exec.RunSpec(ident="groups/pair_a", playbook="/p/site.yml", inventory="/p/inv", project_dir="/p",
                               artifacts_dir=str(tmp_path / "art" / "groups"), private_dir=private,
                               args=["-e", json.dumps({"serve_api_key": "sk-secret-value"})])
    result = runner_exec.run_playbook(spec)
    assert result.status == "successful"
    assert "sk-secret-value" not in seen["cmdline"] and seen["cmdline"].startswith("-e @")
    assert json.loads(seen["content"]) == {"serve_api_key": "sk-secret-value"}
    assert os.path.dirname(seen["path"]) == os.path.join(private, runner_exec.EXTRA_VARS_DIR)
    assert not os.path.exists(seen["path"])
