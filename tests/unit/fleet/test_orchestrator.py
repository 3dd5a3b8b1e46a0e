"""orchestrator.Fleet with a fake runner: threads, results, stop and cancel, without Ansible."""

import io
import threading
import time

from dspark_fleet import orchestrator, progress
from dspark_fleet.orchestrator import Fleet, GroupRun
from dspark_fleet.runner_exec import RunResult
from dspark_fleet.scheduler import CANCELLED, CONVERGED, FAILED, NOT_STARTED, Scheduler

from conftest import load_stream


class FakeRunner:
    """Replays a recorded stream per group; `hold` groups wait until cancelled."""

    def __init__(self, streams, hold=()):
        self.streams = streams
        self.hold = set(hold)
        self.started = []
        self.lock = threading.Lock()
        self.holding = threading.Event()

    def __call__(self, spec, event_handler, cancel_callback):
        with self.lock:
            self.started.append(spec.ident)
        doc = load_stream(self.streams[spec.ident])
        for event in doc["events"][:5] if spec.ident in self.hold else doc["events"]:
            event_handler(event)
        if spec.ident in self.hold:
            self.holding.set()
            while not cancel_callback():
                time.sleep(0.01)
            return RunResult(status="canceled", rc=254)
        return RunResult(status=doc["status"], rc=doc["rc"])


class Spec:
    def __init__(self, ident):
        self.ident = ident


def fleet(streams, parallel=1, hold=(), tick=0.01, **kwargs):
    runs = dict((name, GroupRun(name, Spec(name))) for name in streams)
    out = io.StringIO()
    runner = FakeRunner(streams, hold)
    finished = []
    return Fleet(runs, Scheduler(list(streams), parallel=parallel, **kwargs), progress.PlainProgress(out),
                 runner=runner, tick=tick, on_finish=lambda f: finished.append(1)), runner, out, finished


def test_results_events_and_progress_lines():
    f, runner, out, finished = fleet({"a": "site_converged", "b": "site_tp_ranks_failed"}, parallel=2)
    runs = f.run()
    assert runs["a"].result == CONVERGED and runs["b"].result == FAILED
    assert runs["a"].events.tp_ranks["ok"] and runs["b"].events.failure_view()["tp_ranks"]
    assert runs["a"].started <= runs["a"].finished
    assert len(finished) == 2                          # an interim report after each group
    text = out.getvalue()
    assert text.count("phase preflight") == 2 and text.count("phase serve") == 2
    assert "CONVERGED" in text and "FAILED         tp_ranks on bad-head" in text


def test_max_failed_leaves_the_rest_not_started():
    f, runner = fleet({"b": "site_tp_ranks_failed", "a": "site_converged"}, max_failed=1)[:2]
    runs = f.run()
    assert runner.started == ["b"]
    assert runs["a"].result == NOT_STARTED and runs["a"].started is None


def test_stop_cancels_running_groups_and_starts_no_more():
    f, runner, out = fleet({"a": "site_converged", "b": "site_converged", "c": "site_converged"}, hold=("a",))[:3]
    threading.Thread(target=lambda: (runner.holding.wait(5), f.request_stop("interrupted by SIGINT"))).start()
    runs = f.run()
    assert runs["a"].result == CANCELLED
    assert runs["b"].result == NOT_STARTED and runs["c"].result == NOT_STARTED
    assert runner.started == ["a"]
    assert f.scheduler.blocked() == "interrupted by SIGINT"
    assert "interrupted by SIGINT: no new group starts; cancelling a" in out.getvalue()


def test_a_group_cancelled_before_the_loop_comes_round_is_still_named():
    """The race a loaded CI machine hit: the cancelled group finished while the loop waited for a finished group
    (a long tick makes it certain), and the stop was never announced."""
    f, runner, out = fleet({"a": "site_converged", "b": "site_converged"}, hold=("a",), tick=30)[:3]
    threading.Thread(target=lambda: (runner.holding.wait(5), f.request_stop("interrupted by SIGINT"))).start()
    runs = f.run()
    assert runs["a"].result == CANCELLED and runs["b"].result == NOT_STARTED
    assert "interrupted by SIGINT: no new group starts; cancelling a" in out.getvalue()


def test_a_runner_exception_is_a_failure():
    def broken(spec, event_handler, cancel_callback):
        raise RuntimeError("boom")
    runs = {"a": GroupRun("a", Spec("a"))}
    f = Fleet(runs, Scheduler(["a"]), progress.PlainProgress(io.StringIO()), runner=broken, tick=0.01)
    assert f.run()["a"].result == FAILED
    assert runs["a"].run_result.error == "RuntimeError: boom"


def test_abandon_gives_up_on_a_run_that_does_not_stop(monkeypatch):
    monkeypatch.setattr(orchestrator, "ABANDON_GRACE_S", 0.1)
    release = threading.Event()

    def stuck(spec, event_handler, cancel_callback):
        release.wait(10)
        return RunResult(status="canceled", rc=254)
    runs = {"a": GroupRun("a", Spec("a"))}
    f = Fleet(runs, Scheduler(["a"]), progress.PlainProgress(io.StringIO()), runner=stuck, tick=0.01)
    threading.Thread(target=lambda: (time.sleep(0.1), f.request_abandon())).start()
    start = time.time()
    assert f.run()["a"].result == CANCELLED
    assert time.time() - start < 5
    release.set()
