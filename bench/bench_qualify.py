"""Node qualification over the SIMULATED fleet lab (inventories/lab-fleet: the pair pair_b and the trio trio_c,
five nodes): `dspark-fleet qualify` of both groups at once against one group alone (the pair pair_b), three runs
each (the median is kept), with the controller memory (peak RSS of each group's ansible-playbook) and the number
of checks.

Needs `make lab-fleet` (bare or converged nodes: qualification changes nothing). Goal: the whole fleet at most 1.5x
one group, as for the other fleet-scale measurements.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from benchlib import stamp, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(sys.executable).parent
INVENTORY = pathlib.Path(os.environ.get("BENCH_FLEET_INVENTORY", ROOT / "inventories" / "lab-fleet" / "hosts.yml"))
RESULT = ROOT / "bench" / "results" / "qualify_fleet.json"
GROUPS = ["pair_b", "trio_c"]
ALONE = "pair_b"
RUNS = 3
GOAL_RATIO = 1.5


def qualify(groups):
    """(seconds, report) of one dspark-fleet qualify run over `groups`."""
    artifacts = tempfile.mkdtemp(prefix="bench-qualify-")
    started = time.monotonic()
    run = subprocess.run([str(BIN / "dspark-fleet"), "qualify", "-i", str(INVENTORY), "--plain",
                          "--groups", ",".join(groups), "--artifacts", artifacts],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if run.returncode != 0:
        sys.exit("dspark-fleet qualify failed (rc=%d):\n%s" % (run.returncode, (run.stdout + run.stderr)[-4000:]))
    return elapsed, json.loads((pathlib.Path(artifacts) / "report.json").read_text())


def measure(groups):
    """The median of RUNS runs, and the per-group numbers of the median run."""
    runs = sorted((qualify(groups) for _run in range(RUNS)), key=lambda item: item[0])
    seconds, report = runs[len(runs) // 2]
    per_group = {name: {"seconds": group["duration_s"], "checks": group["qualify"]["checks"],
                        "nodes": group["qualify"]["nodes"], "verdict": group["qualify"]["verdict"],
                        "controller_memory_peak_mib": round((group["controller_memory_peak_kib"] or 0) / 1024, 1)}
                 for name, group in report["groups"].items()}
    return round(seconds, 1), [round(run[0], 1) for run in runs], per_group


def main():
    fleet_s, fleet_runs, fleet_groups = measure(GROUPS)
    alone_s, alone_runs, alone_groups = measure([ALONE])
    ratio = round(fleet_s / alone_s, 2)
    result = {
        "benchmark": "dspark-fleet qualify of every group of the simulated fleet lab at once vs one group alone",
        **stamp(),
        "fleet": {"groups": len(GROUPS), "nodes": sum(g["nodes"] for g in fleet_groups.values()),
                  "inventory": INVENTORY.parent.name, "note": "SIMULATED fleet lab (containers)"},
        "qualify": {"fleet_seconds": fleet_s, "fleet_runs": fleet_runs, "one_group_seconds": alone_s,
                    "one_group_runs": alone_runs, "ratio": ratio,
                    "checks": sum(g["checks"] for g in fleet_groups.values()),
                    "groups": fleet_groups, "alone": alone_groups},
        "goal": {"ratio_max": GOAL_RATIO},
        "met": ratio <= GOAL_RATIO,
    }
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
