"""dspark-fleet: plan, reprovision, status, watch, qualify, acceptance and bundle over the serving groups of one inventory.

qualify runs playbooks/qualify.yml (changes nothing) per group, every group at once by default, and reports
each group qualified or not with the failing checks and their fixes (qualify.py).

reprovision --rolling runs the same playbook per group before draining it (unless --no-qualify): a group that
is not qualified is never drained nor touched, stays in rotation and counts as failed (rolling.py).

Exit codes: 0 every group converged (skipped by --resume counts as converged) / is ok / is qualified; 1 a group
failed, was cancelled, did not start, or (qualify) is not qualified or unreachable; 2 bad usage or bad input
(unknown group pattern, unreadable inventory or --resume report, a playbook missing under --project-dir, the
global validation failed).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from datetime import datetime, timezone

from . import __version__, fingerprint, inventory, locks, progress, qualify, report, resume, rolling, router_step, runner_exec
from . import acceptance, metrics, proven, supervisor, trust
from . import watch
from . import bundle
from .orchestrator import Fleet, GroupRun, default_judge
from .scheduler import CANCELLED, CONVERGED, FAILED, NOT_STARTED, OK, RUNNING, SKIPPED, SUCCESS, Scheduler

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

PLAYBOOKS = {"plan": "site.yml", "reprovision": "site.yml", "status": "playbooks/status.yml",
             "watch": watch.VERIFY, "qualify": "playbooks/qualify.yml", "acceptance": "site.yml",
             "bundle": bundle.PLAYBOOK}
PREFLIGHT = "playbooks/preflight.yml"
# JSON, not key=value: `-e key=false` is the string "false", which ansible-core 2.19 refuses as a conditional.
PREFLIGHT_VARS = '{"preflight_check_reachability": false}'


class UsageError(Exception):
    """Bad usage or bad input: exit 2."""


# --------------------------------------------------------------------------- arguments


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


# --------------------------------------------------------------------------- context


def default_project_dir():
    """The repository this package lives in (tools/dspark-fleet/dspark_fleet/ -> ../../..), else the cwd."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.abspath(os.path.join(here, "..", "..", ".."))
    for candidate in (repo, os.getcwd()):
        if os.path.isfile(os.path.join(candidate, "site.yml")):
            return candidate
    raise UsageError("cannot find the collection checkout (site.yml): pass --project-dir")


def utc_stamp(now=None):
    return datetime.fromtimestamp(now or time.time(), timezone.utc).strftime("%Y%m%dT%H%M%SZ")


class Context:
    """Everything a subcommand needs, checked before anything runs (UsageError on bad input)."""

    def __init__(self, args, argv):
        self.args = args
        self.subcommand = args.subcommand
        self.started = time.time()
        self.project_dir = os.path.abspath(args.project_dir) if args.project_dir else default_project_dir()
        needed = ["ansible.cfg", PLAYBOOKS[self.subcommand]] + ([PREFLIGHT] if self.subcommand == "reprovision" else [])
        for rel in needed:
            if not os.path.isfile(os.path.join(self.project_dir, rel)):
                raise UsageError("%s has no %s (is --project-dir the collection checkout?)" % (self.project_dir, rel))
        self.env_add = runner_exec.ansible_env(self.project_dir)
        if args.vault_password_file:    # the path only, for ansible-inventory, the runs and hostvars.py
            self.env_add[watch.VAULT_ENV] = os.path.abspath(args.vault_password_file)
        self.previous = None
        if getattr(args, "resume", None):
            try:
                self.previous = resume.load_previous(args.resume)
            except resume.ResumeError as exc:
                raise UsageError(str(exc)) from None
        try:
            self.inventory = inventory.inventory_path(args.inventory)
            env = dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_FAILED="True", **self.env_add)
            data = inventory.list_inventory(self.inventory, self.project_dir, env,
                                            executable=runner_exec.tool("ansible-inventory"))
            self.inv = inventory.Inventory(data, project_dir=self.project_dir)
            self.patterns = inventory.split_patterns(args.groups)
            self.groups = self.inv.select(self.patterns)
        except inventory.InventoryError as exc:
            raise UsageError(str(exc)) from None
        if self.subcommand == "qualify" and not any(a == "--parallel" or a.startswith("--parallel=") for a in argv):
            args.parallel = max(1, len(self.groups))     # qualify changes nothing: every group at once
        try:
            self.extra_digest = fingerprint.extra_vars_digest(args.extra_vars)
        except fingerprint.ExtraVarsError as exc:
            raise UsageError(str(exc)) from None
        self.tags = getattr(args, "tags", None)
        self.extra_vars = tuple(args.extra_vars)
        self.state_dir = locks.state_dir(args.state_dir)
        self.routers = self.inv.hosts_of(rolling.ROUTER_GROUP)
        # reprovision: the image and revision each group's run uses, and where the proven ones are recorded.
        self.store = proven.Store(locks.state_dir(args.state_dir)) if self.subcommand == "reprovision" else None
        self.configs = (dict((g, proven.config_of(self.inv, g, args.extra_vars)) for g in self.groups)
                        if self.store is not None else {})
        self.rolling = self._rolling_runner(args, argv)
        self.code = fingerprint.code_digest(self.project_dir)
        self.fingerprints = dict(
            (g, fingerprint.group_fingerprint(g, self.inv.member_vars(g), self.extra_digest, self.tags, self.code))
            for g in self.groups)
        artifacts = args.artifacts or os.path.join(locks.state_dir(args.state_dir), utc_stamp(self.started))
        self.artifacts = os.path.abspath(artifacts)
        if os.path.isdir(self.artifacts) and os.listdir(self.artifacts):
            raise UsageError("the artifacts directory %s is not empty: choose another --artifacts" % self.artifacts)
        if os.path.exists(self.artifacts) and not os.path.isdir(self.artifacts):
            raise UsageError("--artifacts %s is not a directory" % self.artifacts)
        self.report_path = os.path.abspath(args.report) if args.report else os.path.join(self.artifacts, "report.json")
        self.command = {
            "subcommand": self.subcommand,
            "argv": ["dspark-fleet"] + redacted_argv(argv),
            "playbook": PLAYBOOKS[self.subcommand],
            "options": {
                "groups": self.patterns,
                "parallel": args.parallel,
                "canary": getattr(args, "canary", None),
                "max_failed": getattr(args, "max_failed", None),
                "tags": self.tags,
                "check": self.subcommand == "plan",
                "resume": os.path.abspath(args.resume) if getattr(args, "resume", None) else None,
                "rolling": self.rolling is not None,
                "max_unavailable": self.max_unavailable,
                "qualify_before_drain": (self.rolling.qualify_first if self.rolling is not None else None),
                "rollback": (self.rolling.rollback_enabled if self.rolling is not None else None),
                "ignore_supervisor": bool(getattr(args, "ignore_supervisor", False)),
            },
            "extra_vars": {"count": len(args.extra_vars), "sha256": self.extra_digest},
        }
        self.private_dir = None
        self.meta = {"command": self.command, "inventory": self.inventory, "project_dir": self.project_dir,
                     "code_sha256": self.code, "artifacts_dir": self.artifacts, "started": self.started,
                     "finished": None, "interrupted": False, "stop_reason": None, "preflight": None}

    def _rolling_runner(self, args, argv):
        """The RollingRunner of --rolling (None without it), after checking the options against the inventory."""
        self.max_unavailable = None
        if not getattr(args, "rolling", False):
            given = [o for o in ("--max-unavailable", "--drain-timeout", "--on-drain-timeout", "--no-qualify",
                                 "--no-rollback")
                     if getattr(args, o[2:].replace("-", "_"), None) is not None]
            if given:
                raise UsageError("%s only apply with --rolling" % ", ".join(given))
            return None
        if any(a == "--parallel" or a.startswith("--parallel=") for a in argv):
            raise UsageError("--rolling takes its parallelism from --max-unavailable, not --parallel")
        routers = self.inv.hosts_of(rolling.ROUTER_GROUP)
        if not routers:
            raise UsageError("--rolling needs the router: the inventory has no host in group %s (playbooks/router.yml "
                             "sets it up); without it, reprovision without --rolling" % rolling.ROUTER_GROUP)
        groups = self.inv.groups
        if len(groups) < 2:
            raise UsageError("--rolling needs at least two serving groups behind the router, the inventory has one "
                             "(%s): reprovision it without --rolling (it will stop serving)" % groups[0])
        self.max_unavailable = args.max_unavailable or 1
        if self.max_unavailable >= len(groups):
            raise UsageError("--max-unavailable %d would leave no group in rotation: the router serves %d group(s) "
                             "(%s). Use at most %d" % (self.max_unavailable, len(groups), ", ".join(groups),
                                                       len(groups) - 1))
        qualify_first = not args.no_qualify
        if qualify_first and not os.path.isfile(os.path.join(self.project_dir, rolling.QUALIFY)):
            raise UsageError("%s has no %s, which --rolling runs before draining each group (--no-qualify skips it)"
                             % (self.project_dir, rolling.QUALIFY))
        return rolling.RollingRunner(runner_exec.run_playbook, self.project_dir, extra_vars=args.extra_vars,
                                     drain_timeout=args.drain_timeout,
                                     on_drain_timeout=args.on_drain_timeout or "fail",
                                     qualify=qualify_first, members=self.members, store=self.store,
                                     configs=self.configs, rollback=not args.no_rollback, tags=self.tags)

    def prepare_artifacts(self):
        try:
            self.private_dir = runner_exec.prepare(self.artifacts)
        except OSError as exc:
            raise UsageError("cannot create the artifacts directory %s: %s" % (self.artifacts, exc)) from None

    def playbook_args(self):
        args = []
        if self.subcommand == "plan":
            args += ["--check", "--diff"]
        if self.tags:
            args += ["--tags", self.tags]
        for value in self.args.extra_vars:
            args += ["-e", value]
        return args

    def spec(self, ident, folder, playbook, limit, args):
        return runner_exec.RunSpec(
            ident=ident, playbook=os.path.join(self.project_dir, playbook), inventory=self.inventory,
            project_dir=self.project_dir, artifacts_dir=folder, private_dir=self.private_dir, limit=limit,
            args=args, envvars=self.env_add)

    def members(self, group):
        out = []
        for host in self.inv.ordered_members(group):
            out.append({"host": host, "rank": self.inv.rank(host)})
        return out

    members_of = members

    def extra_args(self):
        args = []
        for value in self.extra_vars:
            args += ["-e", value]
        return args


# --------------------------------------------------------------------------- signals


class Interrupts:
    """SIGINT/SIGTERM: the first stops the fleet gracefully, the second stops waiting. Never raises."""

    def __init__(self):
        self.count = 0
        self.fleet = None
        self.signal_name = None

    def handler(self, signum, frame):  # pylint: disable=unused-argument
        self.count += 1
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name
        if self.fleet is not None:
            if self.count == 1:
                self.fleet.request_stop("interrupted by %s" % self.signal_name)
            else:
                self.fleet.request_abandon()

    def install(self):
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self.handler)

    @property
    def reason(self):
        return "interrupted by %s" % self.signal_name if self.count else None


# --------------------------------------------------------------------------- building the report


def group_entries(ctx, runs, skips=None, skip_previous=None):
    skips = skips or {}
    entries = {}
    qualifying = ctx.subcommand == "qualify"
    for group in ctx.groups:
        common = {"fingerprint": ctx.fingerprints[group], "members": ctx.members(group),
                  "model": ctx.inv.head_var(group, "dspark_model"),
                  "revision": ctx.inv.head_var(group, "dspark_model_revision")}
        if group in skips:
            entries[group] = report.group_entry(group, SKIPPED, skip_reason=skips[group],
                                                previous=(skip_previous or {}).get(group), **common)
            continue
        run = runs.get(group)
        if run is None or run.started is None:
            entries[group] = report.group_entry(group, NOT_STARTED, **common)
            if qualifying:
                entries[group]["qualify"] = qualify.section(entries[group], None)
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
                    error = "cancelled (%s)" % (ctx.meta.get("stop_reason") or "stopped")
            rotation = ctx.rolling.rotation.get(group) if ctx.rolling is not None else None
            entries[group] = report.group_entry(
                group, result, events=run.events, started=run.started, finished=run.finished, rotation=rotation,
                runner=({"status": run.run_result.status, "rc": run.run_result.rc} if run.run_result else None),
                logs={"artifacts_dir": run.spec.artifact_dir, "stdout": run.spec.stdout_path},
                memory_kib=run.memory_kib, error=error, **common)
            if qualifying:
                entries[group]["qualify"] = qualify.section(entries[group], run.events)
            elif ctx.rolling is not None:
                _rolling_qualify(ctx.rolling, group, entries[group], error)
                if ctx.rolling.rollback_view(group) is not None:
                    entries[group]["rollback"] = dict(ctx.rolling.rollback_view(group))
    return entries


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


def exit_code_for(entries):
    return EXIT_OK if all(e["result"] in SUCCESS for e in entries.values()) else EXIT_FAILED


def write_report(ctx, entries, exit_code, complete=True, quiet=False):
    doc = report.build(ctx.meta, entries, exit_code, complete=complete)
    try:
        return report.write(doc, ctx.report_path)
    except OSError as exc:
        if not quiet:
            print("dspark-fleet: cannot write the report %s: %s" % (ctx.report_path, exc), file=sys.stderr)
        return None


# --------------------------------------------------------------------------- running


def run_groups(ctx, groups, interrupts, prog, success, playbook, scheduler, skips=None, skip_previous=None,
               runner=None):
    """One run per group through `scheduler`; interim reports after each group."""
    folder = os.path.join(ctx.artifacts, "groups")
    runs = dict((g, GroupRun(g, ctx.spec(g, folder, playbook, g, ctx.playbook_args()))) for g in groups)

    def stop_reason(fleet):
        return fleet.stop_reason or (scheduler.blocked() if scheduler.not_started() else None)

    def interim(fleet):
        ctx.meta["stop_reason"] = stop_reason(fleet)
        write_report(ctx, group_entries(ctx, runs, skips, skip_previous), None, complete=False, quiet=True)

    fleet = Fleet(runs, scheduler, prog, judge=default_judge(success), on_finish=interim, runner=runner)
    interrupts.fleet = fleet
    if interrupts.count:
        fleet.request_stop(interrupts.reason)
    fleet.run()
    interrupts.fleet = None
    ctx.meta["stop_reason"] = stop_reason(fleet)
    ctx.meta["interrupted"] = bool(interrupts.count)
    return runs


def run_preflight(ctx, interrupts, prog):
    """The one global validation: preflight.yml over every selected group, no node contacted."""
    args = []
    for value in ctx.args.extra_vars:
        args += ["-e", value]
    args += ["-e", PREFLIGHT_VARS]
    spec = ctx.spec("preflight", ctx.artifacts, PREFLIGHT, ",".join(ctx.groups), args)
    runs = {"preflight": GroupRun("preflight", spec)}
    fleet = Fleet(runs, Scheduler(["preflight"]), prog, judge=default_judge(OK))
    interrupts.fleet = fleet
    if interrupts.count:
        fleet.request_stop(interrupts.reason)
    fleet.run()
    interrupts.fleet = None
    run = runs["preflight"]
    failure = run.events.failure_view()
    msg = None
    if run.result == FAILED:
        if failure and failure["failed_tasks"]:
            msg = "; ".join("%s: %s" % (t["host"], t["msg"]) for t in failure["failed_tasks"])
        else:
            msg = (run.run_result.error if run.run_result else None) or runner_exec.stdout_tail(spec.stdout_path)
    ctx.meta["preflight"] = {"result": run.result, "msg": msg, "artifacts_dir": spec.artifact_dir,
                             "stdout": spec.stdout_path,
                             "duration_s": (round(run.finished - run.started, 3)
                                            if run.finished and run.started else None)}
    return run.result, msg


def finish(ctx, entries, code, summary=None):
    ctx.meta["finished"] = time.time()
    paths = write_report(ctx, entries, code)
    (summary or print_summary)(ctx, entries)
    if paths:
        print("Report: %s (Markdown: %s)" % paths)
    print("Artifacts (each run's full Ansible output is <dir>/stdout): %s" % ctx.artifacts)
    if paths is None and code == EXIT_OK:
        return EXIT_FAILED
    return code


def print_summary(ctx, entries):
    counts = report.totals(entries)
    parts = ", ".join("%s %d" % (k.replace("_", " "), v) for k, v in counts.items() if k != "groups" and v)
    print("")
    print("%s: %d group(s): %s" % (ctx.subcommand, counts["groups"], parts or "none"))
    if ctx.meta.get("stop_reason"):
        print("Stopped early: %s" % ctx.meta["stop_reason"])
    if ctx.meta.get("router"):
        print(router_step.line(ctx.meta["router"]))
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


def print_plan(entries):
    for name, entry in entries.items():
        changes = [(key, t) for key, phase in entry["phases"].items() for t in phase["changed_tasks"]]
        print("")
        print("%s: %s, %d task(s) would change" % (name, entry["result"], len(changes)))
        for key, task in changes:
            print("  %-14s %s (%s)" % (key, task["task"], ", ".join(task["hosts"])))


def print_status(entries):
    """One table: a row per member (its serve_status, or why there is none), serving on the head's row; then the
    engine's numbers per group (metrics.py) when cmd_status attached them."""
    header = ["group", "node", "rank", "container", "restarts", "image", "API models", "serving"]
    rows = []
    for name, entry in entries.items():
        status = entry.get("status") or {"serving": None, "ranks": []}
        serving = {True: "yes", False: "no", None: "unknown"}[status.get("serving")]
        if entry["result"] == FAILED and status.get("serving") is None:
            serving = "no"
        noted = dict((r["host"], r) for r in status["ranks"])
        failed = (entry.get("failure") or {}).get("failed_tasks") or []
        unreachable = set(t["host"] for t in failed if t.get("unreachable"))
        failed_hosts = set(t["host"] for t in failed)
        for member in entry["members"]:
            rank = noted.get(member["host"])
            if rank is None:
                state = ("unreachable" if member["host"] in unreachable else "failed" if member["host"] in failed_hosts
                         else entry["result"] if entry["result"] in (CANCELLED, NOT_STARTED) else "unknown")
                rank = {"host": member["host"], "rank": member["rank"], "state": state, "restarts": None,
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


def cmd_reprovision(ctx, interrupts, prog):
    skips, skip_previous = {}, {}
    if ctx.previous is not None:
        decisions = resume.decide(ctx.previous, ctx.fingerprints)
        for group, (skip, reason) in decisions.items():
            if skip:
                skips[group] = reason
                before = ctx.previous["groups"][group]
                skip_previous[group] = {"report": ctx.command["options"]["resume"], "result": before.get("result"),
                                        "finished": before.get("finished"), "image_id": before.get("image_id")}
            prog.message("%s: %s (%s)" % (group, "skip" if skip else "redo", reason))
    to_run = [g for g in ctx.groups if g not in skips]
    if to_run:
        prog.message("validating the inventory once for %d group(s): %s" % (len(ctx.groups), PREFLIGHT))
        result, msg = run_preflight(ctx, interrupts, prog)
        if result != OK:
            entries = group_entries(ctx, {}, skips, skip_previous)
            if result == FAILED:
                ctx.meta["stop_reason"] = "the global validation (%s) failed" % PREFLIGHT
                ctx.meta["finished"] = time.time()
                write_report(ctx, entries, EXIT_USAGE)
                print("dspark-fleet: the global validation failed, nothing was changed:\n%s" % msg, file=sys.stderr)
                print("Log: %s" % ctx.meta["preflight"]["stdout"], file=sys.stderr)
                print("Report: %s" % ctx.report_path, file=sys.stderr)
                return EXIT_USAGE
            ctx.meta["stop_reason"] = interrupts.reason or "the global validation was %s" % result
            ctx.meta["interrupted"] = bool(interrupts.count)
            return finish(ctx, entries, EXIT_FAILED)
    # Rolling: the router's configuration first, so that every group of the inventory has its server to drain (a new
    # group's is down until it serves) and removed groups are gone; nothing is drained when that fails.
    if ctx.rolling is not None and to_run and converge_router(ctx, interrupts, prog) != CONVERGED:
        ctx.meta["stop_reason"] = ctx.meta.get("stop_reason") or (
            "the router's configuration (%s) failed before the roll: no group was drained" % router_step.PLAYBOOK)
        return finish(ctx, group_entries(ctx, {}, skips, skip_previous), EXIT_FAILED)
    # Rolling: --max-unavailable is the parallelism, and a failed group (left out of rotation) keeps its slot.
    # A group left in rotation because it was not qualified holds no slot.
    if ctx.rolling is not None:
        scheduler = rolling.RollingScheduler(to_run, parallel=ctx.max_unavailable, canary=ctx.args.canary,
                                             max_failed=ctx.args.max_failed, in_rotation=ctx.rolling.in_rotation,
                                             roll_stopped=ctx.rolling.roll_stopped)
        prog.message("rolling through the router: at most %d group(s) out of rotation at once%s" % (
            ctx.max_unavailable, ", each qualified first (%s)" % rolling.QUALIFY if ctx.rolling.qualify_first
            else ""))
    else:
        scheduler = Scheduler(to_run, parallel=ctx.args.parallel, canary=ctx.args.canary,
                              max_failed=ctx.args.max_failed)
    # Each group's run holds the group's lock (shared with `watch`), waiting while the supervisor holds it.
    # A group proven by site.yml has its image and revision recorded (the rolling runner records its own).
    plain = proven.recording_runner(ctx.store, ctx.configs, runner_exec.run_playbook, on_error=lambda g, exc: (
        prog.message("%s: its proven image and revision could not be recorded: %s" % (g, exc))))
    guarded = locks.locked_runner(locks.state_dir(ctx.args.state_dir), ctx.rolling or plain,
                                  "reprovision",
                                  on_wait=lambda g, h: prog.message("%s: waiting for its lock (%s)" % (
                                      g, locks.describe(h))))
    runs = run_groups(ctx, to_run, interrupts, prog, CONVERGED, PLAYBOOKS["reprovision"], scheduler, skips,
                      skip_previous, runner=guarded)
    entries = group_entries(ctx, runs, skips, skip_previous)
    code = exit_code_for(entries)
    if ctx.rolling is None and converge_router(ctx, interrupts, prog) == FAILED:
        code = EXIT_FAILED
    return finish(ctx, entries, code)


def converge_router(ctx, interrupts, prog):
    """playbooks/router.yml when the run speaks for the whole fleet (router_step.decide): after the groups, or before
    the roll with --rolling; its section goes into the report. Returns its result (converged, failed, cancelled or
    skipped)."""
    routers = ctx.inv.hosts_of(router_step.GROUP)
    stopped = ctx.meta.get("stop_reason") or interrupts.reason or False
    run, reason = router_step.decide(ctx.subcommand, routers, ctx.groups, ctx.inv.groups, ctx.rolling is not None,
                                     ctx.tags, stopped)
    ctx.meta["router"] = (router_step.converge(ctx, interrupts, prog, routers, reason) if run
                          else router_step.skipped(reason))
    return ctx.meta["router"]["result"]


def cmd_plan(ctx, interrupts, prog):
    scheduler = Scheduler(ctx.groups, parallel=ctx.args.parallel)
    runs = run_groups(ctx, ctx.groups, interrupts, prog, OK, PLAYBOOKS["plan"], scheduler)
    entries = group_entries(ctx, runs)
    print_plan(entries)
    return finish(ctx, entries, exit_code_for(entries))


def cmd_status(ctx, interrupts, prog):
    prometheus = ctx.args.prometheus or os.environ.get(metrics.PROMETHEUS_ENV) or None
    try:
        prometheus = metrics.check_url(prometheus) if prometheus else None
        window = metrics.check_window(ctx.args.prometheus_window)
    except ValueError as exc:
        print("dspark-fleet: error: %s" % exc, file=sys.stderr)
        return EXIT_USAGE
    scheduler = Scheduler(ctx.groups, parallel=ctx.args.parallel)
    runs = run_groups(ctx, ctx.groups, interrupts, prog, OK, PLAYBOOKS["status"], scheduler)
    entries = group_entries(ctx, runs)
    if prometheus:
        prog.message("asking Prometheus %s for the engine's numbers (window %s)" % (prometheus, window))
    metrics.attach(entries, runs, prometheus=prometheus, window=window, project_dir=ctx.project_dir)
    print_status(entries)
    watch.print_journal_summary(ctx.groups, ctx.args.journal or watch.journal_mod.default_path(
        locks.state_dir(ctx.args.state_dir)))
    return finish(ctx, entries, exit_code_for(entries))


def cmd_watch(ctx, interrupts, prog):
    return watch.run(ctx, ctx.args, interrupts, prog)


def cmd_qualify(ctx, interrupts, prog):
    """qualify.yml per group (no preflight, no group lock: it changes nothing); the verdicts come from the facts."""
    scheduler = Scheduler(ctx.groups, parallel=ctx.args.parallel)
    runs = run_groups(ctx, ctx.groups, interrupts, prog, OK, PLAYBOOKS["qualify"], scheduler)
    entries = group_entries(ctx, runs)
    return finish(ctx, entries, qualify.exit_code(entries),
                  summary=lambda c, e: qualify.print_summary(e, c.meta.get("stop_reason")))


def cmd_bundle(ctx, interrupts, prog):
    return bundle.run(ctx, ctx.args, interrupts, prog)


def cmd_acceptance(ctx, interrupts, prog):
    return acceptance.command(ctx, ctx.args, interrupts, prog)


COMMANDS = {"plan": cmd_plan, "reprovision": cmd_reprovision, "status": cmd_status, "watch": cmd_watch,
            "qualify": cmd_qualify, "acceptance": cmd_acceptance, "bundle": cmd_bundle}


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
                                       else default_project_dir())
            if refused is not None:
                return refused
        ctx = Context(args, argv)
        ctx.prepare_artifacts()
    except UsageError as exc:
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
        ctx.subcommand, len(ctx.groups), ctx.inventory, ctx.artifacts))
    try:
        return COMMANDS[ctx.subcommand](ctx, interrupts, prog)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
