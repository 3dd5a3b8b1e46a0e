# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: the group's trust file lives on the controller, so the decision and the write run in the controller's
process (module_utils.checkpoint_trust_file) instead of a module built and run on localhost (issue #40)."""

from __future__ import annotations

import os

from ansible.plugins.action import ActionBase

from ansible_collections.dspark.cluster.plugins.module_utils.checkpoint import CheckpointError
from ansible_collections.dspark.cluster.plugins.module_utils.checkpoint_trust_file import check

ARGUMENT_SPEC = {
    "path": {"type": "path", "required": True},
    "group": {"type": "str", "required": True},
    "manifest": {"type": "dict", "required": True},
    "rotate": {"type": "bool", "default": False},
}


class ActionModule(ActionBase):
    """Runs on the controller only; never contacts a node. Check mode decides and writes nothing."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars or {})
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        path = os.path.expanduser(os.path.expandvars(args["path"]))
        try:
            decided, message = check(path, args["group"], args["manifest"], args["rotate"], bool(self._task.check_mode))
        except CheckpointError as exc:
            result.update(failed=True, msg=exc.message, code=exc.code, details=exc.details)
            return result
        except OSError as exc:
            result.update(failed=True, msg="%s: %s" % (type(exc).__name__, exc), code="io_error")
            return result
        result.update(decided)
        if message:
            result.update(failed=True, msg=message, code="manifest_mismatch")
        return result
