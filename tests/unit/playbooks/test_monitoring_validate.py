"""playbooks/monitoring.yml's first play (the role's validate.yml) on the controller: a Prometheus or Alertmanager
beyond loopback without a web config stops the run before any change, naming the variable, the value and the fix;
the new web variables pass the role's argument spec; the hashes and the password are never printed.

Only the first play runs: it is tagged `always`, the others are not, and the run asks for a tag nothing else has.
The inventory (tests/templates/monitoring_inventory.yml) is two local hosts; nothing is changed on them.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
HASH = "$2b$10$abcdefghijklmnopqrstuuWRO.aPjfZIPa7LiT/idLvqe8ILJHybK"


def validate(extra):
    command = [ANSIBLE_PLAYBOOK, "-i", os.path.join(ROOT, "tests", "templates", "monitoring_inventory.yml"),
               "--tags", "validate_only_here", "-e", json.dumps(extra), os.path.join(ROOT, "playbooks", "monitoring.yml")]
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300, check=False)
    return run.returncode, run.stdout + run.stderr


def test_the_defaults_pass():
    rc, out = validate({})
    assert rc == 0, out[-3000:]
    assert "Check the plan" in out and "Node_exporter, the collector" not in out


@pytest.mark.parametrize("name", ["monitoring_prometheus_listen_address", "monitoring_alertmanager_listen_address"])
def test_beyond_loopback_without_a_web_config_stops_before_any_change(name):
    rc, out = validate({name: "10.0.0.5"})
    assert rc != 0
    assert "monitoring: nothing was changed: %s='10.0.0.5' is not a loopback address" % name in out, out[-3000:]
    assert "Fix: set monitoring_web_config with tls_server_config" in out


def test_a_bad_web_config_is_refused_without_showing_its_secrets():
    rc, out = validate({"monitoring_prometheus_listen_address": "10.0.0.5",
                        "monitoring_web_config": {"basic_auth_users": {"dspark": "SECRET-not-a-hash"}},
                        "monitoring_web_username": "dspark", "monitoring_web_password": "SECRET-password"})
    assert rc != 0
    assert "monitoring_web_config.basic_auth_users='(not shown)' is not a mapping of user names" in out, out[-3000:]
    assert "SECRET" not in out


def test_a_web_config_opens_other_addresses():
    rc, out = validate({"monitoring_prometheus_listen_address": "10.0.0.5",
                        "monitoring_alertmanager_listen_address": "0.0.0.0",
                        "monitoring_web_config": {"tls_server_config": {"cert_file": "/etc/ssl/m.crt", "key_file": "/etc/ssl/m.key"},
                                                  "basic_auth_users": {"dspark": HASH}},
                        "monitoring_web_username": "dspark", "monitoring_web_password": "SECRET-password"})
    assert rc == 0, out[-3000:]
    assert "SECRET" not in out and HASH not in out
