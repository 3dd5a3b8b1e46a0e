"""The router role's computed values and its HAProxy configuration under real Ansible, against what its Jinja computed
before the group model and the backend servers moved into Python (plugins/filter/router_plan.py).

Renders the role's defaults, vars and templates/haproxy.cfg.j2 with the venv's ansible-playbook on the controller for
the router host of the fleet lab (inventories/lab-fleet: an open API), the fleet lab with TLS, a stats page, no plain
port and a health key, and the real-engine lab (inventories/lab-real: two groups with keys), and compares with
fixtures/ (recorded with the role's vars of commit b831aa3, before the move). One ansible-playbook run per case.

`python tests/unit/playbooks/test_router_config.py record <roles dir>` records the fixtures from <roles dir>/router.
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
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "router_plan")
FIXTURES = os.path.join(HERE, "fixtures")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
CASES = {
    "fleet": ["-i", "inventories/lab-fleet/hosts.yml"],
    "fleet_tls": ["-i", "inventories/lab-fleet/hosts.yml", "-e", json.dumps({
        "router_tls_certificate": "CERT", "router_tls_key": "KEY", "router_port": 0, "router_stats_port": 8404,
        "router_api_key": "k%ey", "router_served_model_name": "m+1", "router_group_header": ""})],
    "real": ["-i", "inventories/lab-real/hosts.yml"],
}


def render(case, roles_root, work):
    """{file stem: values} for one case, rendered with the router role in roles_root."""
    dest = os.path.join(work, "roles", "plan_router")
    os.makedirs(os.path.join(dest, "tasks"))
    for part in ("defaults", "vars", "templates"):
        os.symlink(os.path.join(roles_root, "router", part), os.path.join(dest, part))
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
def test_router_values_unchanged(case, tmp_path):
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
