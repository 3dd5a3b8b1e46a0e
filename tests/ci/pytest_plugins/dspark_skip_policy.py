"""pytest plugin of `make test`: no test skips silently.

tests/ci/stage.sh loads it into every pytest run of every stage (``-p dspark_skip_policy``). A test that skips, at
run time or at collection (``importorskip``, a ``skipif`` module mark), fails the run unless one line of
tests/ci/allowed_skips.txt allows it: ``<test id glob> | <reason regex> | <why>``. Deselected tests (``-m``, ``-k``)
are not skips. Without the plugin (pytest by hand) skips stay skips.
"""

import fnmatch
import os
import re

import pytest

ALLOWED_FILE = os.environ.get("DSPARK_ALLOWED_SKIPS") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "allowed_skips.txt")


def parse_allowed(text):
    """The allow list's entries as (id glob, compiled reason regex, why); ValueError names a bad line."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [part.strip() for part in line.split(" | ")]
        if len(parts) != 3 or not all(parts):
            raise ValueError("%s line %d: want '<test id glob> | <reason regex> | <why>', got %r" % (ALLOWED_FILE, number, line))
        entries.append((parts[0], re.compile(parts[1]), parts[2]))
    return entries


def skip_reason(report):
    """The reason of a skipped report ('' when it has none)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr or "")
    return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason


def allowed(entries, nodeid, reason):
    """Whether an entry allows this skip (the id by glob, the reason by regex search)."""
    return any(fnmatch.fnmatchcase(nodeid, glob) and pattern.search(reason) for glob, pattern, dummy in entries)


class SkipPolicy:
    def __init__(self, entries):
        self.entries = entries
        self.refused = []

    def _note(self, report):
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = skip_reason(report)
            if not allowed(self.entries, report.nodeid, reason):
                self.refused.append((report.nodeid, reason))

    def pytest_runtest_logreport(self, report):
        self._note(report)

    def pytest_collectreport(self, report):
        self._note(report)

    def pytest_terminal_summary(self, terminalreporter):
        if self.refused:
            terminalreporter.section("skips not allowed (tests/ci/allowed_skips.txt)", sep="=", red=True)
            for nodeid, reason in self.refused:
                terminalreporter.line("SKIP NOT ALLOWED %s: %s" % (nodeid, reason))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        if self.refused and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config):
    with open(ALLOWED_FILE, encoding="utf-8") as handle:
        entries = parse_allowed(handle.read())
    config.pluginmanager.register(SkipPolicy(entries), "dspark_skip_policy_state")
