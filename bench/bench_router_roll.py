"""Requests through the fleet lab's router during a rolling reprovision of every group: goal 0 failed.

A steady-state load first (STEADY_SECONDS at RATE requests/s, half streamed), then the same load during the roll:
`dspark-fleet reprovision --rolling -e '{"serve_force_restart": true}'` drains each serving group in turn at the
router, reprovisions it (site.yml --limit <group>), proves it (tp_ranks) and puts it back.
Records requests sent and failed, incomplete answers, p50/p99 latency of both phases, and per group (from the
fleet report) the time it spent out of rotation (drain set -> back in rotation), the drain's wait and each phase.

Needs the fleet lab up and converged with its router (make lab-fleet; ansible-playbook -i
inventories/lab-fleet/hosts.yml site.yml). Without it: prints why and exits 0 without a result
(BENCH_REQUIRED=1 makes that exit 1), so `make bench` on the pair lab still runs the others.

BENCH_LAB=real: the REAL-ENGINE lab instead (`make lab-real site-real`): its real vLLM group (CPU build, the lab's tiny
model) is rolled while its simulated group serves, through its router; 16-token answers at BENCH_RATE (default 1/s).
"""

import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fleet"))

import loadclient  # noqa: E402  pylint: disable=wrong-import-position
import routerlab as lab  # noqa: E402  pylint: disable=wrong-import-position
import fleetlab  # noqa: E402  pylint: disable=wrong-import-position
from benchlib import stamp, write_result  # noqa: E402  pylint: disable=wrong-import-position

LABS = {
    "fleet": {"result": "router_roll.json", "inventory": lab.INVENTORY, "url": lab.ROUTER_URL, "rate": "4",
              "load": {"allowed_networks": lab.LOAD_NETWORKS}, "groups": None,
              "lab": "SIMULATED fleet (inventories/lab-fleet): 2 groups (2+3 nodes; trio_c two simulated GPUs per "
                     "node), simulator at 0.05 s per token (about 1 s per answer), routers spark-router and spark-router2 behind "
                     "one service address",
              "roll": "dspark-fleet reprovision --rolling (--max-unavailable 1), site.yml per group, restart forced"},
    "real": {"result": "real_engine_roll.json", "inventory": str(ROOT / "inventories" / "lab-real" / "hosts.yml"),
             "url": "http://127.0.0.1:18081", "rate": "1", "groups": "real_pair",
             "load": {"model": "tiny-llama", "api_key": "lab-real-key-5e1d", "max_tokens": 16, "expect": None},
             "lab": "REAL-ENGINE lab (inventories/lab-real): real_pair = REAL vLLM (CPU build 0.32.0, lab/engine), the "
                    "lab's tiny model, TP=2 over Gloo; sim_pair = the simulator under the same model name and keys; "
                    "router spark-rrouter; 5 lab containers on one 2-core machine",
             "roll": "dspark-fleet reprovision --rolling --groups real_pair: the real group drained, site.yml with the "
                     "restart forced (a real engine start), proven, back in rotation; sim_pair serves meanwhile"},
}
LAB_NAME = os.environ.get("BENCH_LAB", "fleet")
LAB = LABS[LAB_NAME]
RESULT = ROOT / "bench" / "results" / LAB["result"]
RATE = float(os.environ.get("BENCH_RATE", LAB["rate"]))
STEADY_SECONDS = int(os.environ.get("BENCH_STEADY_SECONDS", "60"))
GOAL_FAILED = 0


def phase(summary, seconds):
    return {
        "seconds": round(seconds, 1),
        "requests_sent": summary["sent"],
        "requests_failed": summary["failed"],
        "streams": summary["streams"],
        "streams_complete": summary["streams_complete"],
        "incomplete": summary["incomplete"],
        "latency_p50_s": summary["latency_p50"],
        "latency_p99_s": summary["latency_p99"],
        "latency_max_s": summary["latency_max"],
        "by_group": summary["by_group"],
        "failures": summary["failures"],
    }


def real_problem():
    """None when the real-engine lab is up and its router answers with both groups in it, else the reason."""
    status = subprocess.run(["bash", str(ROOT / "lab" / "real.sh"), "status"], capture_output=True, text=True,
                            timeout=300, check=False)
    if status.returncode != 0 or "spark-rrouter" not in status.stdout:
        return "the real-engine lab (with its router) is not up: make lab-real site-real"
    return None


def main():
    problem = lab.fleet_problem() if LAB_NAME == "fleet" else real_problem()
    if problem:
        print("bench_router_roll: SKIPPED: %s" % problem)
        return 1 if os.environ.get("BENCH_REQUIRED") == "1" else 0

    if LAB_NAME == "fleet":                                             # the fleet lab's key, from its inventory
        LAB["load"]["api_key"] = lab.api_key()
    started = time.monotonic()
    steady_records, steady = loadclient.run_load(LAB["url"], int(RATE * STEADY_SECONDS), RATE, **LAB["load"])
    steady_seconds = time.monotonic() - started

    groups = lab.serving_groups() if LAB["groups"] is None else LAB["groups"].split(",")
    only = [] if LAB["groups"] is None else ["--groups", LAB["groups"]]
    artifacts = ROOT / ".dspark-fleet" / ("bench-roll-%d" % time.time())
    load = loadclient.Load(LAB["url"], count=int(RATE * 1800), rate=RATE, **LAB["load"]).start()
    roll_started = time.monotonic()
    time.sleep(5)
    try:
        rc, out = fleetlab.fleet("reprovision", "-i", LAB["inventory"], "--rolling", *only, "--plain", "--artifacts",
                                 artifacts, "-e", '{"serve_force_restart": true}')
    finally:
        time.sleep(5)
        load.stop()
        roll_records = load.wait(timeout=300)
    roll_seconds = time.monotonic() - roll_started
    roll = loadclient.summarize(roll_records)
    del steady_records
    doc = fleetlab.report(artifacts / "report.json")

    per_group = []
    for group in groups:
        entry = doc["groups"][group]
        rotation = entry.get("rotation") or {}
        drain = rotation.get("drain") or {}
        per_group.append({
            "group": group,
            "result": entry["result"],
            "out_of_rotation_s": rotation.get("out_of_rotation_s"),
            "drain_wait_s": drain.get("waited_s"),
            "sessions_at_drain": drain.get("sessions_at_start"),
            "drain_bound_hit": drain.get("bound_hit"),
            "phases_s": {k: v["duration_s"] for k, v in entry["phases"].items()},
            "error": (entry.get("failure") or {}).get("summary"),
        })
    all_rolled = rc == 0 and all(g["result"] == "converged" for g in per_group)
    result = {
        "benchmark": "requests through the %s lab's router (HAProxy) during a rolling reprovision" % LAB_NAME,
        **stamp(),
        "lab": LAB["lab"],
        "roll": LAB["roll"],
        "load": {"rate_per_s": RATE, "streamed": "every second request", "client": "tests/fleet/loadclient.py",
                 "schedule": "open loop, fixed rate; the roll's load stops 5 s after the last group is back"},
        "steady_state": phase(steady, steady_seconds),
        "during_roll": phase(roll, roll_seconds),
        "groups": per_group,
        "all_groups_rolled": all_rolled,
        "goal": {"requests_failed": GOAL_FAILED, "incomplete": 0},
        "met": all_rolled and roll["failed"] == GOAL_FAILED and steady["failed"] == 0 and roll["incomplete"] == 0,
    }
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
