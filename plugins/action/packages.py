# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: installs distribution packages the collection's one way (plugins/plugin_utils/_packages.py)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.dspark.cluster.plugins.plugin_utils import _packages

display = Display()

ARGUMENT_SPEC = {
    "name": {"type": "list", "elements": "str", "required": True},
    "install_recommends": {"type": "bool"},
}


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        try:
            dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        except AnsibleActionFail as exc:
            result.update(failed=True, msg=str(exc))
            return result
        names = args["name"]
        problem = _packages.names_problem(names)
        if problem:
            result.update(failed=True, msg=problem)
            return result
        first = self._execute_module(module_name=_packages.APT, task_vars=task_vars,
                                     module_args=_packages.apt_args(names, args.get("install_recommends")))
        if not _packages.failed(first):
            result.update(first)
            result["refreshed"] = False
            return result
        if self._task.check_mode:
            result.update(_packages.check_mode_plan(names, first))
            # Said at every verbosity, as a debug task would: a changed line alone does not say what would happen.
            display.display("%s: %s" % (task_vars.get("inventory_hostname", "?"), result["msg"]))
            return result
        second = self._execute_module(module_name=_packages.APT, task_vars=task_vars,
                                      module_args=_packages.apt_args(names, args.get("install_recommends"), refresh=True))
        if _packages.failed(second):
            result.update(_packages.failure(names, first, second))
            return result
        result.update(second)
        result["refreshed"] = True
        return result
