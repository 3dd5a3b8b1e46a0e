"""Fold the ansible-runner events of ONE playbook run into the state of one serving group (pure: no I/O).

An event is the dict ansible-runner hands to ``event_handler`` (and stores in ``job_events/``):
``event`` (type), ``created`` (ISO 8601 UTC), ``pid`` (of ansible-playbook) and ``event_data``
(``play``, ``task``, ``task_action``, ``host``, ``res``, ``ignore_errors``, ...).

What is kept:

- phase: one per play; the key is the text of the play name before `` - ``, lower case, spaces as ``_``
  ("Docker runtime - ..." -> ``docker_runtime``); duration from the play's start to the next play's
  start (or the end of the run), tasks started, changed results (``runner_on_ok`` with ``res.changed``)
  and which tasks changed on which hosts (what ``plan`` prints in check mode);
- the current phase, task and host (for the progress line), and every phase change (for plain output);
- failures: ``runner_on_failed`` without ``ignore_errors`` and ``runner_on_unreachable``: phase, task,
  host, message (the serve role rescues a failed tp_ranks and then fails in its own task: both are kept);
- the tp_ranks proof (``task_action`` dspark.cluster.tp_ranks): registered ranks, world size, elapsed,
  ready_at, each node's container image; or its failure message and diagnosis;
- status (playbooks/status.yml): each rank's ``serve_status`` fact and whether the head's
  "Check that the group serves" assert passed;
- qualify (playbooks/qualify.yml): each host's ``qualify_result`` fact (its checks; the head's also carries the
  group-scope checks), kept as set even when a later task fails the host.
"""

from __future__ import annotations

from datetime import datetime

TP_RANKS_ACTIONS = ("dspark.cluster.tp_ranks", "tp_ranks")
STATUS_FACT = "serve_status"
QUALIFY_FACT = "qualify_result"
FIRST_FAILURE_FACT = "serve_status_first_failure"   # the head's: the rank whose container failed first
SERVES_TASK = "Check that the group serves"
MSG_MAX = 2000
STDERR_TAIL = 600
FAILURES_MAX = 50


def phase_key(play_name):
    """'Docker runtime - engine, ...' -> 'docker_runtime'; a name without ' - ' is taken whole."""
    head = (play_name or "").split(" - ", 1)[0]
    return "_".join(head.strip().lower().split()) or "play"


def event_time(event):
    """Seconds since the epoch of an event's ``created`` stamp (None when it has none)."""
    created = event.get("created")
    if not created:
        return None
    try:
        return datetime.fromisoformat(created).timestamp()
    except (TypeError, ValueError):
        return None


def _clip(text, limit=MSG_MAX):
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _failure_message(res):
    """res.msg, with the end of stderr when a command failed without saying more."""
    msg = res.get("msg")
    if not isinstance(msg, str):
        msg = "" if msg is None else str(msg)
    stderr = res.get("stderr")
    if isinstance(stderr, str) and stderr.strip():
        tail = stderr.strip()[-STDERR_TAIL:]
        msg = (msg + ": " if msg else "") + tail
    if not msg and "rc" in res:
        msg = "exited with rc %s" % res.get("rc")
    return _clip(msg or "failed (no message)")


class GroupEvents:
    """The folded state; `feed()` takes the events in order. Not thread-safe: the caller locks."""

    def __init__(self):
        self.phases = {}            # key -> phase dict (see _phase), in the order first seen
        self.phase = None
        self.task = None
        self.host = None
        self.phase_log = []         # [(time, phase key)] every phase change, in order
        self.failures = []
        self.failures_dropped = 0
        self.tp_ranks = None        # proof or failure of the tp_ranks task
        self.status = {}            # host -> serve_status fact
        self.qualify = {}           # host -> qualify_result fact
        self.serving = None         # the head's assert: True passed, False failed, None not seen
        self.first_failure = None   # the head's serve_status_first_failure fact (status.yml), when it names one
        self.stats = None
        self.host_seen = {}         # host -> number of the last event about it (tells a rescued failure)
        self.pid = None
        self.first_time = None
        self.last_time = None
        self.events = 0

    # ------------------------------------------------------------------ folding

    def _phase(self, key, name):
        if key not in self.phases:
            self.phases[key] = {"name": name, "started": None, "ended": None, "duration_s": 0.0, "tasks": 0,
                                "changed": 0, "changed_tasks": [], "_open": None}
        return self.phases[key]

    def _close_phase(self, when):
        if self.phase is None:
            return
        phase = self.phases[self.phase]
        opened = phase.pop("_open", None)
        phase["_open"] = None
        if opened is not None and when is not None:
            phase["duration_s"] = round(phase["duration_s"] + max(0.0, when - opened), 3)
            phase["ended"] = when

    def feed(self, event):
        """Fold one event; True when it started a new phase."""
        kind = event.get("event")
        data = event.get("event_data") or {}
        when = event_time(event)
        self.events += 1
        if when is not None:
            if self.first_time is None:
                self.first_time = when
            self.last_time = when
        # A rolling group runs several playbooks: the pid is the latest ansible-playbook's.
        if isinstance(event.get("pid"), int) and (self.pid is None or kind == "playbook_on_start"):
            self.pid = event["pid"]
        if kind and kind.startswith("runner_") and data.get("host"):
            self.host_seen[data["host"]] = self.events

        if kind == "playbook_on_play_start":
            self._close_phase(when)
            name = data.get("play") or data.get("name") or ""
            key = phase_key(name)
            phase = self._phase(key, name)
            phase["_open"] = when
            if phase["started"] is None:
                phase["started"] = when
            self.phase, self.task, self.host = key, None, None
            self.phase_log.append((when, key))
            return True
        if kind == "playbook_on_task_start":
            self.task = data.get("task") or data.get("name")
            self.host = None
            if self.phase is not None:
                self.phases[self.phase]["tasks"] += 1
        elif kind == "runner_on_start":
            self.host = data.get("host")
        elif kind == "runner_on_ok":
            self._on_ok(data)
        elif kind == "runner_on_failed":
            self._on_failed(data, when)
        elif kind == "runner_on_unreachable":
            self._on_unreachable(data, when)
        elif kind == "playbook_on_stats":
            self._close_phase(when)
            self.stats = dict((k, data.get(k) or {}) for k in (
                "ok", "changed", "failures", "dark", "skipped", "rescued", "ignored", "processed"))
            self.task, self.host = None, None
        return False

    def _on_ok(self, data):
        res = data.get("res") or {}
        if res.get("changed") and self.phase is not None:
            phase = self.phases[self.phase]
            phase["changed"] += 1
            name = data.get("task") or "?"
            host = data.get("host") or "?"
            for entry in phase["changed_tasks"]:
                if entry["task"] == name:
                    if host not in entry["hosts"]:
                        entry["hosts"].append(host)
                    break
            else:
                phase["changed_tasks"].append({"task": name, "hosts": [host]})
        action = data.get("task_action")
        if action in TP_RANKS_ACTIONS and not res.get("skipped"):
            self.tp_ranks = tp_ranks_view(res, data.get("host"), ok=True)
        facts = res.get("ansible_facts") or {}
        if STATUS_FACT in facts and isinstance(facts[STATUS_FACT], dict):
            self.status[data.get("host") or "?"] = facts[STATUS_FACT]
        if QUALIFY_FACT in facts and isinstance(facts[QUALIFY_FACT], dict):
            self.qualify[data.get("host") or "?"] = facts[QUALIFY_FACT]
        if isinstance(facts.get(FIRST_FAILURE_FACT), dict):
            self.first_failure = facts[FIRST_FAILURE_FACT]
        if data.get("task") == SERVES_TASK:
            self.serving = True

    def _record_failure(self, entry):
        if len(self.failures) >= FAILURES_MAX:
            self.failures_dropped += 1
            return
        self.failures.append(entry)

    def _on_failed(self, data, when):
        if data.get("ignore_errors"):
            return
        res = data.get("res") or {}
        action = data.get("task_action")
        entry = {"phase": self.phase, "task": data.get("task"), "host": data.get("host"), "action": action,
                 "unreachable": False, "msg": _failure_message(res), "time": when, "seq": self.events}
        if action in TP_RANKS_ACTIONS:
            self.tp_ranks = tp_ranks_view(res, data.get("host"), ok=False)
            entry["tp_ranks"] = True
        if data.get("task") == SERVES_TASK:
            self.serving = False
        self._record_failure(entry)

    def _on_unreachable(self, data, when):
        if data.get("ignore_errors"):
            return
        res = data.get("res") or {}
        self._record_failure({"phase": self.phase, "task": data.get("task"), "host": data.get("host"),
                              "action": data.get("task_action"), "unreachable": True,
                              "msg": _clip(res.get("msg") or "unreachable"), "time": when, "seq": self.events})

    # ------------------------------------------------------------------ views

    def phases_view(self):
        """Phases without the bookkeeping key, durations of an open phase up to the last event."""
        out = {}
        for key, phase in self.phases.items():
            view = dict((k, v) for k, v in phase.items() if not k.startswith("_"))
            if phase.get("_open") is not None and self.last_time is not None:
                view["duration_s"] = round(view["duration_s"] + max(0.0, self.last_time - phase["_open"]), 3)
            view["changed_tasks"] = [dict(t, hosts=sorted(t["hosts"])) for t in phase["changed_tasks"]]
            out[key] = view
        return out

    def changed_total(self):
        return sum(p["changed"] for p in self.phases.values())

    def failure_view(self):
        """The tp_ranks failure first (when there is one), then every failed task in order; None if none.

        A failed task is `rescued` when its host ran more tasks afterwards (a block's rescue took over): a host
        whose failure stands leaves the play. The summary names the tp_ranks failure, else the first failure
        that stands (later ones are often consequences, e.g. the other members stopping), else the first one.
        """
        tp_failed = self.tp_ranks if self.tp_ranks and not self.tp_ranks.get("ok") else None
        if not self.failures and tp_failed is None:
            return None
        tasks = []
        for failure in self.failures:
            task = dict((k, v) for k, v in failure.items() if k not in ("time", "tp_ranks", "seq"))
            task["rescued"] = self.host_seen.get(failure["host"], 0) > failure["seq"]
            tasks.append(task)
        standing = [t for t in tasks if not t["rescued"]]
        if tp_failed is not None:
            summary = "tp_ranks on %s: %s" % (tp_failed.get("host"), tp_failed.get("msg"))
            lead = first_failure_line(tp_failed.get("diagnosis"))
            if lead:
                summary = lead + " | " + summary
        else:
            first = (standing or tasks)[0]
            summary = "%s on %s: %s" % (first["task"], first["host"], first["msg"])
        final = (standing or tasks or [None])[-1]
        return {"summary": _clip(summary), "tp_ranks": tp_failed, "failed_tasks": tasks,
                "final_task": final, "more_failures": self.failures_dropped}


class SplitEvents:
    """The events of ONE run over several groups, folded per group (pure: no I/O): each host's events (``runner_*``)
    go to the GroupEvents of the group that host belongs to, the run's own events (playbook, plays, tasks, stats) to
    every group's. `host_groups` maps host -> group; a host it does not name goes to the only group when there is one,
    else nowhere (it is no host of a group in this run). `feed()` is the event handler; `groups[name]` the folds."""

    def __init__(self, groups, host_groups):
        self.groups = dict((group, GroupEvents()) for group in groups)
        self.host_groups = dict(host_groups or {})
        self.only = next(iter(self.groups)) if len(self.groups) == 1 else None

    def group_of(self, host):
        group = self.host_groups.get(host)
        return group if group in self.groups else (None if group is not None else self.only)

    def feed(self, event):
        kind = event.get("event") or ""
        host = (event.get("event_data") or {}).get("host") if kind.startswith("runner_") else None
        if host is None:
            for events in self.groups.values():
                events.feed(event)
            return
        group = self.group_of(host)
        if group is not None:
            self.groups[group].feed(event)


def tp_ranks_view(res, host, ok):
    """The parts of a tp_ranks result the report keeps (never its logs)."""
    containers = res.get("containers") if isinstance(res.get("containers"), dict) else {}
    images = dict((node, c.get("image")) for node, c in sorted(containers.items()) if isinstance(c, dict))
    ranks = []
    for item in res.get("registered_ranks") or []:
        if isinstance(item, dict):
            ranks.append({"rank": item.get("rank"), "node": item.get("node")})
    view = {"ok": ok, "host": host, "registered_ranks": ranks, "world_size": res.get("world_size"),
            "elapsed_s": res.get("elapsed"), "ready_at": res.get("ready_at"), "images": images,
            "msg": _clip(res.get("msg")) if res.get("msg") else None}
    if not ok:
        view["missing_ranks"] = [{"rank": m.get("rank"), "node": m.get("node")}
                                 for m in res.get("missing_ranks") or [] if isinstance(m, dict)]
        view["diagnosis"] = [_diagnosis_entry(d) for d in res.get("diagnosis") or [] if isinstance(d, dict)]
    return view


# What tp_ranks adds to the diagnosis of the rank that failed first and to the others' consequences.
FIRST_FAILURE_KEYS = ("first_failure", "consequence_of", "exit_code", "killed", "finished_at")


def _diagnosis_entry(diag):
    entry = dict((k, diag.get(k)) for k in ("code", "rank", "node", "cause", "fix", "severity"))
    entry.update((k, diag[k]) for k in FIRST_FAILURE_KEYS if diag.get(k) is not None)
    return entry


def first_failure_line(diagnosis):
    """'rank 1 on h1 failed first (container exit code 137, killed at T); rank 0 on h0: lost its peer rank 1
    (consequence)' from a tp_ranks diagnosis, or None when it names no rank that failed first."""
    items = [d for d in diagnosis or [] if isinstance(d, dict)]
    first = [d for d in items if d.get("first_failure")]
    if not first:
        return None
    lead = next((d for d in first if d.get("exit_code") is not None), first[0])
    what = []
    if lead.get("exit_code") is not None:
        what.append("container exit code %s" % lead["exit_code"])
    if lead.get("killed"):
        what.append("killed" + (" at %s" % lead["finished_at"] if lead.get("finished_at") else ""))
    elif lead.get("finished_at"):
        what.append("ended at %s" % lead["finished_at"])
    if not what:
        what.append(lead.get("code") or "failed")
    text = "rank %s on %s failed first (%s)" % (lead.get("rank"), lead.get("node") or "unknown node", ", ".join(what))
    seen = []
    for diag in items:
        key = (diag.get("rank"), diag.get("node"), diag.get("consequence_of"))
        if diag.get("consequence_of") is not None and key not in seen:
            seen.append(key)
    for rank, node, peer in seen:
        text += "; rank %s on %s: lost its peer rank %s (consequence)" % (rank, node or "unknown node", peer)
    return text


def image_id(tp_ranks):
    """The one image every rank runs (None when unknown or when the ranks differ)."""
    if not tp_ranks:
        return None
    images = set(v for v in (tp_ranks.get("images") or {}).values() if v)
    return images.pop() if len(images) == 1 else None
