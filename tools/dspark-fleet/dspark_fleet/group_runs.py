"""One playbook run per selected group through a scheduler, and the report's entry of each group.

Shared by plan, status, qualify and reprovision: `run_groups()` returns the runs and why the fleet stopped early;
`entries()` turns them (plus the groups --resume skipped, plus what --rolling saw at the router) into the report's
``groups``.
"""

from __future__ import annotations

import os

from . import qualify, report, runner_exec
from .orchestrator import Fleet, GroupRun, default_judge
from .scheduler import CANCELLED, FAILED, NOT_STARTED, RUNNING, SKIPPED, SUCCESS


def playbook_args(subcommand, tags, extra_vars):
    """ansible-playbook's arguments of each group's run: check mode with diff for plan, --tags, every -e."""
    args = ["--check", "--diff"] if subcommand == "plan" else []
    if tags:
        args += ["--tags", tags]
    for value in extra_vars:
        args += ["-e", value]
    return args


def run_groups(sel, groups, playbook, scheduler, success, interrupts, prog, runner=None, on_finish=None):
    """`playbook --limit <group>` for each of `groups` through `scheduler` (a run judged `success` when it ends
    successfully): ({group: GroupRun}, why groups were stopped or never started, else None).
    `on_finish(runs, stop_reason)` after each group (reprovision's interim report)."""
    folder = os.path.join(sel.artifacts, "groups")
    runs = dict((g, GroupRun(g, sel.spec(g, folder, playbook, g, playbook_args(sel.subcommand, sel.tags,
                                                                               sel.extra_vars))))
                for g in groups)

    def stop_reason(fleet):
        return fleet.stop_reason or (scheduler.blocked() if scheduler.not_started() else None)

    fleet = Fleet(runs, scheduler, prog, judge=default_judge(success), runner=runner,
                  on_finish=(lambda f: on_finish(runs, stop_reason(f))) if on_finish else None)
    interrupts.run(fleet)
    return runs, stop_reason(fleet)


def entries(sel, runs, stop_reason=None, skipped=None, rolling=None):
    """The report's group entries, one per selected group in order: skipped (`skipped`: {group: (reason, its
    previous result)}), not started, or what its run in `runs` did; `stop_reason` names why a cancelled one was;
    `rolling` (the RollingRunner) adds each group's rotation, qualify step and rollback."""
    skipped = skipped or {}
    out = {}
    qualifying = sel.subcommand == "qualify"
    for group in sel.groups:
        model, revision = sel.models[group]
        common = {"fingerprint": sel.fingerprints[group], "members": sel.members_of(group), "model": model,
                  "revision": revision}
        if group in skipped:
            reason, previous = skipped[group]
            out[group] = report.group_entry(group, SKIPPED, skip_reason=reason, previous=previous, **common)
            continue
        run = runs.get(group)
        if run is None or run.started is None:
            out[group] = report.group_entry(group, NOT_STARTED, **common)
            if qualifying:
                out[group]["qualify"] = qualify.section(out[group], None)
            continue
        with run.lock:
            result = run.result or RUNNING
            error = None
            if run.run_result is not None and result not in SUCCESS:
                error = run.run_result.error
                if error is None and not run.events.failures and result == FAILED:
                    tail = runner_exec.stdout_tail(run.spec.stdout_path, 8)
                    error = "ansible-playbook ended with status %s (rc %s) without a failed task%s" % (
                        run.run_result.status, run.run_result.rc, (": " + tail) if tail else "")
                if error is None and result == CANCELLED:
                    error = "cancelled (%s)" % (stop_reason or "stopped")
            rotation = rolling.rotation.get(group) if rolling is not None else None
            out[group] = report.group_entry(
                group, result, events=run.events, started=run.started, finished=run.finished, rotation=rotation,
                runner=({"status": run.run_result.status, "rc": run.run_result.rc} if run.run_result else None),
                logs={"artifacts_dir": run.spec.artifact_dir, "stdout": run.spec.stdout_path},
                memory_kib=run.memory_kib, error=error, **common)
            if qualifying:
                out[group]["qualify"] = qualify.section(out[group], run.events)
            elif rolling is not None:
                _rolling_qualify(rolling, group, out[group], error)
                if rolling.rollback_view(group) is not None:
                    out[group]["rollback"] = dict(rolling.rollback_view(group))
    return out


def _rolling_qualify(runner, group, entry, error):
    """--rolling: the group's qualify step; a group left untouched names it as its failure, its log as the log."""
    view = runner.qualify_view(group)
    if view is None:
        return
    entry["qualify"] = view
    if runner.in_rotation(group):
        entry["logs"] = dict(view["logs"])
        if error and entry.get("failure"):
            entry["failure"]["summary"] = error
