"""Shared by the firewall apply tests (test_serve_firewall_apply.py, test_monitoring_firewall_apply.py): shell steps
run in one unprivileged user + network namespace (`unshare -rn`), each playbook step leaving <step>.out and <step>.rc
in the test's output directory."""

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run_in_namespace(steps, out, path_prefix=None):
    """Run the steps (shell, joined by ;) in a new namespace; skip when this machine allows none."""
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    if path_prefix:
        environ["PATH"] = "%s:%s" % (path_prefix, os.environ.get("PATH", ""))
    run = subprocess.run(["unshare", "-rn", "sh", "-c", "; ".join(steps)], cwd=ROOT, env=environ, capture_output=True,
                         text=True, timeout=600, check=False)
    if "Operation not permitted" in run.stderr and not (out / "first.rc").exists():
        pytest.skip("no unprivileged network namespaces here: %s" % run.stderr.strip())
    return run


def result(out, step):
    """A step's output, asserting that it exited 0."""
    text = (out / ("%s.out" % step)).read_text()
    assert (out / ("%s.rc" % step)).read_text().strip() == "0", text[-4000:]
    return text
