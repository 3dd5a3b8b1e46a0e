"""`reprovision` as a pipeline: selection (selection.py, before this), resume decision, preflight, the router first
(--rolling), the group runs, the router after, the report.

Each stage takes plain values (the frozen Selection and Options, the groups, the record's fields) and returns one
(the groups to skip, the preflight section, the router section, the runs and why they stopped). Only `run()` puts
what they return into the run's record (run_record.RunRecord, frozen), so an input is followed by reading `run()`
and the one stage it is handed to.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from . import group_runs, locks, proven, resume, rolling, router_step, run_record, runner_exec
from .orchestrator import run_one
from .run_record import EXIT_FAILED, EXIT_USAGE
from .scheduler import CONVERGED, FAILED, OK, Scheduler
from .selection import PLAYBOOKS, PREFLIGHT

# JSON, not key=value: `-e key=false` is the string "false", which ansible-core 2.19 refuses as a conditional.
PREFLIGHT_VARS = '{"preflight_check_reachability": false}'


def run(sel, opts, record, interrupts, prog):
    """The subcommand: the exit code (0 every group converged or skipped, 1 one did not or the router failed, 2 the
    global validation failed)."""
    skipped, lines = resume_decision(opts.previous, sel.fingerprints, opts.resume)       # the resume decision
    for line in lines:
        prog.message(line)
    to_run = [g for g in sel.groups if g not in skipped]
    if to_run:
        prog.message("validating the inventory once for %d group(s): %s" % (len(sel.groups), PREFLIGHT))
        record = replace(record, preflight=preflight(sel, interrupts, prog))                # preflight
        if record.preflight["result"] != OK:
            return stop_at_preflight(record, group_runs.entries(sel, {}, skipped=skipped), interrupts)
    store = proven.Store(sel.state_dir)
    roller = rolling_runner(sel, opts.rolling, store) if opts.rolling is not None else None
    # Rolling: the router's configuration first, so that every group of the inventory has its server to drain (a new
    # group's is down until it serves) and removed groups are gone; nothing is drained when that fails.
    if roller is not None and to_run:
        record = replace(record, router=router(sel, True, record.stop_reason or interrupts.reason, interrupts, prog))
        if record.router["result"] != CONVERGED:
            record = replace(record, stop_reason=record.stop_reason or (
                "the router's configuration (%s) failed before the roll: no group was drained" % router_step.PLAYBOOK))
            return run_record.finish(record, group_runs.entries(sel, {}, skipped=skipped), EXIT_FAILED)
    if roller is not None:
        prog.message("rolling through the router: at most %d group(s) out of rotation at once%s" % (
            opts.rolling.max_unavailable, ", each qualified first (%s)" % rolling.QUALIFY
            if opts.rolling.qualify_first else ""))
    runner = group_runner(sel.state_dir, store, sel.configs, roller, prog)                  # the group runs

    def interim(runs, stop_reason):     # after each group: quiet, the final report says what failed
        run_record.write_report(replace(record, stop_reason=stop_reason), group_runs.entries(
            sel, runs, stop_reason, skipped, roller), None, complete=False, quiet=True)

    runs, stop_reason = group_runs.run_groups(sel, to_run, PLAYBOOKS["reprovision"],
                                              scheduler_for(to_run, opts, roller), CONVERGED, interrupts, prog,
                                              runner=runner, on_finish=interim)
    record = replace(record, stop_reason=stop_reason, interrupted=bool(interrupts.count))
    entries = group_runs.entries(sel, runs, stop_reason, skipped, roller)
    code = run_record.exit_code_for(entries)
    if roller is None:                                                                      # the router after
        record = replace(record, router=router(sel, False, record.stop_reason or interrupts.reason, interrupts, prog))
        if record.router["result"] == FAILED:
            code = EXIT_FAILED
    return run_record.finish(record, entries, code)                                         # the report


def resume_decision(previous, fingerprints, report_path):
    """--resume: ({group: (why it is skipped, its previous result)}, a line per group: skip or redo, and why).
    `previous`: the report read from `report_path` (None without --resume); `fingerprints`: {group: now}."""
    if previous is None:
        return {}, []
    skipped, lines = {}, []
    for group, (skip, reason) in resume.decide(previous, fingerprints).items():
        if skip:
            before = previous["groups"][group]
            skipped[group] = (reason, {"report": report_path, "result": before.get("result"),
                                       "finished": before.get("finished"), "image_id": before.get("image_id")})
        lines.append("%s: %s (%s)" % (group, "skip" if skip else "redo", reason))
    return skipped, lines


def preflight(sel, interrupts, prog):
    """The one global validation: preflight.yml over every selected group, no node contacted. The report's
    ``preflight`` section (result ok, failed or cancelled; msg: why it failed)."""
    spec = sel.spec("preflight", sel.artifacts, PREFLIGHT, ",".join(sel.groups),
                    sel.extra_args() + ["-e", PREFLIGHT_VARS])
    run = run_one(spec, OK, prog, interrupts)
    msg = None
    if run.result == FAILED:
        failure = run.events.failure_view()
        if failure and failure["failed_tasks"]:
            msg = "; ".join("%s: %s" % (t["host"], t["msg"]) for t in failure["failed_tasks"])
        else:
            msg = (run.run_result.error if run.run_result else None) or runner_exec.stdout_tail(spec.stdout_path)
    return {"result": run.result, "msg": msg, "artifacts_dir": spec.artifact_dir, "stdout": spec.stdout_path,
            "duration_s": round(run.finished - run.started, 3) if run.finished and run.started else None}


def stop_at_preflight(record, entries, interrupts):
    """The validation did not pass: nothing else runs. Failed: exit 2 with its message; cancelled: exit 1."""
    section = record.preflight
    if section["result"] == FAILED:
        record = replace(record, stop_reason="the global validation (%s) failed" % PREFLIGHT)
        run_record.write_report(replace(record, finished=time.time()), entries, EXIT_USAGE)
        print("dspark-fleet: the global validation failed, nothing was changed:\n%s" % section["msg"], file=sys.stderr)
        print("Log: %s" % section["stdout"], file=sys.stderr)
        print("Report: %s" % record.report_path, file=sys.stderr)
        return EXIT_USAGE
    record = replace(record, stop_reason=interrupts.reason or "the global validation was %s" % section["result"],
                     interrupted=bool(interrupts.count))
    return run_record.finish(record, entries, EXIT_FAILED)


def router(sel, rolls, stopped, interrupts, prog):
    """playbooks/router.yml when the run speaks for the whole fleet (router_step.decide): after the groups, or before
    the roll (`rolls`); `stopped`: why the run stopped early, else None. The report's ``router`` section."""
    go, reason = router_step.decide(sel.subcommand, sel.routers, sel.groups, sel.every_group, rolls, sel.tags, stopped)
    if not go:
        return router_step.skipped(reason)
    spec = sel.spec(router_step.IDENT, sel.artifacts, router_step.PLAYBOOK, router_step.GROUP, sel.extra_args())
    return router_step.converge(spec, sel.routers, reason, interrupts, prog)


def rolling_runner(sel, options, store):
    """--rolling's runner of each group: qualify, drain, site.yml, enable (rolling.RollingRunner)."""
    return rolling.RollingRunner(runner_exec.run_playbook, sel.project_dir, extra_vars=sel.extra_vars,
                                 drain_timeout=options.drain_timeout, on_drain_timeout=options.on_drain_timeout,
                                 qualify=options.qualify_first, members=sel.members_of, store=store,
                                 configs=sel.configs, rollback=options.rollback, tags=sel.tags)


def scheduler_for(groups, opts, roller=None):
    """The order and limits of the group runs. Rolling: --max-unavailable is the parallelism, a failed group (left
    out of rotation) keeps its slot, one left in rotation because it was not qualified holds none."""
    if roller is not None:
        return rolling.RollingScheduler(groups, parallel=opts.rolling.max_unavailable, canary=opts.canary,
                                        max_failed=opts.max_failed, in_rotation=roller.in_rotation,
                                        roll_stopped=roller.roll_stopped)
    return Scheduler(groups, parallel=opts.parallel, canary=opts.canary, max_failed=opts.max_failed)


def group_runner(state_dir, store, configs, roller, prog):
    """What runs each group: under the group's lock (shared with `watch`, waiting while the supervisor holds it),
    the rolling runner, or site.yml recording the image and revision of a group it proved (`configs[group]`)."""
    plain = proven.recording_runner(store, configs, runner_exec.run_playbook, on_error=lambda g, exc: (
        prog.message("%s: its proven image and revision could not be recorded: %s" % (g, exc))))
    return locks.locked_runner(state_dir, roller or plain, "reprovision", on_wait=lambda g, h: prog.message(
        "%s: waiting for its lock (%s)" % (g, locks.describe(h))))
