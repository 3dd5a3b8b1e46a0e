"""Fleet scale on the SIMULATED fleet lab (inventories/lab-fleet: the pair pair_b and the trio trio_c, five
nodes), same run, same machine:

1. dspark-fleet reprovision with a forced restart of every group (serve_force_restart) and --parallel = number
   of groups (both groups), against the same for one group alone (the pair pair_b). Goal: at most 1.5x.
2. a no-op site.yml over the whole fleet against the same playbook limited to the pair pair_b. Goal: at most 1.5x.

Also records the controller memory (peak RSS of each group's ansible-playbook) from the dspark-fleet report.
Needs `make lab-fleet` and a converged fleet (it converges once first, untimed). BENCH_SETTINGS=name
(benchlib.controller_settings: default, fact_cache, mitogen) runs every command under one set of controller settings;
the result is then bench/results/fleet_scale_<name>.json.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from benchlib import controller_settings, stamp, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(sys.executable).parent
# BENCH_FLEET_INVENTORY: a renamed copy of the fleet lab (other host names, ports, subnets) beside the real one.
INVENTORY = pathlib.Path(os.environ.get("BENCH_FLEET_INVENTORY", ROOT / "inventories" / "lab-fleet" / "hosts.yml"))
SETTING = os.environ.get("BENCH_SETTINGS", "default")
SETTING_ENV = controller_settings(SETTING)
RESULT = ROOT / "bench" / "results" / ("fleet_scale.json" if SETTING == "default" else "fleet_scale_%s.json" % SETTING)
# The lab's serving groups and their nodes (inventories/lab-fleet/hosts.yml; a BENCH_FLEET_INVENTORY copy keeps
# the group names). ALONE: the baseline group, the fleet's one pair.
GROUPS = {"pair_b": 2, "trio_c": 3}
ALONE = "pair_b"
GOAL_RATIO = 1.5
STRATEGY_WARNING = "strategy plugins not included in ansible.builtin"
FORCE = '{"serve_force_restart": true}'


def timed(argv):
    started = time.monotonic()
    run = subprocess.run(argv, cwd=ROOT, env=dict(os.environ, **SETTING_ENV), capture_output=True, text=True,
                         check=False)
    elapsed = time.monotonic() - started
    if run.returncode != 0:
        sys.exit("%s failed (rc=%d):\n%s" % (" ".join(argv), run.returncode, (run.stdout + run.stderr)[-4000:]))
    return round(elapsed, 1), run.stdout


def reprovision(groups):
    artifacts = tempfile.mkdtemp(prefix="bench-fleet-")
    elapsed, dummy = timed([str(BIN / "dspark-fleet"), "reprovision", "-i", str(INVENTORY), "--plain",
                            "--groups", ",".join(groups), "--parallel", str(len(groups)), "-e", FORCE,
                            "--artifacts", artifacts])
    report = json.loads((pathlib.Path(artifacts) / "report.json").read_text())
    if "ANSIBLE_STRATEGY" in SETTING_ENV:
        # The strategy reaches each group's ansible-playbook through ansible-runner's environment: ansible-core
        # warns about every strategy from outside ansible.builtin, so each group's output must hold the warning.
        outputs = list((pathlib.Path(artifacts) / "groups").glob("*/stdout"))
        missing = [str(path) for path in outputs if STRATEGY_WARNING not in path.read_text(errors="replace")]
        if not outputs or missing:
            sys.exit("BENCH_SETTINGS=%s: the strategy did not reach the groups' runs (%s)"
                     % (SETTING, ", ".join(missing) or "no group output under %s" % artifacts))
    return elapsed, {name: {"seconds": group["duration_s"], "changed": group["changed"],
                            "controller_memory_peak_mib": round((group["controller_memory_peak_kib"] or 0) / 1024, 1),
                            "ranks": len(group["tp_ranks"]["registered_ranks"])}
                     for name, group in report["groups"].items()}


def noop(limit=None):
    argv = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(ROOT / "site.yml")]
    elapsed, out = timed(argv + (["--limit", limit] if limit else []))
    changed = [line for line in out.splitlines() if " changed=" in line and " changed=0 " not in line]
    return elapsed, changed


def main():
    timed([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(ROOT / "site.yml")])   # converge, untimed
    fleet_s, fleet_groups = reprovision(list(GROUPS))
    alone_s, alone_groups = reprovision([ALONE])
    noop_fleet_s, changed_fleet = noop()
    noop_pair_s, changed_pair = noop(ALONE)
    reprovision_ratio = round(fleet_s / alone_s, 2)
    noop_ratio = round(noop_fleet_s / noop_pair_s, 2)
    result = {
        "benchmark": "fleet scale on the simulated fleet lab: forced reprovision of every group in parallel "
                     "vs one group alone (the pair); no-op site.yml over the fleet vs the pair",
        **stamp(), "settings": {"name": SETTING, "environment": SETTING_ENV},
        "fleet": {"groups": len(GROUPS), "nodes": sum(GROUPS.values()), "inventory": INVENTORY.parent.name,
                  "note": "SIMULATED fleet lab (containers, the vLLM simulator)"},
        "reprovision": {"fleet_seconds": fleet_s, "one_group_seconds": alone_s, "ratio": reprovision_ratio,
                        "groups": fleet_groups, "alone": alone_groups},
        "noop_site": {"fleet_seconds": noop_fleet_s, "one_pair_seconds": noop_pair_s, "ratio": noop_ratio,
                      "changed_lines": changed_fleet + changed_pair},
        "goal": {"reprovision_ratio_max": GOAL_RATIO, "noop_ratio_max": GOAL_RATIO, "noop_changed": 0},
        "met": reprovision_ratio <= GOAL_RATIO and noop_ratio <= GOAL_RATIO and not (changed_fleet or changed_pair),
    }
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
