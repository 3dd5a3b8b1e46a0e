"""A lab converge and its idempotence under one ansible-playbook (issue #15 point 1: the newest ansible-core).

Runs PLAYBOOK on INVENTORY with ANSIBLE_PLAYBOOK twice: the first run must pass, the second must pass with
changed=0 on every host. Prints each run's PLAY RECAP; the whole output goes to stdout (the stage's log).
CONVERGE_EXPECT=TEXT: each run's output must also hold TEXT (proof that a controller setting took effect).
Usage: converge_twice.py ANSIBLE_PLAYBOOK INVENTORY PLAYBOOK [EXTRA_ARG...]
"""

import os
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


def problems(rc, hosts, idempotence, output="", expect=None):
    """Why a run does not count as passed ([] when it does)."""
    found = []
    if expect and expect not in output:
        found.append("the output lacks %r (CONVERGE_EXPECT: the setting did not take effect)" % expect)
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
        found = problems(run.returncode, recap(run.stdout), idempotence, run.stdout + run.stderr,
                         os.environ.get("CONVERGE_EXPECT"))
        if found:
            print("== %s FAILED: %s" % (name, "; ".join(found)))
            return 1
        print("== %s passed" % name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
