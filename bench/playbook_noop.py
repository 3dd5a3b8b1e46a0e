"""A no-op re-run of one playbook on the converged fleet lab (issue #40): the controller's CPU, the machine's, the wall
time and the host-tasks, BENCH_RUNS runs after one untimed converge (medians by controller CPU). BENCH_CHECKOUT=<dir>
runs the playbook of another checkout (a `git worktree` of the commit before a change, with DSPARK_LAB_STATE=<this
checkout>/.lab) against the same lab and records its numbers as the result's `baseline`; a run of this checkout then
judges its own numbers against that baseline. Shared by bench_monitoring_noop.py and bench_router_noop.py.
"""

import json
import os
import pathlib
import sys

from bench_controller_cost import timed_run
from benchlib import recap as read_recap, stamp, write_baseline, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(sys.executable).parent


def playbook(checkout, path):
    argv = [str(BIN / "ansible-playbook"), "-i", str(checkout / "inventories" / "lab-fleet" / "hosts.yml"),
            str(checkout / path)]
    run, wall, cpu, machine = timed_run(argv, checkout)
    if run.returncode != 0:
        sys.exit("%s failed (rc=%d):\n%s" % (path, run.returncode, run.stdout[-3000:] + run.stderr[-3000:]))
    recap = read_recap(run.stdout)
    return {"wall_s": round(wall, 1), "controller_cpu_s": round(cpu, 1), "machine_cpu_s": round(machine, 1),
            "host_tasks": sum(r["ok"] + r["failed"] + r["skipped"] for r in recap.values()),
            "changed": sum(r["changed"] for r in recap.values())}


def measure(checkout, path, runs):
    playbook(checkout, path)  # converge
    samples = sorted((playbook(checkout, path) for dummy in range(runs)), key=lambda s: s["controller_cpu_s"])
    middle = dict(samples[len(samples) // 2])
    middle["controller_cpu_s_each"] = [s["controller_cpu_s"] for s in samples]
    middle["machine_cpu_s_each"] = [s["machine_cpu_s"] for s in samples]
    middle["max_changed"] = max(s["changed"] for s in samples)
    return middle


def main(path, result, title, ratio_of, goal):
    """Measure ``path``; as the baseline (BENCH_CHECKOUT set) or judged against it: ``ratio_of`` (a number's key) over
    the baseline's at most goal[ratio_of + '_over_baseline_max'], and goal['changed'] changes at most."""
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    checkout = pathlib.Path(os.environ.get("BENCH_CHECKOUT", ROOT))
    numbers = measure(checkout, path, runs)
    if checkout != ROOT:
        return write_baseline(result, numbers, checkout)
    # The baseline, measured first against the same lab, is what the goal is judged against.
    baseline = (json.loads(result.read_text(encoding="utf-8")) if result.is_file() else {}).get("baseline")
    if not baseline:
        sys.exit("no baseline: run this script first with BENCH_CHECKOUT=<a checkout of the commit before>")
    ratio = round(numbers[ratio_of] / baseline[ratio_of], 2)
    return write_result(result, {
        "benchmark": title, **stamp(), "runs": runs, **numbers, "goal": goal, "baseline": baseline,
        "%s_over_baseline" % ratio_of: ratio,
        "met": ratio <= goal["%s_over_baseline_max" % ratio_of] and numbers["max_changed"] <= goal["changed"]})
