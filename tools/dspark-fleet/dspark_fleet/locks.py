"""Per-group lock files shared by `dspark-fleet reprovision` and `dspark-fleet watch`.

One file per serving group, ``<state dir>/locks/<group>.lock``, locked with ``fcntl.flock(LOCK_EX | LOCK_NB)``:
never blocking, released by the kernel when the holder exits (a killed process leaves no stale lock). The
holder writes one JSON line into the file (pid, purpose, since) so that the other side can say who holds it.

The state dir is ``--state-dir``, else ``$DSPARK_FLEET_STATE_DIR``, else ``.dspark-fleet`` (in the cwd).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time

STATE_DIR_ENV = "DSPARK_FLEET_STATE_DIR"
DEFAULT_STATE_DIR = ".dspark-fleet"
WAIT_POLL_S = 0.5


def state_dir(option=None, environ=None):
    environ = os.environ if environ is None else environ
    return os.path.abspath(option or environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


def lock_path(directory, group):
    if not re.match(r"^[A-Za-z0-9_.-]+$", group or "") or group.startswith("."):
        raise ValueError("not a group name usable as a file name: %r" % (group,))
    return os.path.join(directory, "locks", group + ".lock")


class GroupLock:
    """A non-blocking exclusive lock on one group. `acquire()` -> True/False; `holder()` says who has it."""

    def __init__(self, directory, group, purpose):
        self.group = group
        self.purpose = purpose
        self.path = lock_path(directory, group)
        self.handle = None

    def acquire(self):
        if self.handle is not None:
            return True
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")  # pylint: disable=consider-using-with
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "purpose": self.purpose, "since": time.time()}) + "\n")
        handle.flush()
        self.handle = handle
        return True

    def release(self):
        if self.handle is None:
            return
        try:
            self.handle.seek(0)
            self.handle.truncate()
            self.handle.flush()
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
        finally:
            self.handle.close()
            self.handle = None

    def holder(self):
        """What the holder wrote ({} when unknown or free)."""
        try:
            with open(self.path, encoding="utf-8") as handle:
                return json.loads(handle.readline() or "{}")
        except (OSError, ValueError):
            return {}

    def __enter__(self):
        if not self.acquire():
            raise LockBusy(self.group, self.holder())
        return self

    def __exit__(self, *exc):
        self.release()


class LockBusy(Exception):
    def __init__(self, group, holder):
        super().__init__("group %s is locked by %s" % (group, describe(holder)))
        self.group = group
        self.holder = holder


def describe(holder):
    if not holder:
        return "another process"
    return "%s (pid %s)" % (holder.get("purpose") or "?", holder.get("pid"))


def locked_runner(directory, runner, purpose="reprovision", on_wait=None, poll=WAIT_POLL_S):
    """Wrap a `runner(spec, event_handler, cancel_callback)` so that it holds the lock of group `spec.ident`.

    The lock is taken with non-blocking attempts, polled until free (a watch restart holds it for a minute or
    two) or until the run is cancelled; `on_wait(group, holder)` is called once when it has to wait.
    """
    from .runner_exec import RunResult  # pylint: disable=import-outside-toplevel

    def run(spec, event_handler=None, cancel_callback=None):
        lock = GroupLock(directory, spec.ident, purpose)
        told = False
        while not lock.acquire():
            if cancel_callback is not None and cancel_callback():
                return RunResult(status="canceled", rc=None,
                                 error="cancelled while waiting for the lock of %s (%s)" % (
                                     spec.ident, describe(lock.holder())))
            if not told and on_wait is not None:
                on_wait(spec.ident, lock.holder())
                told = True
            time.sleep(poll)
        try:
            return runner(spec, event_handler=event_handler, cancel_callback=cancel_callback)
        finally:
            lock.release()
    return run
