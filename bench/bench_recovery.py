"""Time from a rank's death to its group serving again under the supervisor (`dspark-fleet watch`).

On the SIMULATED fleet lab (`make lab-fleet`, then site.yml; the lab to itself), or with BENCH_LAB=real on the
REAL-ENGINE pair (`make lab-real site-real`): a background
`dspark-fleet watch --groups pair_b --interval INTERVAL` runs; once it saw the group serving, the worker's rank is
killed (`docker exec spark-b1 docker kill dspark-vllm`) and the clock runs until a chat completion on the head
answers again after the supervisor's restart. Split from the journal: detection (death -> failed check
journaled), logs, restart (serve.yml) and the last mile. Goal: under 120 s from death to serving.
Stdlib only (bench/run.sh runs it with the system python3).
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

from benchlib import machine, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
# BENCH_LAB=real: the same on the REAL-ENGINE pair (`make lab-real site-real`: vLLM's CPU build, issue #24).
LABS = {
    "fleet": {"result": "recovery.json", "inventory": "lab-fleet", "group": "pair_b", "head": "spark-b0",
              "worker": "spark-b1", "model": "deepseek-v4-flash", "key": "",
              "note": "The serving image is the lab SIMULATOR (3 s fake load); 7 lab nodes on one 2-core machine. "},
    "real": {"result": "real_engine_recovery.json", "inventory": "lab-real", "group": "real_pair", "head": "spark-r0",
             "worker": "spark-r1", "model": "tiny-llama", "key": "lab-real-key-5e1d",
             "note": "REAL vLLM (CPU build 0.32.0, lab/engine) serving the lab's tiny model, TP=2 over Gloo on two "
                     "lab nodes of one 2-core machine; the restart is a real engine start (Python/torch imports). "},
}
LAB = LABS[os.environ.get("BENCH_LAB", "fleet")]
RESULT = ROOT / "bench" / "results" / LAB["result"]
INVENTORY = ROOT / "inventories" / LAB["inventory"] / "hosts.yml"
RUNS = int(os.environ.get("BENCH_RUNS", "2"))
INTERVAL = float(os.environ.get("BENCH_WATCH_INTERVAL", "10"))
GROUP, HEAD, WORKER = LAB["group"], LAB["head"], LAB["worker"]
GOAL_SECONDS = 120.0


def chat_ok():
    body = json.dumps({"model": LAB["model"], "max_tokens": 4, "messages": [{"role": "user", "content": "ping"}]})
    # Headers on curl's standard input (-H @-): a key is never on a command line, not even the lab's.
    headers = "Content-Type: application/json\n" + ("Authorization: Bearer %s\n" % LAB["key"] if LAB["key"] else "")
    run = subprocess.run(["docker", "exec", "-i", HEAD, "curl", "-s", "-m", "60", "-H", "@-", "-d", body,
                          "http://127.0.0.1:8888/v1/chat/completions"],
                         input=headers, capture_output=True, text=True, check=False, timeout=90)
    try:
        return run.returncode == 0 and bool(json.loads(run.stdout).get("choices"))
    except ValueError:
        return False


def journal(path):
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return [r for r in out if r.get("group") == GROUP]


def wait(predicate, timeout, interval=0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def one_run(state, index):
    path = state / "journal.jsonl"
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", DSPARK_LAB_STATE=str(ROOT / ".lab"))
    log = open(state / ("watch-%d.log" % index), "w", encoding="utf-8")  # pylint: disable=consider-using-with
    watch = subprocess.Popen([str(ROOT / ".venv" / "bin" / "dspark-fleet"), "watch", "-i", str(INVENTORY),
                              "--groups", GROUP, "--plain", "--interval", str(INTERVAL), "--state-dir", str(state),
                              "--artifacts", str(state / ("art-%d" % index))],
                             cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        seen = len(journal(path))
        if not wait(lambda: any(r["action"] == "check" and r["ok"] for r in journal(path)[seen:]), 300):
            sys.exit("the supervisor never saw %s serving: see %s" % (GROUP, log.name))
        seen = len(journal(path))
        died = time.time()
        subprocess.run(["docker", "exec", WORKER, "docker", "kill", "dspark-vllm"], check=True, capture_output=True)

        def restarted():
            return any(r["action"] == "restart" and r["ok"] for r in journal(path)[seen:])
        if not wait(restarted, 900):
            sys.exit("no successful restart journaled: see %s" % log.name)
        wait(chat_ok, 120)
        serving = time.time()
        records = journal(path)[seen:]
        check = next(r for r in records if r["action"] == "check" and not r["ok"])
        logs = next(r for r in records if r["action"] == "logs")
        restart = next(r for r in records if r["action"] == "restart")
        return {"death_to_serving_s": round(serving - died, 1),
                "death_to_failed_check_s": round(check["time"] - died, 1),
                "logs_s": round(logs["time"] - check["time"], 1),
                "restart_s": restart.get("duration_s"),
                "why": check["summary"]}
    finally:
        watch.send_signal(signal.SIGTERM)
        try:
            watch.wait(timeout=120)
        except subprocess.TimeoutExpired:
            watch.kill()
        log.close()


def main():
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        runs = [one_run(pathlib.Path(tmp), i) for i in range(RUNS)]
    worst = max(r["death_to_serving_s"] for r in runs)
    result = {
        "benchmark": "supervisor recovery: a worker rank killed -> its group serving again under dspark-fleet watch",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                 check=False).stdout.strip(),
        "machine": machine(),
        "runs": RUNS,
        "watch_interval_s": INTERVAL,
        "results": runs,
        "max_death_to_serving_s": worst,
        "goal": {"max_death_to_serving_s": GOAL_SECONDS},
        "met": worst <= GOAL_SECONDS,
        "note": LAB["note"] + "Detection is bounded by the watch interval plus one check (playbooks/verify.yml).",
    }
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
