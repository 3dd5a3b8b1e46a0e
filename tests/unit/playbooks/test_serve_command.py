"""The serve role's vLLM command line (_serve_command) under real Ansible, against what its Jinja computed before the
command moved into Python (plugins/filter/serve_command.py).

Renders the role's defaults and vars with the venv's ansible-playbook on the controller for every member of the
real-engine lab (inventories/lab-real: the recipe's flags off, the CPU build's extra arguments) and of the fleet lab
with the recipe's flags off, another reasoning default, string numbers and extra arguments, and compares with
fixtures/ (recorded with the role's vars of commit b831aa3, before the move; the fleet lab with its defaults is
tests/unit/playbooks/test_role_plans.py's). One ansible-playbook run per case.

`python tests/unit/playbooks/test_serve_command.py record <roles dir>` records the fixtures from <roles dir>/serve.
Record again only for an intended change, and say which in the commit.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_command")
FIXTURES = os.path.join(HERE, "fixtures")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
CASES = {
    "fleet_variant": ["-i", "inventories/lab-fleet/hosts.yml", "-e", json.dumps({
        "serve_recipe_args": "no", "serve_default_thinking": "max", "serve_max_num_seqs": "3", "serve_mtp_num_tokens": "7",
        "serve_gpu_memory_utilization": 0.9, "serve_extra_args": ["--enforce-eager", "--seed", "1"]})],
    "fleet_recipe_strings": ["-i", "inventories/lab-fleet/hosts.yml", "-e", json.dumps({
        "serve_recipe_args": "true", "serve_default_thinking": "off", "serve_max_num_seqs": "3", "serve_mtp_num_tokens": "7",
        "serve_gpu_memory_utilization": "0.9", "serve_speculative_method": "mtp", "serve_extra_args": ["--seed", "2"]})],
    "real": ["-i", "inventories/lab-real/hosts.yml"],
}


def render(case, roles_root, work):
    """{file stem: values} for one case, rendered with the serve role in roles_root."""
    dest = os.path.join(work, "roles", "plan_serve")
    os.makedirs(os.path.join(dest, "tasks"))
    for part in ("defaults", "vars"):
        os.symlink(os.path.join(roles_root, "serve", part), os.path.join(dest, part))
    shutil.copy(os.path.join(HERE, "main.yml"), os.path.join(dest, "tasks", "main.yml"))
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
def test_serve_command_unchanged(case, tmp_path):
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
