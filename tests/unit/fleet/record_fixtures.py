"""Record the ansible-runner event streams in fixtures/ (run again after an ansible-core / ansible-runner upgrade).

    .venv/bin/python tests/unit/fleet/record_fixtures.py

Each stream is recorded through dspark_fleet.runner_exec.run_playbook (exactly what the fleet's event handler
gets) from a playbook run against local hosts: the fake project in fakeproject/ (the real play names, a
fake dspark.cluster.tp_ranks action returning the real result keys) and fixtures/recording/shapes.yml (real
command and ping modules). The events are stored as received; see fixtures/README.md.
"""

import json
import os
import sys
import tempfile

from dspark_fleet import runner_exec

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
PROJECT = os.path.join(HERE, "fakeproject")
INVENTORY = os.path.join(FIXTURES, "recording", "inventory.yml")

# name: (project dir, playbook, limit, extra ansible-playbook arguments, what it shows)
RECORDINGS = {
    "site_converged": (PROJECT, "site.yml", "grp_ok", [], "site.yml on a group that converges"),
    "site_tp_ranks_failed": (PROJECT, "site.yml", "grp_bad", [],
                             "site.yml where tp_ranks fails on the head and the rescue's fail task ends the run"),
    "site_check": (PROJECT, "site.yml", "grp_ok", ["--check", "--diff"], "site.yml in check mode with diff"),
    "status_serving": (PROJECT, "playbooks/status.yml", "grp_ok", [], "status.yml of a serving group"),
    "status_not_serving": (PROJECT, "playbooks/status.yml", "grp_down", [],
                           "status.yml of a group whose containers are absent (the head's assert fails)"),
    "preflight_bad_input": (PROJECT, "playbooks/preflight.yml", "grp_ok,grp_input",
                            ["-e", "{\"preflight_check_reachability\": false}"], "the global validation run failing"),
    "shapes": (os.path.join(FIXTURES, "recording"), "shapes.yml", None, [],
               "real modules: unreachable node, changed task, rescued failure, ignored failure, failed command "
               "whose rescue fails"),
}


def record(name, project, playbook, limit, args, what, work):
    events = []
    spec = runner_exec.RunSpec(
        ident=name, playbook=os.path.join(project, playbook), inventory=INVENTORY, project_dir=project,
        artifacts_dir=work, private_dir=runner_exec.prepare(work), limit=limit, args=args,
        envvars=runner_exec.ansible_env(project))
    result = runner_exec.run_playbook(spec, event_handler=events.append)
    doc = {
        "source": "recorded by tests/unit/fleet/record_fixtures.py: %s" % what,
        "playbook": os.path.relpath(os.path.join(project, playbook), HERE),
        "limit": limit,
        "args": args,
        "status": result.status,
        "rc": result.rc,
        "events": events,
    }
    with open(os.path.join(FIXTURES, name + ".json"), "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print("%-22s %-10s rc=%s events=%d" % (name, result.status, result.rc, len(events)))


def main(names):
    with tempfile.TemporaryDirectory() as work:
        for name, recording in RECORDINGS.items():
            if not names or name in names:
                record(name, *recording, work=work)


if __name__ == "__main__":
    main(sys.argv[1:])
