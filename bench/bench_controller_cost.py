"""Controller cost per host: the CPU-seconds the controller spends (ansible-playbook, its forks, the ssh clients and
the ssh ControlMaster processes they start) for a no-op site.yml and for a forced restart of every group
(serve_force_restart=true), on the SIMULATED lab pair and on the SIMULATED fleet lab; then a projection to 100
groups (200 nodes) from the per-host cost measured.

Needs both labs converged: `make lab` and `make lab-fleet`, then site.yml once on each (this script converges each
once more, untimed). BENCH_RUNS no-op runs each (median taken); BENCH_SETTINGS=name (benchlib.controller_settings:
default, fact_cache, mitogen) measures one set of controller settings. Result: bench/results/controller_cost.json
(bench/results/controller_cost_<name>.json for a setting other than the default).

CPU is counted as getrusage(RUSAGE_CHILDREN) around each run (every process the run waited for) plus the CPU the
ssh ControlMaster processes ("ssh: ... [mux]", detached, so never waited for) gained during the run, read from /proc.
The lab nodes are containers on this machine: their own CPU is not the controller's and is not counted there, but
the whole machine's busy CPU-seconds over each run are recorded beside it (machine_cpu_s, /proc/stat): a run over
three times the nodes cannot take less wall time than its machine CPU over the two cores, which bounds the fleet's
wall ratio at about 3 x the pair's use of the cores (machine_cpu_use).
"""

import math
import os
import pathlib
import resource
import subprocess
import sys
import time

from benchlib import busy_core_seconds, controller_settings, recap as read_recap, stamp, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(sys.executable).parent
PAIR = ROOT / "inventories" / "lab" / "hosts.yml"
FLEET = pathlib.Path(os.environ.get("BENCH_FLEET_INVENTORY", ROOT / "inventories" / "lab-fleet" / "hosts.yml"))
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
FORCE = '{"serve_force_restart": true}'
SETTING = os.environ.get("BENCH_SETTINGS", "default")
SETTING_ENV = controller_settings(SETTING)
RESULT = ROOT / "bench" / "results" / ("controller_cost.json" if SETTING == "default"
                                       else "controller_cost_%s.json" % SETTING)
# The projection: 100 groups of two nodes, one controller.
PROJECT_GROUPS = 100
PROJECT_NODES = 200
# Goals of issue #29 (the no-op fleet run over the pair's), kept with the numbers they judge.
GOAL_NOOP_RATIO = 1.5
CLK_TCK = os.sysconf("SC_CLK_TCK")


def mux_cpu():
    """CPU-seconds so far of every ssh ControlMaster process, by pid."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as handle:
                cmdline = handle.read()
            with open("/proc/%s/stat" % pid, encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if cmdline.startswith(b"ssh") and b"[mux]" in cmdline:
            found[pid] = (int(fields[11]) + int(fields[12])) / CLK_TCK   # utime + stime
    return found


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(argv, cwd, env=None):
    """Run argv: (the completed process, wall seconds, controller CPU-seconds with the ssh ControlMasters' gain,
    the whole machine's busy core-seconds)."""
    mux_before, cpu_before, machine_before = mux_cpu(), children_cpu(), busy_core_seconds()
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    machine = busy_core_seconds() - machine_before
    cpu = children_cpu() - cpu_before + sum(now - mux_before.get(pid, 0.0) for pid, now in mux_cpu().items())
    return proc, wall, cpu, machine


def run(inventory, extra=None):
    """One site.yml run: wall and controller CPU seconds, remote hosts, host-tasks, changed count."""
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(ROOT / "site.yml")]
    if extra:
        argv += ["-e", extra]
    env = dict(os.environ, **SETTING_ENV)
    mux_before, cpu_before, machine_before = mux_cpu(), children_cpu(), busy_core_seconds()
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    machine_cpu = busy_core_seconds() - machine_before
    cpu = children_cpu() - cpu_before
    mux = sum(now - mux_before.get(pid, 0.0) for pid, now in mux_cpu().items())
    if proc.returncode != 0:
        sys.exit("site.yml on %s failed (rc=%d):\n%s"
                 % (inventory, proc.returncode, (proc.stdout + proc.stderr)[-4000:]))
    recap = read_recap(proc.stdout)
    remote = sorted(h for h in recap if h != "localhost")
    # Host-tasks: every task result of a remote host (ok counts changed ones too), skipped ones included: each is
    # a templated condition and a callback on the controller.
    host_tasks = sum(recap[h]["ok"] + recap[h]["failed"] + recap[h]["skipped"] for h in remote)
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu + mux, 1), "ssh_mux_cpu_s": round(mux, 1),
            "machine_cpu_s": round(machine_cpu, 1), "machine_cpu_use": round(machine_cpu / wall / os.cpu_count(), 2),
            "hosts": len(remote), "host_tasks": host_tasks, "changed": sum(recap[h]["changed"] for h in remote)}


def median_run(inventory, extra=None, runs=RUNS):
    samples = [run(inventory, extra) for dummy in range(runs)]
    samples.sort(key=lambda s: s["cpu_s"])
    middle = dict(samples[len(samples) // 2])
    middle["cpu_s_each"] = [s["cpu_s"] for s in samples]
    middle["wall_s_each"] = sorted(s["wall_s"] for s in samples)
    return per_host(middle)


def per_host(sample):
    sample["cpu_s_per_host"] = round(sample["cpu_s"] / sample["hosts"], 2)
    sample["cpu_ms_per_host_task"] = round(1000 * sample["cpu_s"] / sample["host_tasks"], 1)
    return sample


def projection(pair, fleet):
    """Controller CPU for PROJECT_NODES hosts: a fixed part and a per-host part fitted through the pair and the
    fleet, and the wall time that CPU needs on 2 and on 16 cores (a lower bound: latency comes on top)."""
    slope = (fleet["cpu_s"] - pair["cpu_s"]) / (fleet["hosts"] - pair["hosts"])
    fixed = pair["cpu_s"] - slope * pair["hosts"]
    cpu = fixed + slope * PROJECT_NODES
    # dspark-fleet runs each group as its own ansible-playbook: every group pays the fixed part (its own controller
    # process, inventory and plays), so the per-group figure is the pair's whole run.
    per_group_cpu = pair["cpu_s"] * PROJECT_GROUPS
    return {
        "groups": PROJECT_GROUPS, "nodes": PROJECT_NODES,
        "cpu_s_per_extra_host": round(slope, 2), "cpu_s_fixed": round(fixed, 1),
        "one_playbook_cpu_s": round(cpu, 0),
        "one_playbook_wall_s_min": {"2_cores": round(cpu / 2, 0), "16_cores": round(cpu / 16, 0)},
        "per_group_playbooks_cpu_s": round(per_group_cpu, 0),
        "per_group_playbooks_wall_s_min": {"2_cores": round(per_group_cpu / 2, 0),
                                           "16_cores": round(per_group_cpu / 16, 0)},
        "forks_needed_for_one_batch": PROJECT_NODES,
        "batches_at_forks_20": math.ceil(PROJECT_NODES / 20),
    }


def main():
    result = {"benchmark": "controller CPU per host: no-op and forced site.yml on the lab pair and the fleet lab, "
                           "projected to 100 groups",
              **stamp(), "settings": {"name": SETTING, "environment": SETTING_ENV},
              "note": "SIMULATED labs (containers, the vLLM simulator); cpu_s is the controller's, machine_cpu_s the "
                      "whole machine's (the lab's nodes run on it too)"}
    for name, inventory in (("pair", PAIR), ("fleet", FLEET)):
        if name == "fleet" and os.environ.get("BENCH_FLEET", "1") == "0":
            continue
        run(inventory)                                      # converge (and fill a fact cache), untimed
        result[name] = {"inventory": str(inventory.relative_to(ROOT)) if inventory.is_relative_to(ROOT)
                        else str(inventory),
                        "noop": median_run(inventory),
                        "forced": per_host(run(inventory, FORCE))}
    met = None
    if "fleet" in result:
        result["projection"] = projection(result["pair"]["noop"], result["fleet"]["noop"])
        ratio = round(result["fleet"]["noop"]["wall_s"] / result["pair"]["noop"]["wall_s"], 2)
        result["noop_wall_ratio_fleet_over_pair"] = ratio
        met = ratio <= GOAL_NOOP_RATIO and result["fleet"]["noop"]["changed"] == 0
    result["goal"] = {"noop_wall_ratio_max": GOAL_NOOP_RATIO, "noop_changed": 0}
    result["met"] = bool(met) and result["pair"]["noop"]["changed"] == 0
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
