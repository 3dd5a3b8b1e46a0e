"""The supervisor's journal: one JSON object per line, appended (O_APPEND, one write per record, fsync).

Every record has ``time`` (seconds since the epoch), ``iso`` (UTC), ``group`` (or null for the watch itself) and
``action``; the rest depends on the action (see ACTIONS). A torn last line (a crash mid-write) is skipped on
reading. `summarize()` folds a journal into each group's supervisor state: what `watch` resumes from after a
restart of the service, and what `dspark-fleet status` prints.
"""

from __future__ import annotations

import json
import os
import time

from .report import iso

DEFAULT_NAME = "journal.jsonl"

# action -> meaning
ACTIONS = {
    "watch_start": "the supervisor started (options)",
    "watch_stop": "the supervisor stopped (reason)",
    "check": "a check of the group: ok true/false, summary, diagnosis",
    "locked": "the group's lock is held (a reprovision): nothing done this round",
    "logs": "every rank's logs collected (dir)",
    "restart": "the group was restarted as one unit: ok true/false, attempt, summary",
    "backoff": "broken, but the next restart is not due yet (due)",
    "give_up": "no more restarts (reason): the group is marked failed",
    "needs_reboot": "a node's memory was not reclaimed: not retried, the group is marked failed",
    "failed": "the group is marked failed; nothing done (reason)",
    "recovered": "a group marked failed serves again (fixed by hand): its failed mark is cleared",
    "error": "the supervisor could not run a playbook (msg)",
    "drain": "the broken group was taken out of the router's rotation: ok true/false, summary",
    "enable": "the group serves again and was put back in the router's rotation: ok true/false, summary",
}


def default_path(state_dir):
    return os.path.join(state_dir, DEFAULT_NAME)


class Journal:
    def __init__(self, path, clock=time.time):
        self.path = os.path.abspath(path)
        self.clock = clock

    def write(self, action, group=None, **fields):
        now = self.clock()
        record = {"time": round(now, 3), "iso": iso(now), "group": group, "action": action}
        record.update(fields)
        line = (json.dumps(record, sort_keys=False, default=str) + "\n").encode("utf-8")
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        return record

    def read(self):
        return read(self.path)


def read(path):
    records = []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                line = line.strip()
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and "action" in record:
                    records.append(record)
    except FileNotFoundError:
        return []
    return records


def new_state():
    return {"restarts": [], "failed": None, "last_failure": None, "diagnosis": None, "last_check": None,
            "last_ok": None, "attempts": 0, "drained": None}


def fold(state, record):
    """Apply one journal record to a group's state (pure). `attempts`: restarts since it last served."""
    action = record.get("action")
    when = record.get("time")
    if action == "check":
        state["last_check"] = when
        if record.get("ok"):
            state["last_ok"] = when
            state["attempts"] = 0
        else:
            state["last_failure"] = {"time": when, "summary": record.get("summary")}
            state["diagnosis"] = record.get("diagnosis") or state["diagnosis"]
    elif action == "restart":
        state["restarts"].append(when)
        state["attempts"] += 1
        if not record.get("ok"):
            state["last_failure"] = {"time": when, "summary": record.get("summary")}
            if record.get("diagnosis"):
                state["diagnosis"] = record["diagnosis"]
    elif action in ("give_up", "needs_reboot"):
        state["failed"] = {"time": when, "reason": record.get("reason")}
    elif action == "drain" and record.get("ok"):
        state["drained"] = when                 # drained by the supervisor: it alone puts the group back
    elif action == "enable" and record.get("ok"):
        state["drained"] = None
    elif action == "recovered":
        state["failed"] = None
        state["attempts"] = 0
    return state


def summarize(records, groups=None):
    """{group: state} over the records (only `groups` when given)."""
    states = {}
    for record in records:
        group = record.get("group")
        if not group or (groups is not None and group not in groups):
            continue
        fold(states.setdefault(group, new_state()), record)
    return states


def diagnosis_text(diagnosis):
    """tp_ranks diagnosis entries -> one short line: the rank that failed first leads, the other ranks' consequences
    of it are summed up per rank at the end ("rank 0 on h0: lost its peer rank 1 (consequence: peer_lost, ...)")."""
    if not diagnosis:
        return ""
    if isinstance(diagnosis, str):
        return diagnosis
    items = list(diagnosis)
    dicts = [i for i in items if isinstance(i, dict)]
    items.sort(key=lambda i: not (isinstance(i, dict) and i.get("first_failure")))
    parts = []
    consequences = {}
    for item in items:
        if isinstance(item, dict):
            if item.get("consequence_of") is not None and any(d.get("first_failure") for d in dicts):
                key = (item.get("rank"), item.get("node"), item["consequence_of"])
                consequences.setdefault(key, []).append(item.get("code") or "?")
                continue
            where = " ".join(str(x) for x in ("rank %s" % item["rank"] if item.get("rank") is not None else None,
                                              "on %s" % item["node"] if item.get("node") else None) if x)
            if item.get("first_failure"):
                where += ", failed first"
            parts.append("%s%s: %s" % (item.get("code") or "?", (" (%s)" % where) if where else "",
                                       item.get("cause") or ""))
        else:
            parts.append(str(item))
    for (rank, node, peer), codes in consequences.items():
        parts.append("rank %s on %s: lost its peer rank %s (consequence: %s)" % (
            rank, node or "unknown node", peer, ", ".join(sorted(set(codes), key=codes.index))))
    return "; ".join(parts)
