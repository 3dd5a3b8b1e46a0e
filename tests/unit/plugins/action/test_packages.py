"""The packages action: one apt run from the current lists, a refresh and a second run only when the first fails,
what check mode reports; apt itself replaced by a recorder of the module runs."""

from unittest.mock import MagicMock

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.playbook.task import Task
from ansible.template import Templar

from ansible_collections.dspark.cluster.plugins.action.packages import ActionModule
from ansible_collections.dspark.cluster.plugins.plugin_utils import _packages

NO_MATCH = "No package matching 'nftables' is available"


def run(args, results, check_mode=False):
    task = MagicMock(Task)
    task.args = args
    task.async_val = 0
    task.check_mode = check_mode
    action = ActionModule(task, MagicMock(), MagicMock(), loader=DataLoader(), templar=Templar(loader=None),
                          shared_loader_obj=None)
    calls = []

    def execute_module(module_name=None, module_args=None, task_vars=None, **kwargs):
        calls.append((module_name, module_args))
        return dict(results[len(calls) - 1])

    action._execute_module = execute_module
    return action.run(task_vars={}), calls


def test_installed_packages_cost_one_apt_run_and_no_refresh():
    result, calls = run({"name": ["nftables"]}, [{"changed": False}])
    assert calls == [("ansible.builtin.apt", {"name": ["nftables"], "state": "present"})]
    assert result["changed"] is False and result["refreshed"] is False and not result.get("failed")


def test_lists_that_cannot_install_are_refreshed_once():
    result, calls = run({"name": ["nftables", "socat"], "install_recommends": False},
                        [{"failed": True, "msg": NO_MATCH}, {"changed": True}])
    assert [c[1] for c in calls] == [
        {"name": ["nftables", "socat"], "state": "present", "install_recommends": False},
        {"name": ["nftables", "socat"], "state": "present", "install_recommends": False, "update_cache": True}]
    assert result["changed"] is True and result["refreshed"] is True and not result.get("failed")


def test_a_failure_after_the_refresh_names_both_reasons_and_the_fix():
    results = [{"failed": True, "msg": NO_MATCH}, {"failed": True, "msg": "Failed to update apt cache: W:GPG error"}]
    result, calls = run({"name": ["nftables"]}, results)
    assert len(calls) == 2 and result["failed"] is True and result["refreshed"] is True
    assert "could not install nftables: Failed to update apt cache: W:GPG error" in result["msg"]
    assert "before the refresh of the package lists: " + NO_MATCH in result["msg"]
    assert "Fix: check the node's apt sources" in result["msg"]


def test_check_mode_reports_what_a_real_run_would_do_without_failing(capsys):
    result, calls = run({"name": ["nftables"]}, [{"failed": True, "msg": NO_MATCH}], check_mode=True)
    # Printed at every verbosity (a changed line alone would not say it).
    assert "?: would refresh the package lists and install nftables" in capsys.readouterr().out
    assert len(calls) == 1
    assert result["changed"] is True and not result.get("failed")
    assert result["msg"] == "would refresh the package lists and install nftables (the current lists cannot: %s)" % NO_MATCH


def test_an_unreachable_node_is_returned_as_it_is():
    result, calls = run({"name": ["nftables"]}, [{"unreachable": True, "msg": "ssh: timed out"}])
    assert len(calls) == 1 and result["unreachable"] is True and result["msg"] == "ssh: timed out"


@pytest.mark.parametrize("names, needle", [
    ([], "non-empty list"),
    (["nft ables"], "'nft ables'"),
    (["-o Dpkg::Options=x"], "'-o Dpkg::Options=x'"),
    ([""], "''"),
])
def test_bad_names_fail_before_apt_runs(names, needle):
    result, calls = run({"name": names}, [])
    assert calls == [] and result["failed"] is True and needle in result["msg"]


def test_missing_name_is_refused_by_the_argument_spec():
    result, calls = run({}, [])
    assert calls == [] and result["failed"] is True and "name" in result["msg"]


def test_long_apt_messages_are_shortened():
    assert len(_packages._short("x" * 1000)) == 300
