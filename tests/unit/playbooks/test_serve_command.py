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
import sys

import pytest

import role_render

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_command")
FIXTURES = os.path.join(HERE, "fixtures")
# The fleet lab as the fixtures were recorded (three groups), frozen here: inventories/lab-fleet changes with the lab.
FLEET_INVENTORY = "tests/unit/playbooks/inventories/lab-fleet-three-groups/hosts.yml"
CASES = {
    "fleet_variant": ["-i", FLEET_INVENTORY, "-e", json.dumps({
        "serve_recipe_args": "no", "serve_default_thinking": "max", "serve_max_num_seqs": "3", "serve_mtp_num_tokens": "7",
        "serve_gpu_memory_utilization": 0.9, "serve_extra_args": ["--enforce-eager", "--seed", "1"]})],
    "fleet_recipe_strings": ["-i", FLEET_INVENTORY, "-e", json.dumps({
        "serve_recipe_args": "true", "serve_default_thinking": "off", "serve_max_num_seqs": "3", "serve_mtp_num_tokens": "7",
        "serve_gpu_memory_utilization": "0.9", "serve_speculative_method": "mtp", "serve_extra_args": ["--seed", "2"],
        # Recorded when the recipe always passed it; now only on request (#26).
        "serve_trust_remote_code": "yes"})],
    # The model and its revision are files the lab writes when it comes up (.lab/model/): given here as the lab writes
    # them, so that the case renders on a fresh checkout before any lab ran.
    # LMCache (serve_lmcache, on for the real pair since issue #45) did not exist before the move: off here (its
    # connector flag: tests/unit/plugins/plugin_utils/test_serve_argv.py).
    "real": ["-i", "inventories/lab-real/hosts.yml", "-e", json.dumps({
        "dspark_model": "dspark-lab/tiny-llama", "dspark_model_revision": "d642987900daa73d1b9e704dd2b623ff5be79b30",
        "serve_lmcache": False})],
}


def render(case, roles_root, work):
    """{file stem: values} for one case, rendered with the serve role in roles_root."""
    role_render.link_role(roles_root, "serve", work, ("defaults", "vars"), os.path.join(HERE, "main.yml"))
    return role_render.run_play(work, os.path.join(HERE, "play.yml"), CASES[case])


@pytest.mark.parametrize("case", sorted(CASES))
def test_serve_command_unchanged(case, tmp_path):
    role_render.assert_unchanged(FIXTURES, case, render(case, os.path.join(role_render.ROOT, "roles"), str(tmp_path)))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "record":
        sys.exit(__doc__)
    role_render.record(render, CASES, FIXTURES, os.path.abspath(sys.argv[2]))
