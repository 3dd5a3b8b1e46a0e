"""SIGINT/SIGTERM: the first stops the running fleet gracefully, the second stops waiting for it.

One `Interrupts` per process (cli.py installs it); whatever runs playbooks hands it the fleet it runs, so a signal
reaches the fleet of the moment (the global validation's, the groups', the router's, a watch's rounds).
"""

from __future__ import annotations

import signal


class Interrupts:
    """The signal handler's state. Never raises."""

    def __init__(self):
        self.count = 0
        self.fleet = None
        self.signal_name = None

    def handler(self, signum, frame):  # pylint: disable=unused-argument
        self.count += 1
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name
        if self.fleet is not None:
            if self.count == 1:
                self.fleet.request_stop("interrupted by %s" % self.signal_name)
            else:
                self.fleet.request_abandon()

    def install(self):
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self.handler)

    @property
    def reason(self):
        return "interrupted by %s" % self.signal_name if self.count else None

    def run(self, fleet):
        """fleet.run() with the signals driving it; a signal received before it starts stops it at once."""
        self.fleet = fleet
        if self.count:
            fleet.request_stop(self.reason)
        fleet.run()
        self.fleet = None
