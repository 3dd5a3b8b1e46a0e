"""What a rolling reprovision under load must show, whichever lab ran it (tests/fleet/test_router.py on the simulated
fleet, tests/real on the real-engine lab): zero failed requests, every answer complete, every group converged, proven
and back in rotation, no request sent to a group while it was out, one group out at a time."""

import time
from datetime import datetime

import loadclient


def under_load(load, action, settle=10, tail=5, wait=180):
    """Start `load` (a loadclient.Load), let it settle, run action(), stop the load `tail` seconds later (even when
    action raised) and wait for its requests; returns (action's result, the load's records)."""
    load.start()
    time.sleep(settle)                                                 # steady state first
    try:
        result = action()
    finally:
        time.sleep(tail)
        load.stop()
        records = load.wait(timeout=wait)
    return result, records


def epoch(stamp):
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def assert_rolled(doc, records, groups, min_sent, serving=None):
    """Assert the roll's report (dspark-fleet's report.json) and the load's records: `groups` were rolled, `serving`
    (default: the same) all answered requests. Returns the load's summary and each rolled group's seconds out of
    rotation."""
    summary = loadclient.summarize(records)
    out_of_rotation = {g: doc["groups"][g]["rotation"]["out_of_rotation_s"] for g in groups}
    assert sorted(doc["groups"]) == sorted(groups), sorted(doc["groups"])
    assert summary["sent"] >= min_sent, summary
    assert summary["failed"] == 0, summary["failures"]
    assert summary["incomplete"] == 0 and summary["streams_complete"] == summary["streams"], summary
    assert set(summary["by_group"]) == set(serving or groups), summary["by_group"]
    windows = []
    for group in groups:
        entry = doc["groups"][group]
        assert entry["result"] == "converged" and entry["tp_ranks"]["ok"], entry.get("failure")
        rotation = entry["rotation"]
        assert rotation["back_in_rotation"] and not rotation["left_out"] and rotation["out_of_rotation_s"] > 0
        assert rotation["drain"]["bound_hit"] is False
        drained_at = epoch(rotation["drain"]["finished_at"])
        enable_started = epoch(entry["phases"]["router_enable"]["started"])
        windows.append((group, epoch(rotation["drain"]["started_at"]), epoch(entry["phases"]["router_enable"]["ended"])))
        # No request was sent to a group between the end of its drain and the start of its enable.
        strays = [r["index"] for r in records if r["group"] == group and drained_at < r["started"] < enable_started]
        assert strays == [], (group, strays)
    # One group out at a time: each was back before the next was drained.
    for (first, dummy, back), (second, drained, dummy2) in zip(windows, windows[1:]):
        assert back <= drained, (first, second)
    return summary, out_of_rotation
