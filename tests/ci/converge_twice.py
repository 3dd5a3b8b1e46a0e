"""A lab converge and its idempotence under one ansible-playbook (issue #15 point 1: the newest ansible-core).

Runs PLAYBOOK on INVENTORY with ANSIBLE_PLAYBOOK twice: the first run must pass, the second must pass with
changed=0 on every host. Prints each run's PLAY RECAP; the whole output goes to stdout (the stage's log).
Usage: converge_twice.py ANSIBLE_PLAYBOOK INVENTORY PLAYBOOK [EXTRA_ARG...]
"""

import re
import subprocess
import sys

RECAP_LINE = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$")


def recap(output):
    """{host: {counter: int}} from the last PLAY RECAP in ``output`` ({} when there is none)."""
    if "PLAY RECAP" not in output:
        return {}
    found = {}
    for line in output.rsplit("PLAY RECAP", 1)[1].splitlines():
        match = RECAP_LINE.match(line.strip())
        if match:
            found[match.group(1)] = {k: int(v) for k, v in (pair.split("=") for pair in match.group(2).split())}
    return found


def problems(rc, hosts, idempotence):
    """Why a run does not count as passed ([] when it does)."""
    found = []
    if rc != 0:
        found.append("ansible-playbook exited %d" % rc)
    if not hosts:
        found.append("no PLAY RECAP")
    for host, counters in sorted(hosts.items()):
        for counter in ("failed", "unreachable"):
            if counters.get(counter, 0):
                found.append("%s: %s=%d" % (host, counter, counters[counter]))
        if idempotence and counters.get("changed", 0):
            found.append("%s: changed=%d on the second run (not idempotent)" % (host, counters["changed"]))
    return found


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    command = [argv[0], "-i", argv[1], argv[2], *argv[3:]]
    for idempotence, name in ((False, "converge"), (True, "idempotence")):
        print("== %s: %s" % (name, " ".join(command)), flush=True)
        run = subprocess.run(command, capture_output=True, text=True, check=False)
        print(run.stdout + run.stderr, flush=True)
        found = problems(run.returncode, recap(run.stdout), idempotence)
        if found:
            print("== %s FAILED: %s" % (name, "; ".join(found)))
            return 1
        print("== %s passed" % name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
