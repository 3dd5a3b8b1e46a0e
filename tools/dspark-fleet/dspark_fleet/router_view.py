"""`status` with routers: each router's view of the groups and which router holds the service address (issue #42).

playbooks/router_status.yml runs once over group dspark_router (it changes nothing) and writes each router's result
(router_report_file): its backend's servers and, with several routers behind router_vip, whether it holds the address
and whether keepalived's check passes there. A router that did not answer is missing from that file: it is reported
as such, never left out. `problems()` says what an operator must know: no router or several hold the address, one
router left that can take it, a group in rotation on one router but not on another.
"""

from __future__ import annotations

import json
import os

from . import rolling
from .orchestrator import run_one
from .scheduler import CONVERGED

PLAYBOOK = "playbooks/router_status.yml"
IDENT = "router_status"


def read(sel, interrupts, prog):
    """Run router_status.yml over the routers; the report's `routers` section (see view())."""
    path = os.path.join(sel.artifacts, "router_status.json")
    spec = sel.spec(IDENT, sel.artifacts, PLAYBOOK, None,
                    sel.extra_args() + ["-e", json.dumps({"router_report_file": path})])
    if not os.path.isfile(spec.playbook):
        return view(sel.routers, {}, "%s is missing under --project-dir" % PLAYBOOK, None)
    prog.message("routers: reading %s (%s)" % (", ".join(sel.routers), PLAYBOOK))
    run = run_one(spec, CONVERGED, prog, interrupts)
    error = None
    if run.result != CONVERGED:
        failure = run.events.failure_view()
        error = failure["summary"] if failure else "%s did not complete (log: %s)" % (PLAYBOOK, spec.stdout_path)
    return view(sel.routers, rolling.read_router_report(path), error, spec.stdout_path)


def _server(server):
    return {"status": server.get("status"), "admin": server.get("admin"), "in_rotation": bool(server.get("in_rotation")),
            "sessions": server.get("sessions")}


def view(routers, report, error, log):
    """The section from the playbook's report ({router: result}): every router of the inventory, in its order."""
    out = {"error": error, "log": log, "address": None, "holders": [], "routers": {}}
    for name in routers:
        result = report.get(name)
        if not isinstance(result, dict):
            out["routers"][name] = {"answered": False, "holds_address": None, "can_take_address": None, "servers": {}}
            continue
        held = result.get("service_address") or None
        if held:
            out["address"] = held.get("address")
        out["routers"][name] = {
            "answered": bool(result.get("ok")),
            "holds_address": bool(held["holds"]) if held else None,
            "can_take_address": bool(held["check_passes"]) if held else None,
            "servers": dict((s.get("name"), _server(s)) for s in result.get("servers") or [] if isinstance(s, dict)),
        }
        if held and held.get("holds"):
            out["holders"].append(name)
    out["problems"] = problems(out)
    return out


def problems(section):
    """What the operator must know, one sentence each with the fix."""
    routers = section["routers"]
    out = []
    silent = [name for name, r in routers.items() if not r["answered"]]
    if silent:
        why = section.get("error") or "no result"
        out.append("router(s) %s did not answer (%s): their view is unknown. Fix: look at that host's HAProxy "
                   "(systemctl status haproxy) or run playbooks/router.yml" % (", ".join(silent), why))
    if section["address"]:
        holders = section["holders"]
        if not holders and not silent:
            out.append("no router holds the service address %s: clients reach no endpoint. A router takes it only "
                       "when its HAProxy sees a serving group up (is every group down?)" % section["address"])
        elif len(holders) > 1:
            out.append("%d routers hold the service address %s (%s): VRRP between them is broken (a partition, or "
                       "router_vrrp_router_id or router_vrrp_auth_pass differs); per-key limits count twice"
                       % (len(holders), section["address"], ", ".join(holders)))
        able = [name for name, r in routers.items() if r["can_take_address"]]
        if len(routers) > 1 and len(able) < 2:
            out.append("only %s of %d routers can take the service address (%s): the next failure takes the endpoint "
                       "down. Fix: bring the others back (systemctl start haproxy there, or playbooks/router.yml)"
                       % (len(able), len(routers), ", ".join(able) or "none"))
    groups = sorted(set(g for r in routers.values() for g in r["servers"]))
    for group in groups:
        states = dict((name, r["servers"].get(group)) for name, r in routers.items() if r["answered"])
        inside = [name for name, s in states.items() if s and s["in_rotation"]]
        if inside and len(inside) < len(states):
            out.append("group %s is in rotation on %s but not on %s: a drain or enable did not reach every router. "
                       "Fix: run playbooks/router_drain.yml or router_enable.yml -e router_target_group=%s again"
                       % (group, ", ".join(inside), ", ".join(sorted(set(states) - set(inside))), group))
    return out


def print_table(section):
    """A row per router: whether it holds the service address, may take it, and each group's state there."""
    routers = section["routers"]
    groups = sorted(set(g for r in routers.values() for g in r["servers"]))
    header = ["router", "service address", "can take it"] + groups
    rows = []
    for name, r in routers.items():
        if not r["answered"]:
            rows.append([name, "no answer", "-"] + ["-"] * len(groups))
            continue
        held = {True: "HOLDS", False: "backup", None: "(none set)"}[r["holds_address"]]
        able = {True: "yes", False: "NO", None: "-"}[r["can_take_address"]]
        cells = []
        for group in groups:
            server = r["servers"].get(group)
            cells.append("-" if server is None else "%s %s%s" % (
                server["status"], server["admin"], "" if server["in_rotation"] else " (out)"))
        rows.append([name, held, able] + cells)
    widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(len(header))]
    print("")
    print("Routers%s:" % ((" (service address %s)" % section["address"]) if section["address"] else ""))
    for row in [header] + rows:
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    for problem in section["problems"]:
        print("  ! " + problem)
