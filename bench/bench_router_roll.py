"""Requests through the fleet lab's router during a rolling reprovision of every group: goal 0 failed.

A steady-state load first (STEADY_SECONDS at RATE requests/s, half streamed), then the same load during the roll:
each serving group in turn is drained at the router (playbooks/router_drain.yml), restarted
(playbooks/serve.yml --limit <group> -e serve_force_restart=true) and put back (playbooks/router_enable.yml).
Records requests sent and failed, incomplete answers, p50/p99 latency of both phases, and per group the time
it spent out of rotation (drain set -> ready again), the drain's wait and the restart time.

Needs the fleet lab up and converged with its router (make lab-fleet; ansible-playbook -i
inventories/lab-fleet/hosts.yml site.yml). Without it: prints why and exits 0 without a result
(BENCH_REQUIRED=1 makes that exit 1), so `make bench` on the pair lab still runs the others.
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
from benchlib import machine, write_result  # noqa: E402  pylint: disable=wrong-import-position

RESULT = ROOT / "bench" / "results" / "router_roll.json"
RATE = float(os.environ.get("BENCH_RATE", "4"))
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


def main():
    problem = lab.fleet_problem()
    if problem:
        print("bench_router_roll: SKIPPED: %s" % problem)
        return 1 if os.environ.get("BENCH_REQUIRED") == "1" else 0

    started = time.monotonic()
    steady_records, steady = loadclient.run_load(lab.ROUTER_URL, int(RATE * STEADY_SECONDS), RATE)
    steady_seconds = time.monotonic() - started

    groups = lab.serving_groups()
    load = loadclient.Load(lab.ROUTER_URL, count=int(RATE * 1800), rate=RATE).start()
    roll_started = time.monotonic()
    time.sleep(5)
    rolled = []
    try:
        for group in groups:
            result = lab.roll_group(group)
            rolled.append(result)
            if "error" in result:
                break
    finally:
        time.sleep(5)
        load.stop()
        roll_records = load.wait(timeout=300)
    roll_seconds = time.monotonic() - roll_started
    roll = loadclient.summarize(roll_records)
    del steady_records

    per_group = []
    for result in rolled:
        drain = (result.get("drain") or {}).get("report") or {}
        per_group.append({
            "group": result["group"],
            "out_of_rotation_s": result.get("out_of_rotation_seconds"),
            "drain_wait_s": drain.get("waited_seconds"),
            "sessions_at_drain": drain.get("sessions_at_start"),
            "drain_bound_hit": drain.get("bound_hit"),
            "drain_playbook_s": (result.get("drain") or {}).get("seconds"),
            "serve_restart_s": (result.get("serve") or {}).get("seconds"),
            "enable_playbook_s": (result.get("enable") or {}).get("seconds"),
            "enable_health_wait_s": ((result.get("enable") or {}).get("report") or {}).get("waited_seconds"),
            "error": (result.get("error") or "")[-500:] or None,
        })
    all_rolled = len(rolled) == len(groups) and all("error" not in r for r in rolled)
    result = {
        "benchmark": "requests through the fleet lab's router (HAProxy) during a rolling reprovision of every group",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "git_commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                     text=True, check=False).stdout.strip(),
        "lab": "SIMULATED fleet (inventories/lab-fleet): 3 groups (2+2+3 nodes), simulator at 0.05 s per token "
               "(about 1 s per answer), router spark-router",
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
