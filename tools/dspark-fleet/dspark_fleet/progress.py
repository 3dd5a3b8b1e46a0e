"""Live progress on the terminal: one line per group (group, phase, current task, elapsed, result).

On a TTY the block of lines is redrawn in place (ANSI: cursor up, clear to the end of the screen). Anywhere
else a line is printed when a group starts, changes phase and ends: no redraws, no spinner.
"""

from __future__ import annotations

import os
import shutil
import sys

UP = "\x1b[%dA"
CLEAR_DOWN = "\x1b[J"


def clock(seconds):
    """Elapsed time as m:ss (h:mm:ss from an hour)."""
    if seconds is None:
        return ""
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "%d:%02d:%02d" % (hours, minutes, secs) if hours else "%d:%02d" % (minutes, secs)


def row_text(row, name_width):
    """One group's line; `row` has group, state (waiting, running or a result), phase, task, elapsed, note."""
    state = row.get("state") or "waiting"
    if state == "running":
        what = "%-14s %s" % (row.get("phase") or "starting", row.get("task") or "")
    elif state == "waiting":
        what = "waiting"
    else:
        what = "%-14s %s" % (state.upper(), row.get("note") or "")
    what = what.replace("\r", " ").replace("\n", " ")   # one line per group, whatever the message holds
    return "%-*s %8s  %s" % (name_width, row["group"], clock(row.get("elapsed")) if state != "waiting" else "", what)


class PlainProgress:
    """A line per event that matters; for logs and pipes."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.width = 0

    def _print(self, text):
        self.stream.write(text.rstrip() + "\n")
        self.stream.flush()

    def set_groups(self, names):
        self.width = max([len(n) for n in names] + [5])

    def message(self, text):
        self._print(text)

    def started(self, group):
        self._print("%-*s %8s  started" % (self.width, group, clock(0)))

    def phase(self, group, phase, elapsed):
        self._print("%-*s %8s  phase %s" % (self.width, group, clock(elapsed), phase))

    def finished(self, row):
        self._print(row_text(row, self.width))

    def update(self, rows):
        """Periodic snapshot: nothing to do without a TTY."""

    def close(self):
        self.stream.flush()


class TtyProgress(PlainProgress):
    """The block of group lines, redrawn in place."""

    def __init__(self, stream=None):
        super().__init__(stream)
        self.drawn = 0
        self.rows = []
        self.last = None

    def _lines(self):
        size = shutil.get_terminal_size((100, 24))
        columns = max(size.columns - 1, 20)
        rows = self.rows
        limit = max(size.lines - 2, 3)
        if len(rows) > limit:
            # Running and failed groups first, then the rest; one summary line for what does not fit.
            def weight(row):
                state = row.get("state")
                return 0 if state == "running" else 1 if state in ("failed", "cancelled") else 2
            shown = sorted(rows, key=weight)[:limit - 1]
            counts = {}
            for row in rows:
                counts[row.get("state")] = counts.get(row.get("state"), 0) + 1
            lines = [row_text(r, self.width) for r in shown]
            lines.append("... %d groups: %s" % (len(rows), ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
        else:
            lines = [row_text(r, self.width) for r in rows]
        return [line[:columns] for line in lines]

    def _redraw(self, force=False):
        lines = self._lines()
        if lines == self.last and not force:
            return
        self.last = lines
        out = []
        if self.drawn:
            out.append(UP % self.drawn)
        out.append("\r" + CLEAR_DOWN)
        out.append("".join(line + "\n" for line in lines))
        self.stream.write("".join(out))
        self.stream.flush()
        self.drawn = len(lines)

    def message(self, text):
        if self.drawn:
            self.stream.write(UP % self.drawn + "\r" + CLEAR_DOWN)
            self.drawn = 0
        self._print(text)
        if self.rows:
            self._redraw(force=True)

    def started(self, group):
        """Shown by the next redraw."""

    def phase(self, group, phase, elapsed):
        """Shown by the next redraw."""

    def finished(self, row):
        self.rows = [row if r["group"] == row["group"] else r for r in self.rows]
        self._redraw()

    def update(self, rows):
        self.rows = list(rows)
        self._redraw()

    def close(self):
        """Leave the block as it is; the next block (or message) starts below it."""
        if self.rows:
            self._redraw()
        self.stream.flush()
        self.drawn = 0
        self.rows = []
        self.last = None


def make(stream=None, force_plain=False):
    """In-place lines on a terminal that understands ANSI, plain lines anywhere else."""
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", lambda: False)()
    dumb = os.environ.get("TERM", "") in ("", "dumb")
    return TtyProgress(stream) if isatty and not dumb and not force_plain else PlainProgress(stream)
