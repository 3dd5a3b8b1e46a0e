"""tests/ci/bench_docs.py: docs/benchmarks.md rendered from bench/results/*.json, and the drift check."""

import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("bench_docs", ROOT / "tests" / "ci" / "bench_docs.py")
bench_docs = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench_docs)

SITE_NOOP = {
    "benchmark": "site.yml no-op re-run on the converged lab pair",
    "date": "2031-01-02T03:04:05Z",
    "machine": {"cpu": "Test CPU", "cores": 2, "python": "3.11.7"},
    "git_commit": "abc1234",
    "runs": 3,
    "host_tasks_per_node_max": 90,
    "wall_s_each": [41.5, 42.25, 47.0],
    "cpu_s_per_node": 9.5,
    "forced": {"wall_s": 40.0},
    "forced_wall_over_baseline": 0.7,
    "max_changed": 0,
    "baseline": {"host_tasks": {"a-head": 241, "a-worker": 238}, "wall_s_each": [50.0, 51.0, 52.5],
                 "cpu_s_per_node": 18.0, "forced": {"wall_s": 57.0}},
    "goal": {"max_seconds": 60.0, "changed": 0},
    "met": True,
}
RECOVERY = {
    "date": "2031-01-03T00:00:00Z",
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "watch_interval_s": 10.0,
    "results": [{"death_to_serving_s": 77.7, "death_to_failed_check_s": 9.9, "restart_s": 50.5},
                {"death_to_serving_s": 66.6, "death_to_failed_check_s": 8.8, "restart_s": 40.4}],
    "goal": {"max_death_to_serving_s": 120.0},
    "met": False,
    "note": "A note\n  on two lines.",
}


def results(tmp_path, files):
    directory = tmp_path / "results"
    directory.mkdir()
    for name, data in files.items():
        text = data if isinstance(data, str) else json.dumps(data)
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def test_every_result_is_rendered_with_goal_verdict_numbers_commit_date_and_script(tmp_path):
    page = bench_docs.render(results(tmp_path, {"site_noop.json": SITE_NOOP, "recovery.json": RECOVERY}))
    assert "| `site_noop.json` | No-op re-run of site.yml | `seconds` at most 60.0, `changed` = 0 | **met** | 2031-01-02 |" in page
    assert "| `recovery.json` |" in page and "**not met**" in page
    assert "- controller CPU per node (s): 9.5" in page
    assert "- wall of each run (s): 41.5, 42.25, 47.0" in page
    assert "- baseline: host-tasks per node: 241, 238" in page
    assert "- death to serving, each run (s): 77.7, 66.6" in page
    assert "2031-01-02T03:04:05Z, commit `abc1234`" in page
    assert "commit `0123456789ab`" in page
    assert "written by `bench/bench_site_noop.py`" in page and "written by `bench/bench_recovery.py`" in page
    assert "Note recorded with the result: A note on two lines." in page
    # sorted by file name, so the same results give the same page
    assert page.index("## Supervisor recovery") < page.index("## No-op re-run")


def test_a_missing_goal_or_commit_is_said_not_invented(tmp_path):
    data = {k: v for k, v in SITE_NOOP.items() if k not in ("goal", "met", "git_commit")}
    page = bench_docs.render(results(tmp_path, {"site_noop.json": data}))
    assert "goal: none recorded; no verdict recorded" in page
    assert "commit not recorded" in page


def test_write_then_check_passes_and_a_changed_result_is_drift(tmp_path, capsys):
    directory = results(tmp_path, {"site_noop.json": SITE_NOOP})
    page = tmp_path / "benchmarks.md"
    argv = ["--results", str(directory), "--output", str(page)]
    assert bench_docs.main(argv) == 0
    assert bench_docs.main(argv + ["--check"]) == 0
    changed = dict(SITE_NOOP, cpu_s_per_node=99.5, met=False)
    (directory / "site_noop.json").write_text(json.dumps(changed), encoding="utf-8")
    capsys.readouterr()
    assert bench_docs.main(argv + ["--check"]) == 1
    err = capsys.readouterr().err
    assert "-- controller CPU per node (s): 9.5" in err and "+- controller CPU per node (s): 99.5" in err
    assert "Fix: run python tests/ci/bench_docs.py" in err
    assert "per node (s): 9.5" in page.read_text(encoding="utf-8")  # --check writes nothing


def test_a_hand_edit_of_the_page_is_drift(tmp_path, capsys):
    directory = results(tmp_path, {"site_noop.json": SITE_NOOP})
    page = tmp_path / "benchmarks.md"
    argv = ["--results", str(directory), "--output", str(page)]
    bench_docs.main(argv)
    page.write_text(page.read_text(encoding="utf-8").replace("42.25", "36"), encoding="utf-8")
    assert bench_docs.main(argv + ["--check"]) == 1
    assert "+- wall of each run (s): 41.5, 42.25, 47.0" in capsys.readouterr().err


@pytest.mark.parametrize("name, content, words", [
    ("site_noop.json", "{not json", "not valid JSON"),
    ("site_noop.json", "[1, 2]", "must be a JSON object"),
    ("site_noop.json", json.dumps({k: v for k, v in SITE_NOOP.items() if k != "cpu_s_per_node"}), "no field 'cpu_s_per_node'"),
    ("brand_new.json", json.dumps(SITE_NOOP), "no entry for it in BENCHMARKS"),
])
def test_a_garbled_or_unknown_result_is_a_clear_error_naming_the_file(tmp_path, capsys, name, content, words):
    directory = results(tmp_path, {name: content})
    assert bench_docs.main(["--results", str(directory), "--output", str(tmp_path / "out.md"), "--check"]) == 2
    err = capsys.readouterr().err
    assert name in err and words in err
    assert not (tmp_path / "out.md").exists()


def test_an_empty_results_directory_is_an_error(tmp_path, capsys):
    directory = results(tmp_path, {})
    assert bench_docs.main(["--results", str(directory), "--output", str(tmp_path / "out.md")]) == 2
    assert "no *.json result files" in capsys.readouterr().err


def test_every_entry_names_an_existing_script_and_the_committed_page_is_current():
    for name, spec in bench_docs.BENCHMARKS.items():
        assert (ROOT / spec["script"]).is_file(), name
    assert bench_docs.main(["--check"]) == 0


def test_an_unreadable_result_is_an_error_naming_it(tmp_path, capsys):
    directory = results(tmp_path, {"site_noop.json": SITE_NOOP})
    (directory / "recovery.json").mkdir()
    assert bench_docs.main(["--results", str(directory), "--output", str(tmp_path / "out.md")]) == 2
    err = capsys.readouterr().err
    assert "recovery.json: cannot read it" in err
