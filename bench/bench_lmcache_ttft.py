"""Time to first token of a repeated long prompt after a restart of the whole group, with and without LMCache
(issue #45; goal: at least 3x faster with it).

Drives lab/lmcache/tp2.sh (a TP=2 vLLM CPU group of the engine image with an LMCache server per node, in throwaway
lmc-* containers on this machine's Docker). For each run and each mode (none: no connector, the baseline; urls:
LMCacheMPConnector with both nodes' servers), alternating the modes run by run:
- a fresh group (tp2.sh down, the disk tier emptied, tp2.sh up; the JIT caches are kept between runs);
- tp2.sh ask: a short warm-up request, then the long prompt (PROMPT_TOKENS tokens), streamed;
- a stop and start of the WHOLE group, the LMCache servers too (tp2.sh stop, tp2.sh start): vLLM's own prefix
  cache is gone, only LMCache's disk tier (L2) survives;
- tp2.sh ask again: the warm-up (the first request after a start is slow JIT work), then the same long prompt,
  whose time to first token is the sample; with LMCache, vLLM's vllm:external_prefix_cache_hits_total after it.
Writes bench/results/lmcache_ttft.json. Env: BENCH_RUNS (default 3), BENCH_MODES (default "none urls"),
PROMPT_TOKENS (1900), MAXLEN (2048), IMAGE (dspark-lab/vllm-cpu:0.32.0), BENCH_WORK (/tmp/lmc-bench-ttft: tp2.sh's
WORK). Stdlib only (bench/run.sh runs it with the system python3).
"""

import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import time

from benchlib import stamp, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "lmcache_ttft.json"
TP2 = ROOT / "lab" / "lmcache" / "tp2.sh"
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
MODES = os.environ.get("BENCH_MODES", "none urls").split()
PROMPT_TOKENS = int(os.environ.get("PROMPT_TOKENS", "1900"))
MAXLEN = int(os.environ.get("MAXLEN", "2048"))
IMAGE = os.environ.get("IMAGE", "dspark-lab/vllm-cpu:0.32.0")
WORK = pathlib.Path(os.environ.get("BENCH_WORK", "/tmp/lmc-bench-ttft"))
GOAL_SPEEDUP = 3.0
LONG = re.compile(r"\[(\S+)\] long prompt: prompt_tokens (\S+), ttft ([0-9.]+) s, total ([0-9.]+) s")
WARM = re.compile(r"\[(\S+)\] warm-up: ttft ([0-9.]+) s")
METRIC = re.compile(r"^\s*(vllm:(?:external_)?prefix_cache_(?:hits|queries)_total)\{[^}]*\} ([0-9.e+]+)$", re.M)
READY = re.compile(r"group ready: /v1/models 200 ([0-9.]+) s")


def tp2(mode, *args):
    """Run one tp2.sh step in MODE; its output (the step's failure ends the benchmark, tearing the group down)."""
    env = dict(os.environ, MODE=mode, WORK=str(WORK), IMAGE=IMAGE, PROMPT_TOKENS=str(PROMPT_TOKENS),
               MAXLEN=str(MAXLEN))
    proc = subprocess.run(["bash", str(TP2), *args], env=env, capture_output=True, text=True, check=False)
    out = proc.stdout + proc.stderr
    sys.stderr.write("".join("  [%s] %s\n" % (mode, line) for line in out.splitlines() if line.startswith("tp2:")))
    if proc.returncode != 0:
        subprocess.run(["bash", str(TP2), "down"], env=env, check=False)
        sys.exit("tp2.sh %s (MODE=%s) failed (exit %s):\n%s" % (" ".join(args), mode, proc.returncode, out[-4000:]))
    return out


def asked(out):
    long_prompt, warm = LONG.search(out), WARM.search(out)
    if not long_prompt:
        sys.exit("tp2.sh ask printed no long-prompt line:\n" + out[-2000:])
    return {"ttft_s": float(long_prompt.group(3)), "total_s": float(long_prompt.group(4)),
            "prompt_tokens": int(long_prompt.group(2)) if long_prompt.group(2).isdigit() else None,
            "warm_up_ttft_s": float(warm.group(2)) if warm else None}


def one_run(mode):
    started = time.monotonic()
    tp2(mode, "down")
    for n in (0, 1):  # the disk tier of the last run: a fresh group starts with an empty LMCache
        shutil.rmtree(WORK / ("l2-%d" % n), ignore_errors=True)
    up = tp2(mode, "up")
    cold = asked(tp2(mode, "ask", "cold"))
    tp2(mode, "stop")
    restart = tp2(mode, "start")
    warm = asked(tp2(mode, "ask", "after-restart"))
    metrics = {name: float(value) for name, value in METRIC.findall(tp2(mode, "metrics"))}
    ready = READY.findall(up), READY.findall(restart)
    sample = {"mode": mode, "ttft_after_restart_s": warm["ttft_s"], "total_after_restart_s": warm["total_s"],
              "warm_up_after_restart_ttft_s": warm["warm_up_ttft_s"], "prompt_tokens": warm["prompt_tokens"],
              "cold_ttft_s": cold["ttft_s"],
              "external_prefix_cache_hits": metrics.get("vllm:external_prefix_cache_hits_total"),
              "external_prefix_cache_queries": metrics.get("vllm:external_prefix_cache_queries_total"),
              "prefix_cache_hits": metrics.get("vllm:prefix_cache_hits_total"),
              "group_ready_after_restart_s": float(ready[1][-1]) if ready[1] else None,
              "run_wall_s": round(time.monotonic() - started, 1)}
    print("%s: ttft after restart %.3f s (cold %.3f s), external hits %s, %.0f s" % (
        mode, sample["ttft_after_restart_s"], sample["cold_ttft_s"], sample["external_prefix_cache_hits"],
        sample["run_wall_s"]), file=sys.stderr, flush=True)
    return sample


def main():
    samples = []
    try:
        for _run in range(RUNS):
            for mode in MODES:
                samples.append(one_run(mode))
    finally:
        tp2(MODES[0], "down")
    per_mode = {}
    for mode in MODES:
        mine = [s for s in samples if s["mode"] == mode]
        per_mode[mode] = {"median_ttft_s": round(statistics.median(s["ttft_after_restart_s"] for s in mine), 3),
                          "ttft_s_each": [s["ttft_after_restart_s"] for s in mine],
                          "median_cold_ttft_s": round(statistics.median(s["cold_ttft_s"] for s in mine), 3),
                          "external_prefix_cache_hits_each": [s["external_prefix_cache_hits"] for s in mine]}
    none, lmcache = per_mode.get("none"), per_mode.get("urls")
    speedup = round(none["median_ttft_s"] / lmcache["median_ttft_s"], 2) if none and lmcache else None
    hits = lmcache["external_prefix_cache_hits_each"] if lmcache else []
    least_hits = min((h or 0) for h in hits) if hits else 0
    result = dict(stamp(), **{
        "benchmark": "TTFT of a repeated long prompt after a restart of the whole TP=2 group, LMCache vs none",
        "runs": RUNS,
        "model": "the lab's tiny-llama (.lab/model: random weights, float32), vLLM CPU 0.32.0 (%s), TP=2, "
                 "--enforce-eager, --max-model-len %d" % (IMAGE, MAXLEN),
        "prompt_tokens": PROMPT_TOKENS,
        "lmcache": "MODE=urls: LMCacheMPConnector, lmcache.mp.server_urls with both nodes' servers, L1 1 GB, "
                   "L2 fs on the host, chunk 128",
        "modes": per_mode,
        "median_ttft_none_s": none and none["median_ttft_s"],
        "median_ttft_lmcache_s": lmcache and lmcache["median_ttft_s"],
        "speedup": speedup,
        "external_prefix_cache_hits_min": least_hits,
        "goal": {"min_speedup": GOAL_SPEEDUP, "min_external_prefix_cache_hits": 1},
        "met": bool(speedup and speedup >= GOAL_SPEEDUP and least_hits >= 1),
        "samples": samples,
        "note": "speedup = median TTFT without LMCache / median TTFT with it, of the long prompt asked again after a "
                "stop and start of the whole group (vLLM ranks and LMCache servers; only LMCache's disk tier "
                "survives), each after a short warm-up request. The model is the lab's TINY random-weight llama on a "
                "2-core CPU, where prefilling about 1900 tokens costs a fraction of a second, so the ratio says "
                "little about real serving: the ratio on a real DeepSeek-V4 checkpoint on DGX Spark is a step of "
                "the hardware acceptance run (docs/hardware-acceptance.md). Other labs may run beside it on the "
                "same 2 cores. external_prefix_cache_hits: tokens of the prompt vLLM took from LMCache (head rank's "
                "/metrics after the after-restart prompt).",
    })
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
