"""`reprovision` converges the fleet's router too, so that one command leaves one endpoint (issue #29, item 1).

The router's configuration is derived from the whole inventory (a backend server per serving group), so it is run
once when the run speaks for the whole fleet:

- without --groups (or with a selection that names every group), after the groups: a first-time user gets the
  endpoint, and a group that failed is marked down by the health check;
- with --rolling, before the roll (after the global validation): groups added to the inventory get their server
  (down until they serve) so that they can be drained like the others, removed groups leave; drain states survive
  the reload (the router keeps a server-state file); if it fails, no group is drained;
- never with --tags (the operator chose what runs), never after an interrupt, never without a dspark_router host.

A subset of groups (--groups) is the operator's promise to touch only those groups: the router, which serves
every group, is left alone and the report says so.
"""

from __future__ import annotations

import os

from . import runner_exec
from .orchestrator import run_one
from .scheduler import CONVERGED, FAILED

PLAYBOOK = "playbooks/router.yml"
GROUP = "dspark_router"
IDENT = "router"


def decide(subcommand, routers, selected, every_group, rolling, tags, interrupted):
    """(run, reason): whether the router is converged, and why (or why not). ``interrupted``: false, or why the run
    stopped early (True when no reason is known)."""
    if subcommand != "reprovision":
        return False, "only reprovision converges the router"
    if not routers:
        return False, "the inventory has no host in group %s" % GROUP
    if interrupted:
        why = interrupted if isinstance(interrupted, str) else "interrupted"
        return False, "the run stopped early (%s): the router was left as it was" % why
    if tags:
        return False, "--tags %s limits what runs: run %s to converge the router" % (tags, PLAYBOOK)
    if rolling:
        return True, "--rolling keeps the router's configuration in step with the inventory's groups"
    if set(selected) != set(every_group):
        left = sorted(set(every_group) - set(selected))
        return False, ("--groups selects %d of %d group(s) (not %s): the router, which serves every group, was "
                       "left alone; run %s to converge it" % (len(selected), len(every_group), ", ".join(left),
                                                              PLAYBOOK))
    return True, "the run covers every group of the inventory"


def skipped(reason):
    """The report's router section when it did not run."""
    return {"result": "skipped", "reason": reason, "changed": None, "duration_s": None, "error": None, "logs": None,
            "hosts": []}


def converge(spec, routers, reason, interrupts, prog):
    """router.yml (`spec`, the run's extra vars passed on) on the dspark_router hosts; the report's router section."""
    if not os.path.isfile(spec.playbook):
        return dict(skipped("%s has no %s" % (spec.project_dir, PLAYBOOK)), result=FAILED,
                    error="%s is missing under --project-dir" % PLAYBOOK)
    prog.message("router: converging %s (%s) - %s" % (", ".join(routers), PLAYBOOK, reason))
    return section(run_one(spec, CONVERGED, prog, interrupts), reason, routers)


def section(run, reason, routers):
    """The report's router section from a finished run (GroupRun)."""
    with run.lock:
        failure = run.events.failure_view()
        error = None
        if run.result != CONVERGED:
            if failure:
                error = failure["summary"]
            elif run.run_result is not None:
                error = run.run_result.error or "ansible-playbook ended with status %s (rc %s)%s" % (
                    run.run_result.status, run.run_result.rc,
                    (": " + runner_exec.stdout_tail(run.spec.stdout_path, 8)) if run.spec.stdout_path else "")
            else:
                error = "did not run"
        duration = round(run.finished - run.started, 3) if run.finished and run.started else None
        return {"result": run.result or FAILED, "reason": reason, "changed": run.events.changed_total(),
                "duration_s": duration, "error": error, "hosts": list(routers),
                "logs": {"artifacts_dir": run.spec.artifact_dir, "stdout": run.spec.stdout_path}}


def line(entry):
    """One line for the summary."""
    if entry["result"] == "skipped":
        return "router: not converged (%s)" % entry["reason"]
    if entry["result"] == CONVERGED:
        return "router: converged on %s, changed %d" % (", ".join(entry["hosts"]), entry["changed"])
    return "router: %s: %s (log: %s)" % (entry["result"], entry["error"], (entry.get("logs") or {}).get("stdout"))
