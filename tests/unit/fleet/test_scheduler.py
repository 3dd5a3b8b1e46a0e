"""scheduler.Scheduler: parallel limit, canaries, max-failed, stop."""

import pytest

from dspark_fleet.scheduler import CANCELLED, CONVERGED, FAILED, Scheduler


def test_parallel_limit_and_order():
    s = Scheduler(["a", "b", "c", "d", "e"], parallel=2)
    assert s.take() == ["a", "b"]
    assert s.take() == []          # full
    s.finish("b", CONVERGED)
    assert s.take() == ["c"]
    s.finish("a", CONVERGED)
    s.finish("c", FAILED)          # no max-failed: failures do not block
    assert s.take() == ["d", "e"]
    assert not s.done()
    s.finish("d", CONVERGED)
    s.finish("e", CONVERGED)
    assert s.done() and s.not_started() == [] and s.blocked() is None


def test_serial_by_default():
    s = Scheduler(["a", "b"])
    assert s.take() == ["a"]
    assert s.take() == []
    s.finish("a", CONVERGED)
    assert s.take() == ["b"]


def test_canaries_first_then_the_rest_when_all_converged():
    s = Scheduler(["a", "b", "c", "d"], parallel=4, canary=2)
    assert s.take() == ["a", "b"]  # only canaries, although 4 could run
    s.finish("a", CONVERGED)
    assert s.take() == []          # b (canary) still runs
    s.finish("b", CONVERGED)
    assert s.take() == ["c", "d"]


def test_a_failed_canary_blocks_the_rest():
    s = Scheduler(["a", "b", "c"], parallel=1, canary=2)
    assert s.take() == ["a"]
    s.finish("a", FAILED)
    assert s.take() == ["b"]       # the other canary still runs: the canary set is judged as a whole
    s.finish("b", CONVERGED)
    assert s.take() == []
    assert s.done()
    assert s.not_started() == ["c"]
    assert "canary" in s.blocked() and "a" in s.blocked()


def test_canary_larger_than_the_fleet():
    s = Scheduler(["a", "b"], parallel=2, canary=5)
    assert s.take() == ["a", "b"]
    s.finish("a", CONVERGED)
    s.finish("b", CONVERGED)
    assert s.done() and s.blocked() is None


def test_max_failed_stops_new_starts_but_not_running_groups():
    s = Scheduler(["a", "b", "c", "d"], parallel=2, max_failed=1)
    assert s.take() == ["a", "b"]
    s.finish("a", FAILED)
    assert s.take() == []
    assert not s.done()            # b still runs
    s.finish("b", CONVERGED)
    assert s.done()
    assert s.not_started() == ["c", "d"]
    assert "max-failed" in s.blocked()


def test_max_failed_counts_failures_only():
    s = Scheduler(["a", "b", "c"], parallel=1, max_failed=2)
    s.take()
    s.finish("a", FAILED)
    assert s.take() == ["b"]
    s.finish("b", CANCELLED)
    assert s.take() == ["c"]


def test_stop_flag():
    s = Scheduler(["a", "b", "c"], parallel=1)
    assert s.take() == ["a"]
    s.stop("interrupted by SIGINT")
    s.stop("later reasons do not replace the first")
    assert s.take() == []
    assert not s.done()
    s.finish("a", CANCELLED)
    assert s.done()
    assert s.not_started() == ["b", "c"]
    assert s.blocked() == "interrupted by SIGINT"


@pytest.mark.parametrize("kwargs", [{"parallel": 0}, {"canary": -1}, {"max_failed": 0}])
def test_bad_limits(kwargs):
    with pytest.raises(ValueError):
        Scheduler(["a"], **kwargs)


def test_finish_checks():
    s = Scheduler(["a", "a2"])
    with pytest.raises(ValueError):
        s.finish("a", CONVERGED)   # not running
    s.take()
    with pytest.raises(ValueError):
        s.finish("a", "skipped")
    with pytest.raises(ValueError):
        Scheduler(["a", "a"])
