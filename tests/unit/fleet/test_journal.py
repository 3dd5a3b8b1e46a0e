"""journal: JSON lines appended, a torn line skipped, each group's supervisor state folded from it."""

import json

from dspark_fleet import journal


def clock(values):
    values = list(values)
    return lambda: values.pop(0)


def test_write_and_read(tmp_path):
    path = tmp_path / "sub" / "journal.jsonl"
    j = journal.Journal(str(path), clock=clock([100.0, 101.5]))
    first = j.write("check", "pair_a", ok=False, summary="tp_ranks on a0: rank 1 missing")
    j.write("restart", "pair_a", ok=True, attempt=1)
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0]) == first
    assert first["iso"].startswith("1970-01-01T00:01:40") and first["action"] == "check"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"time": 3, "group": "pair_a", "act')          # torn last line
    records = j.read()
    assert [r["action"] for r in records] == ["check", "restart"]
    assert journal.read(str(tmp_path / "missing.jsonl")) == []


def test_summarize_counts_restarts_and_failures():
    records = [
        {"time": 1, "group": "g", "action": "check", "ok": True},
        {"time": 2, "group": "g", "action": "check", "ok": False, "summary": "dead",
         "diagnosis": [{"code": "rank_exited", "rank": 1, "node": "b1", "cause": "exit 137"}]},
        {"time": 3, "group": "g", "action": "restart", "ok": True, "attempt": 1},
        {"time": 4, "group": "g", "action": "check", "ok": False, "summary": "dead again"},
        {"time": 5, "group": "g", "action": "restart", "ok": False, "summary": "start failed"},
        {"time": 6, "group": "g", "action": "give_up", "reason": "cap"},
        {"time": 7, "group": "other", "action": "check", "ok": True},
        {"time": 8, "group": None, "action": "watch_stop"},
    ]
    states = journal.summarize(records)
    g = states["g"]
    assert g["restarts"] == [3, 5] and g["attempts"] == 2
    assert g["failed"] == {"time": 6, "reason": "cap"}
    assert g["last_failure"] == {"time": 5, "summary": "start failed"}
    assert g["diagnosis"][0]["code"] == "rank_exited"
    assert journal.diagnosis_text(g["diagnosis"]) == "rank_exited (rank 1 on b1): exit 137"
    assert states["other"]["last_ok"] == 7 and states["other"]["failed"] is None
    assert set(journal.summarize(records, groups=["other"])) == {"other"}
    # a check that passes resets the attempts (backoff), a recovery clears the failed mark
    journal.fold(g, {"time": 9, "group": "g", "action": "recovered"})
    journal.fold(g, {"time": 9, "group": "g", "action": "check", "ok": True})
    assert g["failed"] is None and g["attempts"] == 0 and g["restarts"] == [3, 5]


def test_every_action_is_documented():
    assert {"check", "locked", "logs", "restart", "backoff", "give_up", "needs_reboot"} <= set(journal.ACTIONS)
