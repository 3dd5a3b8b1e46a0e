"""tests/ci/converge_twice.py: the recap parser and what counts as a passed converge / idempotence run."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("converge_twice", ROOT / "tests" / "ci" / "converge_twice.py")
ct = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(ct)

OUT = """
PLAY RECAP *********************************************************************
early-play   : ok=1 changed=1 unreachable=0 failed=0 skipped=0 rescued=0 ignored=0

PLAY RECAP *********************************************************************
spark-head                 : ok=120  changed=0    unreachable=0    failed=0    skipped=40   rescued=0    ignored=0
spark-worker               : ok=118  changed=2    unreachable=0    failed=0    skipped=41   rescued=0    ignored=0
"""


def test_the_last_recap_is_read_per_host():
    hosts = ct.recap(OUT)
    assert set(hosts) == {"spark-head", "spark-worker"}
    assert hosts["spark-worker"]["changed"] == 2 and hosts["spark-head"]["ok"] == 120


def test_a_changed_host_fails_only_the_idempotence_run():
    hosts = ct.recap(OUT)
    assert ct.problems(0, hosts, idempotence=False) == []
    assert ct.problems(0, hosts, idempotence=True) == ["spark-worker: changed=2 on the second run (not idempotent)"]


def test_failed_unreachable_no_recap_and_exit_status_are_all_named():
    hosts = {"a": {"failed": 1, "unreachable": 0, "changed": 0}, "b": {"unreachable": 1}}
    assert ct.problems(2, hosts, idempotence=False) == ["ansible-playbook exited 2", "a: failed=1", "b: unreachable=1"]
    assert ct.problems(0, ct.recap("no recap here"), idempotence=True) == ["no PLAY RECAP"]


def test_it_stops_after_a_failed_converge(tmp_path):
    fake = tmp_path / "ansible-playbook"
    count = tmp_path / "count"
    fake.write_text("#!/bin/bash\necho run >>%s\necho 'PLAY RECAP'\necho 'h : ok=1 changed=1 unreachable=0 failed=1'\nexit 2\n"
                    % count)
    fake.chmod(0o755)
    assert ct.main([str(fake), "inv", "site.yml"]) == 1
    assert count.read_text().count("run") == 1


def test_a_clean_pair_of_runs_passes(tmp_path):
    fake = tmp_path / "ansible-playbook"
    fake.write_text("#!/bin/bash\necho 'PLAY RECAP'\necho 'h : ok=1 changed=0 unreachable=0 failed=0'\n")
    fake.chmod(0o755)
    assert ct.main([str(fake), "inv", "site.yml", "-e", "x=1"]) == 0


def test_an_expected_text_missing_from_a_run_fails_it(tmp_path, monkeypatch):
    fake = tmp_path / "ansible-playbook"
    fake.write_text("#!/bin/bash\necho 'PLAY RECAP'\necho 'h : ok=1 changed=0 unreachable=0 failed=0'\n"
                    "echo 'strategy plugins not included in ansible.builtin' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CONVERGE_EXPECT", "strategy plugins not included in ansible.builtin")
    assert ct.main([str(fake), "inv", "site.yml"]) == 0
    monkeypatch.setenv("CONVERGE_EXPECT", "mitogen_linear")
    assert ct.main([str(fake), "inv", "site.yml"]) == 1
    assert ct.problems(0, {"h": {}}, False, "out", "x") == [
        "the output lacks 'x' (CONVERGE_EXPECT: the setting did not take effect)"]
