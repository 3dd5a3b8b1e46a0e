"""The recipe's hotfixes on the controller: catalog order, what is required, the generated script (run for
real with sh over a stand-in tree), the tree digest and the recipe source (directory or pinned git URL)."""

import os
import pathlib
import shutil
import subprocess

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import hotfix_recipe as hr

ROOT = pathlib.Path(__file__).resolve().parents[4]
LAB_RECIPE = ROOT / "lab" / "recipe"
MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"
REV = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
DEFAULT_ORDER = [
    "hotfix-dsv4-issue55-tool-truncation.py", "hotfix-nvfp4-ds-mla-issue22.sh", "hotfix-gb10-spin-wait.sh",
    "hotfix-dsv4-mtp-buffer-50312.sh", "hotfix-dsv4-adaptive-topk-50004.sh", "hotfix-dsv4-skip-topk-49486.sh",
    "hotfix-dsv4-dense-prefill-indexer-48407.sh", "hotfix-dsv4-skip-empty-c128-48957.sh",
    "hotfix-dsv4-flashmla-workspace-50298.sh", "hotfix-dsv4-grammar-advance.sh",
    "hotfix-vllm-empty-encoder-output.py", "hotfix-dsv4-issue27-partial-prefill-concurrency.py",
    "hotfix-dsv4-issue43-decode-fairness-and-diag.py", "hotfix-dsv4-issue26-hybrid-swa-min.py",
    "hotfix-dsv4-suppress-stops-in-reasoning.py",
]


@pytest.fixture
def recipe(tmp_path):
    """A copy of the lab's stand-in recipe tree."""
    dest = tmp_path / "recipe"
    shutil.copytree(LAB_RECIPE, dest)
    return dest


def test_lab_stand_in_has_every_catalog_file():
    names = {step["file"] for step in hr.CATALOG}
    assert names <= {p.name for p in (LAB_RECIPE / "patches").iterdir()}


def test_switch_env_renders_the_upstream_names():
    env = hr.switch_env({"serve_hotfix_skip_spin_wait": True, "serve_hotfix_enable_issue31_gpu": True})
    assert env == {"DSPARK_SKIP_HOTFIX": "0", "DSPARK_SKIP_ISSUE22_HOTFIX": "0", "DSPARK_SKIP_SPIN_WAIT_HOTFIX": "1",
                   "DSPARK_SKIP_SUPPRESS_STOPS_HOTFIX": "0", "DSPARK_ENABLE_ISSUE31_GPU_HOTFIX": "1",
                   "DSPARK_ENABLE_ASSISTANT_FINAL_HOTFIX": "0"}


def test_switch_conflicts_name_both_variables():
    assert hr.switch_conflicts({}, [("serve_hotfix_env", {"DSPARK_SKIP_HOTFIX": "0", "DSPARK_MAX_INFLIGHT_PREFILLS": "1"})]) == []
    # The default serve_hotfix_env ("0" everywhere) never conflicts with a switch turned on.
    assert hr.switch_conflicts({"serve_hotfix_skip_spin_wait": True}, [("serve_hotfix_env", {"DSPARK_SKIP_SPIN_WAIT_HOTFIX": "0"})]) == []
    assert hr.switch_conflicts({"serve_hotfix_skip_spin_wait": True}, [("serve_extra_env", {"DSPARK_SKIP_SPIN_WAIT_HOTFIX": "1"})]) == []
    problems = hr.switch_conflicts({}, [("serve_extra_env", {"DSPARK_SKIP_ISSUE22_HOTFIX": "1"})])
    assert len(problems) == 1
    assert "serve_extra_env sets DSPARK_SKIP_ISSUE22_HOTFIX='1'" in problems[0]
    assert "set serve_hotfix_skip_issue22: true" in problems[0]


def test_plan_default_order_and_digest(recipe):
    plan = hr.plan(str(recipe), "lab", {}, False, MODEL, REV)
    assert plan["steps"] == ["hotfix-encoding-dsv4-issue21.py"] + DEFAULT_ORDER
    assert plan["env"]["DSPARK_SKIP_HOTFIX"] == "0"
    assert "patches/hotfix-gb10-spin-wait.sh" in plan["sums"]
    again = hr.plan(str(recipe), "lab", {}, False, MODEL, REV)
    assert again["digest"] == plan["digest"]
    (recipe / "patches" / "hotfix-gb10-spin-wait.sh").write_text("echo changed\n")
    assert hr.plan(str(recipe), "lab", {}, False, MODEL, REV)["digest"] != plan["digest"]


def test_plan_with_keys_and_switches(recipe):
    plan = hr.plan(str(recipe), "lab", {"serve_hotfix_skip": True, "serve_hotfix_enable_assistant_final": True},
                   True, MODEL, REV)
    steps = plan["steps"]
    assert "hotfix-dsv4-mtp-buffer-50312.sh" not in steps
    assert steps.index("hotfix-vllm-redact-api-key-log.sh") + 1 == steps.index("hotfix-vllm-redact-api-key-log.sh --status")
    assert steps.index("hotfix-gb10-spin-wait.sh") < steps.index("hotfix-vllm-redact-api-key-log.sh") \
        < steps.index("hotfix-vllm-empty-encoder-output.py")
    assert steps[-1] == "hotfix-dsv4-assistant-final-continuation.py"


@pytest.mark.parametrize("missing, switches, keys, words", [
    ("hotfix-gb10-spin-wait.sh", {}, False, ["serve_hotfix_skip_spin_wait is false", "serve_hotfix_skip_spin_wait: true"]),
    ("hotfix-nvfp4-ds-mla-issue22.sh", {}, False, ["serve_hotfix_skip_issue22"]),
    ("hotfix-dsv4-grammar-advance.sh", {}, False, ["serve_hotfix_skip is false"]),
    ("hotfix-dsv4-issue55-tool-truncation.py", {}, False, ["always runs it"]),
    ("hotfix-vllm-redact-api-key-log.sh", {}, True, ["API keys are set", "unset serve_api_key and serve_api_keys"]),
    ("hotfix-dsv4-issue31-v2-thinking-budget-gpu.py", {"serve_hotfix_enable_issue31_gpu": True}, False,
     ["serve_hotfix_enable_issue31_gpu is true"]),
])
def test_missing_required_hotfix_names_file_variable_and_fix(recipe, missing, switches, keys, words):
    (recipe / "patches" / missing).unlink()
    with pytest.raises(hr.RecipeError) as err:
        hr.plan(str(recipe), "/srv/recipe", switches, keys, MODEL, REV)
    text = str(err.value)
    assert text.startswith("serve_hotfix_recipe=/srv/recipe: patches/%s is missing" % missing)
    assert "Fix: " in text
    for word in words:
        assert word in text


@pytest.mark.parametrize("missing, switches, keys", [
    ("hotfix-gb10-spin-wait.sh", {"serve_hotfix_skip_spin_wait": True}, False),
    ("hotfix-dsv4-grammar-advance.sh", {"serve_hotfix_skip": True}, False),
    ("hotfix-vllm-redact-api-key-log.sh", {}, False),
    ("hotfix-dsv4-assistant-final-continuation.py", {}, False),
])
def test_skipped_or_unused_hotfix_is_not_required(recipe, missing, switches, keys):
    (recipe / "patches" / missing).unlink()
    assert hr.plan(str(recipe), "lab", switches, keys, MODEL, REV)["digest"]


def test_not_a_recipe_tree(tmp_path):
    with pytest.raises(hr.RecipeError, match="has no patches/ directory"):
        hr.plan(str(tmp_path), "x", {}, False, MODEL, REV)


def run_script(recipe, tmp_path, **env):
    script = hr.entry_script(MODEL, REV).replace("P=/opt/dspark-patches", "P=%s" % (recipe / "patches"))
    path = tmp_path / "hotfixes.sh"
    path.write_text(script)
    log = tmp_path / "markers.log"
    full = {"PATH": os.environ["PATH"], "DSPARK_LAB_HOTFIX_LOG": str(log)}
    full.update(env)
    run = subprocess.run(["sh", str(path)], env=full, capture_output=True, text=True, timeout=60, check=False)
    markers = log.read_text().splitlines() if log.exists() else []
    return run.returncode, run.stderr, markers


def test_script_runs_the_hotfixes_in_upstream_order(recipe, tmp_path):
    rc, err, markers = run_script(recipe, tmp_path)
    assert rc == 0, err
    assert markers == DEFAULT_ORDER
    assert "encoding_dsv4.py not found" in err and "all hotfixes applied" in err


def test_script_switches_and_keys(recipe, tmp_path):
    rc, err, markers = run_script(recipe, tmp_path, DSPARK_SKIP_HOTFIX="1", DSPARK_SKIP_SPIN_WAIT_HOTFIX="1",
                                  DSPARK_API_KEYS=" k1 k2 ", DSPARK_ENABLE_ISSUE31_GPU_HOTFIX="true")
    assert rc == 0, err
    assert "hotfix-gb10-spin-wait.sh" not in markers and "hotfix-dsv4-grammar-advance.sh" not in markers
    assert "hotfix-dsv4-issue31-v2-thinking-budget-gpu.py" not in markers  # only exactly "1" enables
    i = markers.index("hotfix-vllm-redact-api-key-log.sh")
    assert markers[i + 1] == "hotfix-vllm-redact-api-key-log.sh --status"
    assert markers[i + 2] == "hotfix-vllm-empty-encoder-output.py"


def test_script_blank_keys_do_not_count(recipe, tmp_path):
    rc, err, markers = run_script(recipe, tmp_path, DSPARK_API_KEYS="  ")
    assert rc == 0 and markers == DEFAULT_ORDER, err


def test_script_fails_closed_on_a_failing_hotfix(recipe, tmp_path):
    rc, err, markers = run_script(recipe, tmp_path, DSPARK_LAB_HOTFIX_FAIL="hotfix-gb10-spin-wait.sh")
    assert rc == 1
    assert markers == DEFAULT_ORDER[:2]
    assert ("dspark-hotfix: FATAL: hotfix-gb10-spin-wait.sh failed with exit code 1; this rank stops here "
            "(fail-closed)") in err


def test_script_fails_closed_on_a_missing_hotfix(recipe, tmp_path):
    (recipe / "patches" / "hotfix-nvfp4-ds-mla-issue22.sh").unlink()
    rc, err, markers = run_script(recipe, tmp_path)
    assert rc == 1 and markers == DEFAULT_ORDER[:1]
    assert "hotfix-nvfp4-ds-mla-issue22.sh is missing; this rank stops here" in err


def test_script_finds_the_encoding_file(recipe, tmp_path):
    enc = tmp_path / "encoding_dsv4.py"
    enc.write_text("# encoding\n")
    fake = tmp_path / "site" / "vllm"
    (fake / "tokenizers").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    rc, err, markers = run_script(recipe, tmp_path, DSPARK_ENCODING_FILE=str(enc), PYTHONPATH=str(tmp_path / "site"))
    assert rc == 0, err
    assert markers[0] == "hotfix-encoding-dsv4-issue21.py"
    assert (fake / "tokenizers" / "deepseek_v4_encoding.py").read_text() == "# encoding\n"


# --- the source of the recipe ---

def test_resolve_directory(recipe):
    assert hr.resolve(str(recipe), "", "/nonexistent") == str(recipe)
    with pytest.raises(hr.RecipeError, match="neither a directory on the controller nor a git URL"):
        hr.resolve(str(recipe / "nope"), "", "/nonexistent")


def git(*args, cwd):
    subprocess.run(["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t"] + list(args), cwd=cwd,
                   check=True, capture_output=True)


@pytest.fixture
def git_recipe(recipe):
    git("init", "-q", cwd=recipe)
    git("add", "-A", cwd=recipe)
    git("commit", "-q", "-m", "stand-in", cwd=recipe)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=recipe, capture_output=True, text=True, check=True)
    return recipe, head.stdout.strip()


def test_resolve_directory_checks_its_commit(git_recipe):
    recipe, head = git_recipe
    assert hr.resolve(str(recipe), head, "/nonexistent") == str(recipe)
    with pytest.raises(hr.RecipeError, match="not at serve_hotfix_recipe_version=" + "0" * 40):
        hr.resolve(str(recipe), "0" * 40, "/nonexistent")


def test_resolve_git_url_needs_a_commit(tmp_path):
    for version in ("", "main", "abc123"):
        with pytest.raises(hr.RecipeError, match="not a 40-hex commit id"):
            hr.resolve("https://github.com/MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark.git", version, str(tmp_path))


def test_resolve_git_url_clones_once_at_the_commit(git_recipe, tmp_path):
    recipe, head = git_recipe
    first_commit = head
    (recipe / "patches" / "hotfix-gb10-spin-wait.sh").write_text("echo newer\n")
    git("commit", "-q", "-am", "newer", cwd=recipe)
    url = "file://%s" % recipe
    cache = tmp_path / "cache"
    path = hr.resolve(url, first_commit, str(cache))
    assert pathlib.Path(path).parent == cache
    assert "newer" not in (pathlib.Path(path) / "patches" / "hotfix-gb10-spin-wait.sh").read_text()
    calls = []

    def spy(argv, **kwargs):
        calls.append(argv)
        check = kwargs.pop("check", False)
        return subprocess.run(argv, check=check, **kwargs)

    assert hr.resolve(url, first_commit.upper(), str(cache), runner=spy) == path
    assert all("clone" not in argv for argv in calls)
    assert [p.name for p in cache.iterdir()] == [pathlib.Path(path).name]  # no temporary clone left


def test_resolve_git_url_unknown_commit(git_recipe, tmp_path):
    recipe, dummy = git_recipe
    with pytest.raises(hr.RecipeError, match="could not be checked out on the controller"):
        hr.resolve("file://%s" % recipe, "1" * 40, str(tmp_path / "cache"))
    assert list((tmp_path / "cache").iterdir()) == []


@pytest.mark.parametrize("source, url", [
    ("https://github.com/o/r.git", True), ("git@github.com:o/r.git", True), ("ssh://git@h/o/r", True),
    ("file:///srv/r", True), ("/srv/recipe", False), ("lab/recipe", False), ("~/recipe", False),
])
def test_is_git_url(source, url):
    assert hr.is_git_url(source) is url
