"""Cost of a no-op `playbooks/monitoring.yml` on the converged fleet lab (issue #40; bench/playbook_noop.py says how).
The baseline: a worktree of e814ae7, before the plan was pinned once per host and run and before each exporter host
was decided on one read. Goal: the controller CPU at most 0.6 of the baseline's, changed=0.
"""

import pathlib
import sys

import playbook_noop

RESULT = pathlib.Path(__file__).resolve().parent / "results" / "monitoring_noop.json"
GOAL = {"controller_cpu_s_over_baseline_max": 0.6, "changed": 0}

if __name__ == "__main__":
    sys.exit(playbook_noop.main(
        "playbooks/monitoring.yml", RESULT,
        "playbooks/monitoring.yml no-op re-run on the converged fleet lab (SIMULATED nodes)", "controller_cpu_s", GOAL))
