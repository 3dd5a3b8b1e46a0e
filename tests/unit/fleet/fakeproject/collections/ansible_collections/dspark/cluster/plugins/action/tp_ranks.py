# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""FAKE dspark.cluster.tp_ranks for the dspark-fleet tests: no container, only the result keys of the real action.

The real action (plugins/action/tp_ranks.py of the collection) returns empty_result() updated by _outcome();
this one returns the same keys with made-up values, ready or failed (``fail: true``) after ``delay`` seconds.
"""

from __future__ import annotations

import time

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

IMAGE = "sha256:" + "ab12" * 16


class ActionModule(ActionBase):
    """Pretends every member of the group (in rank order) registered, or that the last one never joined."""

    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = self._task.args
        group = args.get("group") or task_vars.get("dspark_group")
        hostvars = task_vars.get("hostvars") or {}
        members = sorted((task_vars.get("groups") or {}).get(group) or [],
                         key=lambda h: int(hostvars[h]["dspark_rank"]) if h in hostvars else 0)
        ranks = [{"rank": i, "node": node, "evidence": "fake", "world_size": len(members), "tp_rank": i,
                  "init_method": "tcp://127.0.0.1:25000"} for i, node in enumerate(members)]
        if self._task.check_mode:
            result.update(skipped=True, msg="Check mode: not polling.")
            return result
        time.sleep(float(args.get("delay") or 0))
        containers = dict((node, {"name": "dspark-vllm", "state": "running", "image": IMAGE, "exit_code": 0,
                                  "restart_count": 0, "started_at": "2026-11-30T10:00:00Z", "problem": None,
                                  "message": None}) for node in members)
        result.update(changed=False, expected_ranks=list(range(len(members))), missing_ranks=[],
                      expected_world_size=len(members), api_ready=True, generation_ok=True, logs={},
                      members=[], log_warnings=[], init_method="tcp://127.0.0.1:25000", api_state="ready",
                      group=group, containers=containers)
        if boolean(args.get("fail") or False):
            last = members[-1] if members else None
            result.update(failed=True, registered_ranks=ranks[:-1], missing_ranks=[{"rank": len(members) - 1, "node": last}],
                          world_size=len(members), elapsed=1.5, ready_at=None, api_ready=False,
                          generation_ok=False,
                          diagnosis=[{"code": "worker_never_joined", "rank": len(members) - 1, "node": last,
                                      "cause": "rank %d never registered" % (len(members) - 1),
                                      "fix": "check the fabric between the head and %s" % last,
                                      "evidence": "fake", "severity": "error"}],
                          msg="TP group %s (%d ranks) is not serving after 1.5 s: %s: worker_never_joined"
                              % (group, len(members), last))
            return result
        result.update(registered_ranks=ranks, world_size=len(members), elapsed=2.25, ready_at=time.time(),
                      diagnosis=[], msg="TP group %s ready after 2.3 s" % group)
        return result
