"""`reprovision --rolling`: each group leaves the router's rotation only while it is reprovisioned.

Per group, under its lock, three ansible-playbook runs whose events fold into the group's one GroupEvents
(so the report's phases are router_drain, preflight ... serve, router_enable):

1. playbooks/router_drain.yml: no new requests to the group, then wait (bounded) for its open ones to end.
   The playbook itself refuses to drain the last group in rotation (nothing changed).
2. site.yml --limit <group>: reprovision, ending with the tp_ranks proof.
3. playbooks/router_enable.yml: back in rotation once the router's health check passes.

A group whose reprovisioning (or enable) fails stays out of rotation and the report says so. A group that is
drained but never touched (drain bound hit with --on-drain-timeout fail, or a cancel before site.yml) is put
back. The scheduler counts a failed group as still unavailable (see Scheduler(hold_failed=True)).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading

from .runner_exec import RunResult

DRAIN = "playbooks/router_drain.yml"
ENABLE = "playbooks/router_enable.yml"
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


class RollingRunner:
    """A runner(spec, event_handler, cancel_callback) that wraps site.yml's run of group spec.ident in a drain
    and an enable. `rotation[group]` tells what happened at the router (the report's `rotation`)."""

    def __init__(self, base_runner, project_dir, extra_vars=(), drain_timeout=None, on_drain_timeout="fail"):
        if on_drain_timeout not in ON_DRAIN_TIMEOUT:
            raise ValueError("on_drain_timeout must be one of %s" % ", ".join(ON_DRAIN_TIMEOUT))
        self.base = base_runner
        self.project_dir = project_dir
        self.extra_vars = list(extra_vars)
        self.drain_timeout = drain_timeout
        self.on_drain_timeout = on_drain_timeout
        self.rotation = {}
        self._lock = threading.Lock()

    def _sub(self, spec, step, playbook, report_path):
        router_vars = {"router_target_group": spec.ident, "router_report_file": report_path}
        if step == "drain":
            # The bound is always continue inside the playbook: this runner decides (and puts the group back).
            router_vars["router_drain_on_timeout"] = "continue"
            if self.drain_timeout is not None:
                router_vars["router_drain_timeout"] = self.drain_timeout
        args = []
        for value in self.extra_vars:
            args += ["-e", value]
        args += ["-e", json.dumps(router_vars)]
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

    def __call__(self, spec, event_handler=None, cancel_callback=None):
        group = spec.ident
        cancelled = cancel_callback or (lambda: False)
        with self._lock:
            self.rotation[group] = new_rotation()
        os.makedirs(spec.artifacts_dir, exist_ok=True)
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
        if cancelled():
            self._put_back(spec, event_handler, enable_path, drain_report, "cancelled before reprovisioning")
            return RunResult(status="canceled", rc=None, error="cancelled after the drain, before reprovisioning")

        site = self.base(spec, event_handler=event_handler, cancel_callback=cancel_callback)
        if site.status != "successful":
            self._set(group, left_out=True, note="left out of rotation: reprovisioning did not complete (%s)" %
                      site.status)
            return site
        enable, enable_report = self._enable(spec, event_handler, enable_path)
        if enable.status != "successful":
            self._set(group, left_out=True, note="left out of rotation: the router's health check did not pass "
                                                 "after reprovisioning (router_enable.yml %s)" % enable.status)
            return RunResult(status="failed", rc=enable.rc, error=enable.error)
        self._set(group, back_in_rotation=True, out_of_rotation_s=out_of_rotation_seconds(drain_report, enable_report))
        return site

    def _put_back(self, spec, event_handler, enable_path, drain_report, why):
        enable, enable_report = self._enable(spec, event_handler, enable_path)
        back = enable.status == "successful"
        self._set(spec.ident, back_in_rotation=back, left_out=not back,
                  out_of_rotation_s=out_of_rotation_seconds(drain_report, enable_report) if back else None,
                  note="%s: %s" % (why, "put back in rotation untouched" if back else
                                   "putting it back failed, it is still drained (playbooks/router_enable.yml)"))
