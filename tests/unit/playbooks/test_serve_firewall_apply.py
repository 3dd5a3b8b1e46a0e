"""The serve role's firewall tasks, applied for real in a throw-away user + network namespace (`unshare -rn`).

tests/templates/firewall.yml runs roles/serve/tasks/firewall.yml (or firewall_off.yml) with the venv's ansible-playbook,
connection local, inside the namespace, several times in one namespace session: the first run replaces the table, the
second changes nothing (changed=0), a --check run with other networks runs `nft -c` and reports a change without applying
it, a table edited by hand is put back, the operator's own table is never touched, and serve_firewall off removes it.
Skipped where unprivileged namespaces or nft are missing. About 4 ansible-playbook runs (~30-40 s on 2 loaded cores).
"""

import json
import os
import re
import shlex
import shutil
import sys

import pytest

from netns_steps import result, run_in_namespace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TEMPLATES = os.path.join(ROOT, "tests", "templates")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
NFT = "/usr/sbin/nft"

pytestmark = pytest.mark.skipif(not (shutil.which("unshare") and os.path.exists(NFT)), reason="needs unshare and /usr/sbin/nft")


def playbook(out, step, extra, *args):
    command = [ANSIBLE_PLAYBOOK, "-i", os.path.join(TEMPLATES, "inventory.yml"), "--skip-tags", "serve_firewall_boot",
               "-e", json.dumps(extra)] + list(args) + [os.path.join(TEMPLATES, "firewall.yml")]
    return "%s > %s/%s.out 2>&1; echo $? > %s/%s.rc" % (shlex.join(command), out, step, out, step)


def recap(text):
    found = re.search(r"tpl-head\s*:\s*ok=(\d+)\s+changed=(\d+).*failed=(\d+)", text)
    assert found, text[-3000:]
    return int(found.group(2)), int(found.group(3))


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    out = tmp_path_factory.mktemp("fw")
    conf = out / "conf"
    conf.mkdir()
    base = {"serve_config_dir": str(conf), "serve_api_allowed_cidrs": ["10.0.0.0/24"]}
    other = dict(base, serve_api_allowed_cidrs=["10.9.0.0/16"])
    steps = [
        "%s add table inet operator" % NFT,
        "%s add chain inet operator input '{ type filter hook input priority 10; policy accept; }'" % NFT,
        playbook(out, "first", base),
        "%s list ruleset > %s/after_first.nft" % (NFT, out),
        "stat -c %%a %s/firewall.nft > %s/mode; cp %s/firewall.state %s/state.json" % (conf, out, conf, out),
        playbook(out, "second", base),
        playbook(out, "check", other, "--check"),
        "%s list table inet dspark_serve > %s/after_check.nft" % (NFT, out),
        "%s delete rule inet dspark_serve input handle $(%s -a list chain inet dspark_serve input | awk '/daddr/ {print $NF}')"
        % (NFT, NFT),
        playbook(out, "drift", base),
        "%s list table inet dspark_serve > %s/after_drift.nft" % (NFT, out),
        playbook(out, "off", dict(base, fw_tasks="firewall_off.yml")),
        "%s list ruleset > %s/after_off.nft" % (NFT, out),
    ]
    run_in_namespace(steps, out)
    return out, conf


def test_first_run_applies_and_records(session):
    out, conf = session
    changed, failed = recap(result(out, "first"))
    assert changed >= 1 and failed == 0
    ruleset = (out / "after_first.nft").read_text()
    assert "table inet dspark_serve" in ruleset and "table inet operator" in ruleset
    assert "ip saddr @fabric_peers accept" in ruleset and "ip daddr 10.77.77.1 drop" in ruleset
    assert (out / "mode").read_text().strip() == "600"
    assert json.loads((out / "state.json").read_text())["digest"]


def test_second_run_changes_nothing(session):
    out, dummy = session
    assert recap(result(out, "second")) == (0, 0)


def test_check_mode_reports_the_change_and_applies_nothing(session):
    out, dummy = session
    text = result(out, "check")
    changed, failed = recap(text)
    assert changed >= 1 and failed == 0
    table = (out / "after_check.nft").read_text()
    assert "10.0.0.0/24" in table and "10.9.0.0/16" not in table


def test_a_table_edited_by_hand_is_put_back(session):
    out, dummy = session
    changed, dummy = recap(result(out, "drift"))
    assert changed >= 1
    assert "ip daddr 10.77.77.1 drop" in (out / "after_drift.nft").read_text()


def test_off_removes_the_table_and_keeps_the_operators(session):
    out, conf = session
    changed, dummy = recap(result(out, "off"))
    assert changed >= 1
    ruleset = (out / "after_off.nft").read_text()
    assert "dspark_serve" not in ruleset and "table inet operator" in ruleset
    assert not (conf / "firewall.nft").exists() and not (conf / "firewall.state").exists()
