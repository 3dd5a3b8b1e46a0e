"""What every benchmark shares: the machine it ran on and how its result is written."""

import json
import os
import pathlib
import platform
import re
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo", encoding="utf-8")
                if line.startswith("model name")), platform.processor())
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}


def stamp():
    """When, where and at which commit a result was measured: the first keys of every result."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip()
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(), "git_commit": commit}


RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)", re.M)
RECAP_FIELDS = ("ok", "changed", "unreachable", "failed", "skipped")


def recap(stdout):
    """An ansible-playbook PLAY RECAP as {host: {ok, changed, unreachable, failed, skipped}} (ok counts changed too)."""
    return {m.group(1): dict(zip(RECAP_FIELDS, (int(g) for g in m.groups()[1:]))) for m in RECAP.finditer(stdout)}


def write_result(path, result):
    """Write the result to bench/results, print it, and return the exit code (0 when its goal was met)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0 if result["met"] else 1
