"""plugins/plugin_utils/_dockerd_drift.py: dockerd is stale when a config file is newer than its start, or systemd
has not reloaded its unit files; never when it is not running."""

import datetime

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dspark.cluster.plugins.filter.dockerd_restart_reason import FilterModule
from ansible_collections.dspark.cluster.plugins.plugin_utils import _dockerd_drift as drift

STARTED = "Tue 2026-12-01 05:41:01.250000 UTC"
STARTED_EPOCH = datetime.datetime(2026, 12, 1, 5, 41, 1, 250000, tzinfo=datetime.timezone.utc).timestamp()
DAEMON = "/etc/docker/daemon.json"
DROPIN = "/etc/systemd/system/docker.service.d/http-proxy.conf"


def show(state="active", started=STARTED, reload="no"):
    return "ActiveState=%s\nActiveEnterTimestamp=%s\nNeedDaemonReload=%s\n" % (state, started, reload)


def stat(path, mtime, exists=True):
    return {"item": path, "stat": {"exists": exists, "mtime": mtime} if exists else {"exists": False}}


def reason(text, *results):
    return FilterModule().filters()["dockerd_restart_reason"](text, list(results))


def test_the_timestamp_is_read_to_the_microsecond_in_utc():
    assert drift.epoch(STARTED) == STARTED_EPOCH


@pytest.mark.parametrize("value", ["", "n/a", "  "])
def test_no_timestamp_is_none(value):
    assert drift.epoch(value) is None


@pytest.mark.parametrize("value", ["Tue 2026-12-01 05:41:01 UTC", "Tue 2026-12-01 05:41:01.250000 CET", "@1764567661"])
def test_another_format_is_an_error_not_a_guess(value):
    with pytest.raises(ValueError):
        drift.epoch(value)
    with pytest.raises(AnsibleFilterError, match="--timestamp=us\\+utc"):
        reason(show(started=value), stat(DAEMON, 0))


def test_files_older_than_the_start_need_nothing():
    assert reason(show(), stat(DAEMON, STARTED_EPOCH - 60), stat(DROPIN, STARTED_EPOCH - 0.001)) == ""


def test_a_file_written_after_the_start_means_a_run_died_before_its_restart():
    text = reason(show(), stat(DAEMON, STARTED_EPOCH + 0.5), stat(DROPIN, STARTED_EPOCH - 60))
    assert DAEMON in text and DROPIN not in text
    assert "2026-12-01 05:41:01" in text


def test_a_write_in_the_same_second_but_after_the_start_still_counts():
    # Whole seconds would lose this one: started at .250, written at .900 of the same second.
    assert DAEMON in reason(show(), stat(DAEMON, STARTED_EPOCH + 0.65))


def test_a_restart_after_the_write_clears_it():
    assert reason(show(), stat(DAEMON, STARTED_EPOCH - 0.0001)) == ""


def test_missing_files_are_ignored():
    assert reason(show(), stat(DROPIN, 0, exists=False), stat(DAEMON, STARTED_EPOCH - 1)) == ""


def test_unit_files_systemd_has_not_reloaded_need_a_restart_with_daemon_reload():
    # A drop-in removed (no file left to compare) shows only here.
    assert "docker.service" in reason(show(reload="yes"), stat(DROPIN, 0, exists=False))


@pytest.mark.parametrize("state", ["inactive", "failed", "activating", ""])
def test_an_engine_that_is_not_running_needs_no_restart(state):
    assert reason(show(state=state, reload="yes"), stat(DAEMON, STARTED_EPOCH + 100)) == ""


def test_an_active_unit_without_a_timestamp_needs_nothing():
    assert reason(show(started="n/a"), stat(DAEMON, STARTED_EPOCH + 100)) == ""


def test_values_with_equals_signs_and_blank_lines_parse():
    assert drift.properties("A=b=c\n\nNoEquals\nB= x \n") == {"A": "b=c", "B": "x"}
