# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the tp_ranks action reaches each member of a serving group: one Ansible connection per member.

Every member, the task's own host included, gets its connection plugin (``ansible_connection``, ``smart`` = ssh)
configured from its own inventory variables, the way TaskExecutor builds the connection of a delegated host, on a
no_log play context: the ssh plugin's -vvv trace would otherwise print the ranks' raw logs, keys included (the
task's own connection is used only when the task itself is no_log). When the task becomes (``become: true``, or the
member's ``ansible_become``), each member's connection gets its own become plugin (the member's
``ansible_become_method``, ``ansible_become_user``, password variables, and ``-K``'s password), as TaskExecutor
gives one to a delegated host's connection, and shell commands run through ActionBase's
``_low_level_execute_command``, which wraps them with it. Modules (the API probe) run without become, on a
connection of their own: they need no privilege, and a module run as an unprivileged become user needs ACLs for
Ansible's temporary files. The connections are kept for the whole poll (ssh ControlPersist makes each command
cheap; the two connections of a member share its master) and closed at the end.

Public APIs: ``connection_loader``, ``become_loader``, ``action_loader`` (the ``normal`` action built on a member's
connection, whose ActionBase runs that member's commands and modules) and ``get_plugin_loader_namespace`` (the
strategy's shared loader); the plugins' ``set_options``, ``option_definitions`` (the variables a plugin reads) and
``set_become_plugin``; ``PlayContext.copy``. The plugins' variables are picked here (``plugin_var_options``), not
by a plugin's private resolver. What has no public API goes through ``_ansible_private``: the action's task,
connection, play context, loader and templar, the task's id and keywords, a connection's shell plugin, and
ActionBase's command and module execution.
"""

from __future__ import annotations

import os

from ansible import constants as C
from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins import loader as plugin_loader
from ansible.plugins.loader import action_loader, become_loader, connection_loader
from ansible.utils.display import Display

from ansible_collections.dspark.cluster.plugins.plugin_utils import _ansible_private as core_private

display = Display()

# Always copied for a member connection, next to the connection and shell plugins' own variables.
BASE_CONNECTION_VARS = ("inventory_hostname", "ansible_host", "ansible_connection", "ansible_python_interpreter",
                        "ansible_become", "ansible_become_method")
# The member variables a module run reads besides the connection's (interpreter choice and its discovery).
MODULE_VARS = ("inventory_hostname", "ansible_python_interpreter", "ansible_interpreter_python_fallback")
# The action whose ActionBase helpers run a member's commands and modules (never its run()): what TaskExecutor gives
# a module without an action plugin of its own.
RUNNER_ACTION = "ansible.legacy.normal"


def option_vars(plugin):
    """The variables a plugin reads its options from: the ``vars`` of its option definitions."""
    return set(var["name"] for option in plugin.option_definitions.values() for var in option.get("vars") or ())


def plugin_var_options(plugin, plugin_vars, member_vars):
    """The ``var_options`` of a plugin's ``set_options``: the member's values of the plugin's own variables, and for a
    connection plugin that allows them its ``ansible_<extras_prefix>_*`` extras under ``_extras`` (what TaskExecutor
    hands a connection or a become plugin). The values come from HostVars, already templated."""
    options = {"_extras": {}}
    for name in plugin_vars:
        if name in member_vars:
            options[name] = member_vars[name]
    if getattr(plugin, "allow_extras", False):
        prefix = "ansible_%s_" % plugin.extras_prefix
        for name, value in member_vars.items():
            if name.startswith(prefix) and name not in options:
                options["_extras"][name] = value
    return options


def wants_become(member_vars, task_become):
    """Whether a member's commands become: its ``ansible_become`` when set, else the task's ``become`` (TaskExecutor's
    rule for the connection it builds)."""
    value = member_vars.get("ansible_become")
    return boolean(value, strict=False) if value is not None else bool(task_become)


class MemberConnections:
    """One connection per member of a serving group; ``action`` is the running action plugin."""

    def __init__(self, action, hostvars, own_host):
        self._parts = core_private.action_parts(action)
        self._hostvars = hostvars
        self._own_host = own_host
        self._built = {}
        self._becomes = {}
        self._runners = {}
        self._module_vars = {}

    def _member_vars(self, host, names):
        """Plain dict of the member's variables that the plugins read (HostVars templates each on access)."""
        raw = self._hostvars[host]
        found = {}
        for name in names:
            if name in raw:
                found[name] = raw[name]
        found.setdefault("inventory_hostname", host)
        return found

    def _context_for(self, host, name, become=False, censored=False):
        play_context = self._parts.play_context.copy()
        play_context.connection = name
        play_context.remote_addr = self._member_vars(host, ("ansible_host",)).get("ansible_host") or host
        play_context.become = become
        if censored:
            # What the ranks' logs hold before tp_ranks redacts it (vLLM logs keys given by --config): the ssh
            # plugin's -vvv trace prints every command's raw output unless its play context is no_log.
            play_context.no_log = True
        return play_context

    def _task_keys(self):
        """The task's keywords as TaskExecutor hands them to a member's plugins."""
        play_context = self._parts.play_context
        task_keys = core_private.task_keywords(self._parts.task)
        # As TaskExecutor: 'timeout' is the connection timeout, the passwords come via the play context.
        task_keys["timeout"] = play_context.timeout
        if play_context.password:
            task_keys["password"] = play_context.password
        if play_context.become_pass:
            task_keys["become_pass"] = play_context.become_pass
        task_keys.pop("retries", None)
        return task_keys

    def _become(self, host, first, task_keys):
        """The member's become plugin with its own options, or None when its commands do not become."""
        task = self._parts.task
        if not wants_become(first, task.become):
            return None
        method = first.get("ansible_become_method") or task.become_method
        become = become_loader.get(method)
        if not become:
            raise AnsibleError("the become plugin '%s' (for %s) was not found" % (method, host))
        become_vars = option_vars(become)
        become.set_options(task_keys=task_keys, var_options=plugin_var_options(
            become, become_vars, self._member_vars(host, sorted(become_vars))))
        return become

    def _build(self, host, become):
        task = self._parts.task
        first = self._member_vars(host, BASE_CONNECTION_VARS)
        name = first.get("ansible_connection") or task.connection or C.DEFAULT_TRANSPORT
        if name == "smart":
            name = "ssh"
        conn = connection_loader.get(name, self._context_for(host, name, become is not None, censored=True),
                                     new_stdin=None, task_uuid=core_private.task_uuid(task),
                                     ansible_playbook_pid=to_text(os.getppid()))
        if not conn:
            raise AnsibleError("the connection plugin '%s' (for %s) was not found" % (name, host))
        conn.set_become_plugin(become)
        shell = core_private.connection_shell(conn)
        conn_vars = option_vars(conn)
        shell_vars = option_vars(shell)
        names = set(BASE_CONNECTION_VARS) | conn_vars | shell_vars
        if getattr(conn, "allow_extras", False):
            prefix = "ansible_%s_" % conn.extras_prefix
            names.update(n for n in self._hostvars[host] if n.startswith(prefix))
        member_vars = self._member_vars(host, sorted(names))
        task_keys = self._task_keys()
        conn.set_options(task_keys=task_keys, var_options=plugin_var_options(conn, conn_vars, member_vars))
        shell.set_options(task_keys=task_keys,
                          var_options=dict((k, v) for k, v in member_vars.items() if k in shell_vars))
        return conn

    def get(self, host, for_module=False):
        """The connection to ``host``: for commands, one with the member's become (if any); for modules, one without.
        Built here (its -vvv trace censored), or for the task's host the task's own one when that is censored too (a
        no_log task; TaskExecutor gave it the task's become, so modules use it only when it has none)."""
        if host not in self._hostvars:
            raise AnsibleError("%s is not in the inventory" % host)
        own = self._parts.connection
        if host == self._own_host and own is not None and self._parts.play_context.no_log:
            if not for_module or getattr(own, "become", None) is None:
                return own
        if for_module:
            become = None
        else:
            if host not in self._becomes:
                self._becomes[host] = self._become(host, self._member_vars(host, BASE_CONNECTION_VARS),
                                                   self._task_keys())
            become = self._becomes[host]
        key = (host, become is not None)
        if key not in self._built:
            self._built[key] = self._build(host, become)
        return self._built[key]

    def _runner(self, host, for_module=False):
        """The RUNNER_ACTION on one of the member's connections (built on first use): runs its commands or modules."""
        key = (host, for_module)
        if key not in self._runners:
            parts = self._parts
            conn = self.get(host, for_module)
            transport = getattr(conn, "transport", None) or parts.play_context.connection
            self._runners[key] = action_loader.get(
                RUNNER_ACTION, task=parts.task, connection=conn,
                play_context=self._context_for(host, transport, getattr(conn, "become", None) is not None),
                loader=parts.loader, templar=parts.templar,
                shared_loader_obj=plugin_loader.get_plugin_loader_namespace())
            if not self._runners[key]:
                raise AnsibleError("the action plugin '%s' was not found" % RUNNER_ACTION)
        return self._runners[key]

    def run(self, host, command, in_data=None):
        """(rc, stdout, stderr), with the member's become when it has one; rc None when the host could not be
        reached. A failed become (a missing or wrong sudo password) is the command's failure, not an unreachable
        host: rc 1 and the plugin's message as stderr."""
        data = to_bytes(in_data, errors="surrogate_or_strict") if in_data is not None else None
        try:
            runner = self._runner(host)
        except AnsibleError as exc:
            return None, "", to_text(exc)
        try:
            res = core_private.execute_command(runner, command, data)
        except AnsibleConnectionFailure as exc:
            return None, "", to_text(exc)
        except AnsibleError as exc:
            return 1, "", to_text(exc)
        return res["rc"], res["stdout"], res["stderr"]

    def _vars_for_module(self, host):
        """The member's variables for a module run, kept across runs (interpreter discovery happens once)."""
        if host not in self._module_vars:
            found = self._member_vars(host, MODULE_VARS)
            raw = self._hostvars[host]
            facts = raw["ansible_facts"] if "ansible_facts" in raw else None
            found["ansible_facts"] = dict((k, v) for k, v in (facts or {}).items()
                                          if k.startswith("discovered_interpreter_"))
            delegate_to = self._parts.task.delegate_to
            if delegate_to:
                # ActionBase reads a delegated task's interpreter from the delegated host's variables.
                found["ansible_delegated_vars"] = {delegate_to: found}
            self._module_vars[host] = found
        return self._module_vars[host]

    def run_module(self, host, module_name, module_args):
        """Run a module on ``host`` (never with become); its result, or {unreachable, msg} when it could not run."""
        try:
            runner = self._runner(host, for_module=True)
            result = core_private.execute_module(runner, module_name, dict(module_args), self._vars_for_module(host))
        except AnsibleError as exc:
            return {"unreachable": True, "failed": True, "msg": to_text(exc)}
        result.pop("ansible_facts", None)       # discovered interpreter of another host: not the task host's fact
        return result

    def close(self):
        for (host, dummy), conn in self._built.items():
            try:
                conn.close()
            except Exception as exc:  # pylint: disable=broad-except
                display.vvv("tp_ranks: closing the connection to %s failed: %s" % (host, exc))
        self._built = {}
        self._runners = {}
