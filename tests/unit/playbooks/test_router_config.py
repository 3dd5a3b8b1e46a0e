"""The router role's computed values and its HAProxy configuration under real Ansible, against recorded fixtures.

Renders the role's defaults, vars and templates/haproxy.cfg.j2 with the venv's ansible-playbook on the controller for
the router host of the fleet lab (inventories/lab-fleet: an open API), the fleet lab with TLS, a stats page, no plain
port, its own paths and health path and every edge limit off, and the real-engine lab (inventories/lab-real: two groups
with keys), and compares with fixtures/. One ansible-playbook run per case. The fixtures were first recorded with the
role's vars of commit b831aa3, before the group model and the backend servers moved into Python (unchanged by that
move); recorded again for issue #26 (the edge: allowed paths, per-key limits, body bound, a health check without a
key; the whole configuration written by plugins/plugin_utils/_router_plan.py). Issue #41 added fleet_tls_plain (TLS
with the plain port on: keys refused there); the other fixtures did not change. Issue #42 added fleet_two_routers
(and every fixture's keepalived value, null without router_vip). test_router_haproxy.py runs
`haproxy -c` on them.

`python tests/unit/playbooks/test_router_config.py record <roles dir>` records the fixtures from <roles dir>/router.
Record again only for an intended change, and say which in the commit.
"""

import json
import os
import sys

import pytest

import role_render

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "router_plan")
FIXTURES = os.path.join(HERE, "fixtures")
# The fleet lab as the fixtures were recorded (three groups), frozen here: inventories/lab-fleet changes with the lab.
FLEET_INVENTORY = "tests/unit/playbooks/inventories/lab-fleet-three-groups/hosts.yml"
CASES = {
    "fleet": ["-i", FLEET_INVENTORY],
    "fleet_tls": ["-i", FLEET_INVENTORY, "-e", json.dumps({
        "router_tls_certificate": "CERT", "router_tls_key": "KEY", "router_port": 0, "router_stats_port": 8404,
        "router_served_model_name": "m+1", "router_group_header": "", "router_allowed_paths": ["/v1/chat/completions"],
        "router_health_path": "/ping", "router_key_rate_limit": 0, "router_key_concurrency_limit": 0,
        "router_max_body_bytes": 0})],
    # TLS with the plain port on as well (issue #41: keys refused there).
    "fleet_tls_plain": ["-i", FLEET_INVENTORY, "-e", json.dumps({"router_tls_certificate": "CERT", "router_tls_key": "KEY"})],
    "real": ["-i", "inventories/lab-real/hosts.yml"],
    # Two routers behind one service address (issue #42): the API on that address only, peers, keepalived.
    "fleet_two_routers": ["-i", "tests/unit/playbooks/inventories/lab-fleet-two-routers/hosts.yml"],
}


def render(case, roles_root, work):
    """{file stem: values} for one case, rendered with the router role in roles_root."""
    role_render.link_role(roles_root, "router", work, ("defaults", "vars", "templates"), os.path.join(HERE, "main.yml"))
    return role_render.run_play(work, os.path.join(HERE, "play.yml"), CASES[case])


@pytest.mark.parametrize("case", sorted(CASES))
def test_router_values_unchanged(case, tmp_path):
    role_render.assert_unchanged(FIXTURES, case, render(case, os.path.join(role_render.ROOT, "roles"), str(tmp_path)))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "record":
        sys.exit(__doc__)
    role_render.record(render, CASES, FIXTURES, os.path.abspath(sys.argv[2]))
