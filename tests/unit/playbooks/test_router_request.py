"""playbooks/router_drain.yml and router_enable.yml refuse a request before any router is touched: the first play
(localhost) names every problem at once (no router in the inventory, no group named) and says nothing changed; the
rules are plugin_utils._rules_router.target_problems (unit-tested beside it). No router is contacted: the inventories
have none, or the run stops on the controller first."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
NO_ROUTER = os.path.join(ROOT, "inventories", "lab", "hosts.yml")
ROUTER = os.path.join(ROOT, "tests", "unit", "playbooks", "inventories", "lab-fleet-three-groups", "hosts.yml")


def run(playbook, inventory, *extra):
    command = [ANSIBLE_PLAYBOOK, "-i", inventory, os.path.join(ROOT, "playbooks", playbook)] + list(extra)
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    done = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, " ".join((done.stdout + done.stderr).split())


@pytest.mark.parametrize("playbook,where", [("router_drain.yml", "there is no router to drain at."),
                                            ("router_enable.yml", "there is no router.")])
def test_no_router_and_no_group_are_named_at_once(playbook, where):
    rc, out = run(playbook, NO_ROUTER)
    assert rc != 0
    assert ("The inventory has no host in group dspark_router: %s Name the group: -e router_target_group=<group>. "
            "Nothing changed." % where) in out, out[-2000:]


def test_a_router_without_a_named_group_is_refused_on_the_controller():
    rc, out = run("router_enable.yml", ROUTER)
    assert rc != 0
    assert "'Name the group: -e router_target_group=<group>. Nothing changed.'" in out, out[-2000:]
    assert "spark-router" not in out.rsplit("PLAY RECAP", maxsplit=1)[-1]          # the router's play never ran
