"""The fleet report: JSON (schema ``dspark-fleet-report/1``, see report.schema.json) and Markdown next to it.

Both files are written atomically (a temporary file in the same directory, fsync, rename): an interrupted
write leaves the previous report, never half of one. The report holds no inventory or extra-vars value,
only hashes of them. A `qualify` report's group entries also carry a ``qualify`` section (see qualify.py), and
so does a `reprovision --rolling` group that was qualified before its drain (qualify.step).
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone

from . import __version__, metrics
from .events import image_id
from .qualify import markdown as qualify_markdown
from .scheduler import RESULTS

SCHEMA_ID = "dspark-fleet-report/1"
SCHEMA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report.schema.json")


def load_schema():
    with open(SCHEMA_FILE, encoding="utf-8") as handle:
        return json.load(handle)


def iso(stamp):
    """Seconds since the epoch -> ISO 8601 UTC (None stays None)."""
    if stamp is None:
        return None
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _seconds(start, end):
    if start is None or end is None:
        return None
    return round(max(0.0, end - start), 3)


def short_image(image):
    """'sha256:0123456789abcdef...' -> '0123456789ab'; anything else unchanged."""
    if not image:
        return None
    image = str(image)
    if image.startswith("sha256:"):
        return image[7:19]
    return image


def group_entry(name, result, fingerprint, members, model, revision, events=None, started=None, finished=None,
                runner=None, logs=None, memory_kib=None, skip_reason=None, previous=None, error=None, rotation=None):
    """One group of the report. `events` is the group's GroupEvents (None when it never ran)."""
    entry = {
        "result": result,
        "fingerprint": fingerprint,
        "members": members,
        "head": next((m["host"] for m in members if m.get("rank") == 0), None),
        "model": model,
        "model_revision": revision,
        "started": iso(started),
        "finished": iso(finished),
        "duration_s": _seconds(started, finished),
        "phases": {},
        "changed": 0,
        "image_id": None,
        "tp_ranks": None,
        "failure": None,
        "status": None,
        "skip_reason": skip_reason,
        "previous": previous,
        "runner": runner,
        "logs": logs,
        "controller_memory_peak_kib": memory_kib,
    }
    if rotation is not None:
        entry["rotation"] = rotation_view(rotation)
    if events is not None:
        phases = events.phases_view()
        for phase in phases.values():
            phase["started"] = iso(phase["started"])
            phase["ended"] = iso(phase["ended"])
        entry["phases"] = phases
        entry["changed"] = events.changed_total()
        if events.tp_ranks is not None and events.tp_ranks.get("ok"):
            proof = dict(events.tp_ranks)
            ready = proof.get("ready_at")
            proof["ready_at_iso"] = iso(ready) if isinstance(ready, (int, float)) else None
            entry["tp_ranks"] = proof
        entry["image_id"] = image_id(events.tp_ranks)
        if events.status:
            entry["status"] = status_view(events)
            if entry["image_id"] is None:
                images = set(r["image"] for r in entry["status"]["ranks"] if r.get("image"))
                entry["image_id"] = images.pop() if len(images) == 1 else None
        failure = events.failure_view()
        if failure is not None and result not in ("converged", "ok"):
            entry["failure"] = failure
    if error and entry["failure"] is None:
        entry["failure"] = {"summary": error, "tp_ranks": None, "failed_tasks": [], "final_task": None,
                            "more_failures": 0}
    return entry


def rotation_view(rotation):
    """--rolling: the group at the router (times of the drain as ISO)."""
    view = dict(rotation)
    if view.get("drain"):
        drain = dict(view["drain"])
        drain["started_at"] = iso(drain.get("started_at"))
        drain["finished_at"] = iso(drain.get("finished_at"))
        view["drain"] = drain
    return view


def rotation_text(rotation):
    """One line: how long the group was out of rotation, or why it is still out."""
    parts = []
    drain = rotation.get("drain") or {}
    if drain.get("bound_hit"):
        parts.append("drain bound hit (%s open session(s) after %s s)" % (
            drain.get("sessions_left"), drain.get("waited_s")))
    if rotation.get("cut_sessions"):
        parts.append("%s request(s) still open at the drain bound, cut by the restart unless they ended first "
                     "(--on-drain-timeout continue)" % rotation["cut_sessions"])
    if rotation.get("back_in_rotation"):
        parts.append("out of rotation %s s" % rotation.get("out_of_rotation_s"))
    elif rotation.get("left_out"):
        parts.append("LEFT OUT OF ROTATION")
    if rotation.get("note"):
        parts.append(rotation["note"])
    return ", ".join(parts) or "not drained"


ROLLBACK_RESULTS = {"rolled_back": "rolled back, proven and back in rotation",
                    "proven_left_out": "rolled back and proven, but its health check did not pass: LEFT OUT OF ROTATION",
                    "failed": "the rollback FAILED its proof too: LEFT OUT OF ROTATION (drained)",
                    "cancelled": "the rollback was cancelled: LEFT OUT OF ROTATION (drained)",
                    "not_attempted": "not attempted"}


def _config_text(config):
    if not config:
        return "-"
    revision = config.get("revision")
    return "image %s, model %s%s" % (config.get("image") or "?", config.get("model") or "?",
                                     ("@" + str(revision)[:12]) if revision else "")


def rollback_text(rollback):
    """--rolling, a group that failed its proof: whether it went back to its last proven image and revision."""
    text = ROLLBACK_RESULTS.get(rollback.get("result"), str(rollback.get("result")))
    if rollback.get("attempted"):
        text += " (from %s to %s, proven %s)" % (_config_text(rollback.get("from")), _config_text(rollback.get("to")),
                                                 rollback.get("recorded_at") or "?")
    if rollback.get("reason"):
        text += ": %s" % rollback["reason"]
    if rollback.get("error"):
        text += "; %s" % rollback["error"]
    return text


def status_view(events):
    """Rows of `status`: one per rank, from each rank's serve_status fact."""
    rows = []
    for host, fact in events.status.items():
        container = fact.get("container") if isinstance(fact.get("container"), dict) else {}
        models = fact.get("api_models")
        rows.append({
            "host": host,
            "rank": _int_or_none(fact.get("rank")),
            "state": container.get("state"),
            "exit_code": _int_or_none(container.get("exit_code")),
            "restarts": _int_or_none(container.get("restarts")),
            "image": container.get("image"),
            "api_models": list(models) if isinstance(models, list) else None,
        })
    rows.sort(key=lambda r: (r["rank"] is None, r["rank"] or 0, r["host"]))
    view = {"serving": events.serving, "ranks": rows}
    first = getattr(events, "first_failure", None)
    if isinstance(first, dict) and first.get("host"):
        # status.yml's rule: the rank whose container ended first, else the only one killed, else the only one
        # that ended while the others run; the other ranks' failures are its consequences.
        view["first_failure"] = {"host": first.get("host"), "rank": _int_or_none(first.get("rank")),
                                 "state": first.get("label") or first.get("state"),
                                 "exit_code": _int_or_none(first.get("exit_code")),
                                 "killed": bool(first.get("killed")),
                                 "finished_at": (first.get("finished") + "Z") if first.get("finished") else None}
    return view


def _int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def totals(groups):
    out = {"groups": len(groups)}
    for result in RESULTS:
        out[result] = sum(1 for g in groups.values() if g["result"] == result)
    return out


def build(meta, groups, exit_code, complete=True):
    """The whole report; `meta` holds command, inventory, dirs, times (epoch), preflight and stop reason."""
    report = {
        "schema": SCHEMA_ID,
        "tool": {"name": "dspark-fleet", "version": __version__},
        "complete": complete,
        "command": meta["command"],
        "inventory": meta["inventory"],
        "project_dir": meta["project_dir"],
        "code_sha256": meta["code_sha256"],
        "artifacts_dir": meta["artifacts_dir"],
        "started": iso(meta["started"]),
        "finished": iso(meta.get("finished")),
        "duration_s": _seconds(meta["started"], meta.get("finished")),
        "interrupted": bool(meta.get("interrupted")),
        "stop_reason": meta.get("stop_reason"),
        "preflight": meta.get("preflight"),
        "router": meta.get("router"),
        "routers": meta.get("routers"),
        "totals": totals(groups),
        "exit_code": exit_code,
        "groups": groups,
    }
    return report


# --------------------------------------------------------------------------- writing


def write_atomic(path, text):
    """Write `text` to `path` so that readers see the old file or the new one, never a part."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def markdown_path(json_path):
    base, ext = os.path.splitext(json_path)
    return (base if ext.lower() == ".json" else json_path) + ".md"


def write(report, path):
    """The JSON report at `path` and its Markdown next to it (same name, .md); returns both paths."""
    md_path = markdown_path(path)
    write_atomic(path, json.dumps(report, indent=2, sort_keys=False) + "\n")
    write_atomic(md_path, to_markdown(report))
    return path, md_path


# --------------------------------------------------------------------------- Markdown


def _cell(value):
    if value is None or value == "":
        return "-"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _duration(seconds):
    if seconds is None:
        return "-"
    seconds = float(seconds)
    if seconds < 60:
        return "%.1f s" % seconds
    minutes, rest = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return "%dm%02ds" % (minutes, rest)
    hours, minutes = divmod(minutes, 60)
    return "%dh%02dm" % (hours, minutes)


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([" --- "] * len(header)) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return lines


def _proof_text(group, subcommand="qualify"):
    if group.get("qualify") and subcommand == "qualify":
        view = group["qualify"]
        return "%s: %s" % (view["verdict"], view["summary"]) if view.get("summary") else view["verdict"]
    proof = group.get("tp_ranks")
    if proof:
        ranks = ", ".join("%s on %s" % (r.get("rank"), r.get("node")) for r in proof.get("registered_ranks") or [])
        return "ranks %s (world size %s), ready %s" % (
            ranks or "-", proof.get("world_size"), proof.get("ready_at_iso") or "-")
    if group.get("failure"):
        rollback = group.get("rollback") or {}
        return "FAILED: " + group["failure"]["summary"] + (
            " (%s)" % ROLLBACK_RESULTS[rollback["result"]] if rollback.get("attempted") else "")
    if group.get("skip_reason"):
        return group["skip_reason"]
    return "-"


def to_markdown(report):
    cmd = report["command"]
    out = ["# dspark-fleet %s" % cmd["subcommand"], ""]
    if not report.get("complete"):
        out += ["**Written while the run was still going: not final.**", ""]
    out += _table(["", ""], [
        ["Command", "`%s`" % " ".join(cmd.get("argv") or [])],
        ["Inventory", report["inventory"]],
        ["Started", report["started"]],
        ["Finished", report["finished"]],
        ["Duration", _duration(report.get("duration_s"))],
        ["Exit code", report.get("exit_code")],
        ["Artifacts", report["artifacts_dir"]],
        ["Stopped early", report.get("stop_reason")],
    ])
    totals_row = report["totals"]
    out += ["", "## Totals", ""]
    out += _table(["groups", "converged", "ok", "failed", "cancelled", "skipped", "not started"],
                  [[totals_row["groups"], totals_row["converged"], totals_row["ok"], totals_row["failed"],
                    totals_row["cancelled"], totals_row["skipped"], totals_row["not_started"]]])
    preflight = report.get("preflight")
    if preflight:
        out += ["", "## Global validation (playbooks/preflight.yml)", "",
                "Result: **%s**%s" % (preflight.get("result"),
                                      (": " + preflight["msg"]) if preflight.get("msg") else ""),
                "", "Log: `%s`" % preflight.get("stdout")]
    router = report.get("router")
    if router:
        out += ["", "## Router (playbooks/router.yml)", "",
                "Result: **%s**%s" % (router.get("result"), (": " + router["error"]) if router.get("error") else ""),
                "", "Why: %s" % router.get("reason")]
        if router.get("logs"):
            out += ["", "Log: `%s`" % router["logs"].get("stdout")]
    routers = report.get("routers")
    if routers:
        out += ["", "## Routers (playbooks/router_status.yml)", ""]
        if routers.get("address"):
            out += ["Service address %s, held by: %s" % (routers["address"], ", ".join(routers["holders"]) or "none"), ""]
        for name, view in routers["routers"].items():
            out.append("- %s: %s" % (name, "no answer" if not view["answered"] else ", ".join(
                "%s %s%s" % (g, s["status"], "" if s["in_rotation"] else " (out of rotation)")
                for g, s in sorted(view["servers"].items())) or "no server"))
        out += ["- problem: %s" % p for p in routers["problems"]]
    out += ["", "## Groups", ""]
    rows = []
    for name, group in report["groups"].items():
        model = group.get("model")
        if model and group.get("model_revision"):
            model = "%s@%s" % (model, str(group["model_revision"])[:12])
        rows.append([name, "**%s**" % group["result"], _duration(group.get("duration_s")), group.get("changed"),
                     short_image(group.get("image_id")), model, _proof_text(group, cmd["subcommand"])])
    out += _table(["group", "result", "duration", "changed", "image", "model", "proof / failure"], rows)
    if any("metrics" in group for group in report["groups"].values()):
        out += ["", "## Engine (vLLM) per group", ""]
        out += _table(["group", "running", "waiting", "KV cache", "TTFT p95", "source"], metrics.rows(report["groups"]))
    for name, group in report["groups"].items():
        out += _group_section(name, group, cmd["subcommand"])
    return "\n".join(out) + "\n"


def _state_cell(row, first):
    """'exited (137)' for an ended container, marked when it failed first."""
    text = row.get("state")
    if text in ("exited", "dead") and row.get("exit_code") is not None:
        text = "%s (%s)" % (text, row["exit_code"])
    if first and first.get("host") == row.get("host"):
        text = "%s, failed first" % text
    return text


def _rank_cell(diag):
    """The rank of a diagnosis, marked when it failed first or when its error is a consequence of another's."""
    rank = diag.get("rank")
    if diag.get("first_failure"):
        return "%s (failed first)" % rank
    if diag.get("consequence_of") is not None:
        return "%s (consequence of rank %s)" % (rank, diag["consequence_of"])
    return rank


def _group_section(name, group, subcommand):
    out = ["", "### %s: %s" % (name, group["result"]), ""]
    members = ", ".join("%s (rank %s)" % (m["host"], m.get("rank")) for m in group.get("members") or [])
    out.append("- members: %s" % (members or "-"))
    out.append("- inputs fingerprint: `%s`" % group.get("fingerprint"))
    if group.get("skip_reason"):
        out.append("- skipped: %s" % group["skip_reason"])
    logs = group.get("logs") or {}
    if logs:
        out.append("- log: `%s` (artifacts `%s`)" % (logs.get("stdout"), logs.get("artifacts_dir")))
    if group.get("rotation"):
        out.append("- router: %s" % rotation_text(group["rotation"]))
    if group.get("rollback"):
        out.append("- **rollback**: %s" % rollback_text(group["rollback"]))
        if (group["rollback"].get("logs") or {}).get("stdout"):
            out.append("- rollback log: `%s`" % group["rollback"]["logs"]["stdout"])
    if group.get("controller_memory_peak_kib"):
        out.append("- controller memory peak (ansible-playbook): %.0f MiB"
                   % (group["controller_memory_peak_kib"] / 1024.0))
    phases = group.get("phases") or {}
    if phases:
        out += ["", "| phase | duration | tasks | changed |", "| --- | --- | --- | --- |"]
        for key, phase in phases.items():
            out.append("| %s | %s | %s | %s |" % (key, _duration(phase.get("duration_s")), phase.get("tasks"),
                                                  phase.get("changed")))
    if subcommand == "plan":
        changes = [(key, t) for key, phase in phases.items() for t in phase.get("changed_tasks") or []]
        out += ["", "Would change:" if changes else "Would change: nothing."]
        for key, task in changes:
            out.append("- %s: %s (%s)" % (key, task["task"], ", ".join(task["hosts"])))
    if group.get("qualify"):
        out += qualify_markdown(group, _table, "Qualify" if subcommand == "qualify" else "Qualify before the drain")
    proof = group.get("tp_ranks")
    if proof:
        out += ["", "tp_ranks proof: world size %s, checked in %s s, ready at %s" % (
            proof.get("world_size"), proof.get("elapsed_s"), proof.get("ready_at_iso") or "-"), ""]
        out += _table(["rank", "node", "image"], [
            [r.get("rank"), r.get("node"), short_image((proof.get("images") or {}).get(r.get("node")))]
            for r in proof.get("registered_ranks") or []])
    status = group.get("status")
    if status:
        out += ["", "Serving: **%s**" % {True: "yes", False: "no", None: "unknown"}[status.get("serving")], ""]
        first = status.get("first_failure")
        if first:
            out[-1:] = ["", "**First failed:** rank %s on %s: its container %s%s; the other ranks' failures are its "
                        "consequences" % (first["rank"], first["host"], first["state"],
                                          " at %s" % first["finished_at"] if first.get("finished_at") else ""), ""]
        out += _table(["node", "rank", "container", "restarts", "image", "API models"], [
            [r["host"], r["rank"], _state_cell(r, first), r["restarts"], short_image(r["image"]),
             ", ".join(r["api_models"]) if r["api_models"] is not None else None] for r in status["ranks"]])
    failure = group.get("failure")
    if failure:
        out += ["", "**Failure:** %s" % _cell(failure["summary"])]
        tp_failed = failure.get("tp_ranks")
        if tp_failed:
            out += ["", "tp_ranks diagnosis (the rank that failed first leads):", ""]
            out += _table(["code", "rank", "node", "cause", "fix"], [
                [d.get("code"), _rank_cell(d), d.get("node"), d.get("cause"), d.get("fix")]
                for d in tp_failed.get("diagnosis") or []])
        final = failure.get("final_task")
        if failure.get("failed_tasks"):
            out += ["", "Failed tasks, in order (rescued: a block's rescue took over and the host went on):", ""]
            out += _table(["phase", "task", "host", "message"], [
                [t.get("phase"), t.get("task"),
                 (t.get("host") or "-") + (" (unreachable)" if t.get("unreachable") else "")
                 + (" (rescued)" if t.get("rescued") else ""), t.get("msg")] for t in failure["failed_tasks"]])
            if final:
                out += ["", "Ended by: %s on %s: %s" % (final.get("task"), final.get("host"), _cell(final.get("msg")))]
        elif final is None:
            out += ["", "No task failed: see the log."]
    return out
