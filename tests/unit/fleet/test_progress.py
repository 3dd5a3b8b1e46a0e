"""progress: plain lines without a TTY, an in-place block on a TTY."""

import io

from dspark_fleet import progress


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_make_picks_by_tty(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    assert not isinstance(progress.make(io.StringIO()), progress.TtyProgress)
    assert isinstance(progress.make(Tty()), progress.TtyProgress)
    assert not isinstance(progress.make(Tty(), force_plain=True), progress.TtyProgress)
    monkeypatch.setenv("TERM", "dumb")
    assert not isinstance(progress.make(Tty()), progress.TtyProgress)


def test_clock():
    assert progress.clock(5) == "0:05"
    assert progress.clock(3725) == "1:02:05"
    assert progress.clock(None) == ""


def test_plain_prints_starts_phases_and_ends_only():
    out = io.StringIO()
    prog = progress.PlainProgress(out)
    prog.set_groups(["pair_a", "b"])
    prog.started("pair_a")
    prog.update([{"group": "pair_a", "state": "running", "phase": "serve", "task": "x", "elapsed": 3}] * 5)
    prog.phase("pair_a", "serve", 65)
    prog.finished({"group": "pair_a", "state": "converged", "elapsed": 70, "note": "changed 3"})
    lines = out.getvalue().splitlines()
    assert lines == ["pair_a     0:00  started", "pair_a     1:05  phase serve",
                     "pair_a     1:10  CONVERGED      changed 3"]
    assert "\x1b" not in out.getvalue()


def test_tty_redraws_in_place():
    out = Tty()
    prog = progress.TtyProgress(out)
    prog.set_groups(["pair_a", "pair_b"])
    rows = [{"group": "pair_a", "state": "running", "phase": "fabric", "task": "Check the link", "elapsed": 12},
            {"group": "pair_b", "state": "waiting"}]
    prog.update(rows)
    first = out.getvalue()
    assert "pair_a" in first and "fabric         Check the link" in first and "waiting" in first
    assert "\x1b[2A" not in first                       # nothing to go back over yet
    prog.update(rows)
    assert out.getvalue() == first                      # nothing changed: nothing written
    rows[0] = dict(rows[0], elapsed=13)
    prog.update(rows)
    assert out.getvalue()[len(first):].startswith("\x1b[2A\r\x1b[J")   # back over the 2 lines, redrawn
    assert "0:13" in out.getvalue()[len(first):]
    prog.message("a note")
    assert "a note\n" in out.getvalue()
    prog.close()                                        # the block stays; the next one starts below it
    mark = len(out.getvalue())
    prog.update(rows)
    assert not out.getvalue()[mark:].startswith("\x1b[")


def test_tty_lines_fit_the_terminal(monkeypatch):
    monkeypatch.setattr(progress.shutil, "get_terminal_size", lambda fallback=None: __import__("os").terminal_size((30, 6)))
    prog = progress.TtyProgress(Tty())
    prog.set_groups(["g%d" % i for i in range(10)])
    prog.rows = [{"group": "g%d" % i, "state": "running" if i == 7 else "waiting", "phase": "serve",
                  "task": "a very long task name that does not fit", "elapsed": 1} for i in range(10)]
    lines = prog._lines()
    assert len(lines) == 4 and all(len(line) <= 29 for line in lines)
    assert lines[0].startswith("g7")                   # running groups first
    assert lines[-1].startswith("... 10 groups")
