"""plan, status and qualify: one playbook per selected group that changes nothing, the report, a table.

No preflight, no group lock (nothing changes); qualify runs every group at once unless --parallel is given
(selection.py) and takes its verdicts from the facts (qualify.py).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from . import group_runs, journal, metrics, qualify, report, router_view, run_record, watch
from .run_record import EXIT_USAGE
from .scheduler import CANCELLED, FAILED, NOT_STARTED, OK, Scheduler
from .selection import PLAYBOOKS


def _run(sel, parallel, record, interrupts, prog):
    """Every selected group's run: (its runs, the record with why it stopped, the report's entries)."""
    def interim(runs, stop_reason):     # after each group: quiet, the final report says what failed
        run_record.write_report(replace(record, stop_reason=stop_reason), group_runs.entries(sel, runs, stop_reason),
                                None, complete=False, quiet=True)

    runs, stop_reason = group_runs.run_groups(sel, sel.groups, PLAYBOOKS[sel.subcommand],
                                              Scheduler(sel.groups, parallel=parallel), OK, interrupts, prog,
                                              on_finish=interim)
    record = replace(record, stop_reason=stop_reason, interrupted=bool(interrupts.count))
    return runs, record, group_runs.entries(sel, runs, stop_reason)


def plan(sel, parallel, record, interrupts, prog):
    dummy, record, entries = _run(sel, parallel, record, interrupts, prog)
    print_plan(entries)
    return run_record.finish(record, entries, run_record.exit_code_for(entries))


def status(sel, parallel, record, interrupts, prog, prometheus=None, window="5m", journal_path=None):
    """`prometheus`: --prometheus (else $DSPARK_FLEET_PROMETHEUS); `journal_path`: --journal (else the state dir's)."""
    prometheus = prometheus or os.environ.get(metrics.PROMETHEUS_ENV) or None
    try:
        prometheus = metrics.check_url(prometheus) if prometheus else None
        window = metrics.check_window(window)
    except ValueError as exc:
        print("dspark-fleet: error: %s" % exc, file=sys.stderr)
        return EXIT_USAGE
    runs, record, entries = _run(sel, parallel, record, interrupts, prog)
    if prometheus:
        prog.message("asking Prometheus %s for the engine's numbers (window %s)" % (prometheus, window))
    metrics.attach(entries, runs, prometheus=prometheus, window=window, project_dir=sel.project_dir)
    routers = None
    if sel.routers and not record.interrupted:
        routers = router_view.read(sel, interrupts, prog)
        record = replace(record, routers=routers)
    print_status(entries)
    if routers:
        router_view.print_table(routers)
    watch.print_journal_summary(sel.groups, journal_path or journal.default_path(sel.state_dir))
    return run_record.finish(record, entries, run_record.exit_code_for(entries))


def qualify_groups(sel, parallel, record, interrupts, prog):
    """qualify.yml per group; the verdicts come from the facts."""
    dummy, record, entries = _run(sel, parallel, record, interrupts, prog)
    return run_record.finish(record, entries, qualify.exit_code(entries),
                             summary=lambda e, r: qualify.print_summary(e, r.stop_reason))


def print_plan(entries):
    for name, entry in entries.items():
        changes = [(key, t) for key, phase in entry["phases"].items() for t in phase["changed_tasks"]]
        print("")
        print("%s: %s, %d task(s) would change" % (name, entry["result"], len(changes)))
        for key, task in changes:
            print("  %-14s %s (%s)" % (key, task["task"], ", ".join(task["hosts"])))


def print_status(entries):
    """One table: a row per member (its serve_status, or why there is none), serving on the head's row; then the
    engine's numbers per group (metrics.py) when status() attached them."""
    header = ["group", "node", "rank", "container", "restarts", "image", "API models", "serving"]
    rows = []
    for name, entry in entries.items():
        state = entry.get("status") or {"serving": None, "ranks": []}
        serving = {True: "yes", False: "no", None: "unknown"}[state.get("serving")]
        if entry["result"] == FAILED and state.get("serving") is None:
            serving = "no"
        noted = dict((r["host"], r) for r in state["ranks"])
        failed = (entry.get("failure") or {}).get("failed_tasks") or []
        unreachable = set(t["host"] for t in failed if t.get("unreachable"))
        failed_hosts = set(t["host"] for t in failed)
        for member in entry["members"]:
            rank = noted.get(member["host"])
            if rank is None:
                what = ("unreachable" if member["host"] in unreachable else "failed" if member["host"] in failed_hosts
                        else entry["result"] if entry["result"] in (CANCELLED, NOT_STARTED) else "unknown")
                rank = {"host": member["host"], "rank": member["rank"], "state": what, "restarts": None,
                        "image": None, "api_models": None}
            models = rank["api_models"]
            rows.append([name, rank["host"], "-" if rank["rank"] is None else str(rank["rank"]), rank["state"] or "-",
                         "-" if rank["restarts"] is None else str(rank["restarts"]),
                         report.short_image(rank["image"]) or "-",
                         "-" if models is None else (", ".join(models) or "(none)"),
                         serving if rank["rank"] == 0 else ""])
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    print("")
    for row in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    if any("metrics" in e for e in entries.values()):
        metrics.print_table(entries)
