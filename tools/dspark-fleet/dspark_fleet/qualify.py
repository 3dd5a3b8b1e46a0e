"""dspark-fleet qualify: what playbooks/qualify.yml found on each serving group (pure: no I/O but printing).

Every host of a group sets the fact ``qualify_result``::

    {"host": str, "group": str, "ok": bool,
     "checks": [{"check": str, "subject": str, "value": any, "threshold": any,
                 "verdict": "pass" | "fail" | "warn" | "info" | "skip", "message": str,
                 "fix": str | null, "variable": str | null, "scope": "node" | "group"}]}

(the head, rank 0, also carries the group-scope checks). When a check fails, the play's last task fails on that
host, so the run ends failed: the verdict comes from the facts, not from the run's status.

The report entry of each group gets a ``qualify`` section (see ``section``):

- ``verdict``: ``qualified`` (every member left a result and no check failed), ``not qualified`` (a check
  failed), ``unreachable`` (a member could not be reached, no check failed), ``failed`` (the playbook failed
  without leaving every member's checks), or the run's ``cancelled`` / ``not_started`` / ``running``;
- ``summary``: one line (what the console prints after the group's name);
- ``checks`` / ``nodes``: how many checks on how many members with a result; ``counts`` by verdict;
- ``hosts``: per member: rank, state (as the verdict, per host; ``no result`` when it left none), ok, counts,
  ``problems`` (its fail and warn checks, fails first), every check as the playbook set it, and the error of an
  unreachable or failed host.

A check verdict outside pass/fail/warn/info/skip counts as a failure (a playbook newer than this tool).

``reprovision --rolling`` runs the same playbook per group before draining it; ``step`` gives that group's
``qualify`` section plus ``failing`` (its failing checks, each with its host), ``runner`` and ``logs``.
"""

from __future__ import annotations

import json

from .scheduler import CANCELLED, NOT_STARTED, OK, RUNNING

QUALIFIED = "qualified"
NOT_QUALIFIED = "not qualified"
UNREACHABLE = "unreachable"
FAILED = "failed"
NO_RESULT = "no result"

CHECK_VERDICTS = ("pass", "fail", "warn", "info", "skip")
PASSING = ("pass", "info", "skip")          # not listed as problems
CHECK_KEYS = ("check", "subject", "value", "threshold", "verdict", "message", "fix", "variable", "scope")
SUMMARY_FIX_MAX = 300


def normalize_check(check):
    """A check of the fact with every key present (scope defaults to node); None when it is not a dict."""
    if not isinstance(check, dict):
        return None
    out = dict((k, check.get(k)) for k in CHECK_KEYS)
    out["verdict"] = str(out["verdict"] or "fail").lower()
    out["scope"] = out["scope"] or "node"
    out.update((k, v) for k, v in check.items() if k not in out)
    return out


def is_failing(check):
    return check["verdict"] not in PASSING and check["verdict"] != "warn"


def is_problem(check):
    return check["verdict"] not in PASSING


def count_verdicts(checks):
    counts = dict((v, 0) for v in CHECK_VERDICTS)
    for check in checks:
        counts[check["verdict"]] = counts.get(check["verdict"], 0) + 1
    return counts


def _standing_failures(failure):
    """host -> its first failed task that stands (not rescued), from the entry's failure view."""
    out = {}
    for task in (failure or {}).get("failed_tasks") or []:
        if task.get("rescued") or not task.get("host"):
            continue
        out.setdefault(task["host"], task)
    return out


def host_view(host, rank, fact, failed_task):
    if fact is not None:
        raw = fact.get("checks")
        checks = [c for c in (normalize_check(c) for c in (raw if isinstance(raw, list) else [])) if c is not None]
        failing = any(is_failing(c) for c in checks)
        problems = sorted((c for c in checks if is_problem(c)), key=lambda c: 0 if is_failing(c) else 1)
        ok = bool(fact.get("ok")) and not failing
        return {"rank": rank, "state": QUALIFIED if ok else NOT_QUALIFIED, "ok": ok, "counts": count_verdicts(checks),
                "problems": problems, "checks": checks, "error": None}
    state, error = NO_RESULT, None
    if failed_task is not None:
        state = UNREACHABLE if failed_task.get("unreachable") else FAILED
        error = failed_task.get("msg")
        if state == FAILED and failed_task.get("task"):
            error = "%s: %s" % (failed_task["task"], error)
    return {"rank": rank, "state": state, "ok": None if state == NO_RESULT else False,
            "counts": count_verdicts([]), "problems": [], "checks": [], "error": error}


def section(entry, events):
    """The ``qualify`` section of one group's report entry (`events`: its GroupEvents, None when it never ran)."""
    result = entry["result"]
    facts = dict(events.qualify) if events is not None else {}
    standing = _standing_failures(entry.get("failure"))
    hosts = {}
    for member in entry.get("members") or []:
        hosts[member["host"]] = host_view(member["host"], member.get("rank"), facts.get(member["host"]),
                                          standing.get(member["host"]))
    for host, fact in facts.items():         # a host outside the group's members (should not happen): keep it
        if host not in hosts:
            hosts[host] = host_view(host, None, fact, standing.get(host))
    states = [h["state"] for h in hosts.values()]
    if result in (CANCELLED, NOT_STARTED, RUNNING):
        verdict = result
    elif NOT_QUALIFIED in states:
        verdict = NOT_QUALIFIED
    elif UNREACHABLE in states:
        verdict = UNREACHABLE
    elif result != OK or not hosts or any(s != QUALIFIED for s in states):
        verdict = FAILED
    else:
        verdict = QUALIFIED
    counts = dict((v, 0) for v in CHECK_VERDICTS)
    for view in hosts.values():
        for key, value in view["counts"].items():
            counts[key] = counts.get(key, 0) + value
    view = {"verdict": verdict, "summary": None, "checks": sum(counts.values()),
            "nodes": sum(1 for h in hosts.values() if h["state"] in (QUALIFIED, NOT_QUALIFIED)),
            "counts": counts, "hosts": hosts}
    view["summary"] = _summary(view, entry)
    return view


def problems(view):
    """Every fail and warn check of the group as (host, check), fails first, then in member order."""
    rows = [(host, c) for host, h in view["hosts"].items() for c in h["problems"]]
    return sorted(rows, key=lambda row: 0 if is_failing(row[1]) else 1)


def check_text(host, check, with_fix=True):
    """'spark-03 port 8000: held by container foo. Fix: docker rm -f foo'"""
    what = " ".join(str(p) for p in (host, check.get("check"), check.get("subject")) if p not in (None, ""))
    text = "%s: %s" % (what, str(check.get("message") or check["verdict"]).strip())
    if with_fix and check.get("fix"):
        fix = str(check["fix"])
        if len(fix) > SUMMARY_FIX_MAX:
            fix = fix[:SUMMARY_FIX_MAX - 3] + "..."
        text += ("" if text.endswith((".", "!", "?")) else ".") + " Fix: " + fix
    return text


def _plural(count, word):
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def _summary(view, entry):
    verdict = view["verdict"]
    counts = view["counts"]
    if verdict == QUALIFIED:
        text = "%s on %s" % (_plural(view["checks"], "check"), _plural(view["nodes"], "node"))
        if counts.get("warn"):
            text += ", " + _plural(counts["warn"], "warning")
        return text
    if verdict == NOT_QUALIFIED:
        rows = [r for r in problems(view) if is_failing(r[1])]
        if rows:
            text = check_text(*rows[0])
        else:
            text = "; ".join("%s: its qualify_result is not ok" % host for host, h in view["hosts"].items()
                             if h["state"] == NOT_QUALIFIED)
        if len(rows) > 1:
            text += " (and %d more failing check%s)" % (len(rows) - 1, "" if len(rows) == 2 else "s")
        return text
    if verdict in (UNREACHABLE, FAILED):
        by_error = {}                       # the same error on several hosts: named once
        for host, h in view["hosts"].items():
            if h["state"] == verdict:
                by_error.setdefault(h["error"] or verdict, []).append(host)
        if by_error:
            return "; ".join("%s: %s" % (", ".join(hosts), error) for error, hosts in by_error.items())
        missing = [host for host, h in view["hosts"].items() if h["state"] == NO_RESULT]
        failure = (entry.get("failure") or {}).get("summary")
        if failure:
            return failure
        if missing:
            return "no qualify_result from %s (does the playbook set it?)" % ", ".join(missing)
        return "the run ended %s" % entry["result"]
    failure = (entry.get("failure") or {}).get("summary")
    return failure or verdict.replace("_", " ")


def step(status, rc, events, members, logs, error=None, stdout_tail=""):
    """The ``qualify`` section of a rolling group: what qualify.yml --limit <group> found before the drain.

    `status`/`rc`/`error`: the run's (RunResult); `events`: its own GroupEvents; `members`: [{host, rank}];
    `logs`: {artifacts_dir, stdout}; `stdout_tail`: the end of its stdout (named when it failed without a task).
    """
    result = OK if status == "successful" else CANCELLED if status == "canceled" else FAILED
    failure = events.failure_view()
    if failure is None and result == FAILED:
        summary = error or "ansible-playbook ended with status %s (rc %s) without a failed task%s" % (
            status, rc, (": " + stdout_tail) if stdout_tail else "")
        failure = {"summary": summary, "failed_tasks": []}
    view = section({"result": result, "members": members, "failure": failure}, events)
    view["failing"] = [dict(check, host=host) for host, check in problems(view) if is_failing(check)]
    view["runner"] = {"status": status, "rc": rc}
    view["logs"] = logs
    return view


def exit_code(entries):
    """0 when every group is qualified, else 1."""
    return 0 if entries and all((e.get("qualify") or {}).get("verdict") == QUALIFIED
                                for e in entries.values()) else 1


# --------------------------------------------------------------------------- console


def summary_line(name, entry):
    view = entry.get("qualify") or {"verdict": entry["result"], "summary": None}
    verdict = view["verdict"]
    if verdict == QUALIFIED:
        return "%s qualified (%s)" % (name, view["summary"])
    label = "NOT qualified" if verdict == NOT_QUALIFIED else verdict.replace("_", " ").upper()
    return "%s %s: %s" % (name, label, view["summary"]) if view.get("summary") else "%s %s" % (name, label)


def print_summary(entries, stop_reason=None):
    """The console's verdicts, one line per group (`stop_reason`: why the run stopped early)."""
    tally = {}
    for entry in entries.values():
        verdict = (entry.get("qualify") or {}).get("verdict", entry["result"])
        tally[verdict] = tally.get(verdict, 0) + 1
    print("")
    print("qualify: %d group(s): %s" % (len(entries), ", ".join(
        "%d %s" % (n, v.replace("_", " ")) for v, n in tally.items()) or "none"))
    if stop_reason:
        print("Stopped early: %s" % stop_reason)
    for name, entry in entries.items():
        print("  " + summary_line(name, entry))
        verdict = (entry.get("qualify") or {}).get("verdict")
        if verdict in (FAILED, UNREACHABLE) and entry.get("logs"):
            print("    log: %s" % entry["logs"]["stdout"])


# --------------------------------------------------------------------------- Markdown


def _value(value):
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def markdown(group, table, title="Qualify"):
    """The qualify part of a group's Markdown section; `table(header, rows)` renders a table (report._table)."""
    view = group.get("qualify")
    if not view:
        return []
    counts = view["counts"]
    out = ["", "%s: **%s**: %s" % (title, view["verdict"], view["summary"] or "-"), "",
           "%s on %s: %s." % (_plural(view["checks"], "check"), _plural(view["nodes"], "node"),
                              ", ".join("%d %s" % (n, v) for v, n in counts.items() if n) or "none")]
    if (view.get("logs") or {}).get("stdout"):
        out += ["", "Log: `%s`" % view["logs"]["stdout"]]
    out += [""] + table(["host", "rank", "result", "pass", "fail", "warn", "info", "skip", "error"], [
        [host, h["rank"], h["state"], h["counts"].get("pass"), h["counts"].get("fail"), h["counts"].get("warn"),
         h["counts"].get("info"), h["counts"].get("skip"), h["error"]] for host, h in view["hosts"].items()])
    rows = problems(view)
    if rows:
        out += ["", "Failing and warning checks (%d passing not listed: the JSON report keeps every check):"
                % counts.get("pass", 0), ""]
        out += table(["host", "check", "subject", "value", "threshold", "verdict", "message", "Fix"], [
            [host + (" (group)" if c.get("scope") == "group" else ""), c.get("check"), c.get("subject"),
             _value(c.get("value")), _value(c.get("threshold")), c["verdict"], c.get("message"),
             c.get("fix") + (" (variable `%s`)" % c["variable"] if c.get("variable") else "") if c.get("fix")
             else ("variable `%s`" % c["variable"] if c.get("variable") else None)]
            for host, c in rows])
    elif view["checks"]:
        out += ["", "No failing or warning check (%d passing: the JSON report keeps every check)."
                % counts.get("pass", 0)]
    return out
