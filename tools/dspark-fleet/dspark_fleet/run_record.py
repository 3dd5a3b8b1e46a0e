"""The run's record, what the report is built from besides the group entries, and the end of a run.

`RunRecord` is frozen: a stage returns its part (the preflight section, the router section, why the run stopped)
and the subcommand puts it in with ``dataclasses.replace``, so every write to the record is in the subcommand's
own function. `finish()` writes the report (report.py), prints the summary and says where everything is.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, replace

from . import qualify, report, router_step
from .scheduler import CANCELLED, CONVERGED, FAILED, OK, SUCCESS
from .selection import PLAYBOOKS

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


@dataclass(frozen=True)
class RunRecord:
    """The report's fields but the groups (report.build reads them by these names): the command, where things are,
    times and what happened around the groups."""

    command: dict
    inventory: str
    project_dir: str
    code_sha256: str
    artifacts_dir: str
    report_path: str
    started: float
    finished: float | None = None
    interrupted: bool = False
    stop_reason: str | None = None
    preflight: dict | None = None
    router: dict | None = None
    routers: dict | None = None     # status: each router's view (router_view.py)

    @property
    def subcommand(self):
        return self.command["subcommand"]


def redacted_argv(argv):
    """The command line without extra-vars values (an @file keeps its path)."""
    def hide(value):
        return value if value.startswith("@") else "<redacted>"
    out = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(hide(arg))
            hide_next = False
        elif arg in ("-e", "--extra-vars"):
            out.append(arg)
            hide_next = True
        elif arg.startswith("--extra-vars="):
            out.append("--extra-vars=" + hide(arg[len("--extra-vars="):]))
        elif arg.startswith("-e") and not arg.startswith("--"):
            out.append("-e" + hide(arg[2:]))
        else:
            out.append(arg)
    return out


def start(sel, opts, argv):
    """The record of a run that has not run anything yet: the report's `command` (options, never a value of -e)."""
    rolling = opts.rolling
    command = {
        "subcommand": sel.subcommand,
        "argv": ["dspark-fleet"] + redacted_argv(argv),
        "playbook": PLAYBOOKS[sel.subcommand],
        "options": {
            "groups": sel.patterns,
            "parallel": opts.parallel,
            "canary": opts.canary,
            "max_failed": opts.max_failed,
            "tags": sel.tags,
            "check": sel.subcommand == "plan",
            "resume": opts.resume,
            "rolling": rolling is not None,
            "max_unavailable": rolling.max_unavailable if rolling is not None else None,
            "qualify_before_drain": rolling.qualify_first if rolling is not None else None,
            "rollback": rolling.rollback if rolling is not None else None,
            "ignore_supervisor": opts.ignore_supervisor,
        },
        "extra_vars": {"count": len(sel.extra_vars), "sha256": sel.extra_digest},
    }
    return RunRecord(command=command, inventory=sel.inventory, project_dir=sel.project_dir, code_sha256=sel.code,
                     artifacts_dir=sel.artifacts, report_path=sel.report_path, started=sel.started)


def exit_code_for(entries):
    return EXIT_OK if all(e["result"] in SUCCESS for e in entries.values()) else EXIT_FAILED


def write_report(record, entries, exit_code, complete=True, quiet=False):
    """The JSON and Markdown report: (json path, md path), None when it cannot be written (said unless `quiet`)."""
    doc = report.build(asdict(record), entries, exit_code, complete=complete)
    try:
        return report.write(doc, record.report_path)
    except OSError as exc:
        if not quiet:
            print("dspark-fleet: cannot write the report %s: %s" % (record.report_path, exc), file=sys.stderr)
        return None


def finish(record, entries, code, summary=None):
    """The final report, the summary (`summary(entries, record)`, default print_summary), where both are: the exit
    code, 1 instead of 0 when the report could not be written."""
    record = replace(record, finished=time.time())
    paths = write_report(record, entries, code)
    (summary or print_summary)(entries, record)
    if paths:
        print("Report: %s (Markdown: %s)" % paths)
    print("Artifacts (each run's full Ansible output is <dir>/stdout): %s" % record.artifacts_dir)
    if paths is None and code == EXIT_OK:
        return EXIT_FAILED
    return code


def print_summary(entries, record):
    counts = report.totals(entries)
    parts = ", ".join("%s %d" % (k.replace("_", " "), v) for k, v in counts.items() if k != "groups" and v)
    print("")
    print("%s: %d group(s): %s" % (record.subcommand, counts["groups"], parts or "none"))
    if record.stop_reason:
        print("Stopped early: %s" % record.stop_reason)
    if record.router:
        print(router_step.line(record.router))
    width = max([len(g) for g in entries] + [5])
    for name, entry in entries.items():
        line = "  %-*s %-11s" % (width, name, entry["result"])
        if entry.get("failure"):
            line += " " + entry["failure"]["summary"]
        elif entry.get("tp_ranks"):
            proof = entry["tp_ranks"]
            line += " changed %d, image %s, ranks %s (world size %s)" % (
                entry["changed"], report.short_image(entry.get("image_id")) or "-",
                ", ".join("%s on %s" % (r["rank"], r["node"]) for r in proof["registered_ranks"]),
                proof.get("world_size"))
        elif entry.get("skip_reason"):
            line += " " + entry["skip_reason"]
        elif entry["result"] in (CONVERGED, OK):
            line += " changed %d" % entry["changed"]
        rotation = entry.get("rotation")
        if rotation:
            line += "; " + report.rotation_text(rotation)
        print(line)
        if entry.get("rollback"):
            print("  %-*s rollback: %s" % (width, "", report.rollback_text(entry["rollback"])))
        step = entry.get("qualify")
        if entry["result"] == FAILED and step and step["verdict"] != qualify.QUALIFIED and len(step["failing"]) > 1:
            for check in step["failing"]:
                print("  %-*s %s" % (width, "", qualify.check_text(check["host"], check)))
        if entry["result"] in (FAILED, CANCELLED) and entry.get("logs"):
            print("  %-*s log: %s" % (width, "", entry["logs"]["stdout"]))
