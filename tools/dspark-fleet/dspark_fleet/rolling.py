"""`reprovision --rolling`: each group leaves the router's rotation only while it is reprovisioned.

Per group, under its lock, up to four ansible-playbook runs whose events fold into the group's one GroupEvents
(so the report's phases are qualify_before_the_drain, router_drain, preflight ... serve, router_enable):

0. playbooks/qualify.yml --limit <group> (changes nothing; skipped with --no-qualify): every node of the group
   measured before it leaves rotation. A group that is not qualified (a failing check, a member unreachable, the
   run failed) is never drained nor touched: it stays in rotation, counts as failed (--max-failed) but holds no
   --max-unavailable slot (RollingScheduler), and the report's ``qualify`` section says why (qualify.step).
   Its own events are kept apart (the group's phases only show the step; its failed tasks only when it failed).
1. playbooks/router_drain.yml: no new requests to the group, then wait (bounded) for its open ones to end.
   The playbook itself refuses to drain the last group in rotation (nothing changed).
2. site.yml --limit <group>: reprovision, ending with the tp_ranks proof.
3. playbooks/router_enable.yml: back in rotation once the router's health check passes.

A group whose site.yml run ends with its tp_ranks proof has its image and model revision recorded (proven.py).
When site.yml fails instead (not cancelled) and the run's image, model or revision differs from that record, the
group is rolled back (unless rollback=False, --no-rollback): site.yml --limit <group> again with the recorded values
as extra vars (after the run's own, so they win; through the same 0600 files), its own phase ``rollback``. Proven
again, it is put back in rotation; either way the roll stops (`stop_reason`: no further group is drained) and the
group counts as failed. A rollback that fails its proof too leaves the group drained. The report's ``rollback``.

A group whose reprovisioning (or enable) fails stays out of rotation and the report says so. A group that is
drained but never touched (drain bound hit with --on-drain-timeout fail, or a cancel before site.yml) is put
back. The scheduler counts a failed group as still unavailable (see Scheduler(hold_failed=True)), except one that
was never drained because it was not qualified.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading

from . import proven, qualify
from .events import GroupEvents, image_id
from .runner_exec import RunResult, stdout_tail
from .scheduler import FAILED, Scheduler

QUALIFY = "playbooks/qualify.yml"
DRAIN = "playbooks/router_drain.yml"
ENABLE = "playbooks/router_enable.yml"
QUALIFY_PLAY = "Qualify before the drain"     # the step's plays, as the group's phase qualify_before_the_drain
# The qualify run's events the group's GroupEvents sees live (progress, pid, the phase); its failed tasks only
# when the group is not qualified, its facts never.
FORWARDED = ("playbook_on_start", "playbook_on_play_start", "playbook_on_task_start", "runner_on_start",
             "playbook_on_stats")
ROLLBACK_PLAY = "Rollback"      # the rollback run's plays, as the group's phase rollback
ROLLBACK_FORWARDED = ("playbook_on_start", "playbook_on_play_start", "playbook_on_task_start")
ROUTER_GROUP = "dspark_router"
ON_DRAIN_TIMEOUT = ("fail", "continue")


def read_router_report(path):
    """{router: result} written by the router playbooks' router_report_file, or {} when missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _times(report, key):
    return [t for t in (_number((r or {}).get(key)) for r in report.values()) if t is not None]


def drain_view(report):
    """What the drain did across the routers: the worst of each (max waited, any bound hit, sum of sessions left)."""
    if not report:
        return None
    results = [r for r in report.values() if isinstance(r, dict)]
    started, finished = _times(report, "started_at"), _times(report, "finished_at")
    left = [int(r["sessions_left"]) for r in results if str(r.get("sessions_left", "")).isdigit()]
    return {
        "routers": sorted(report),
        "bound_hit": any(str(r.get("bound_hit")).lower() == "true" for r in results),
        "sessions_at_start": sum(int(r["sessions_at_start"]) for r in results
                                 if str(r.get("sessions_at_start", "")).isdigit()),
        "sessions_left": sum(left) if left else None,
        "waited_s": max([_number(r.get("waited_seconds")) or 0.0 for r in results] or [0.0]),
        "started_at": min(started) if started else None,
        "finished_at": max(finished) if finished else None,
    }


def out_of_rotation_seconds(drain_report, enable_report):
    """From the first router's drain start to the last router's enable end; None when either is missing."""
    started, finished = _times(drain_report, "started_at"), _times(enable_report, "finished_at")
    if not started or not finished:
        return None
    return round(max(0.0, max(finished) - min(started)), 3)


def new_rotation():
    return {"drained": False, "drain": None, "back_in_rotation": False, "out_of_rotation_s": None,
            "left_out": False, "note": None}


class RollingScheduler(Scheduler):
    """Scheduler(hold_failed=True), except that a failed group for which `in_rotation(group)` is True (never
    drained: not qualified) holds no slot; it still counts for max_failed and the canaries."""

    def __init__(self, groups, parallel=1, canary=0, max_failed=None, in_rotation=None, roll_stopped=None):
        super().__init__(groups, parallel=parallel, canary=canary, max_failed=max_failed, hold_failed=False)
        self.in_rotation = in_rotation or (lambda group: False)
        self.roll_stopped = roll_stopped or (lambda: None)    # why the roll stops (a rollback), else None

    def held(self):
        """The failed groups still out of rotation, in order."""
        return [g for g in self.order if self.results.get(g) == FAILED and not self.in_rotation(g)]

    def blocked(self):
        reason = super().blocked() or self.roll_stopped()
        if reason is None and len(self.held()) >= self.parallel:
            reason = "max-unavailable reached: %s failed and stay(s) out of rotation (--max-unavailable %d)" % (
                ", ".join(self.held()), self.parallel)
        return reason

    def take(self):
        if self.blocked() is not None:
            return []
        room = self.parallel - len(self.running) - len(self.held())
        chosen = self._eligible()[:max(room, 0)]
        for group in chosen:
            self.pending.remove(group)
            self.running.append(group)
        return chosen


class RollingRunner:
    """A runner(spec, event_handler, cancel_callback) that wraps site.yml's run of group spec.ident in a drain
    and an enable, after qualifying the group (`qualify`). `rotation[group]` tells what happened at the router
    (the report's `rotation`), `qualified[group]` what the qualify step found (the report's `qualify`), and
    `untouched` holds the groups left in rotation because they were not qualified."""

    def __init__(self, base_runner, project_dir, extra_vars=(), drain_timeout=None, on_drain_timeout="fail",
                 qualify=False, members=None, store=None, configs=None, rollback=True, tags=None):
        if on_drain_timeout not in ON_DRAIN_TIMEOUT:
            raise ValueError("on_drain_timeout must be one of %s" % ", ".join(ON_DRAIN_TIMEOUT))
        self.base = base_runner
        self.project_dir = project_dir
        self.extra_vars = list(extra_vars)
        self.drain_timeout = drain_timeout
        self.on_drain_timeout = on_drain_timeout
        self.qualify_first = qualify
        self.members = members          # group -> [{host, rank}]; None: the hosts the qualify run named
        self.store = store              # proven.Store: the last proven image and revision per group; None: none
        self.configs = configs or {}    # group -> proven.config_of(): the image and revision this run uses
        self.rollback_enabled = rollback
        self.tags = tags                # --tags of site.yml: a rollback needs the serve phase's proof
        self.rotation = {}
        self.qualified = {}
        self.rollbacks = {}
        self.untouched = set()
        self.stop_reason = None
        self._lock = threading.Lock()

    def in_rotation(self, group):
        """True for a group that never left rotation because it was not qualified (it holds no slot)."""
        with self._lock:
            return group in self.untouched

    def qualify_view(self, group):
        with self._lock:
            return self.qualified.get(group)

    def rollback_view(self, group):
        with self._lock:
            return self.rollbacks.get(group)

    def roll_stopped(self):
        """Why the roll stops (a group was rolled back), else None."""
        with self._lock:
            return self.stop_reason

    def _extra_args(self):
        args = []
        for value in self.extra_vars:
            args += ["-e", value]
        return args

    def _sub(self, spec, step, playbook, report_path):
        router_vars = {"router_target_group": spec.ident, "router_report_file": report_path}
        if step == "drain":
            # The bound is always continue inside the playbook: this runner decides (and puts the group back).
            router_vars["router_drain_on_timeout"] = "continue"
            if self.drain_timeout is not None:
                router_vars["router_drain_timeout"] = self.drain_timeout
        args = self._extra_args() + ["-e", json.dumps(router_vars)]
        return dataclasses.replace(spec, ident="%s.%s" % (spec.ident, step),
                                   playbook=os.path.join(self.project_dir, playbook), limit=None, args=args)

    def _set(self, group, **values):
        with self._lock:
            self.rotation[group].update(values)

    def _enable(self, spec, event_handler, report_path):
        """router_enable.yml, not cancellable (bounded by router_enable_timeout): (RunResult, its report)."""
        result = self.base(self._sub(spec, "enable", ENABLE, report_path), event_handler=event_handler,
                           cancel_callback=lambda: False)
        return result, read_router_report(report_path)

    def _members(self, group, events):
        if self.members is not None:
            return self.members(group)
        hosts = list(events.host_seen) + [h for h in events.qualify if h not in events.host_seen]
        return [{"host": host, "rank": None} for host in hosts]

    def _qualify(self, spec, event_handler, cancel_callback):
        """playbooks/qualify.yml --limit <group> with the run's extra vars: (RunResult, the qualify step's view)."""
        group = spec.ident
        qspec = dataclasses.replace(spec, ident="%s.qualify" % group, playbook=os.path.join(self.project_dir, QUALIFY),
                                    limit=group, args=self._extra_args())
        events = GroupEvents()

        def handle(event):
            events.feed(event)
            if event_handler is not None and event.get("event") in FORWARDED:
                if event.get("event") == "playbook_on_play_start":
                    data = dict(event.get("event_data") or {})
                    data["play"] = "%s - %s" % (QUALIFY_PLAY, data.get("play") or data.get("name") or "")
                    event = dict(event, event_data=data)
                event_handler(event)

        result = self.base(qspec, event_handler=handle, cancel_callback=cancel_callback)
        tail = stdout_tail(qspec.stdout_path, 8) if result.status != "successful" and result.error is None else ""
        view = qualify.step(result.status, result.rc, events, self._members(group, events),
                            {"artifacts_dir": qspec.artifact_dir, "stdout": qspec.stdout_path},
                            error=result.error, stdout_tail=tail)
        if view["verdict"] not in (qualify.QUALIFIED, qualify.CANCELLED) and event_handler is not None:
            # Its failed tasks that stand become the group's (the progress line and the report's failed tasks).
            for task in (events.failure_view() or {}).get("failed_tasks") or []:
                if not task.get("rescued"):
                    event_handler({"event": "runner_on_unreachable" if task.get("unreachable") else "runner_on_failed",
                                   "event_data": {"task": task.get("task"), "host": task.get("host"),
                                                  "task_action": task.get("action"),
                                                  "res": {"msg": task.get("msg"),
                                                          "unreachable": bool(task.get("unreachable"))}}})
        with self._lock:
            self.qualified[group] = view
        return result, view

    def _not_qualified(self, group, result, view):
        """The group stays in rotation, untouched: a failed RunResult saying why."""
        verdict = view["verdict"]
        label = {qualify.NOT_QUALIFIED: "not qualified", qualify.UNREACHABLE: "not qualified (unreachable)"}.get(
            verdict, "not qualified (%s %s)" % (QUALIFY, verdict))
        with self._lock:
            self.untouched.add(group)
        self._set(group, back_in_rotation=None, note="never drained (%s), still in rotation" % label)
        return RunResult(status="failed", rc=result.rc,
                         error="%s, left in rotation untouched: %s" % (label, view["summary"] or verdict))

    def __call__(self, spec, event_handler=None, cancel_callback=None):
        group = spec.ident
        cancelled = cancel_callback or (lambda: False)
        with self._lock:
            self.rotation[group] = new_rotation()
            self.qualified.pop(group, None)
            self.rollbacks.pop(group, None)
            self.untouched.discard(group)
        os.makedirs(spec.artifacts_dir, exist_ok=True)
        if self.qualify_first:
            result, view = self._qualify(spec, event_handler, cancel_callback)
            if view["verdict"] == qualify.CANCELLED or (view["verdict"] == qualify.QUALIFIED and cancelled()):
                self._set(group, back_in_rotation=None, note="cancelled before the drain: never drained")
                return RunResult(status="canceled", rc=result.rc, error="cancelled %s qualifying, before the drain "
                                 "(nothing was changed)" % ("while" if view["verdict"] == qualify.CANCELLED
                                                            else "after"))
            if view["verdict"] != qualify.QUALIFIED:
                return self._not_qualified(group, result, view)
        drain_path = os.path.join(spec.artifacts_dir, group + ".drain.json")
        enable_path = os.path.join(spec.artifacts_dir, group + ".enable.json")

        drain = self.base(self._sub(spec, "drain", DRAIN, drain_path), event_handler=event_handler,
                          cancel_callback=cancel_callback)
        drain_report = read_router_report(drain_path)
        view = drain_view(drain_report)
        self._set(group, drain=view, drained=drain.status == "successful")
        if drain.status != "successful":
            if view is not None:        # it was set to drain before the run failed: put it back untouched
                self._put_back(spec, event_handler, enable_path, drain_report, "the drain did not complete")
            else:
                self._set(group, back_in_rotation=None, note="not drained: %s" % (drain.error or "the drain failed"))
            return drain
        if view["bound_hit"] and self.on_drain_timeout == "fail":
            self._put_back(spec, event_handler, enable_path, drain_report,
                           "drain bound hit with %s open session(s)" % view["sessions_left"])
            return RunResult(status="failed", rc=drain.rc, error=(
                "drain bound hit: %s open session(s) still on %s after %s s; it was put back in rotation untouched. "
                "Fix: run again later, raise --drain-timeout, or accept cutting them with --on-drain-timeout continue"
                % (view["sessions_left"], group, round(view["waited_s"], 1))))
        if view["bound_hit"]:           # --on-drain-timeout continue: the requests still open are cut by the restart
            self._set(group, cut_sessions=view["sessions_left"] or 0)
        if cancelled():
            self._put_back(spec, event_handler, enable_path, drain_report, "cancelled before reprovisioning")
            return RunResult(status="canceled", rc=None, error="cancelled after the drain, before reprovisioning")

        site, proof = proven.run_proven(self.base, spec, event_handler, cancel_callback)
        if proof is not None:
            self._record(group, proof, spec.artifact_dir)
        if site.status != "successful":
            self._set(group, left_out=True, note="left out of rotation: reprovisioning did not complete (%s)" %
                      site.status)
            if site.status in ("failed", "timeout", "error") and not cancelled():
                return self._rollback(spec, event_handler, cancel_callback, enable_path, drain_report, site)
            return site
        enable, enable_report = self._enable(spec, event_handler, enable_path)
        if enable.status != "successful":
            self._set(group, left_out=True, note="left out of rotation: the router's health check did not pass "
                                                 "after reprovisioning (router_enable.yml %s)" % enable.status)
            return RunResult(status="failed", rc=enable.rc, error=enable.error)
        self._set(group, back_in_rotation=True, out_of_rotation_s=out_of_rotation_seconds(drain_report, enable_report))
        return site

    def _record(self, group, proof, run, config=None):
        """The group was proven with `config` (default: this run's image and revision): record it (a failure to
        write is a note)."""
        config = config if config is not None else self.configs.get(group)
        if self.store is None or config is None:
            return
        try:
            self.store.save(group, config, proof, run=run)
        except OSError as exc:
            self._set(group, note=("%s; " % self.rotation[group]["note"] if self.rotation[group]["note"] else "")
                      + "its proven image and revision could not be recorded: %s" % exc)

    def _stop_roll(self, group, what):
        with self._lock:
            self.stop_reason = "the roll stops: %s failed its proof with a new image or revision; %s" % (group, what)

    def _rollback(self, spec, event_handler, cancel_callback, enable_path, drain_report, site):
        """site.yml failed on a drained group: back to its last proven image and revision when they differ, prove,
        put it back in rotation, stop the roll. Returns the group's (failed) RunResult."""
        group = spec.ident
        if self.store is None:          # nothing is recorded: no rollback to speak of
            return site
        config = self.configs.get(group)
        record = self.store.load(group)
        view = proven.new_rollback(config, record, self.store.path(group))
        go, why = proven.decide(config, record, self.rollback_enabled, self.tags)
        with self._lock:
            self.rollbacks[group] = view
        if not go:
            view["reason"] = why
            return site
        view["attempted"] = True
        view["reason"] = "the failed run's %s differ(s) from the last proven" % (
            ", ".join(key for key in proven.KEYS if (config or {}).get(key) != record.get(key)) or "inputs")
        self._stop_roll(group, "rolling back to the last proven one")
        failed_with = "reprovisioning with %s failed%s" % (proven.short(config),
                                                           (": " + site.error) if site.error else "")
        rspec = dataclasses.replace(spec, ident="%s.rollback" % group,
                                    args=list(spec.args) + ["-e", json.dumps(proven.rollback_vars(record))])
        view["logs"] = {"artifacts_dir": rspec.artifact_dir, "stdout": rspec.stdout_path}

        def handle(event):
            if event_handler is not None and event.get("event") in ROLLBACK_FORWARDED:
                if event.get("event") == "playbook_on_play_start":
                    data = dict(event.get("event_data") or {})
                    data["play"] = "%s - %s" % (ROLLBACK_PLAY, data.get("play") or data.get("name") or "")
                    event = dict(event, event_data=data)
                event_handler(event)

        back, proof = proven.run_proven(self.base, rspec, handle, cancel_callback)
        if proof is None:
            view["result"] = "cancelled" if back.status == "canceled" else "failed"
            tail = stdout_tail(rspec.stdout_path, 4) if back.error is None else ""
            view["error"] = back.error or "site.yml with the last proven image and revision ended %s (rc %s)%s" % (
                back.status, back.rc, (": " + tail) if tail else "")
            self._stop_roll(group, "the rollback to the last proven one %s, it stays drained" % (
                "was cancelled" if back.status == "canceled" else "failed too"))
            self._set(group, note="left out of rotation: %s; the rollback to %s %s too, it stays drained" % (
                failed_with, proven.short(record), "was cancelled" if back.status == "canceled" else "failed"))
            return RunResult(status="failed", rc=site.rc, error="%s; rollback to the last proven %s %s: the group "
                             "stays out of rotation; the roll stops" % (
                                 failed_with, proven.short(record),
                                 "cancelled" if back.status == "canceled" else "FAILED too (%s)" % view["error"]))
        view["image_id"] = image_id(proof)
        self._record(group, proof, rspec.artifact_dir, config=record)
        enable, enable_report = self._enable(spec, event_handler, enable_path)
        if enable.status != "successful":
            view["result"] = "proven_left_out"
            self._stop_roll(group, "rolled back to the last proven one and proven, but its health check did not "
                                   "pass: it stays drained")
            self._set(group, note="left out of rotation: %s; rolled back to %s and proven, but the router's health "
                                  "check did not pass (router_enable.yml %s)" % (
                                      failed_with, proven.short(record), enable.status))
            return RunResult(status="failed", rc=site.rc, error="%s; rolled back to the last proven %s and proven, "
                             "but not back in rotation (router_enable.yml %s); the roll stops" % (
                                 failed_with, proven.short(record), enable.status))
        view["result"] = "rolled_back"
        self._stop_roll(group, "rolled back to the last proven one, proven and back in rotation")
        self._set(group, left_out=False, back_in_rotation=True,
                  out_of_rotation_s=out_of_rotation_seconds(drain_report, enable_report),
                  note="rolled back to its last proven image and revision, proven and back in rotation (%s)" %
                  failed_with)
        return RunResult(status="failed", rc=site.rc, error="%s; rolled back to the last proven %s, proven and back "
                         "in rotation; the roll stops" % (failed_with, proven.short(record)))

    def _put_back(self, spec, event_handler, enable_path, drain_report, why):
        enable, enable_report = self._enable(spec, event_handler, enable_path)
        back = enable.status == "successful"
        self._set(spec.ident, back_in_rotation=back, left_out=not back,
                  out_of_rotation_s=out_of_rotation_seconds(drain_report, enable_report) if back else None,
                  note="%s: %s" % (why, "put back in rotation untouched" if back else
                                   "putting it back failed, it is still drained (playbooks/router_enable.yml)"))
