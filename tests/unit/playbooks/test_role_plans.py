"""The roles' computed variables under real Ansible, against what their Jinja computed before the move to Python.

The group model (plugins/filter/group_model.py) and the fabric plan (plugins/filter/fabric_plan.py) replaced Jinja in
the vars of fabric, nfs_export, checkpoint and serve. This test renders those vars with the venv's ansible-playbook on
the controller (each role's defaults, vars, templates and planning tasks (fabric's tasks/plan_*.yml); fake node reads,
see role_plans/tasks/fabric.yml) and
compares every value with fixtures/ (recorded with the roles' vars of commit 078b77c, before the move): the fleet lab
(two pairs, a trio) with the bandwidth test on, pair_a with a second fabric interface on netplan, trio_c's ranks
reversed and pair_b's worker outside its network (role_plans/overlay.yml). One ansible-playbook run, ~25 s.

`python tests/unit/playbooks/test_role_plans.py record <dir>` records the fixtures from <dir>/<role>/{defaults,vars,templates}.
The fixtures were recorded from a <dir> holding, for fabric, serve, checkpoint and nfs_export, `vars/main.yml` of 078b77c
(`git show 078b77c:roles/<role>/vars/main.yml`) beside links to this checkout's defaults/ and templates/ (unchanged since).
Record again only for an intended change of a computed value, and say which in the commit.
"""

import os
import shutil
import sys

import pytest

import role_render

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "role_plans")
FIXTURES = os.path.join(HERE, "fixtures")
ROLES = ("serve", "checkpoint", "nfs_export", "fabric")
# The fleet lab as the fixtures were recorded (three groups), frozen here: inventories/lab-fleet changes with the lab.
FLEET_INVENTORY = "tests/unit/playbooks/inventories/lab-fleet-three-groups/hosts.yml"
CASES = {
    "fleet": ["-i", FLEET_INVENTORY, "-i", os.path.join(HERE, "overlay.yml"), "-e",
              # serve_trust_remote_code: recorded when the recipe always passed --trust-remote-code (#26: on request).
              # serve_edge: recorded before the API edge put vLLM on loopback (#41; test_serve_command has it on).
              '{"fabric_bandwidth_test": true, "serve_trust_remote_code": true, "serve_edge": false}'],
}


def render(case, roles_root, work):
    """{file stem: values} for one case, rendered with the roles in roles_root."""
    for role in ROLES:
        dest = role_render.link_role(roles_root, role, work, ("defaults", "vars", "templates"),
                                     os.path.join(HERE, "tasks", role + ".yml"))
        # The role's own planning steps (fabric: tasks/plan_*.yml), which the fake tasks import between the fake reads.
        tasks = os.path.join(roles_root, role, "tasks")
        for name in sorted(os.listdir(tasks)) if os.path.isdir(tasks) else []:
            if name.startswith("plan_") and name.endswith(".yml"):
                shutil.copy(os.path.join(tasks, name), os.path.join(dest, "tasks", name))
    return role_render.run_play(work, os.path.join(HERE, "play.yml"), CASES[case])


@pytest.mark.parametrize("case", sorted(CASES))
def test_role_values_unchanged(case, tmp_path):
    role_render.assert_unchanged(FIXTURES, case, render(case, os.path.join(role_render.ROOT, "roles"), str(tmp_path)))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "record":
        sys.exit(__doc__)
    role_render.record(render, CASES, FIXTURES, os.path.abspath(sys.argv[2]))
