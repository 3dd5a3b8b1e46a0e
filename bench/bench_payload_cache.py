"""What the lab controllers' payload cache saves (test venvs only: lab/controller/dspark_lab_payload_cache.py, on when
DSPARK_LAB_PAYLOAD_CACHE names a directory): a no-op `site.yml` on the converged lab pair, alternately with the cache
(its store filled by the first run) and without it, BENCH_RUNS times each. The numbers are the controller's CPU
(ansible-playbook, its forks, ssh) and the machine's (every process, /proc/stat), and the wall time, medians by
controller CPU. Goal: the run with the cache at most 0.85 of the controller CPU of the run without it.
"""

import os
import pathlib
import shutil
import sys
import tempfile

from bench_site_noop import playbook
from benchlib import stamp, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "payload_cache.json"
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
ENV = "DSPARK_LAB_PAYLOAD_CACHE"
GOAL = {"controller_cpu_ratio_max": 0.85, "changed": 0}


def median(samples):
    middle = sorted(samples, key=lambda s: s["cpu_s"])[len(samples) // 2]
    return {"controller_cpu_s": middle["cpu_s"], "machine_cpu_s": middle["machine_cpu_s"], "wall_s": middle["wall_s"],
            "controller_cpu_s_each": [s["cpu_s"] for s in samples], "max_changed": max(s["changed"] for s in samples)}


def main():
    store = tempfile.mkdtemp(prefix="bench-payload-cache-")
    samples = {True: [], False: []}
    try:
        os.environ[ENV] = store
        playbook()  # converge, and fill the store
        for dummy in range(RUNS):
            for on in (True, False):
                if on:
                    os.environ[ENV] = store
                else:
                    os.environ.pop(ENV, None)
                samples[on].append(playbook())
    finally:
        shutil.rmtree(store, ignore_errors=True)
    cached, plain = median(samples[True]), median(samples[False])
    ratio = round(cached["controller_cpu_s"] / plain["controller_cpu_s"], 2)
    result = {"benchmark": "no-op site.yml on the lab pair (SIMULATED nodes) with and without the lab controllers' "
                           "module payload cache", **stamp(), "runs": RUNS, "with_cache": cached,
              "without_cache": plain, "controller_cpu_ratio": ratio,
              "machine_cpu_ratio": round(cached["machine_cpu_s"] / plain["machine_cpu_s"], 2), "goal": GOAL}
    result["met"] = ratio <= GOAL["controller_cpu_ratio_max"] and max(
        cached["max_changed"], plain["max_changed"]) == GOAL["changed"]
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
