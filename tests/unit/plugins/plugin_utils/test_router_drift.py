"""plugins/plugin_utils/_router_drift.py (issue #26 point 8): HAProxy must reload when its files differ from the record
of what it last loaded, or when there is no readable record; never when it is not running. The record is what the
role writes after a run; systemd's NeedDaemonReload asks for a daemon reload."""

import base64
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dspark.cluster.plugins.filter.router_drift import FilterModule as DriftFilter
from ansible_collections.dspark.cluster.plugins.filter.router_loaded_stamp import FilterModule as StampFilter
from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_drift as drift

CFG, PEM = "/etc/haproxy/haproxy.cfg", "/etc/haproxy/dspark-tls/router.pem"
OLD, NEW, KEY = "a" * 64, "b" * 64, "c" * 64
STAMP = "/var/lib/haproxy/dspark-router-loaded.json"


def show(state="active", reload="no"):
    return "ActiveState=%s\nNeedDaemonReload=%s\n" % (state, reload)


def stat(path, checksum=None):
    """A stat loop result: the file with this checksum, or missing (None)."""
    if checksum is None:
        return {"item": path, "stat": {"exists": False}}
    return {"item": path, "stat": {"exists": True, "checksum": checksum}}


def slurped(text):
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64"}


def recorded(*results):
    """The slurp result of the record the role writes for these files."""
    return slurped(StampFilter().filters()["router_loaded_stamp"](list(results)))


def reason(text, loaded, *results):
    return DriftFilter().filters()["router_drift"](text, loaded, list(results), STAMP)


def test_the_record_names_every_file_and_a_missing_one_as_null():
    text = drift.stamp([stat(CFG, OLD), stat(PEM)])
    assert json.loads(text) == {"version": 1, "loaded": {CFG: OLD, PEM: None}}
    assert text.endswith("\n") and text == drift.stamp([stat(PEM), stat(CFG, OLD)])   # same files, same text


def test_the_record_from_the_wanted_texts_is_the_record_of_those_files_on_disk():
    """A converged router's record, worked out from the texts the role writes, is byte for byte what the role wrote
    after reading those files back (so the read can compare it instead of the role rewriting it)."""
    import hashlib
    config = "global\n  maxconn 100\n"
    wanted = StampFilter().filters()["router_loaded_stamp"]({CFG: config, PEM: None})
    assert wanted == drift.stamp([stat(CFG, hashlib.sha256(config.encode()).hexdigest()), stat(PEM)])
    assert wanted != drift.stamp([stat(CFG, OLD), stat(PEM)])


def test_running_the_recorded_files_needs_nothing():
    assert reason(show(), recorded(stat(CFG, OLD), stat(PEM)), stat(CFG, OLD), stat(PEM)) == {"reload": "", "daemon_reload": False}
    with_tls = recorded(stat(CFG, OLD), stat(PEM, KEY))
    assert reason(show(), with_tls, stat(CFG, OLD), stat(PEM, KEY))["reload"] == ""


@pytest.mark.parametrize("before, now, named", [
    # The aborted run wrote haproxy.cfg and ended before its reload.
    ((stat(CFG, OLD), stat(PEM)), (stat(CFG, NEW), stat(PEM)), "%s (loaded: sha256 aaaaaaaaaaaa, now: sha256 bbbbbbbbbbbb)" % CFG),
    # ... or wrote the TLS file (TLS turned on), or removed it (turned off).
    ((stat(CFG, OLD), stat(PEM)), (stat(CFG, OLD), stat(PEM, KEY)), "%s (loaded: missing, now: sha256 cccccccccccc)" % PEM),
    ((stat(CFG, OLD), stat(PEM, KEY)), (stat(CFG, OLD), stat(PEM)), "%s (loaded: sha256 cccccccccccc, now: missing)" % PEM),
])
def test_a_file_changed_after_the_last_reload_asks_for_a_reload(before, now, named):
    why = reason(show(), recorded(*before), *now)["reload"]
    assert why.startswith("HAProxy runs an older configuration than its files hold: ") and named in why
    assert "ended before reloading" in why


def test_both_files_changed_are_both_named():
    why = reason(show(), recorded(stat(CFG, OLD), stat(PEM)), stat(CFG, NEW), stat(PEM, KEY))["reload"]
    assert CFG in why and PEM in why


@pytest.mark.parametrize("loaded", [{}, {"changed": False, "failed": True, "msg": "file not found"}, None])
def test_no_record_asks_for_one_reload(loaded):
    why = reason(show(), loaded, stat(CFG, OLD), stat(PEM))["reload"]
    assert why.startswith("there is no record of what HAProxy last loaded (%s;" % STAMP)


@pytest.mark.parametrize("text", ["not json", json.dumps({"loaded": "x"}), json.dumps([1]), "\xff"])
def test_an_unreadable_record_asks_for_a_reload(text):
    why = reason(show(), slurped(text), stat(CFG, OLD))["reload"]
    assert why.startswith("%s, the record of what HAProxy last loaded, is unreadable" % STAMP)
    assert reason(show(), {"content": "%%%"}, stat(CFG, OLD))["reload"].startswith(STAMP)


@pytest.mark.parametrize("state", ["inactive", "failed", "activating", ""])
def test_a_haproxy_that_does_not_run_needs_no_reload(state):
    """Starting it reads the files (the role's start step); no record and other files change nothing."""
    assert reason(show(state), None, stat(CFG, NEW))["reload"] == ""
    assert reason(show(state), recorded(stat(CFG, OLD)), stat(CFG, NEW))["reload"] == ""


def test_a_reloading_haproxy_is_running():
    assert reason(show("reloading"), recorded(stat(CFG, OLD)), stat(CFG, NEW))["reload"]


@pytest.mark.parametrize("state", ["active", "inactive"])
def test_need_daemon_reload(state):
    assert reason(show(state, "yes"), recorded(stat(CFG, OLD)), stat(CFG, OLD))["daemon_reload"] is True
    assert reason(show(state, "no"), recorded(stat(CFG, OLD)), stat(CFG, OLD))["daemon_reload"] is False


def test_a_file_the_record_does_not_know_counts_as_missing_there():
    """A record of an older role (fewer files) asks for a reload only when the new file exists."""
    assert reason(show(), recorded(stat(CFG, OLD)), stat(CFG, OLD), stat(PEM))["reload"] == ""
    assert PEM in reason(show(), recorded(stat(CFG, OLD)), stat(CFG, OLD), stat(PEM, KEY))["reload"]


@pytest.mark.parametrize("results, message", [
    ([{"stat": {"exists": False}}], "a stat result without its item"),
    ([{"item": CFG, "stat": {"exists": True}}], "has no checksum: read it with get_checksum: true"),
])
def test_a_stat_result_the_role_cannot_have_meant_is_an_error(results, message):
    with pytest.raises(AnsibleFilterError, match=message):
        DriftFilter().filters()["router_drift"](show(), recorded(stat(CFG, OLD)), results)
    with pytest.raises(AnsibleFilterError, match=message):
        StampFilter().filters()["router_loaded_stamp"](results)


def test_an_aborted_run_then_the_next_run():
    """The sequence the role goes through, with the files as the node holds them at each step."""
    record = recorded(stat(CFG, OLD), stat(PEM))                 # run 1 ended normally: HAProxy runs OLD
    # Run 2 writes NEW and dies before its handler: the record still says OLD.
    assert reason(show(), record, stat(CFG, NEW), stat(PEM))["reload"]     # run 3 reloads before writing anything
    record = recorded(stat(CFG, NEW), stat(PEM))                 # ... and records NEW after the reload
    assert reason(show(), record, stat(CFG, NEW), stat(PEM))["reload"] == ""   # run 4: nothing to do
