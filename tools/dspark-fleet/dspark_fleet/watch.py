"""`dspark-fleet watch`: the supervisor. Every round:

1. take each serving group's lock (locks.py; held by `reprovision` while it runs the group): a group whose lock is
   held is journaled `locked` and left alone this round;
2. check every group it holds with ONE run of playbooks/verify.yml (--limit of those groups; dspark.cluster.tp_ranks
   on each head with a short timeout: every rank registered, the API generates, no wedge; nothing is started or
   stopped), its events split per group by host (events.SplitEvents) and judged per group (`judge_group()`): one
   group's failure never marks another broken. Each group's `check` is journaled as before; a serving group's lock
   is released at once;
3. a broken group goes on in its own thread (at most --parallel at once): `decide()` (pure) says what to do from the
   journal's history of the group: restart now, wait (exponential backoff), give up (the cap: at most N restarts in
   a window), or nothing (already failed);
4. a restart first collects every rank's logs (playbooks/logs.yml --limit <group>), then restarts the group
   as one unit by the normal start path (playbooks/serve.yml --limit <group> -e serve_force_restart=true);
   a start that fails with the memory guard's "needs a reboot" is never retried;
5. with a router (inventory group dspark_router, unless --no-router), a broken group is first taken out of
   rotation (playbooks/router_drain.yml, no wait: its requests are not being served anyway), and put back
   (playbooks/router_enable.yml) once it serves again. Only a group the supervisor drained is put back: a
   group drained by hand stays as it is.

Every action goes to the journal (journal.py); the state of each group is rebuilt from the journal at start,
so a restarted service keeps counting restarts and backoff.

Before anything runs, `trust_gate()` refuses to start (exit 3) when the checkout, the venv, the inventory or the
vault password file can be changed by anyone but root and the service user (trust.py). Before each round the
artifacts of earlier rounds (a passing check leaves none; a failed one its logs) are pruned by count and age
(`prune_plan()`, pure), the running round's never.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass

from . import journal as journal_mod
from . import locks, rolling, runner_exec, trust
from .events import GroupEvents, SplitEvents

VERIFY = "playbooks/verify.yml"
SERVE = "playbooks/serve.yml"
LOGS = "playbooks/logs.yml"
FORCE_RESTART = '{"serve_force_restart": true}'
NEEDS_REBOOT = "needs a reboot"

OK, RESTART, BACKOFF, GIVE_UP, FAILED, RECOVERED = "ok", "restart", "backoff", "give_up", "failed", "recovered"

# A watch's artifacts directory carries this file; only such directories (this one and its siblings) are pruned.
MARKER = ".dspark-fleet-watch"
ROUND_RE = re.compile(r"^round\d{5,}$")
KEEP_ROUNDS = 50
KEEP_DAYS = 14.0
VAULT_ENV = "ANSIBLE_VAULT_PASSWORD_FILE"
# The round's one check run lives in <round>/CHECK_DIR/check (a name no inventory group can have: '-' is not allowed).
CHECK_DIR = "all-groups"


@dataclass
class Policy:
    max_restarts: int = 3
    window_s: float = 6 * 3600.0
    backoff_base_s: float = 30.0
    backoff_max_s: float = 3600.0


# --------------------------------------------------------------------------- pure decisions


def restarts_in_window(restarts, now, window_s):
    return [t for t in restarts if t is not None and now - t < window_s]


def backoff_delay(attempts, policy):
    """Seconds to wait after the `attempts`-th restart (since the group last served) before the next one."""
    if attempts <= 0:
        return 0.0
    return min(policy.backoff_max_s, policy.backoff_base_s * (2 ** (attempts - 1)))


def decide(check_ok, state, now, policy):
    """(action, detail) for one group after a check; `state` is journal.new_state()/fold()'s.

    ok / recovered when the check passed; failed when the group is marked failed (no restart until it serves
    again, e.g. after a reprovision); give_up when the cap is reached; backoff until the next restart is due;
    restart otherwise.
    """
    if check_ok:
        return (RECOVERED, "serves again") if state.get("failed") else (OK, None)
    if state.get("failed"):
        return FAILED, state["failed"].get("reason")
    recent = restarts_in_window(state.get("restarts") or [], now, policy.window_s)
    if len(recent) >= policy.max_restarts:
        return GIVE_UP, "%d restart(s) in the last %s (cap %d) did not bring it back" % (
            len(recent), hours(policy.window_s), policy.max_restarts)
    attempts = state.get("attempts") or 0
    if attempts and state.get("restarts"):
        due = state["restarts"][-1] + backoff_delay(attempts, policy)
        if now < due:
            return BACKOFF, due
    return RESTART, len(recent) + 1


def hours(seconds):
    value = seconds / 3600.0
    return ("%g h" % round(value, 2)) if value >= 1 else "%g s" % round(seconds, 1)


def needs_reboot(summary, failures):
    texts = [summary or ""] + [t.get("msg") or "" for t in (failures or [])]
    return any(NEEDS_REBOOT in text for text in texts)


def judge_run(run_result, events):
    """One playbook run -> {ok, summary, diagnosis, failed_tasks}."""
    failure = events.failure_view()
    status = run_result.status if run_result else "error"
    proof = events.tp_ranks
    # A rescued failure (verify.yml's status assert) does not decide: tp_ranks' proof does.
    standing = [t for t in (failure or {}).get("failed_tasks", []) if not t.get("rescued")]
    tp_failed = bool(failure and failure.get("tp_ranks"))
    ok = status == "successful" and not standing and not tp_failed and (proof is None or proof.get("ok"))
    out = {"ok": bool(ok), "summary": None, "diagnosis": None, "failed_tasks": []}
    if ok:
        return out
    if failure:
        out["summary"] = failure["summary"]
        out["failed_tasks"] = [dict((k, t.get(k)) for k in ("task", "host", "msg", "unreachable"))
                               for t in failure["failed_tasks"] if not t.get("rescued")]
        if failure.get("tp_ranks"):
            out["diagnosis"] = failure["tp_ranks"].get("diagnosis")
    else:
        out["summary"] = (run_result.error if run_result and run_result.error else
                          "ansible-playbook ended with status %s (rc %s)" % (status, run_result.rc if run_result else None))
    return out


def judge_group(run_result, events):
    """judge_run() for one group of a run over several (`events`: that group's fold, SplitEvents). A run that failed
    does not decide for a group whose own proof passed and whose hosts failed nothing (another group failed it); a
    group without a proof of its own in a failed run stays broken (the run may have stopped before its head)."""
    status = run_result.status if run_result else "error"
    if status == "failed" and events.tp_ranks and events.tp_ranks.get("ok"):
        failure = events.failure_view()
        if not failure or all(t.get("rescued") for t in failure["failed_tasks"]):
            return judge_run(runner_exec.RunResult(status="successful", rc=0), events)
    return judge_run(run_result, events)


def host_groups(members, groups):
    """host -> group for the members of `groups` (`members`: {group: [host]}, the inventory's)."""
    members = members or {}
    out = {}
    for group in groups:
        for host in members.get(group) or []:
            out.setdefault(host, group)
    return out


def prune_plan(rounds, keep, max_age_s, now, running=None):
    """Which round directories to remove: [(path, mtime)] -> [path]. The newest `keep` that are younger than
    `max_age_s` stay; `running` (the round in progress, or about to start) always stays and is not counted."""
    ordered = sorted((r for r in rounds if r[0] != running), key=lambda r: (r[1], r[0]), reverse=True)
    remove = []
    for index, (path, mtime) in enumerate(ordered):
        if index >= keep or now - mtime > max_age_s:
            remove.append(path)
    return remove


def round_dirs(parent, running_artifacts):
    """[(round dir, mtime)] of every watch artifacts dir under `parent` (the ones with the MARKER file, and the
    running one), and the list of those artifacts dirs."""
    found, dirs = [], []
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return found, dirs
    for name in names:
        folder = os.path.join(parent, name)
        if folder != running_artifacts and not os.path.isfile(os.path.join(folder, MARKER)):
            continue
        dirs.append(folder)
        try:
            entries = sorted(os.listdir(folder))
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(folder, entry)
            if ROUND_RE.match(entry) and os.path.isdir(path) and not os.path.islink(path):
                try:
                    found.append((path, os.lstat(path).st_mtime))
                except OSError:
                    continue
    return found, dirs


def prune(artifacts, keep, max_age_s, now, running=None):
    """Remove the rounds prune_plan() names, then earlier watch artifacts dirs left without a round. The paths
    removed."""
    parent = os.path.dirname(artifacts)
    rounds, dirs = round_dirs(parent, artifacts)
    removed = prune_plan(rounds, keep, max_age_s, now, running)
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    gone = set(removed)
    left = set(os.path.dirname(p) for p, _mtime in rounds if p not in gone)
    for folder in dirs:
        if folder != artifacts and folder not in left and not _marker_alive(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _marker_alive(folder):
    """Whether the watch that wrote `folder`'s marker still runs (then its dir stays, even without a round)."""
    try:
        with open(os.path.join(folder, MARKER), encoding="utf-8") as handle:
            pid = int(json.load(handle)["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def tidy(folder):
    """Remove the empty group folders of a finished round and the round itself when it is empty."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        try:
            os.rmdir(os.path.join(folder, name))
        except OSError:
            pass
    try:
        os.rmdir(folder)
    except OSError:
        pass


# --------------------------------------------------------------------------- the supervisor


class Stopper:
    """What the CLI's signal handler drives (it calls request_stop / request_abandon)."""

    def __init__(self):
        self.event = threading.Event()
        self.stop_reason = None

    def request_stop(self, reason="interrupted"):
        if self.stop_reason is None:
            self.stop_reason = reason
        self.event.set()

    def request_abandon(self):
        self.request_stop()


def uses_router(no_router, routers):
    """Whether a broken group is drained at the router: there is one and --no-router was not given."""
    return not no_router and bool(routers)


class Watch:
    """The supervisor's rounds over `groups`. `spec(ident, folder, playbook, limit, args)` makes a RunSpec of the
    project; `extra_vars`: -e as given; `members`: {group: [host]} (the round's check splits its events by them);
    `router`: drain and enable broken groups (uses_router); `parallel`: broken groups followed up at once; `keep`:
    (rounds, days) of earlier rounds' artifacts under `artifacts`."""

    def __init__(self, groups, spec, artifacts, policy, journal, state_dir, say, extra_vars=(), members=None,
                 router=False, parallel=1, keep=(KEEP_ROUNDS, KEEP_DAYS), runner=None, clock=time.time,
                 keep_ok=False):
        self.groups = list(groups)
        self.spec = spec
        self.artifacts = artifacts
        self.extra_vars = list(extra_vars)
        self.members = members
        self.parallel = parallel
        self.keep = keep
        self.policy = policy
        self.journal = journal
        self.state_dir = state_dir
        self.say = say
        self.runner = runner or runner_exec.run_playbook
        self.clock = clock
        self.keep_ok = keep_ok
        self.stopper = Stopper()
        self.states = journal_mod.summarize(journal.read(), self.groups)
        self.health = {}          # group -> "ok" | "broken" | "failed" | "locked" after the last round
        self.router = router
        self.lock = threading.Lock()

    def state(self, group):
        with self.lock:
            return self.states.setdefault(group, journal_mod.new_state())

    def record(self, action, group=None, **fields):
        record = self.journal.write(action, group, **fields)
        if group is not None:
            with self.lock:
                journal_mod.fold(self.states.setdefault(group, journal_mod.new_state()), record)
        return record

    def play(self, group, folder, ident, playbook, extra, limit=True):
        args = []
        for value in self.extra_vars:
            args += ["-e", value]
        args += extra
        spec = self.spec(ident, folder, playbook, group if limit else None, args)
        events = GroupEvents()
        result = self.runner(spec, event_handler=events.feed, cancel_callback=self.stopper.event.is_set)
        return judge_run(result, events), spec

    def round_dir(self, number):
        return os.path.join(self.artifacts, "round%05d" % number)

    def prune(self, number):
        """Before round `number`: earlier rounds' artifacts beyond --keep-rounds or older than --keep-days."""
        keep, days = self.keep
        try:
            removed = prune(self.artifacts, keep, days * 86400.0, self.clock(), running=self.round_dir(number))
        except OSError as exc:
            self.say("could not prune old artifacts: %s" % exc)
            return []
        if removed:
            self.say("pruned %d old round artifact dir(s) (keeping %d, at most %g days)" % (len(removed), keep, days))
        return removed

    def round(self, number):
        """Take the locks, check every group held with one run, release the serving ones, then follow each broken
        group up in its own thread (at most --parallel at once)."""
        self.prune(number)
        held = {}
        try:
            for group in list(self.groups):
                if self.stopper.event.is_set():
                    return
                lock = self.take(group)
                if lock is not None:
                    held[group] = lock
            if not held:
                return
            checks = self.check(list(held), number)
            if checks is None:
                return
            follow = []
            for group in held:
                if self.settle(group, checks[group]):
                    held[group].release()
                else:
                    follow.append(group)
            self.follow_up(follow, checks, held, number)
        finally:
            for lock in held.values():
                lock.release()
            tidy(self.round_dir(number))

    def take(self, group):
        """The group's lock, or None after journaling why it is left alone this round."""
        lock = locks.GroupLock(self.state_dir, group, "watch")
        try:
            acquired = lock.acquire()
        except OSError as exc:
            # e.g. a lock file that `reprovision` created as another user: the service user cannot open it.
            self.record("error", group, msg="cannot take the group's lock %s: %s" % (lock.path, exc))
            self.say("%s: cannot take its lock %s: %s; fix: run reprovision as the service user, or chown the file to "
                     "it" % (group, lock.path, exc))
            self.health[group] = "broken"
            return None
        if not acquired:
            holder = lock.holder()
            self.record("locked", group, holder=holder)
            self.say("%s: locked by %s: left alone this round" % (group, locks.describe(holder)))
            self.health[group] = "locked"
            return None
        return lock

    def check(self, groups, number):
        """One verify.yml run over `groups`: {group: judge_group()'s verdict + duration_s and log}, journaled per
        group; None when the watch was stopped meanwhile (nothing journaled)."""
        folder = os.path.join(self.round_dir(number), CHECK_DIR)
        started = self.clock()
        split = SplitEvents(groups, host_groups(self.members, groups))
        args = []
        for value in self.extra_vars:
            args += ["-e", value]
        spec = self.spec("check", folder, VERIFY, ",".join(groups), args)
        try:
            result = self.runner(spec, event_handler=split.feed, cancel_callback=self.stopper.event.is_set)
        except Exception as exc:  # pylint: disable=broad-except
            for group in groups:
                self.record("error", group, msg="%s: %s" % (type(exc).__name__, exc))
                self.say("%s: supervisor error: %s: %s" % (group, type(exc).__name__, exc))
                self.health[group] = "broken"
            return None
        if self.stopper.event.is_set():
            return None
        duration = round(self.clock() - started, 1)
        checks = {}
        for group in groups:
            check = judge_group(result, split.groups[group])
            check["duration_s"] = duration
            self.record("check", group, ok=check["ok"], summary=check["summary"], diagnosis=check["diagnosis"],
                        duration_s=duration, log=None if check["ok"] else spec.stdout_path)
            checks[group] = check
        if all(c["ok"] for c in checks.values()) and not self.keep_ok:
            shutil.rmtree(spec.artifact_dir, ignore_errors=True)
        return checks

    def settle(self, group, check):
        """True when the group serves and nothing else is due (its lock can go now)."""
        state = self.state(group)
        if check["ok"] and not state.get("failed") and not (self.router and state.get("drained")):
            self.health[group] = "ok"
            self.say("%s: serving" % group)
            return True
        return False

    def follow_up(self, groups, checks, held, number):
        """decide() and what it says for each group in `groups`, each in its own thread; each lock released when
        its group is done."""
        if not groups or self.stopper.event.is_set():
            return

        def one(group):
            try:
                self.group(group, number, checks[group])
            finally:
                held[group].release()

        workers = max(1, min(self.parallel, len(groups)))
        if workers == 1:
            for group in groups:
                if self.stopper.event.is_set():
                    break
                one(group)
            return
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, groups))

    def group(self, group, number, check):
        if self.stopper.event.is_set():
            return
        try:
            self._group(group, number, check)
        except Exception as exc:  # pylint: disable=broad-except
            self.record("error", group, msg="%s: %s" % (type(exc).__name__, exc))
            self.say("%s: supervisor error: %s: %s" % (group, type(exc).__name__, exc))
            self.health[group] = "broken"

    def _group(self, group, number, check):
        folder = os.path.join(self.round_dir(number), group)
        action, detail = decide(check["ok"], self.state(group), self.clock(), self.policy)
        if action == OK:
            self.health[group] = "ok"
            self.say("%s: serving" % group)
            self.put_back(group, folder)
            return
        if action == RECOVERED:
            self.record("recovered", group)
            self.health[group] = "ok"
            self.say("%s: serves again: its failed mark is cleared" % group)
            self.put_back(group, folder)
            return
        self.say("%s: NOT serving: %s" % (group, check["summary"]))
        self.take_out(group, folder)
        if action == FAILED:
            self.record("failed", group, reason=detail)
            self.health[group] = "failed"
            self.say("%s: marked failed (%s): not restarted" % (group, detail))
            return
        if action == GIVE_UP:
            self.record("give_up", group, reason=detail, last_failure=check["summary"])
            self.health[group] = "failed"
            self.say("%s: giving up: %s; the group is marked failed" % (group, detail))
            return
        if action == BACKOFF:
            self.record("backoff", group, due=round(detail, 3), due_iso=journal_mod.iso(detail))
            self.health[group] = "broken"
            self.say("%s: next restart not before %s (backoff)" % (group, journal_mod.iso(detail)))
            return
        self.restart(group, folder, detail, check)

    def restart(self, group, folder, attempt, check):
        logs_dir = os.path.join(folder, "rank-logs")
        logs = self.play(group, folder, "logs", LOGS, ["-e", '{"serve_failure_logs_dir": "%s"}' % logs_dir])[0]
        self.record("logs", group, ok=logs["ok"], dir=os.path.join(logs_dir, group), summary=logs["summary"])
        if self.stopper.event.is_set():
            return
        self.say("%s: restarting the group as one unit (attempt %d of at most %d in %s)" % (
            group, attempt, self.policy.max_restarts, hours(self.policy.window_s)))
        started = self.clock()
        result, spec = self.play(group, folder, "restart", SERVE, ["-e", FORCE_RESTART])
        reboot = needs_reboot(result["summary"], result["failed_tasks"])
        self.record("restart", group, ok=result["ok"], attempt=attempt, because=check["summary"],
                    summary=result["summary"], diagnosis=result["diagnosis"] or check["diagnosis"],
                    duration_s=round(self.clock() - started, 1), log=spec.stdout_path)
        if result["ok"]:
            self.health[group] = "ok"
            self.say("%s: serving again after %.0f s" % (group, self.clock() - started))
            self.put_back(group, folder)
            return
        self.say("%s: the restart failed: %s" % (group, result["summary"]))
        if reboot:
            self.record("needs_reboot", group, reason=result["summary"])
            self.health[group] = "failed"
            self.say("%s: a node needs a reboot: not retried; the group is marked failed" % group)
            return
        self.health[group] = "broken"

    def take_out(self, group, folder):
        """Drain a broken group at the router (once: the journal remembers), without waiting for its sessions."""
        if self.router and not self.state(group).get("drained"):
            self._router(group, folder, "drain", rolling.DRAIN,
                         {"router_drain_timeout": 0, "router_drain_on_timeout": "continue"},
                         "taken out of the router's rotation while it is broken",
                         "could not be taken out of the router's rotation")

    def put_back(self, group, folder):
        """Put a group the supervisor drained back in rotation (the router waits for its health check)."""
        if self.router and self.state(group).get("drained"):
            self._router(group, folder, "enable", rolling.ENABLE, {}, "back in the router's rotation",
                         "still out of the router's rotation")

    def _router(self, group, folder, action, playbook, extra, done, not_done):
        if self.stopper.event.is_set():
            return
        extra = dict({"router_target_group": group}, **extra)
        result, spec = self.play(group, folder, action, playbook, ["-e", json.dumps(extra)], limit=False)
        self.record(action, group, ok=result["ok"], summary=result["summary"],
                    log=None if result["ok"] else spec.stdout_path)
        self.say("%s: %s" % (group, done) if result["ok"] else "%s: %s: %s" % (group, not_done, result["summary"]))

    def sleep(self, seconds):
        self.stopper.event.wait(max(0.0, seconds))


def trust_paths(args, project_dir, environ=None):
    """What the supervisor runs and reads, for trust.check()."""
    environ = os.environ if environ is None else environ
    vaults = []
    for path in (getattr(args, "vault_password_file", None), environ.get(VAULT_ENV)):
        if path and os.path.abspath(path) not in vaults:
            vaults.append(os.path.abspath(path))
    inventory = os.path.abspath(os.path.expanduser(args.inventory))
    return trust.watch_paths(project_dir, inventory, vaults)


def trust_gate(args, project_dir, err=None, checker=None):
    """None when every path is safe, else trust.EXIT_UNTRUSTED after one line per problem on stderr."""
    err = err or (lambda line: print(line, file=sys.stderr))
    findings = trust.check(trust_paths(args, project_dir), checker)
    # A missing checkout file or inventory is bad input, said by the CLI's own checks (exit 2) right after this.
    findings = [f for f in findings if not (f.problem == trust.MISSING and f.what in ("the checkout", "the inventory"))]
    missing = [f for f in findings if f.problem == trust.MISSING]
    if missing and len(missing) == len(findings):
        for finding in missing:
            err("dspark-fleet: error: %s %s does not exist" % (finding.what, finding.path))
        return 2
    if not findings:
        return None
    trust.report(findings, err)
    err("dspark-fleet watch: nothing was run. Whoever can write these paths could run commands as %s here and as "
        "root on every node (issue #26); there is no option to skip this check" % (
            (checker or trust.Checker()).service_user()))
    return trust.EXIT_UNTRUSTED


def write_marker(artifacts):
    """Mark the artifacts dir as a watch's (pruning only ever touches marked dirs)."""
    os.makedirs(artifacts, mode=0o700, exist_ok=True)
    with open(os.path.join(artifacts, MARKER), "w", encoding="utf-8") as handle:
        json.dump({"pid": os.getpid(), "started": time.time()}, handle)


def run(sel, args, interrupts, prog):
    """The `watch` subcommand over the Selection `sel` with watch's options `args`; exit 0 when every group served at
    the last round, else 1; 0 when a watch without --once/--rounds is stopped by a signal."""
    write_marker(sel.artifacts)
    state_dir = sel.state_dir
    path = args.journal or journal_mod.default_path(state_dir)
    policy = Policy(max_restarts=args.max_restarts, window_s=args.window * 3600.0,
                    backoff_base_s=args.backoff_base, backoff_max_s=max(args.backoff_base, args.backoff_max))
    watch = Watch(sel.groups, sel.spec, sel.artifacts, policy, journal_mod.Journal(path), state_dir, prog.message,
                  extra_vars=sel.extra_vars, members=sel.inv.members, parallel=args.parallel,
                  router=uses_router(args.no_router, sel.routers),
                  keep=(args.keep_rounds, args.keep_days))
    interrupts.fleet = watch.stopper
    if interrupts.count:
        watch.stopper.request_stop(interrupts.reason)
    rounds = 1 if args.once else args.rounds
    watch.record("watch_start", None, groups=list(sel.groups), interval_s=args.interval, rounds=rounds,
                 max_restarts=policy.max_restarts, window_h=args.window, backoff_base_s=policy.backoff_base_s,
                 pid=os.getpid(), artifacts=sel.artifacts)
    prog.message("journal: %s; locks: %s" % (path, os.path.join(state_dir, "locks")))
    number = 0
    try:
        while not watch.stopper.event.is_set():
            number += 1
            began = time.monotonic()
            watch.round(number)
            if rounds and number >= rounds:
                break
            watch.sleep(args.interval - (time.monotonic() - began))
    finally:
        interrupts.fleet = None
        watch.record("watch_stop", None, rounds=number, reason=watch.stopper.stop_reason or "done",
                     health=dict(watch.health))
    prog.close()
    # Run until stopped (the service): a stop by a signal is its normal end, 0, so that `systemctl stop` leaves the
    # unit inactive, not failed (exit 1 on SIGTERM made every stop and restart of the service a failure).
    if not rounds and watch.stopper.stop_reason:
        return 0
    return 0 if watch.health and all(v == "ok" for v in watch.health.values()) else 1


# --------------------------------------------------------------------------- status


def print_journal_summary(groups, path, out=print, now=None, window_s=6 * 3600.0):
    """The supervisor's view from its journal (nothing when there is no journal)."""
    records = journal_mod.read(path)
    if not records:
        return False
    now = time.time() if now is None else now
    states = journal_mod.summarize(records, groups)
    header = ["group", "supervisor", "restarts (%s)" % hours(window_s), "last failure", "diagnosis"]
    rows = []
    for group in groups:
        state = states.get(group)
        if state is None:
            rows.append([group, "-", "0", "-", "-"])
            continue
        if state["failed"]:
            mark = "FAILED: %s" % (state["failed"].get("reason") or "")
        elif state["last_ok"] is not None and (
                state["last_failure"] is None or state["last_ok"] >= state["last_failure"]["time"]):
            mark = "ok"
        elif state["last_failure"] is not None:
            mark = "broken"
        else:
            mark = "-"
        if state.get("drained"):
            mark += " (out of the router's rotation)"
        failure = state["last_failure"]
        rows.append([group, mark, str(len(restarts_in_window(state["restarts"], now, window_s))),
                     "%s %s" % (journal_mod.iso(failure["time"]), failure["summary"] or "") if failure else "-",
                     journal_mod.diagnosis_text(state["diagnosis"]) or "-"])
    clip = 100
    rows = [[c if len(c) <= clip else c[:clip - 3] + "..." for c in row] for row in rows]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    out("")
    out("Supervisor journal: %s" % path)
    for row in [header] + rows:
        out("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return True
