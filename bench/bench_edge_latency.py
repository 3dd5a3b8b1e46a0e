"""The API edge's added latency on the REAL engine (issue #41): on the real-engine pair (`make lab-real site-real`),
inside the head node, GET /v1/models with the group's key through the edge (HAProxy on dspark_api_port) and straight
to vLLM (127.0.0.1:serve_engine_port), alternated, a new connection per request as a client opens one. The added
latency is the difference of the two distributions' p50 and p99. Goal: at most 1 ms at p50.

Writes bench/results/edge_latency.json. Stdlib only (bench/run.sh runs it with the system python3); the measuring
script reaches the node on stdin with the key inside it, so the key is on no command line.
"""

import json
import os
import pathlib
import subprocess
import sys

from benchlib import stamp, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "edge_latency.json"
GROUP_VARS = ROOT / "inventories" / "lab-real" / "group_vars" / "dspark.yml"
HEAD = "spark-r0"
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "600"))
GOAL_P50_MS = 1.0
ENGINE_PORT = 18888     # roles/serve/defaults/main.yml: serve_engine_port (lab-real keeps the default)

# Runs on the node with its own python3: alternating requests, a fresh connection each.
PROBE = r'''
import http.client, json, time
KEY, EDGE, ENGINE, N = %r, %d, %d, %d
times = {"edge": [], "engine": []}
def one(port):
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/v1/models", headers={"Authorization": "Bearer " + KEY})
    answer = conn.getresponse()
    answer.read()
    conn.close()
    assert answer.status == 200, (port, answer.status)
    return (time.perf_counter() - start) * 1000.0
for port in (EDGE, ENGINE):
    for warm in range(20):
        one(port)                      # warm both paths
for turn in range(N):
    times["edge"].append(one(EDGE))
    times["engine"].append(one(ENGINE))
print(json.dumps(times))
'''


def group_vars():
    """The few scalars of the lab's group vars this needs (no YAML library: stdlib only)."""
    values = {}
    for line in GROUP_VARS.read_text().splitlines():
        if line.startswith(("dspark_api_port:", "serve_api_keys:")):
            name, dummy, value = line.partition(":")
            values[name] = value.strip()
    keys = values["serve_api_keys"].strip("[]").split(",")
    return int(values["dspark_api_port"]), keys[0].strip()


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def main():
    api_port, key = group_vars()
    probe = PROBE % (key, api_port, ENGINE_PORT, REQUESTS)
    run = subprocess.run(["docker", "exec", "-i", HEAD, "python3", "-"], input=probe, capture_output=True, text=True,
                         timeout=1800, check=False)
    if run.returncode != 0:
        sys.exit("the probe failed on %s (is the real-engine lab up and converged?): %s" % (HEAD, run.stderr[-2000:]))
    times = json.loads(run.stdout)
    stats = {}
    for path, values in times.items():
        stats[path] = {"p50_ms": round(percentile(values, 0.5), 3), "p99_ms": round(percentile(values, 0.99), 3),
                       "requests": len(values)}
    added_p50 = round(stats["edge"]["p50_ms"] - stats["engine"]["p50_ms"], 3)
    added_p99 = round(stats["edge"]["p99_ms"] - stats["engine"]["p99_ms"], 3)
    result = dict(stamp(), **{
        "benchmark": "the API edge's added latency: GET /v1/models through HAProxy vs straight to vLLM, on the head",
        "requests_each": REQUESTS,
        "through_edge": stats["edge"],
        "straight_to_engine": stats["engine"],
        "added_p50_ms": added_p50,
        "added_p99_ms": added_p99,
        "goal": {"max_added_p50_ms": GOAL_P50_MS},
        "met": added_p50 <= GOAL_P50_MS,
    })
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
