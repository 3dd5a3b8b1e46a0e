"""playbooks/router.yml's plays when they have no router to run on: no router in the inventory, or --limit leaves the
routers out (site.yml --limit <group>, as dspark-fleet runs it). Its second play's hosts come from the groups its first
play makes (group_by); an empty pattern is an error in ansible-core (found by the real-engine lab's converge)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")

WITH_ROUTER = """all:
  hosts:
    h1: {ansible_connection: local}
  children:
    dspark_router:
      hosts:
        r1: {ansible_connection: local}
"""
WITHOUT_ROUTER = """all:
  hosts:
    h1: {ansible_connection: local}
"""


@pytest.mark.parametrize("inventory, args", [(WITH_ROUTER, ["--limit", "h1"]), (WITHOUT_ROUTER, [])],
                         ids=["routers-left-out-by-limit", "no-router"])
def test_router_yml_runs_nothing_and_succeeds(tmp_path, inventory, args):
    path = tmp_path / "hosts.yml"
    path.write_text(inventory)
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(path), os.path.join(ROOT, "playbooks", "router.yml")] + args,
                         cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.count("skipping: no hosts matched") == 2, run.stdout[-3000:]
