"""What the labs' module bytecode cache saves (lab only: lab/image/dspark_lab_ansiballz_cache.py; never on a real
node): a no-op `site.yml` on the converged lab pair, alternately with the cache and without it (its .pth removed from
both nodes and from the test venv, then put back), BENCH_RUNS times each. The numbers are the machine's CPU (every
process: controller, nodes, their sshd and dockerd; /proc/stat) and the wall time, medians by CPU. Goal: the run with
the cache at most 0.9 of the machine CPU of the run without it.
"""

import os
import pathlib
import subprocess
import sys

from bench_site_noop import playbook
from benchlib import stamp, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "ansiballz_cache.json"
RUNS = int(os.environ.get("BENCH_RUNS", "5"))  # one run varies by about 2 CPU-s
NODES = ("spark-head", "spark-worker")
# As lab/image/install_ansiballz_cache.sh installs it; moved aside to run without the cache.
PTH = "dspark-lab-ansiballz-cache.pth"
NODE_PTH = "/usr/lib/python3/dist-packages/" + PTH
VENV_PTH = pathlib.Path(subprocess.run(
    [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
    capture_output=True, text=True, check=True).stdout.strip()) / PTH
GOAL = {"machine_cpu_ratio_max": 0.9, "changed": 0}


def use_cache(on):
    """Move the installed .pth back on both nodes and in the venv, or aside to <name>.off (the module file stays)."""
    here, there = (NODE_PTH + ".off", NODE_PTH) if on else (NODE_PTH, NODE_PTH + ".off")
    for node in NODES:
        subprocess.run(["docker", "exec", node, "sh", "-c", "[ ! -e %s ] || mv %s %s" % (here, here, there)], check=True)
    aside = VENV_PTH.with_name(PTH + ".off")
    source, target = (aside, VENV_PTH) if on else (VENV_PTH, aside)
    if source.exists():
        source.rename(target)


def median(samples):
    middle = sorted(samples, key=lambda s: s["machine_cpu_s"])[len(samples) // 2]
    return {"machine_cpu_s": middle["machine_cpu_s"], "wall_s": middle["wall_s"],
            "controller_cpu_s": middle["cpu_s"], "machine_cpu_s_each": [s["machine_cpu_s"] for s in samples],
            "max_changed": max(s["changed"] for s in samples)}


def main():
    samples = {True: [], False: []}
    try:
        use_cache(True)
        playbook()  # converge, and fill the caches
        for dummy in range(RUNS):
            for on in (True, False):
                use_cache(on)
                samples[on].append(playbook())
    finally:
        use_cache(True)
    cached, plain = median(samples[True]), median(samples[False])
    ratio = round(cached["machine_cpu_s"] / plain["machine_cpu_s"], 2)
    result = {"benchmark": "no-op site.yml on the lab pair (SIMULATED nodes) with and without the labs' module "
                           "bytecode cache", **stamp(), "runs": RUNS, "with_cache": cached, "without_cache": plain,
              "machine_cpu_ratio": ratio, "goal": GOAL}
    result["met"] = ratio <= GOAL["machine_cpu_ratio_max"] and max(
        cached["max_changed"], plain["max_changed"]) == GOAL["changed"]
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
