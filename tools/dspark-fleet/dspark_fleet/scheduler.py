"""Which serving group starts next: a pure state machine (no threads, no clock, no I/O).

The fleet loop asks `take()` for the groups it may start now, starts them, and reports each end with
`finish()`. Rules, in order:

- nothing starts once `stop()` was called (Ctrl-C / SIGTERM);
- nothing starts once `max_failed` groups failed;
- the first `canary` groups (in order) run first; the others start only after every canary converged,
  and never when one of them did not;
- at most `parallel` groups run at the same time; with `hold_failed` (rolling: a failed group stays out of the
  router's rotation) a failed group keeps its slot, and nothing starts once every slot is held.
"""

from __future__ import annotations

# Results of one group (the report uses the same words).
CONVERGED = "converged"      # reprovision: site.yml ended without a failure
OK = "ok"                    # plan / status: the run ended without a failure (status: the group serves)
FAILED = "failed"
CANCELLED = "cancelled"      # running when the fleet was stopped
SKIPPED = "skipped"          # --resume: converged before with the same inputs fingerprint
NOT_STARTED = "not_started"  # never started (stopped, canary failed, max-failed reached)
RUNNING = "running"          # only in a report written while the fleet still runs

RESULTS = (CONVERGED, OK, FAILED, CANCELLED, SKIPPED, NOT_STARTED, RUNNING)
SUCCESS = (CONVERGED, OK, SKIPPED)


class Scheduler:
    """Order, limits and gates of one fleet run over `groups` (names, in the order they should start)."""

    def __init__(self, groups, parallel=1, canary=0, max_failed=None, hold_failed=False):
        if parallel < 1:
            raise ValueError("parallel must be at least 1")
        if canary < 0:
            raise ValueError("canary must not be negative")
        if max_failed is not None and max_failed < 1:
            raise ValueError("max_failed must be at least 1")
        if len(set(groups)) != len(groups):
            raise ValueError("a group is listed twice")
        self.order = list(groups)
        self.parallel = parallel
        self.canaries = self.order[:canary]
        self.max_failed = max_failed
        self.hold_failed = hold_failed
        self.pending = list(self.order)
        self.running = []
        self.results = {}
        self.stop_reason = None

    # ------------------------------------------------------------------ inputs

    def stop(self, reason="interrupted"):
        """No group starts any more (the running ones are the caller's business)."""
        if self.stop_reason is None:
            self.stop_reason = reason

    def finish(self, group, result):
        if group not in self.running:
            raise ValueError("%s is not running" % group)
        if result not in RESULTS or result in (RUNNING, NOT_STARTED, SKIPPED):
            raise ValueError("%r is not the result of a run" % result)
        self.running.remove(group)
        self.results[group] = result

    # ------------------------------------------------------------------ decisions

    def failed_count(self):
        return sum(1 for result in self.results.values() if result == FAILED)

    def blocked(self):
        """Why no pending group may start any more, or None while they still may."""
        if self.stop_reason is not None:
            return self.stop_reason
        if self.max_failed is not None and self.failed_count() >= self.max_failed:
            return "max-failed reached: %d group(s) failed (--max-failed %d)" % (self.failed_count(), self.max_failed)
        if self.hold_failed and self.failed_count() >= self.parallel:
            failed = [g for g in self.order if self.results.get(g) == FAILED]
            return "max-unavailable reached: %s failed and stay(s) out of rotation (--max-unavailable %d)" % (
                ", ".join(failed), self.parallel)
        if self.canaries and all(c in self.results for c in self.canaries):
            bad = [c for c in self.canaries if self.results[c] not in SUCCESS]
            if bad:
                return "canary group(s) did not converge: %s" % ", ".join(bad)
        return None

    def _eligible(self):
        canaries_open = [c for c in self.canaries if c not in self.results]
        if canaries_open:
            return [g for g in self.pending if g in canaries_open]
        return list(self.pending)

    def take(self):
        """The groups to start now (moved from pending to running); [] when none may start yet or ever."""
        if self.blocked() is not None:
            return []
        room = self.parallel - len(self.running) - (self.failed_count() if self.hold_failed else 0)
        chosen = self._eligible()[:max(room, 0)]
        for group in chosen:
            self.pending.remove(group)
            self.running.append(group)
        return chosen

    def done(self):
        """True when nothing runs and nothing more will start."""
        if self.running:
            return False
        return not self.pending or self.blocked() is not None

    def not_started(self):
        return list(self.pending)
