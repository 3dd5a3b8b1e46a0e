"""What every benchmark shares: the machine it ran on and how its result is written."""

import importlib.util
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "ci"))
import cpu_sample  # noqa: E402  pylint: disable=wrong-import-position


def controller_settings(name):
    """Environment of ansible-playbook for a named set of controller settings ("default": the checkout's
    ansible.cfg). Exits naming the fix when a setting needs a package the venv lacks."""
    if name == "default":
        return {}
    if name == "fact_cache":
        # Facts kept between runs: docker_runtime's play gathers facts on every run otherwise.
        return {"ANSIBLE_GATHERING": "smart", "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.jsonfile",
                "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(ROOT / ".lab" / "bench-fact-cache"),
                "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "86400"}
    if name == "mitogen":
        # Mitogen's strategy: one persistent Python per node instead of a new interpreter per module run
        # (docs/fleet.md, controller settings). Its SSH layer puts its own host key option first, so the
        # lab's StrictHostKeyChecking=no in ansible_ssh_common_args does not reach it: the lab's nodes are
        # re-created with new host keys, and known_hosts is /dev/null there anyway.
        spec = importlib.util.find_spec("ansible_mitogen")
        if spec is None:
            raise SystemExit("BENCH_SETTINGS=mitogen: ansible_mitogen is not installed in this Python. "
                             "Fix: make venv (requirements.txt pins mitogen).")
        strategy_dir = pathlib.Path(spec.origin).parent / "plugins" / "strategy"
        return {"ANSIBLE_STRATEGY_PLUGINS": str(strategy_dir), "ANSIBLE_STRATEGY": "mitogen_linear",
                "ANSIBLE_HOST_KEY_CHECKING": "False"}
    raise SystemExit("BENCH_SETTINGS=%r is not a known set of controller settings (default, fact_cache, mitogen)"
                     % name)


def busy_core_seconds():
    """CPU-seconds every core of this machine spent busy since boot (/proc/stat, read by CI's sampler's parser), the
    lab's nodes included."""
    with open("/proc/stat", encoding="ascii") as handle:
        jiffies = cpu_sample.parse(handle.read())
    return (sum(jiffies.values()) - jiffies["idle"] - jiffies["iowait"]) / os.sysconf("SC_CLK_TCK")


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


def write_baseline(path, numbers, checkout):
    """BENCH_CHECKOUT=<another checkout>: its numbers become the result's `baseline` (the rest of the result kept)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True,
                            check=False).stdout.strip()
    result = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    result["baseline"] = dict(numbers, git_commit=commit, date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result["baseline"], indent=2))
    return 0


def write_result(path, result):
    """Write the result to bench/results, print it, and return the exit code (0 when its goal was met)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    # `make converge-mitogen`: a set of controller settings as KEY=VALUE words for env(1).
    print(" ".join("%s=%s" % item for item in controller_settings(sys.argv[1]).items()))
