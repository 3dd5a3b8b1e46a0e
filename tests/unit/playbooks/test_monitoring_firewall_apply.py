"""The monitoring role's node_exporter firewall (roles/monitoring/tasks/firewall.yml), applied for real in a throw-away
user + network namespace (`unshare -rn`), several runs in one namespace session, as test_serve_firewall_apply.py does
for the serve role's table.

tests/templates/monitoring_firewall.yml runs the role's firewall tasks with the venv's ansible-playbook, connection
local. monitoring_config_dir and the boot unit's path are in a temporary directory, and a fake systemctl first on PATH
records `reenable` and answers `is-enabled` from that record (the module's read and the role's task both find it
there), so the machine's systemd is never touched. Proven: the first run loads the table, records it and enables the
boot unit (ordered before node_exporter's unit and required by it); a second run changes nothing and runs nothing
past the read; --check with another port reports the change and applies nothing; a flushed chain and a deleted table
are each put back; the operator's own table is never touched. Skipped where unprivileged namespaces or nft are missing.
About 5 ansible-playbook runs (~20 s).
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
UNIT = "dspark-monitor-firewall.service"

pytestmark = pytest.mark.skipif(not (shutil.which("unshare") and os.path.exists(NFT)), reason="needs unshare and /usr/sbin/nft")

FAKE_SYSTEMCTL = """#!/bin/sh
# systemctl for the test: `reenable UNIT` records UNIT as enabled, `is-enabled UNIT` answers from the record.
record="%s/enabled-$2"
case "$1" in
  reenable) echo "$@" >> "%s/systemctl.log"; touch "$record" ;;
  is-enabled) if [ -e "$record" ]; then echo enabled; else echo disabled; exit 1; fi ;;
  *) echo "fake systemctl: $*" >&2; exit 1 ;;
esac
"""


def playbook(out, step, extra, *args):
    command = [ANSIBLE_PLAYBOOK, "-i", os.path.join(TEMPLATES, "monitoring_inventory.yml"), "-e", json.dumps(extra)] \
        + list(args) + [os.path.join(TEMPLATES, "monitoring_firewall.yml")]
    return "%s > %s/%s.out 2>&1; echo $? > %s/%s.rc" % (shlex.join(command), out, step, out, step)


def recap(text):
    found = re.search(r"mon-node\s*:\s*ok=(\d+)\s+changed=(\d+).*failed=(\d+)", text)
    assert found, text[-3000:]
    return int(found.group(2)), int(found.group(3))


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    out = tmp_path_factory.mktemp("monfw")
    conf, bin_dir = out / "conf", out / "bin"
    conf.mkdir()
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(FAKE_SYSTEMCTL % (out, out))
    systemctl.chmod(0o755)
    base = {"monitoring_config_dir": str(conf), "_monitoring_fw_unit_path": str(out / UNIT)}
    steps = [
        "%s add table inet operator" % NFT,
        "%s add chain inet operator input '{ type filter hook input priority 10; policy accept; }'" % NFT,
        playbook(out, "first", base),
        "%s list ruleset > %s/after_first.nft" % (NFT, out),
        "stat -c %%a %s/firewall.nft > %s/mode; cp %s/firewall.state %s/state.json" % (conf, out, conf, out),
        playbook(out, "second", base),
        playbook(out, "check", dict(base, monitoring_node_exporter_port=9101), "--check"),
        "%s list table inet dspark_monitor > %s/after_check.nft" % (NFT, out),
        "%s flush chain inet dspark_monitor input" % NFT,
        playbook(out, "flushed", base),
        "%s list table inet dspark_monitor > %s/after_flushed.nft" % (NFT, out),
        "%s delete table inet dspark_monitor" % NFT,
        playbook(out, "deleted", base),
        "%s list ruleset > %s/after_deleted.nft" % (NFT, out),
    ]
    run_in_namespace(steps, out, bin_dir)
    return out, conf


def test_first_run_loads_records_and_enables_the_boot_unit(session):
    out, conf = session
    changed, failed = recap(result(out, "first"))
    assert changed >= 1 and failed == 0
    ruleset = (out / "after_first.nft").read_text()
    assert "table inet dspark_monitor" in ruleset and "table inet operator" in ruleset
    assert "tcp dport 9100 ip saddr @monitor_v4 accept" in ruleset and "192.0.2.9" in ruleset
    assert (out / "mode").read_text().strip() == "600"
    state = json.loads((out / "state.json").read_text())
    assert state["digest"] and "table inet dspark_monitor" in state["listed"]
    unit = (out / UNIT).read_text()
    assert "Before=network-pre.target prometheus-node-exporter.service" in unit
    assert "RequiredBy=prometheus-node-exporter.service" in unit and "ExecStart=/usr/sbin/nft -f %s/firewall.nft" % conf in unit
    assert (out / "systemctl.log").read_text().split() == ["reenable", UNIT]


def test_second_run_changes_nothing_and_stops_after_the_read(session):
    out, dummy = session
    text = result(out, "second")
    assert recap(text) == (0, 0)
    assert "Read node_exporter's firewall" in text
    # Everything is current: firewall_apply.yml is not even included.
    assert "Write the ruleset" not in text and "Replace table" not in text and "firewall_apply.yml" not in text
    assert (out / "systemctl.log").read_text().split() == ["reenable", UNIT]


def test_check_mode_reports_the_change_and_applies_nothing(session):
    out, dummy = session
    changed, failed = recap(result(out, "check"))
    assert changed >= 1 and failed == 0
    table = (out / "after_check.nft").read_text()
    assert "tcp dport 9100" in table and "9101" not in table


def test_a_flushed_chain_is_put_back(session):
    out, dummy = session
    changed, dummy = recap(result(out, "flushed"))
    assert changed >= 1
    assert 'tcp dport 9100 drop comment "node_exporter from anyone else"' in (out / "after_flushed.nft").read_text()


def test_a_deleted_table_is_put_back_and_the_operators_table_is_untouched(session):
    out, dummy = session
    changed, dummy = recap(result(out, "deleted"))
    assert changed >= 1
    ruleset = (out / "after_deleted.nft").read_text()
    assert "table inet dspark_monitor" in ruleset and "tcp dport 9100 drop" in ruleset
    assert "table inet operator" in ruleset and "priority filter + 10; policy accept;" in ruleset
