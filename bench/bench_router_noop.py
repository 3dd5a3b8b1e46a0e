"""Cost of a no-op `playbooks/router.yml` on the converged fleet lab's two routers (issue #40; bench/playbook_noop.py
says how). The routers are converged one at a time (serial: 1), so each module run adds to the wall time. The
baseline: a worktree of the commit before each router was decided on one read for HAProxy and one for keepalived.
Goal: the machine's CPU (the routers' module runs and the controller) at most 0.5 of the baseline's, changed=0.
"""

import pathlib
import sys

import playbook_noop

RESULT = pathlib.Path(__file__).resolve().parent / "results" / "router_noop.json"
GOAL = {"machine_cpu_s_over_baseline_max": 0.5, "changed": 0}

if __name__ == "__main__":
    sys.exit(playbook_noop.main(
        "playbooks/router.yml", RESULT,
        "playbooks/router.yml no-op re-run on the converged fleet lab's two routers (SIMULATED nodes)",
        "machine_cpu_s", GOAL))
