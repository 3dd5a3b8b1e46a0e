"""Render a role's computed values under real Ansible and compare them with recorded fixtures: the shared part of
test_role_plans.py, test_router_config.py and test_serve_command.py (each records what a role's Jinja computed before
it moved into Python, and checks that the Python gives the same).

A test stages a throw-away play in `work` (its roles linked from a roles directory, its own tasks that write each value
to char_out/<stem>.json), then `run_play` runs it with the venv's ansible-playbook on the controller.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def link_role(roles_root, role, work, parts, tasks_file):
    """work/roles/plan_<role>: the role's `parts` (defaults, vars, templates) linked, `tasks_file` as its tasks."""
    dest = os.path.join(work, "roles", "plan_" + role)
    os.makedirs(os.path.join(dest, "tasks"))
    for part in parts:
        if os.path.isdir(os.path.join(roles_root, role, part)):
            os.symlink(os.path.join(roles_root, role, part), os.path.join(dest, part))
    shutil.copy(tasks_file, os.path.join(dest, "tasks", "main.yml"))
    return dest


def run_play(work, play_file, args):
    """Run play_file (copied into work) with `args`; {file stem: value} of what it wrote to char_out."""
    shutil.copy(play_file, os.path.join(work, "play.yml"))
    out = os.path.join(work, "out")
    os.makedirs(out)
    command = [ANSIBLE_PLAYBOOK, os.path.join(work, "play.yml"), "-e", "char_out=" + out,
               "-e", "ansible_python_interpreter=" + sys.executable]
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run(command + list(args), cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300,
                         check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    values = {}
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name), encoding="utf-8") as handle:
            values[name[:-len(".json")]] = json.load(handle)
    return values


def assert_unchanged(fixtures, case, values):
    with open(os.path.join(fixtures, case + ".json"), encoding="utf-8") as handle:
        expected = json.load(handle)
    assert sorted(values) == sorted(expected)
    for stem in sorted(expected):
        assert values[stem] == expected[stem], stem


def record(render, cases, fixtures, roles_root):
    """Write fixtures/<case>.json for every case from render(case, roles_root, work)."""
    for case in sorted(cases):
        work = tempfile.mkdtemp()
        try:
            values = render(case, roles_root, work)
        finally:
            shutil.rmtree(work)
        with open(os.path.join(fixtures, case + ".json"), "w", encoding="utf-8") as handle:
            json.dump(values, handle, indent=1, sort_keys=True)
            handle.write("\n")
        print(case, len(values), "files")
