# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ansible-core internals the collection relies on, one function each, and the only place that reads them.

tp_ranks builds connections and runs commands and modules on the members of a serving group the way TaskExecutor
and ActionBase do for a delegated host (``_tp_connections``); ansible-core offers no public API for these parts of
it. tests/unit/plugins/plugin_utils/test_ansible_private.py runs every function on the installed ansible-core's own
objects, so a release that renames or removes one of them fails there (CI runs it on 2.19 and 2.21). An action
plugin's use of its own ActionBase members (``self._task``, ``self._execute_module``) is the interface core gives
action plugins and is not listed here.
"""

from __future__ import annotations

from collections import namedtuple

ActionParts = namedtuple("ActionParts", "task connection play_context loader templar")


def action_parts(action):
    """The task, connection, play context, loader and templar the strategy handed an action plugin."""
    # ActionBase keeps its constructor's arguments only in protected attributes; it has no accessors.
    return ActionParts(action._task, action._connection, action._play_context, action._loader, action._templar)


def task_uuid(task):
    """The task's id, which TaskExecutor hands every connection plugin it builds (``task_uuid=``)."""
    # Playbook objects keep their id only as _uuid.
    return task._uuid


def task_keywords(task):
    """The task's keywords as TaskExecutor hands them to a plugin's ``set_options(task_keys=...)``."""
    # dump_attrs is undocumented; Task lists its keywords nowhere public (set_options maps options to them by name).
    return dict(task.dump_attrs())


def connection_shell(connection):
    """The shell plugin a connection picked for itself (``ansible_shell_type``, else the connection's own default)."""
    # ConnectionBase keeps it only as _shell; TaskExecutor sets its options there too.
    return connection._shell


def execute_command(runner, command, in_data):
    """``runner``'s connection runs ``command`` in its shell, wrapped by the connection's become plugin if any."""
    # ActionBase's become wrapping and success-marker handling exist only in this protected helper.
    return runner._low_level_execute_command(command, sudoable=True, in_data=in_data,
                                             encoding_errors="surrogate_or_replace")


def execute_module(runner, module_name, module_args, task_vars):
    """``runner``'s connection runs a module (payload built, interpreter discovered as for any task)."""
    # Module execution on a connection exists only as ActionBase's protected helper.
    return runner._execute_module(module_name=module_name, module_args=module_args, task_vars=task_vars)
