"""dspark-fleet: plan, reprovision, status, watch, qualify, acceptance and bundle over the serving groups of one inventory.

qualify runs playbooks/qualify.yml (changes nothing) per group, every group at once by default, and reports
each group qualified or not with the failing checks and their fixes (qualify.py).

reprovision --rolling runs the same playbook per group before draining it (unless --no-qualify): a group that
is not qualified is never drained nor touched, stays in rotation and counts as failed (rolling.py).

Exit codes: 0 every group converged (skipped by --resume counts as converged) / is ok / is qualified; 1 a group
failed, was cancelled, did not start, or (qualify) is not qualified or unreachable; 2 bad usage or bad input
(unknown group pattern, unreadable inventory or --resume report, a playbook missing under --project-dir, the
global validation failed).

This module parses the arguments and dispatches: selection.py checks the input and makes the frozen Selection and
Options, each subcommand's module (reprovision.py, inspection.py, watch.py, acceptance.py, bundle.py) takes what it
reads from them.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from . import __version__, acceptance, bundle, inspection, locks, progress, proven, reprovision, rolling, run_record
from . import selection, supervisor, trust, watch
from .interrupts import Interrupts
from .run_record import EXIT_FAILED, EXIT_USAGE


def _int_at_least(low):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not a whole number" % text) from None
        if value < low:
            raise argparse.ArgumentTypeError("%d is less than %d" % (value, low))
        return value
    return parse


def build_parser():
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    common.add_argument("-i", "--inventory", required=True,
                        help="the inventory (file or directory); its child groups of 'dspark' are the serving groups")
    common.add_argument("--groups", action="append", default=[], metavar="NAMES",
                        help="serving groups: names or fnmatch patterns, comma-separated or repeated (default: all)")
    common.add_argument("--parallel", type=_int_at_least(1), default=1, metavar="N",
                        help="groups run at the same time (default 1)")
    common.add_argument("--artifacts", metavar="DIR",
                        help="where each run's logs and events go (default .dspark-fleet/<UTC timestamp>/)")
    common.add_argument("--report", metavar="PATH",
                        help="the JSON report (default <artifacts>/report.json); the Markdown goes next to it (.md)")
    common.add_argument("-e", "--extra-vars", action="append", default=[], dest="extra_vars", metavar="VARS",
                        help="passed to ansible-playbook as given (key=value, @file or JSON); repeatable")
    common.add_argument("--project-dir", metavar="DIR",
                        help="the collection checkout with site.yml and ansible.cfg (default: this tool's repository)")
    common.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    common.add_argument("--vault-password-file", metavar="PATH",
                        help="Ansible's vault password file for the inventory and the playbooks (its path reaches them "
                             "as %s, never its content); for watch mode 0600 or 0400, owned by root or the user it "
                             "runs as" % watch.VAULT_ENV)
    common.add_argument("--state-dir", metavar="DIR",
                        help="the per-group lock files (DIR/locks/), the last proven image and revision per group "
                             "(DIR/proven/) and the supervisor's journal (default $%s, else %s)" % (locks.STATE_DIR_ENV, locks.DEFAULT_STATE_DIR))

    parser = argparse.ArgumentParser(
        prog="dspark-fleet", allow_abbrev=False,
        description="Reprovision, plan and check the DGX Spark serving groups of one inventory, one "
                    "ansible-playbook run per group (ansible-runner).",
        epilog="Exit codes: 0 all converged/ok/qualified, 1 a group failed, was cancelled, did not start or is not "
               "qualified, 2 bad usage or bad input.")
    parser.add_argument("--version", action="version", version="%(prog)s " + __version__)
    sub = parser.add_subparsers(dest="subcommand", metavar="{plan,reprovision,status,watch,qualify}")
    sub.required = True

    plan = sub.add_parser("plan", parents=[common], allow_abbrev=False,
                          help="site.yml in check mode with diff per group: what would change (changes nothing)")
    plan.add_argument("--tags", help="only this phase (passed to ansible-playbook)")

    rep = sub.add_parser("reprovision", parents=[common], allow_abbrev=False,
                         help="validate once, then site.yml --limit <group> per group")
    rep.add_argument("--canary", type=_int_at_least(0), default=0, metavar="K",
                     help="run the first K groups first; the others only when all K converged")
    rep.add_argument("--max-failed", type=_int_at_least(1), default=None, metavar="F",
                     help="no new group starts once F groups failed")
    rep.add_argument("--tags", help="only this phase (passed to ansible-playbook; preflight always runs)")
    rep.add_argument("--resume", metavar="REPORT",
                     help="skip groups that converged in REPORT with the same inputs fingerprint; redo the rest")
    rep.add_argument("--rolling", action="store_true",
                     help="through the router (group %s): drain each group, wait for its requests, reprovision, "
                          "prove, put it back, then the next; a group that fails stays out of rotation"
                          % rolling.ROUTER_GROUP)
    rep.add_argument("--max-unavailable", type=_int_at_least(1), default=None, metavar="M",
                     help="with --rolling: groups out of rotation at once, failed ones included (default 1); "
                          "at least one group always stays in rotation")
    rep.add_argument("--drain-timeout", type=_int_at_least(0), default=None, metavar="S",
                     help="with --rolling: the longest wait for a drained group's open requests (router_drain_timeout)")
    rep.add_argument("--on-drain-timeout", choices=rolling.ON_DRAIN_TIMEOUT, default=None,
                     help="with --rolling: when requests are still open at that bound, put the group back untouched "
                          "and count it failed (fail, the default) or reprovision it anyway, cutting them (continue)")
    rep.add_argument("--no-qualify", action="store_true", default=None,
                     help="with --rolling: do not run %s --limit <group> before draining each group (by default a "
                          "group that is not qualified is left in rotation untouched and counts as failed, without "
                          "holding a --max-unavailable slot)" % rolling.QUALIFY)

    rep.add_argument("--no-rollback", action="store_true", default=None,
                     help="with --rolling: a group that fails its proof with another image, model or revision than "
                          "its last proven ones (recorded in <state dir>/%s/) stays out of rotation; by default it is "
                          "reprovisioned again with the recorded ones, proven, put back, and the roll stops"
                          % proven.FOLDER)

    rep.add_argument("--ignore-supervisor", action="store_true",
                     help="run although a supervisor is installed (%s) with another state dir or user: stop "
                          "dspark-fleet-watch.service first (by default such a run is refused, exit 2, as its "
                          "locks and proven records would not be the supervisor's); recorded in the report"
                          % supervisor.DEFAULT_MARKER)

    stat = sub.add_parser("status", parents=[common], allow_abbrev=False,
                          help="playbooks/status.yml per group: every rank's container, image and the API, as one "
                               "table (and the supervisor's journal when there is one)")
    stat.add_argument("--journal", metavar="PATH", help="the supervisor's journal (default <state dir>/journal.jsonl)")
    stat.add_argument("--prometheus", metavar="URL", default=None,
                      help="the engine's numbers per group (requests running/waiting, KV cache, TTFT p95) from this "
                           "Prometheus' HTTP API, e.g. http://127.0.0.1:9090 (default $DSPARK_FLEET_PROMETHEUS; "
                           "without it, from each head's /metrics, TTFT p95 since the engine started)")
    stat.add_argument("--prometheus-window", metavar="DURATION", default="5m",
                      help="with Prometheus: the window of the TTFT p95 (rate over it, default 5m)")
    add_watch_parser(sub, common)
    sub.add_parser("qualify", parents=[common], allow_abbrev=False,
                   help="playbooks/qualify.yml per group, all groups at once unless --parallel is given (changes "
                        "nothing): each group qualified or not, every failing check with its fix",
                   description="Run playbooks/qualify.yml (it changes nothing) once per serving group with --limit "
                               "<group>, every selected group at the same time unless --parallel N is given. Each "
                               "host's qualify_result fact is reported: per group qualified, not qualified (a check "
                               "failed), unreachable or failed; the failing and warning checks with their fixes.",
                   epilog="Exit codes: 0 every group qualified, 1 a group not qualified, unreachable, failed or "
                          "not run, 2 bad usage or bad input.")
    acceptance.add_parser(sub, common, _int_at_least)
    bundle.add_parser(sub, common)
    return parser


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a number" % text) from None
    if value <= 0:
        raise argparse.ArgumentTypeError("%s is not above 0" % text)
    return value


def add_watch_parser(sub, common):
    wat = sub.add_parser("watch", parents=[common], allow_abbrev=False,
                         help="the supervisor: check every group (playbooks/verify.yml) each round; restart a broken "
                              "group as one unit, with backoff and a cap; journal every action")
    wat.add_argument("--interval", type=_positive_float, default=60.0, metavar="S", help="seconds between rounds (60)")
    wat.add_argument("--once", action="store_true", help="one round, then exit (0: every group serves)")
    wat.add_argument("--rounds", type=_int_at_least(0), default=0, metavar="N", help="stop after N rounds (0: never)")
    wat.add_argument("--max-restarts", type=_int_at_least(0), default=3, metavar="N",
                     help="restarts of a group within --window before it is marked failed (3)")
    wat.add_argument("--window", type=_positive_float, default=6.0, metavar="H", help="the cap's window in hours (6)")
    wat.add_argument("--backoff-base", type=_positive_float, default=30.0, metavar="S",
                     help="wait S, 2S, 4S ... after each restart that did not keep the group serving (30)")
    wat.add_argument("--backoff-max", type=_positive_float, default=3600.0, metavar="S", help="the longest wait (3600)")
    wat.add_argument("--journal", metavar="PATH", help="JSON-lines journal (default <state dir>/journal.jsonl)")
    wat.add_argument("--no-router", action="store_true",
                     help="leave the router (group %s) alone: do not take a broken group out of rotation"
                          % rolling.ROUTER_GROUP)
    wat.add_argument("--keep-rounds", type=_int_at_least(0), default=watch.KEEP_ROUNDS, metavar="N",
                     help="keep the artifacts of the newest N earlier rounds that left any (failed checks, restarts; "
                          "%d)" % watch.KEEP_ROUNDS)
    wat.add_argument("--keep-days", type=_positive_float, default=watch.KEEP_DAYS, metavar="D",
                     help="remove earlier rounds' artifacts older than D days (%g)" % watch.KEEP_DAYS)
    wat.epilog = ("Exit codes: 0 every group served at the last round, 1 a group did not, 2 bad usage or bad input, "
                  "%d refused to start: a path it runs or reads can be changed by someone other than root and the "
                  "user it runs as (one line per path, with the fix)" % trust.EXIT_UNTRUSTED)


def dispatch(args, argv, sel, opts, interrupts, prog):
    """The subcommand's exit code. Each gets the Selection and what else it reads; those that write report.json
    (reprovision, plan, status, qualify) the run's record too."""
    if args.subcommand == "watch":
        return watch.run(sel, args, interrupts, prog)
    if args.subcommand == "acceptance":
        return acceptance.command(sel, args, interrupts, prog)
    if args.subcommand == "bundle":
        return bundle.run(sel, args, interrupts, prog)
    record = run_record.start(sel, opts, argv)
    if args.subcommand == "reprovision":
        return reprovision.run(sel, opts, record, interrupts, prog)
    if args.subcommand == "plan":
        return inspection.plan(sel, opts.parallel, record, interrupts, prog)
    if args.subcommand == "status":
        return inspection.status(sel, opts.parallel, record, interrupts, prog, prometheus=args.prometheus,
                                 window=args.prometheus_window, journal_path=args.journal)
    return inspection.qualify_groups(sel, opts.parallel, record, interrupts, prog)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # usage errors (2), --help and --version (0)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    # A supervisor installed with another state dir (or user): its locks and proven records would not be shared.
    refusal = supervisor.check(args.subcommand, locks.state_dir(args.state_dir),
                               ignore=getattr(args, "ignore_supervisor", False))
    if refusal is not None:
        print("dspark-fleet: error: %s" % refusal, file=sys.stderr)
        return EXIT_USAGE
    if getattr(args, "ignore_supervisor", False):
        print("dspark-fleet: --ignore-supervisor: any supervisor (%s) is not consulted; stop it first" % (
            supervisor.marker_path()), file=sys.stderr)
    try:
        if args.subcommand == "watch":     # before anything runs, ansible-inventory included
            refused = watch.trust_gate(args, os.path.abspath(args.project_dir) if args.project_dir
                                       else selection.default_project_dir())
            if refused is not None:
                return refused
        sel, opts = selection.select(args, argv)
        selection.prepare_artifacts(sel)
    except selection.UsageError as exc:
        print("dspark-fleet: error: %s" % exc, file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("dspark-fleet: interrupted before anything ran", file=sys.stderr)
        return EXIT_FAILED
    interrupts = Interrupts()
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.getsignal(signum)
    interrupts.install()
    prog = progress.make(sys.stderr, force_plain=args.plain)
    prog.message("dspark-fleet %s: %d group(s) of %s; artifacts in %s" % (
        args.subcommand, len(sel.groups), sel.inventory, sel.artifacts))
    try:
        return dispatch(args, argv, sel, opts, interrupts, prog)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
