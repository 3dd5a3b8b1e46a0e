"""The serve_hotfixes action shell: plans on the controller, never connects, fails with every problem."""

import pathlib
import shutil
from unittest.mock import MagicMock

from ansible.playbook.task import Task
from ansible.template import Templar

from ansible_collections.dspark.cluster.plugins.action.serve_hotfixes import ActionModule

LAB_RECIPE = pathlib.Path(__file__).resolve().parents[4] / "lab" / "recipe"
MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"


def run_action(**args):
    task = MagicMock(Task)
    task.args = dict({"model": MODEL, "revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"}, **args)
    task.async_val = 0
    task.check_mode = True
    connection = MagicMock()
    connection._shell = MagicMock()
    action = ActionModule(task, connection, MagicMock(), loader=None, templar=Templar(loader=None),
                          shared_loader_obj=None)
    result = action.run(task_vars={})
    assert not connection.exec_command.called
    return result


def test_plans_the_lab_recipe(tmp_path):
    """The lab's stand-in tree (a plain directory, unversioned) passes the tree rules; the role copies the staged
    copy in the cache, which holds exactly the lab's files."""
    result = run_action(recipe=str(LAB_RECIPE), switches={"serve_hotfix_skip_spin_wait": True}, cache_dir=str(tmp_path))
    assert not result.get("failed"), result
    assert result["changed"] is False
    assert result["env"]["DSPARK_SKIP_SPIN_WAIT_HOTFIX"] == "1"
    assert "hotfix-gb10-spin-wait.sh" not in result["steps"]
    assert result["patches_dir"] == str(tmp_path / "trees" / result["tree_digest"])
    staged = sorted(p.name for p in pathlib.Path(result["patches_dir"]).iterdir())
    assert staged == sorted(p.name for p in (LAB_RECIPE / "patches").iterdir()) == result["files"]
    assert result["recipe"] == {"source": str(LAB_RECIPE), "path": str(LAB_RECIPE), "version": "", "verified": False}
    assert "unversioned, used as it is: patches/ tree sha256 %s" % result["tree_digest"] in result["msg"]
    assert len(result["digest"]) == 64 and result["script"].startswith("# dspark.cluster serve role")


def test_every_problem_is_reported(tmp_path):
    recipe = tmp_path / "recipe"
    shutil.copytree(LAB_RECIPE, recipe)
    (recipe / "patches" / "hotfix-vllm-redact-api-key-log.sh").unlink()
    (recipe / "patches" / "hotfix-gb10-spin-wait.sh").unlink()
    result = run_action(recipe=str(recipe), keys_set=True, extra_env={"DSPARK_SKIP_HOTFIX": "1"},
                        switches={"serve_hotfix_skip_everything": True}, cache_dir=str(tmp_path))
    assert result["failed"] is True
    assert "nothing was started" in result["msg"]
    errors = result["errors"]
    assert any("unknown hotfix switch serve_hotfix_skip_everything" in e for e in errors)
    assert any("serve_extra_env sets DSPARK_SKIP_HOTFIX='1'" in e for e in errors)
    missing = [e for e in errors if "is missing" in e]
    assert len(missing) == 2  # one problem per line of the message
    assert any("patches/hotfix-gb10-spin-wait.sh is missing" in e for e in missing)
    assert any("patches/hotfix-vllm-redact-api-key-log.sh is missing; it is required because API keys are set" in e
               for e in missing)
    assert "digest" not in result
    assert not (tmp_path / "trees").exists()


def test_unpinned_git_url_fails():
    result = run_action(recipe="https://github.com/MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark.git")
    assert result["failed"] is True
    assert "serve_hotfix_recipe_version" in result["msg"]
