"""plugins/plugin_utils/_ansible_private.py on the installed ansible-core's own objects (a Task, a PlayContext, the
`local` and `ssh` connection plugins, the `sudo` become plugin, the `normal` action from action_loader): each test
fails when ansible-core renames or removes the internal its function reads. `make unit-core` runs it on 2.19,
`make unit-newest` on 2.21.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.plugins.loader import action_loader, become_loader, connection_loader, get_plugin_loader_namespace
from ansible.template import Templar

from ansible_collections.dspark.cluster.plugins.plugin_utils import _ansible_private as core_private

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGINS = os.path.join(HERE, "..", "..", "..", "..", "plugins")
COLLECTIONS = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", "collections"))
# The test become plugin (it marks a command with its become user instead of changing user).
BECOME_PLUGINS = os.path.join(HERE, "..", "become_plugins")


def local_connection(play_context=None, become=None):
    conn = connection_loader.get("local", play_context or PlayContext())
    conn.set_options()
    conn.set_become_plugin(become)
    return conn


def normal_action(task=None, connection=None, play_context=None):
    """The action tp_ranks runs a member's commands and modules with, built as _tp_connections builds it."""
    play_context = play_context or PlayContext()
    loader = DataLoader()
    return action_loader.get("ansible.legacy.normal", task=task or Task(), play_context=play_context,
                             connection=connection or local_connection(play_context), loader=loader,
                             templar=Templar(loader=loader), shared_loader_obj=get_plugin_loader_namespace())


def test_action_parts_are_what_the_action_was_built_with():
    task, play_context, loader = Task(), PlayContext(), DataLoader()
    conn, templar = local_connection(play_context), Templar(loader=loader)
    action = action_loader.get("ansible.legacy.normal", task=task, connection=conn, play_context=play_context,
                               loader=loader, templar=templar, shared_loader_obj=get_plugin_loader_namespace())
    parts = core_private.action_parts(action)
    assert parts.task is task and parts.connection is conn and parts.play_context is play_context
    assert parts.loader is loader and parts.templar is templar


def test_task_uuid_is_the_tasks_own_and_survives_a_copy():
    task = Task()
    uuid = core_private.task_uuid(task)
    assert isinstance(uuid, str) and uuid
    assert core_private.task_uuid(task.copy()) == uuid and core_private.task_uuid(Task()) != uuid


def test_task_keywords_set_the_options_plugins_map_to_keywords():
    task = Task()
    task.remote_user = "spark"
    task.become_user = "op1"
    keys = core_private.task_keywords(task)
    # What _tp_connections overrides (the connection timeout) and drops (the task's retries) as TaskExecutor does.
    assert {"timeout", "retries"} <= set(keys)
    keys.pop("retries")
    assert task.retries is None                         # a copy: the task keeps its keywords
    ssh = connection_loader.get("ssh", PlayContext())
    ssh.set_options(task_keys=keys)
    assert ssh.get_option("remote_user") == "spark"
    sudo = become_loader.get("sudo")
    sudo.set_options(task_keys=keys)
    assert sudo.get_option("become_user") == "op1"


@pytest.mark.parametrize("shell_type", [None, "powershell"])
def test_connection_shell_is_the_one_the_connection_picked(shell_type):
    play_context = PlayContext()
    play_context.shell = shell_type                     # what ansible_shell_type sets
    shell = core_private.connection_shell(connection_loader.get("ssh", play_context))
    assert shell.ansible_name == "ansible.builtin.%s" % (shell_type or "sh")
    shell.set_options(var_options={"ansible_remote_tmp": "/tmp/dspark-x"})
    assert shell.get_option("remote_tmp") == "/tmp/dspark-x"


def test_execute_command_runs_on_the_runners_connection():
    runner = normal_action()
    res = core_private.execute_command(runner, "echo out; echo err >&2; exit 3", None)
    assert (res["rc"], res["stdout"], res["stderr"]) == (3, "out\n", "err\n")
    assert core_private.execute_command(runner, "cat", b"stdin")["stdout"] == "stdin"


def test_execute_command_is_wrapped_by_the_connections_become():
    become_loader.add_directory(os.path.abspath(BECOME_PLUGINS))
    become = become_loader.get("fake_root")
    become.set_options(var_options={"ansible_become_user": "op2"})
    play_context = PlayContext()
    play_context.become = True
    runner = normal_action(play_context=play_context, connection=local_connection(play_context, become))
    res = core_private.execute_command(runner, 'echo "$DSPARK_FAKE_BECAME"', None)
    # Wrapped (sudoable), and the become plugin's success marker is gone from the output.
    assert (res["rc"], res["stdout"]) == (0, "op2\n")


# Building a module payload needs Ansible's collection loader, which a plain pytest process lacks: the module runs in
# a process that installs it (as tp_connections_run_module.py does), so this process keeps its own imports.
RUN_MODULE = """
import json, sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
sys.path.insert(0, sys.argv[2])
import test_ansible_private as t
result = t.core_private.execute_module(t.normal_action(), "ansible.legacy.ping", {"data": "dspark"},
                                       {"inventory_hostname": "localhost", "ansible_python_interpreter": sys.executable})
json.dump(result, sys.stdout)
"""


def test_execute_module_runs_a_module_on_the_runners_connection():
    proc = subprocess.run([sys.executable, "-c", RUN_MODULE, COLLECTIONS, HERE], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result.get("ping") == "dspark" and not result.get("failed"), result


# Issue #25: names that no plugin uses. Issue #44: ansible-core internals that only _ansible_private reads (an
# action plugin's own ActionBase members, ``self._task``, are its interface and stay allowed).
NOWHERE = ("_resolve_option_variables", "_shared_loader_obj", "_variable_manager", "hv._vars")
ADAPTER_ONLY = re.compile(r"\._load_name\b|\._shell\b|\._uuid\b|\b_play_context\b|\bdump_attrs\b"
                          r"|(?<!self)\._(task|connection|loader|templar|low_level_execute_command|execute_module)\b")


def test_only_the_adapter_reads_ansible_core_internals():
    found = []
    for dirpath, dummy, files in os.walk(PLUGINS):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(dirpath, name), encoding="utf-8") as handle:
                    text = handle.read()
                found.extend("%s: %s" % (name, word) for word in NOWHERE if word in text)
                if name != "_ansible_private.py":
                    found.extend("%s: %s" % (name, m.group(0)) for m in ADAPTER_ONLY.finditer(text))
    assert not found
