"""No-op re-run of site.yml on the converged lab pair: goal changed=0 in at most 60 s.

Converges once (not timed), then times RUNS further runs and records wall time and the recap.
"""

import os
import pathlib
import subprocess
import sys
import time

from benchlib import recap as read_recap, stamp, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "site_noop.json"
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
GOAL_SECONDS = 60.0


def playbook():
    started = time.monotonic()
    run = subprocess.run(["ansible-playbook", "-i", "inventories/lab/hosts.yml", "site.yml"],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if run.returncode != 0:
        sys.exit("site.yml failed (rc=%d):\n%s" % (run.returncode, run.stdout[-3000:] + run.stderr[-3000:]))
    return elapsed, read_recap(run.stdout)


def main():
    playbook()  # converge
    samples = [playbook() for dummy in range(RUNS)]
    times = sorted(round(t, 2) for t, dummy in samples)
    changed = max(n["changed"] for dummy, recap in samples for n in recap.values())
    result = {
        "benchmark": "site.yml no-op re-run on the converged lab pair",
        **stamp(),
        "runs": RUNS,
        "seconds": times,
        "median_seconds": times[len(times) // 2],
        "max_changed": changed,
        "hosts": sorted(samples[-1][1]),
        "goal": {"max_seconds": GOAL_SECONDS, "changed": 0},
        "met": changed == 0 and times[-1] <= GOAL_SECONDS,
    }
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
