"""Cost of a no-op `playbooks/monitoring.yml` on the converged fleet lab (issue #40): the controller's CPU, the
machine's, the wall time and the host-tasks, BENCH_RUNS runs after one untimed converge (medians by controller CPU).
BENCH_CHECKOUT=<dir> runs the playbook of another checkout (a `git worktree` of the commit before a change, with
DSPARK_LAB_STATE=<this checkout>/.lab) against the same lab and records its numbers as the result's `baseline`.
Goal: the controller CPU at most 0.6 of the baseline's (the role's plan worked out once per host and run instead of
at every task that reads it), changed=0.
"""

import json
import os
import pathlib
import sys

from bench_controller_cost import timed_run
from benchlib import recap as read_recap, stamp, write_baseline, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "monitoring_noop.json"
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
CHECKOUT = pathlib.Path(os.environ.get("BENCH_CHECKOUT", ROOT))
BIN = pathlib.Path(sys.executable).parent
GOAL = {"controller_cpu_over_baseline_max": 0.6, "changed": 0}


def playbook():
    argv = [str(BIN / "ansible-playbook"), "-i", str(CHECKOUT / "inventories" / "lab-fleet" / "hosts.yml"),
            str(CHECKOUT / "playbooks" / "monitoring.yml")]
    run, wall, cpu, machine = timed_run(argv, CHECKOUT)
    if run.returncode != 0:
        sys.exit("monitoring.yml failed (rc=%d):\n%s" % (run.returncode, run.stdout[-3000:] + run.stderr[-3000:]))
    recap = read_recap(run.stdout)
    return {"wall_s": round(wall, 1), "controller_cpu_s": round(cpu, 1), "machine_cpu_s": round(machine, 1),
            "host_tasks": sum(r["ok"] + r["failed"] + r["skipped"] for r in recap.values()),
            "changed": sum(r["changed"] for r in recap.values())}


def measure():
    playbook()  # converge
    samples = sorted((playbook() for dummy in range(RUNS)), key=lambda s: s["controller_cpu_s"])
    middle = dict(samples[len(samples) // 2])
    middle["controller_cpu_s_each"] = [s["controller_cpu_s"] for s in samples]
    middle["max_changed"] = max(s["changed"] for s in samples)
    return middle


def main():
    numbers = measure()
    if CHECKOUT != ROOT:
        return write_baseline(RESULT, numbers, CHECKOUT)
    # The baseline, measured first against the same lab, is what the goal is judged against.
    baseline = (json.loads(RESULT.read_text(encoding="utf-8")) if RESULT.is_file() else {}).get("baseline")
    if not baseline:
        sys.exit("no baseline: run this script first with BENCH_CHECKOUT=<a checkout of the commit before>")
    ratio = round(numbers["controller_cpu_s"] / baseline["controller_cpu_s"], 2)
    return write_result(RESULT, {
        "benchmark": "playbooks/monitoring.yml no-op re-run on the converged fleet lab (SIMULATED nodes)",
        **stamp(), "runs": RUNS, **numbers, "goal": GOAL, "baseline": baseline, "controller_cpu_over_baseline": ratio,
        "met": ratio <= GOAL["controller_cpu_over_baseline_max"] and numbers["max_changed"] == GOAL["changed"]})


if __name__ == "__main__":
    sys.exit(main())
