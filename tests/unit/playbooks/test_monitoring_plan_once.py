"""The monitoring role works out its plan once per host and run (issue #40): vars/main.yml's `_monitoring_plan` is a
template over the whole fleet's hostvars that Ansible would evaluate again at every task reading it (150 ms a
host-task on the fleet lab, bench/results/monitoring_noop.json); validate.yml, the first play of
playbooks/monitoring.yml, pins it as a fact. Shown by a later play that changes one of the plan's inputs: it still
reads the plan of the run's start. Two local hosts, nothing changed on them.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
PLAY = """\
- name: As playbooks/monitoring.yml's first play
  hosts: "dspark:dspark_router"
  gather_facts: false
  tasks:
    - name: Validate
      ansible.builtin.import_role:
        name: plan_monitoring
        tasks_from: validate.yml

- name: A later play of the same run
  hosts: dspark_router
  gather_facts: false
  tasks:
    - name: Change one of the plan's inputs
      ansible.builtin.set_fact:
        monitoring_prometheus_port: 19090
    - name: Read the plan in the role's scope
      ansible.builtin.include_role:
        name: plan_monitoring
        tasks_from: plan_probe.yml
"""
PROBE = """\
- name: Print the plan's Prometheus arguments
  ansible.builtin.debug:
    msg: "PLAN {{ _monitoring_plan.server_args | to_json }} PORT {{ monitoring_prometheus_port }}"
"""


def test_a_later_play_reads_the_plan_of_the_runs_start(tmp_path):
    roles = tmp_path / "roles"
    role = roles / "plan_monitoring"  # the role's files; its probe task added beside them
    (role / "tasks").mkdir(parents=True)
    for part in ("defaults", "vars", "meta"):
        os.symlink(os.path.join(ROOT, "roles", "monitoring", part), role / part)
    for name in os.listdir(os.path.join(ROOT, "roles", "monitoring", "tasks")):
        os.symlink(os.path.join(ROOT, "roles", "monitoring", "tasks", name), role / "tasks" / name)
    (role / "tasks" / "plan_probe.yml").write_text(PROBE)
    (tmp_path / "play.yml").write_text(PLAY)
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0", ANSIBLE_ROLES_PATH=str(roles))
    run = subprocess.run([ANSIBLE_PLAYBOOK, "-i", os.path.join(ROOT, "tests", "templates", "monitoring_inventory.yml"),
                          str(tmp_path / "play.yml")], cwd=ROOT, env=environ, capture_output=True, text=True,
                         timeout=300, check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    # The YAML callback folds a long message over lines.
    flat = " ".join(out.split())
    plan, port = re.search(r"PLAN (.*?) PORT (\d+)", flat).groups()
    # The input changed (19090); the plan is the one worked out at the start (the default port, 9090).
    assert port == "19090" and "127.0.0.1:9090 " in plan and "19090" not in plan, flat[-2000:]
