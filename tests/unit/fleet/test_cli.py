"""cli: argument and input errors exit 2 before anything runs (selection.py); redaction and exit codes (run_record.py)."""

import json

import pytest

from dspark_fleet import cli, run_record, selection
from dspark_fleet.report import SCHEMA_ID


@pytest.mark.parametrize("argv", [
    [],                                                            # no subcommand
    ["deploy", "-i", "x"],                                         # unknown subcommand
    ["plan"],                                                      # -i is required
    ["reprovision", "-i", "x", "--parallel", "0"],
    ["reprovision", "-i", "x", "--parallel", "two"],
    ["reprovision", "-i", "x", "--canary", "-1"],
    ["reprovision", "-i", "x", "--max-failed", "0"],
    ["status", "-i", "x", "--canary", "1"],                        # reprovision only
    ["status", "-i", "x", "--resume", "r.json"],
    ["reprovision", "-i", "x", "--par", "2"],                      # no abbreviations
])
def test_usage_errors_exit_2(argv, capsys):
    assert cli.main(argv) == 2
    assert "usage: dspark-fleet" in capsys.readouterr().err


def test_help_and_version_exit_0(capsys):
    assert cli.main(["--version"]) == 0
    assert cli.main(["reprovision", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--canary K" in out and "--resume REPORT" in out and "--max-failed F" in out


def _bad_input(argv, capsys, tmp_path):
    code = cli.main(argv + ["--artifacts", str(tmp_path / "art")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert not (tmp_path / "art" / "groups").exists()
    return err


def test_missing_inventory(tmp_path, fake_project, capsys):
    err = _bad_input(["reprovision", "-i", str(tmp_path / "nope.yml"), "--project-dir", str(fake_project)],
                     capsys, tmp_path)
    assert "does not exist" in err


def test_unreadable_resume_report(tmp_path, fake_project, capsys):
    (tmp_path / "old.json").write_text(json.dumps({"schema": SCHEMA_ID, "command": {"subcommand": "plan"},
                                                   "groups": {}}))
    err = _bad_input(["reprovision", "-i", str(fake_project / "inventory.yml"), "--project-dir", str(fake_project),
                      "--resume", str(tmp_path / "old.json")], capsys, tmp_path)
    assert "not of 'reprovision'" in err
    err = _bad_input(["reprovision", "-i", str(fake_project / "inventory.yml"), "--project-dir", str(fake_project),
                      "--resume", str(tmp_path / "missing.json")], capsys, tmp_path)
    assert "cannot read the report" in err


def test_project_dir_without_playbooks(tmp_path, capsys):
    (tmp_path / "inv.yml").write_text("all: {}\n")
    err = _bad_input(["status", "-i", str(tmp_path / "inv.yml"), "--project-dir", str(tmp_path)], capsys, tmp_path)
    assert "has no ansible.cfg" in err


def test_unknown_group_pattern_and_missing_vars_file(tmp_path, fake_project, capsys, venv_path):
    base = ["plan", "-i", str(fake_project / "inventory.yml"), "--project-dir", str(fake_project)]
    err = _bad_input(base + ["--groups", "grp_ok,pair_*"], capsys, tmp_path)
    assert "no serving group matches 'pair_*' (serving groups: grp_ok, grp_bad)" in err
    err = _bad_input(base + ["-e", "@" + str(tmp_path / "missing.yml")], capsys, tmp_path)
    assert "missing.yml" in err


def test_artifacts_dir_must_be_empty(tmp_path, fake_project, capsys, venv_path):
    (tmp_path / "art").mkdir()
    (tmp_path / "art" / "old").write_text("x")
    code = cli.main(["plan", "-i", str(fake_project / "inventory.yml"), "--project-dir", str(fake_project),
                     "--artifacts", str(tmp_path / "art")])
    assert code == 2 and "not empty" in capsys.readouterr().err


def test_redacted_argv():
    argv = ["reprovision", "-i", "inv", "-e", "token=secret", "--extra-vars", '{"k": "secret"}', "-e@vars.yml",
            "--extra-vars=a=secret", "-esecret=1", "-e", "@/path/vault.yml", "--groups", "pair_*"]
    assert run_record.redacted_argv(argv) == [
        "reprovision", "-i", "inv", "-e", "<redacted>", "--extra-vars", "<redacted>", "-e@vars.yml",
        "--extra-vars=<redacted>", "-e<redacted>", "-e", "@/path/vault.yml", "--groups", "pair_*"]


def test_exit_codes():
    def entries(*results):
        return dict(("g%d" % i, {"result": r}) for i, r in enumerate(results))
    assert run_record.exit_code_for(entries("converged", "skipped")) == 0
    assert run_record.exit_code_for(entries("ok", "ok")) == 0
    assert run_record.exit_code_for(entries("converged", "failed")) == 1
    assert run_record.exit_code_for(entries("converged", "cancelled")) == 1
    assert run_record.exit_code_for(entries("converged", "not_started")) == 1


def test_default_project_dir_is_this_repository():
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert selection.default_project_dir() == root
