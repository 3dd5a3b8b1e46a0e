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

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "role_plans")
FIXTURES = os.path.join(HERE, "fixtures")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
ROLES = ("serve", "checkpoint", "nfs_export", "fabric")
CASES = {
    "fleet": ["-i", "inventories/lab-fleet/hosts.yml", "-i", os.path.join(HERE, "overlay.yml"), "-e", '{"fabric_bandwidth_test": true}'],
}


def render(case, roles_root, work):
    """{file stem: values} for one case, rendered with the roles in roles_root."""
    for role in ROLES:
        dest = os.path.join(work, "roles", "plan_" + role)
        os.makedirs(os.path.join(dest, "tasks"))
        for part in ("defaults", "vars", "templates"):
            if os.path.isdir(os.path.join(roles_root, role, part)):
                os.symlink(os.path.join(roles_root, role, part), os.path.join(dest, part))
        shutil.copy(os.path.join(HERE, "tasks", role + ".yml"), os.path.join(dest, "tasks", "main.yml"))
        # The role's own planning steps (fabric: tasks/plan_*.yml), which the fake tasks import between the fake reads.
        tasks = os.path.join(roles_root, role, "tasks")
        for name in sorted(os.listdir(tasks)) if os.path.isdir(tasks) else []:
            if name.startswith("plan_") and name.endswith(".yml"):
                shutil.copy(os.path.join(tasks, name), os.path.join(dest, "tasks", name))
    shutil.copy(os.path.join(HERE, "play.yml"), os.path.join(work, "play.yml"))
    out = os.path.join(work, "out")
    os.makedirs(out)
    command = [ANSIBLE_PLAYBOOK, os.path.join(work, "play.yml"), "-e", "char_out=" + out, "-e", "ansible_python_interpreter=" + sys.executable]
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run(command + CASES[case], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    values = {}
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name), encoding="utf-8") as handle:
            values[name[:-len(".json")]] = json.load(handle)
    return values


@pytest.mark.parametrize("case", sorted(CASES))
def test_role_values_unchanged(case, tmp_path):
    with open(os.path.join(FIXTURES, case + ".json"), encoding="utf-8") as handle:
        expected = json.load(handle)
    values = render(case, os.path.join(ROOT, "roles"), str(tmp_path))
    assert sorted(values) == sorted(expected)
    for stem in sorted(expected):
        assert values[stem] == expected[stem], stem


def record(roles_root):
    for case in sorted(CASES):
        work = tempfile.mkdtemp()
        try:
            values = render(case, roles_root, work)
        finally:
            shutil.rmtree(work)
        with open(os.path.join(FIXTURES, case + ".json"), "w", encoding="utf-8") as handle:
            json.dump(values, handle, indent=1, sort_keys=True)
            handle.write("\n")
        print(case, len(values), "files")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "record":
        sys.exit(__doc__)
    record(os.path.abspath(sys.argv[2]))
