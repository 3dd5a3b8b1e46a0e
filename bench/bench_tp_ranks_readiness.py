"""How soon tp_ranks sees a group become ready: its ready_at against the SIMULATOR's own ready time.

Each run restarts the lab group through playbooks/serve.yml (a new env value changes the fingerprint), with
the simulator writing the epoch time of `Application startup complete.` to a file in the head's container.
Goal: tp_ranks reports ready at most 2 s after that. Lab containers share the controller's clock.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import time

from benchlib import machine, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "tp_ranks_readiness.json"
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
GOAL_SECONDS = 2.0
READY_FILE = "/tmp/dspark-sim-ready"


def one_run(index):
    env = {"DSPARK_SIM_LOAD_SECONDS": "3", "DSPARK_SIM_RENDEZVOUS_TIMEOUT": "45",
           "DSPARK_SIM_READY_FILE": READY_FILE, "DSPARK_BENCH_RUN": "%d-%d" % (index, time.time())}
    run = subprocess.run(["ansible-playbook", "-i", "inventories/lab/hosts.yml", "playbooks/serve.yml",
                          "-e", json.dumps({"serve_extra_env": env})],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        sys.exit("serve.yml failed:\n" + run.stdout[-4000:] + run.stderr[-2000:])
    ready_at = float(re.search(r"ready_at=([0-9.]+)", run.stdout.replace("\n", " ")).group(1))
    sim = subprocess.run(["docker", "exec", "spark-head", "docker", "exec", "dspark-vllm", "cat", READY_FILE],
                         capture_output=True, text=True, check=True).stdout
    return round(ready_at - float(sim), 3)


def main():
    lags = [one_run(i) for i in range(RUNS)]
    result = {
        "benchmark": "tp_ranks readiness lag: plugin ready_at minus the simulator's Application startup complete time",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "runs": RUNS,
        "lag_seconds": lags,
        "max_lag_seconds": max(lags),
        "goal": {"max_lag_seconds": GOAL_SECONDS},
        "met": max(lags) <= GOAL_SECONDS,
        "note": "The serving image is the lab SIMULATOR; the lag includes one chat completion on the simulator.",
    }
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
