"""Cost of a no-op `site.yml` on the converged lab pair (issue #40): host-tasks per node, wall time and the
controller's CPU, against the goals (at most 80 host-tasks per node, 15 s wall, 6 controller CPU-seconds per node,
changed=0), and one forced reprovision of the group (serve_force_restart=true; goal: two thirds of the baseline's
wall time).

Converges once (not timed), then times BENCH_RUNS further runs (median by CPU). Controller CPU is every process the
run waited for (getrusage RUSAGE_CHILDREN) plus what the detached ssh ControlMaster processes gained
(bench_controller_cost.mux_cpu). BENCH_CHECKOUT=<dir> runs the site.yml of another checkout of this repository
(e.g. a `git worktree` of an older commit, with DSPARK_LAB_STATE=<this checkout>/.lab) against the same lab and
writes its numbers as the result's `baseline` (the earlier result's other numbers are kept).
"""

import json
import os
import pathlib
import sys

from bench_controller_cost import timed_run
from benchlib import recap as read_recap, stamp, write_baseline, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "site_noop.json"
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
CHECKOUT = pathlib.Path(os.environ.get("BENCH_CHECKOUT", ROOT))
BIN = pathlib.Path(sys.executable).parent
FORCE = '{"serve_force_restart": true}'
GOAL = {"host_tasks_per_node_max": 80, "wall_s_max": 15.0, "cpu_s_per_node_max": 6.0, "changed": 0,
        "forced_wall_over_baseline_max": 0.67}


def playbook(extra=None):
    """One run: wall, controller CPU, host-tasks per node and changed tasks, from the recap."""
    argv = [str(BIN / "ansible-playbook"), "-i", str(CHECKOUT / "inventories" / "lab" / "hosts.yml"),
            str(CHECKOUT / "site.yml")] + (["-e", extra] if extra else [])
    run, wall, cpu, machine = timed_run(argv, CHECKOUT)
    if run.returncode != 0:
        sys.exit("site.yml failed (rc=%d):\n%s" % (run.returncode, run.stdout[-3000:] + run.stderr[-3000:]))
    recap = read_recap(run.stdout)
    nodes = sorted(h for h in recap if h != "localhost")
    tasks = {h: recap[h]["ok"] + recap[h]["failed"] + recap[h]["skipped"] for h in nodes}
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "cpu_s_per_node": round(cpu / len(nodes), 2),
            "machine_cpu_s": round(machine, 1), "host_tasks": tasks,
            "changed": sum(recap[h]["changed"] for h in nodes)}


def measure():
    playbook()  # converge
    samples = sorted((playbook() for dummy in range(RUNS)), key=lambda s: s["cpu_s"])
    middle = dict(samples[len(samples) // 2])
    middle["wall_s_each"] = sorted(s["wall_s"] for s in samples)
    middle["cpu_s_each"] = [s["cpu_s"] for s in samples]
    middle["max_changed"] = max(s["changed"] for s in samples)
    # A forced reprovision of the group (every rank restarted through the normal start path): goal two thirds of
    # the baseline's wall time.
    middle["forced"] = playbook(FORCE)
    return middle


def main():
    numbers = measure()
    if CHECKOUT != ROOT:
        return write_baseline(RESULT, numbers, CHECKOUT)
    earlier = json.loads(RESULT.read_text(encoding="utf-8")) if RESULT.is_file() else {}
    result = {"benchmark": "site.yml no-op re-run on the converged lab pair (SIMULATED nodes)", **stamp(),
              "runs": RUNS, **numbers, "host_tasks_per_node_max": max(numbers["host_tasks"].values()),
              "goal": GOAL}
    forced_ok = True
    if "baseline" in earlier:
        result["baseline"] = earlier["baseline"]
        result["forced_wall_over_baseline"] = round(numbers["forced"]["wall_s"] / earlier["baseline"]["forced"]["wall_s"], 2)
        forced_ok = result["forced_wall_over_baseline"] <= GOAL["forced_wall_over_baseline_max"]
    result["met"] = (result["host_tasks_per_node_max"] <= GOAL["host_tasks_per_node_max"]
                     and numbers["wall_s"] <= GOAL["wall_s_max"] and numbers["cpu_s_per_node"] <= GOAL["cpu_s_per_node_max"]
                     and numbers["max_changed"] == GOAL["changed"] and forced_ok)
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
