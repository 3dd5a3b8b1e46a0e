"""Runs serving groups through the scheduler: one thread (one ansible-runner run) per running group.

The main thread owns the scheduler and the terminal; each group's thread folds its events into the
group's GroupEvents (under the group's lock). `request_stop()` (first Ctrl-C / SIGTERM) lets no new group
start and makes every running run's cancel_callback answer True (ansible-runner then kills that
ansible-playbook); `request_abandon()` (the second one) stops waiting for them.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time

from . import runner_exec
from .events import GroupEvents
from .scheduler import CANCELLED, CONVERGED, FAILED, NOT_STARTED, Scheduler

ABANDON_GRACE_S = 3.0
SAMPLE_EVERY_S = 0.2


class GroupRun:
    """One group's run: spec, folded events, times, result."""

    def __init__(self, name, spec):
        self.name = name
        self.spec = spec
        self.events = GroupEvents()
        self.lock = threading.Lock()
        self.started = None
        self.finished = None
        self.result = None
        self.run_result = None
        self.memory_kib = None
        self.sampled = 0.0
        self.printed_phases = 0

    def handle(self, event):
        with self.lock:
            self.events.feed(event)
            pid = self.events.pid
        now = time.monotonic()
        if now - self.sampled >= SAMPLE_EVERY_S:      # a big play sends hundreds of events a second
            self.sampled = now
            self.sample_memory(pid)

    def sample_memory(self, pid=None):
        if pid is None:
            with self.lock:
                pid = self.events.pid
        if pid is None or self.finished is not None:
            return
        kib = runner_exec.vm_hwm_kib(pid)
        if kib is not None:
            with self.lock:
                self.memory_kib = max(self.memory_kib or 0, kib)

    def row(self, now):
        with self.lock:
            if self.result is not None:
                state = self.result
                elapsed = (self.finished or now) - self.started if self.started is not None else None
            elif self.started is None:
                state, elapsed = "waiting", None
            else:
                state, elapsed = "running", now - self.started
            note = ""
            if self.result is not None:
                failure = self.events.failure_view()
                if failure and self.result not in ("converged", "ok"):
                    note = failure["summary"]
                else:
                    note = "changed %d" % self.events.changed_total()
            return {"group": self.name, "state": state, "phase": self.events.phase, "task": self.events.task,
                    "elapsed": elapsed, "note": note}

    def new_phases(self):
        with self.lock:
            log = self.events.phase_log[self.printed_phases:]
            self.printed_phases = len(self.events.phase_log)
            return list(log)


def default_judge(success_result):
    def judge(run):
        status = run.run_result.status if run.run_result else "error"
        if status == "successful":
            return success_result
        if status == "canceled":
            return CANCELLED
        return FAILED
    return judge


class Fleet:
    """Start groups as the scheduler allows, watch them, return when nothing runs and nothing will start."""

    def __init__(self, runs, scheduler, progress, judge=None, runner=None, tick=0.25, on_finish=None):
        self.runs = runs                      # {name: GroupRun}
        self.scheduler = scheduler
        self.progress = progress
        self.judge = judge or default_judge(CONVERGED)
        self.runner = runner or runner_exec.run_playbook
        self.tick = tick
        self.on_finish = on_finish
        self.cancel = threading.Event()
        self.abandon = threading.Event()
        self.stop_reason = None
        self._announced = False
        self.done = queue.Queue()
        self.threads = {}

    # ------------------------------------------------------------------ requests (signal handlers)

    def request_stop(self, reason="interrupted"):
        if self.stop_reason is None:
            self.stop_reason = reason
        self.cancel.set()

    def request_abandon(self):
        self.request_stop()
        self.abandon.set()

    # ------------------------------------------------------------------ running

    def _thread(self, run):
        try:
            run.run_result = self.runner(run.spec, event_handler=run.handle, cancel_callback=self.cancel.is_set)
        except Exception as exc:  # pylint: disable=broad-except
            run.run_result = runner_exec.RunResult(status="error", rc=None, error="%s: %s" % (type(exc).__name__, exc))
        finally:
            self.done.put(run.name)

    def _start(self, name):
        run = self.runs[name]
        run.started = time.time()
        self.progress.started(name)
        thread = threading.Thread(target=self._thread, args=(run,), name="dspark-fleet-" + name, daemon=True)
        self.threads[name] = thread
        thread.start()

    def _finish(self, name):
        run = self.runs[name]
        run.sample_memory()
        result = self.judge(run)
        with run.lock:
            run.finished = time.time()
            run.result = result
        self.scheduler.finish(name, result)
        self._print_phases()
        self.progress.finished(run.row(time.time()))
        if self.on_finish is not None:
            self.on_finish(self)

    def _print_phases(self):
        for name in list(self.scheduler.running) + [n for n in self.runs if self.runs[n].result is not None]:
            run = self.runs[name]
            for when, phase in run.new_phases():
                elapsed = (when - run.started) if when is not None and run.started is not None else None
                self.progress.phase(name, phase, elapsed)

    def _abandon_running(self):
        """Second signal: kill what still runs (as ansible-runner would) and give up waiting for it."""
        deadline = time.time() + ABANDON_GRACE_S
        while self.scheduler.running and time.time() < deadline:
            try:
                self._finish(self.done.get(timeout=0.2))
            except queue.Empty:
                pass
        for name in list(self.scheduler.running):
            run = self.runs[name]
            with run.lock:
                pid = run.events.pid
            if pid:
                runner_exec.kill_tree(pid)
                try:
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
                except OSError:
                    pass
            if run.run_result is None:
                run.run_result = runner_exec.RunResult(status="canceled", rc=None,
                                                       error="abandoned on a second interrupt")
            self._finish_as(name, CANCELLED)

    def _finish_as(self, name, result):
        run = self.runs[name]
        with run.lock:
            run.finished = time.time()
            run.result = result
        self.scheduler.finish(name, result)
        self.progress.finished(run.row(time.time()))

    def rows(self):
        now = time.time()
        return [run.row(now) for run in self.runs.values()]

    def _announce_stop(self):
        """Once a stop was requested: no group starts any more, and the operator is told which groups are cancelled.
        Also called before a finished group leaves `running`: a group cancelled by the stop can finish before the loop
        comes round (request_stop sets the reason before the cancel event), and must still be named."""
        if self.stop_reason is None:
            return
        self.scheduler.stop(self.stop_reason)
        if not self._announced:
            self._announced = True
            if self.scheduler.running:
                self.progress.message("%s: no new group starts; cancelling %s (again to stop waiting)" % (
                    self.stop_reason, ", ".join(self.scheduler.running)))

    def run(self):
        self.progress.set_groups(list(self.runs))
        self._announced = False
        while True:
            self._announce_stop()
            for name in self.scheduler.take():
                self._start(name)
            if self.scheduler.done():
                break
            if self.abandon.is_set():
                self._abandon_running()
                continue
            try:
                name = self.done.get(timeout=self.tick)
                self._announce_stop()
                self._finish(name)
                while True:
                    self._finish(self.done.get_nowait())
            except queue.Empty:
                pass
            for name in list(self.scheduler.running):
                self.runs[name].sample_memory()
            self._print_phases()
            self.progress.update(self.rows())
        for name in self.scheduler.not_started():
            with self.runs[name].lock:
                self.runs[name].result = NOT_STARTED
        self.progress.update(self.rows())
        self.progress.close()
        return self.runs


def run_one(spec, success, progress, interrupts):
    """One playbook run (the global validation, the router's) as a fleet of one, so that it shows its progress and a
    signal cancels it: its GroupRun, judged `success` when ansible-runner says successful."""
    runs = {spec.ident: GroupRun(spec.ident, spec)}
    interrupts.run(Fleet(runs, Scheduler([spec.ident]), progress, judge=default_judge(success)))
    return runs[spec.ident]
