"""The `make test` skip policy (tests/ci/pytest_plugins/dspark_skip_policy.py): a skip fails the run unless allowed."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLUGINS = os.path.join(ROOT, "tests", "ci", "pytest_plugins")
sys.path.insert(0, PLUGINS)
import dspark_skip_policy as policy  # noqa: E402  pylint: disable=wrong-import-position,import-error


def run_pytest(tmp_path, allowed, body):
    (tmp_path / "test_some.py").write_text(textwrap.dedent(body))
    (tmp_path / "allowed.txt").write_text(allowed)
    env = dict(os.environ, PYTHONPATH=PLUGINS, DSPARK_ALLOWED_SKIPS=str(tmp_path / "allowed.txt"), PYTEST_ADDOPTS="")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "dspark_skip_policy", "-p", "no:cacheprovider",
                           "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=120)


SKIPS = """
    import pytest
    pytestmark = []

    def test_runs():
        assert True

    def test_no_tool():
        pytest.skip("frobnicate is not installed")

    @pytest.mark.xfail(reason="known")
    def test_expected_failure():
        assert False
"""


def test_an_unlisted_skip_fails_the_run(tmp_path):
    run = run_pytest(tmp_path, "# nothing allowed\n", SKIPS)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "SKIP NOT ALLOWED test_some.py::test_no_tool: frobnicate is not installed" in run.stdout, run.stdout


def test_a_listed_skip_passes_and_an_xfail_is_no_skip(tmp_path):
    run = run_pytest(tmp_path, "*::test_no_tool | is not installed | the test's own tool\n", SKIPS)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SKIP NOT ALLOWED" not in run.stdout


def test_the_reason_must_match_too(tmp_path):
    run = run_pytest(tmp_path, "*::test_no_tool | another reason | why\n", SKIPS)
    assert run.returncode == 1 and "SKIP NOT ALLOWED" in run.stdout, run.stdout


def test_a_module_skipped_at_collection_counts(tmp_path):
    run = run_pytest(tmp_path, "", """
        import pytest
        pytest.importorskip("no_such_module_dspark")

        def test_never():
            pass
    """)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "SKIP NOT ALLOWED test_some.py" in run.stdout and "no_such_module_dspark" in run.stdout, run.stdout


def test_a_failing_run_keeps_its_own_status(tmp_path):
    run = run_pytest(tmp_path, "", """
        import pytest

        def test_fails():
            assert False

        def test_skips():
            pytest.skip("why not")
    """)
    assert run.returncode == 1 and "SKIP NOT ALLOWED" in run.stdout, run.stdout


@pytest.mark.parametrize("line", ["just one field", "a | b", "a |  | c"])
def test_a_bad_allow_line_is_named(line):
    with pytest.raises(ValueError, match=re.escape("want '<test id glob> | <reason regex> | <why>'")):
        policy.parse_allowed("# comment\n\n" + line + "\n")


def test_the_project_list_parses():
    with open(os.path.join(ROOT, "tests", "ci", "allowed_skips.txt"), encoding="utf-8") as handle:
        entries = policy.parse_allowed(handle.read())
    assert entries and all(why for dummy, dummy, why in entries)
