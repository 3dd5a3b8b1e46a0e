# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the tp_ranks action reaches each member of a serving group: one Ansible connection per member.

Every member, the task's own host included, gets its connection plugin (``ansible_connection``, ``smart`` = ssh)
configured from its own inventory variables, the way TaskExecutor builds the connection of a delegated host, on a
no_log play context: the ssh plugin's -vvv trace would otherwise print the ranks' raw logs, keys included (the
task's own connection is used only when the task itself is no_log). Shell commands never use become (the caller
adds its own ``sudo -n``); modules run through ActionBase's module execution on a connection without become. The
connections are kept for the whole poll (ssh ControlPersist makes each command cheap) and closed at the end.

Only public plugin APIs: ``connection_loader`` and ``get_plugin_loader_namespace`` (what the strategy hands every
action as its shared loader), ``ConnectionBase`` (``set_options``, ``exec_command``, ``set_become_plugin``,
``close``), ``C.config.get_plugin_vars`` and ``ActionBase._execute_module``; the connection's variables are picked
here (``connection_var_options``), not by the plugin's private resolver.
"""

from __future__ import annotations

import os

from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase
from ansible.plugins import loader as plugin_loader
from ansible.plugins.loader import connection_loader
from ansible.utils.display import Display

display = Display()

# Always copied for a member connection, next to the connection and shell plugins' own variables.
BASE_CONNECTION_VARS = ("inventory_hostname", "ansible_host", "ansible_connection", "ansible_python_interpreter")
# The member variables a module run reads besides the connection's (interpreter choice and its discovery).
MODULE_VARS = ("inventory_hostname", "ansible_python_interpreter", "ansible_interpreter_python_fallback")


def connection_var_options(conn, conn_vars, member_vars):
    """The ``var_options`` of a connection plugin's ``set_options``: the member's values of the plugin's own variables,
    and of its ``ansible_<extras_prefix>_*`` extras under ``_extras`` (what TaskExecutor hands a connection). The
    values come from HostVars, already templated."""
    options = {"_extras": {}}
    for name in conn_vars:
        if name in member_vars:
            options[name] = member_vars[name]
    if getattr(conn, "allow_extras", False):
        prefix = "ansible_%s_" % conn.extras_prefix
        for name, value in member_vars.items():
            if name.startswith(prefix) and name not in options:
                options["_extras"][name] = value
    return options


class _ModuleRunner(ActionBase):
    """ActionBase bound to one member's connection: only its module execution is used."""

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        raise NotImplementedError("used for _execute_module only")


class MemberConnections:
    """One connection per member of a serving group; ``action`` is the running action plugin."""

    def __init__(self, action, hostvars, own_host):
        self._action = action
        self._hostvars = hostvars
        self._own_host = own_host
        self._built = {}
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

    def _play_context(self, host, name, censored=False):
        play_context = self._action._play_context.copy()
        play_context.connection = name
        play_context.remote_addr = self._member_vars(host, ("ansible_host",)).get("ansible_host") or host
        play_context.become = False
        if censored:
            # What the ranks' logs hold before tp_ranks redacts it (vLLM logs keys given by --config): the ssh
            # plugin's -vvv trace prints every command's raw output unless its play context is no_log.
            play_context.no_log = True
        return play_context

    def _build(self, host):
        action = self._action
        if host not in self._hostvars:
            raise AnsibleError("%s is not in the inventory" % host)
        first = self._member_vars(host, BASE_CONNECTION_VARS)
        name = first.get("ansible_connection") or action._task.connection or C.DEFAULT_TRANSPORT
        if name == "smart":
            name = "ssh"
        conn = connection_loader.get(name, self._play_context(host, name, censored=True), new_stdin=None,
                                     task_uuid=action._task._uuid, ansible_playbook_pid=to_text(os.getppid()))
        if not conn:
            raise AnsibleError("the connection plugin '%s' (for %s) was not found" % (name, host))
        conn.set_become_plugin(None)    # become is the caller's own `sudo -n` prefix, never the connection's
        conn_vars = set(C.config.get_plugin_vars("connection", conn._load_name))
        shell_vars = set(C.config.get_plugin_vars("shell", conn._shell._load_name))
        names = set(BASE_CONNECTION_VARS) | conn_vars | shell_vars
        if getattr(conn, "allow_extras", False):
            prefix = "ansible_%s_" % conn.extras_prefix
            names.update(n for n in self._hostvars[host] if n.startswith(prefix))
        member_vars = self._member_vars(host, sorted(names))
        task_keys = action._task.dump_attrs()
        task_keys = dict(task_keys) if isinstance(task_keys, dict) else {}
        # As TaskExecutor: 'timeout' is the connection timeout, the password comes via the play context.
        task_keys["timeout"] = action._play_context.timeout
        if action._play_context.password:
            task_keys["password"] = action._play_context.password
        task_keys.pop("retries", None)
        conn.set_options(task_keys=task_keys, var_options=connection_var_options(conn, conn_vars, member_vars))
        conn._shell.set_options(task_keys=task_keys,
                                var_options=dict((k, v) for k, v in member_vars.items() if k in shell_vars))
        return conn

    def _own_built(self, host):
        if host not in self._built:
            self._built[host] = self._build(host)
        return self._built[host]

    def get(self, host):
        """The connection commands to ``host`` use: one built here (its -vvv trace censored), or for the task's host
        the task's own one when that is censored too (a no_log task)."""
        own = self._action._connection
        if host == self._own_host and own is not None and self._action._play_context.no_log:
            return own
        return self._own_built(host)

    def run(self, host, command, in_data=None):
        """(rc, stdout, stderr); rc None when the host could not be reached or the command not started."""
        data = to_bytes(in_data, errors="surrogate_or_strict") if in_data is not None else None
        try:
            conn = self.get(host)
            rc, out, err = conn.exec_command(command, in_data=data, sudoable=False)
        except AnsibleError as exc:
            return None, "", to_text(exc)
        return rc, to_text(out, errors="surrogate_or_replace"), to_text(err, errors="surrogate_or_replace")

    def _vars_for_module(self, host):
        """The member's variables for a module run, kept across runs (interpreter discovery happens once)."""
        if host not in self._module_vars:
            found = self._member_vars(host, MODULE_VARS)
            raw = self._hostvars[host]
            facts = raw["ansible_facts"] if "ansible_facts" in raw else None
            found["ansible_facts"] = dict((k, v) for k, v in (facts or {}).items()
                                          if k.startswith("discovered_interpreter_"))
            delegate_to = self._action._task.delegate_to
            if delegate_to:
                # ActionBase reads a delegated task's interpreter from the delegated host's variables.
                found["ansible_delegated_vars"] = {delegate_to: found}
            self._module_vars[host] = found
        return self._module_vars[host]

    def run_module(self, host, module_name, module_args):
        """Run a module on ``host`` (never with become); its result, or {unreachable, msg} when it could not run."""
        try:
            if host not in self._hostvars:
                raise AnsibleError("%s is not in the inventory" % host)
            conn = self.get(host)
            if getattr(conn, "become", None) is not None:
                conn = self._own_built(host)     # the task's connection becomes: use one that does not
            action = self._action
            transport = getattr(conn, "transport", None) or action._play_context.connection
            runner = _ModuleRunner(action._task, conn, self._play_context(host, transport), action._loader,
                                   action._templar, plugin_loader.get_plugin_loader_namespace())
            result = runner._execute_module(module_name=module_name, module_args=dict(module_args),
                                            task_vars=self._vars_for_module(host))
        except AnsibleError as exc:
            return {"unreachable": True, "failed": True, "msg": to_text(exc)}
        result.pop("ansible_facts", None)       # discovered interpreter of another host: not the task host's fact
        return result

    def close(self):
        for host, conn in self._built.items():
            try:
                conn.close()
            except Exception as exc:  # pylint: disable=broad-except
                display.vvv("tp_ranks: closing the connection to %s failed: %s" % (host, exc))
        self._built = {}
