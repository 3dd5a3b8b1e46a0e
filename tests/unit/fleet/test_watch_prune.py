"""watch: earlier rounds' artifacts pruned by count and age (prune_plan() pure; prune() on real directories)."""

import json
import os
import subprocess
import sys

import pytest

from dspark_fleet import watch

DAY = 86400.0
NOW = 100 * DAY


@pytest.mark.parametrize("ages_days, keep, max_days, running, removed", [
    ([], 50, 14, None, []),
    ([1, 2, 3], 50, 14, None, []),
    ([1, 2, 3], 2, 14, None, ["r3"]),                     # count: the oldest goes
    ([1, 20, 3], 50, 14, None, ["r2"]),                   # age
    ([1, 2, 3], 0, 14, None, ["r1", "r2", "r3"]),         # keep none
    ([1, 2, 3], 0, 14, "r1", ["r2", "r3"]),               # ... but never the running round
    ([30, 2, 3], 1, 14, "r1", ["r3"]),                    # the running round is neither removed nor counted
    ([15, 16, 1], 5, 14, None, ["r1", "r2"]),
])
def test_prune_plan(ages_days, keep, max_days, running, removed):
    rounds = [("r%d" % (i + 1), NOW - age * DAY) for i, age in enumerate(ages_days)]
    assert sorted(watch.prune_plan(rounds, keep, max_days * DAY, NOW, running)) == removed


def make_round(folder, name, age_days, content=True):
    path = folder / name
    (path / "grp_a" / "check").mkdir(parents=True)
    if content:
        (path / "grp_a" / "check" / "stdout").write_text("failed\n")
    stamp = NOW - age_days * DAY
    os.utime(path, (stamp, stamp))
    return path


def marked(folder, pid):
    folder.mkdir(parents=True)
    (folder / watch.MARKER).write_text(json.dumps({"pid": pid}))
    (folder / ".runner" / "env").mkdir(parents=True)
    return folder


def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])  # pylint: disable=consider-using-with
    proc.wait()
    return proc.pid


def test_prune_across_this_and_earlier_watch_runs(tmp_path):
    state = tmp_path / "state"
    old = marked(state / "20260101T000000Z", dead_pid())
    current = marked(state / "20260102T000000Z", os.getpid())
    report_dir = state / "20260101T120000Z"          # a reprovision's artifacts: never touched
    make_round(report_dir, "round00001", 30)
    (report_dir / "report.json").write_text("{}")
    make_round(old, "round00001", 20)                # too old
    make_round(old, "round00002", 3)
    make_round(current, "round00001", 2)
    make_round(current, "round00002", 1)
    removed = watch.prune(str(current), 2, 14 * DAY, NOW, running=str(current / "round00003"))
    assert sorted(os.path.relpath(p, state) for p in removed) == [
        "20260101T000000Z", "20260101T000000Z/round00001", "20260101T000000Z/round00002"]
    assert sorted(p.name for p in current.iterdir()) == [".dspark-fleet-watch", ".runner", "round00001", "round00002"]
    assert (report_dir / "round00001").is_dir()


def test_an_earlier_dir_of_a_live_watch_stays(tmp_path):
    other = marked(tmp_path / "a", os.getppid())
    current = marked(tmp_path / "b", os.getpid())
    make_round(other, "round00001", 30)
    removed = watch.prune(str(current), 50, 14 * DAY, NOW)
    assert removed == [str(other / "round00001")]
    assert other.is_dir()


def test_the_running_round_is_never_pruned(tmp_path):
    current = marked(tmp_path / "b", os.getpid())
    running = make_round(current, "round00007", 400)
    assert watch.prune(str(current), 0, 1 * DAY, NOW, running=str(running)) == []
    assert running.is_dir()


def test_tidy_removes_what_a_passing_round_left_empty(tmp_path):
    passing = tmp_path / "round00001"
    (passing / "grp_a").mkdir(parents=True)
    (passing / "grp_b").mkdir()
    watch.tidy(str(passing))
    assert not passing.exists()
    failing = make_round(tmp_path, "round00002", 0)
    (failing / "grp_b").mkdir()
    watch.tidy(str(failing))
    assert sorted(p.name for p in failing.iterdir()) == ["grp_a"]
