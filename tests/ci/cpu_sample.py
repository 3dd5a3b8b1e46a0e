"""How busy the machine was while `make test`'s lanes ran: /proc/stat sampled every INTERVAL seconds until SIGTERM,
one line per sample in OUT (seconds since start, busy/iowait/steal percent of all CPUs), then two summary lines on
stdout: the shares, and the commands that used the most CPU (every process's own and its reaped children's time,
scanned from /proc every SCAN seconds and summed by command; a node's Ansible modules count for its sshd). Why: CI time
on the 2-core machine is decided by whether the lanes wait on each other's CPU or on timers, and by what eats it
(docs/design-lab.md, CI time).

Usage: cpu_sample.py OUT [INTERVAL [SCAN]]   (10 s, 60 s; the lanes script starts it and stops it with SIGTERM)
"""

import os
import signal
import sys
import time

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def parse(text):
    """The aggregate `cpu` line of /proc/stat as {field: jiffies} (guest time is already in user and nice)."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            return dict(zip(FIELDS, (int(v) for v in parts[1:1 + len(FIELDS)])))
    raise ValueError("no aggregate cpu line in /proc/stat")


def share(before, after):
    """{busy, iowait, steal}: percent of all CPU time between two samples (busy: neither idle, iowait nor steal)."""
    delta = dict((f, after.get(f, 0) - before.get(f, 0)) for f in FIELDS)
    total = sum(delta.values())
    if total <= 0:
        return {"busy": 0.0, "iowait": 0.0, "steal": 0.0}
    busy = total - delta["idle"] - delta["iowait"] - delta["steal"]
    return dict((k, round(100.0 * v / total, 1)) for k, v in
                (("busy", busy), ("iowait", delta["iowait"]), ("steal", delta["steal"])))


def summary(first, last, seconds, saturated):
    """The line printed at the end: the whole run's shares and the fraction of samples at 95 % busy or more."""
    whole = share(first, last)
    return ("cpu: busy %.1f %%, iowait %.1f %%, steal %.1f %% of all CPUs over %d s; %d %% of the samples at 95 %% "
            "busy or more" % (whole["busy"], whole["iowait"], whole["steal"], seconds, saturated))


def process(stat, cmdline):
    """(command, CPU ticks) of one process from /proc/PID/stat and /proc/PID/cmdline: its own user and system time and
    its reaped children's. The command is the kernel's name, or for an interpreter the script it runs."""
    name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
    ticks = sum(int(v) for v in rest[11:15])          # utime stime cutime cstime (fields 14-17)
    if name.startswith("kworker/"):                    # the kernel's workers, one name per CPU and queue
        name = "kworker"
    args = [a for a in cmdline.split("\0") if a]
    if (name.startswith(("python", "perl")) or name in ("bash", "sh", "dash")) and len(args) > 1:
        script = next((a for a in args[1:] if not a.startswith("-")), None)
        if script:
            name = os.path.basename(script)
    return name, ticks


def scan(proc="/proc"):
    """{pid: (command, ticks)} of every process readable now (those that end meanwhile are skipped)."""
    out = {}
    for entry in os.listdir(proc):
        if entry.isdigit():
            try:
                with open(os.path.join(proc, entry, "stat"), encoding="utf-8", errors="replace") as handle:
                    stat = handle.read()
                with open(os.path.join(proc, entry, "cmdline"), encoding="utf-8", errors="replace") as handle:
                    cmdline = handle.read()
                out[int(entry)] = process(stat, cmdline)
            except (OSError, ValueError, IndexError):
                continue
    return out


def account(totals, before, after):
    """Adds to totals[command] the ticks each process used between two scans; one new since the first scan counts
    whole (it began meanwhile). A reused PID with another command counts as new."""
    for pid, (name, ticks) in after.items():
        old = before.get(pid)
        used = ticks - old[1] if old and old[0] == name and ticks >= old[1] else ticks
        totals[name] = totals.get(name, 0) + used


def top(totals, hz, count=8):
    """The line of the commands that used the most CPU."""
    ranked = sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:count]
    return "cpu: most CPU: " + ", ".join("%s %d s" % (name, ticks / hz) for name, ticks in ranked if ticks > 0)


class Stop(Exception):
    """SIGTERM: the lanes are done."""


def _stop(*dummy):
    raise Stop()


def read():
    with open("/proc/stat", encoding="ascii") as handle:
        return parse(handle.read())


def main(argv):
    if len(argv) not in (2, 3, 4):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    interval = float(argv[2]) if len(argv) >= 3 else 10.0
    every = max(1, round(float(argv[3]) / interval)) if len(argv) == 4 else 6
    hz = os.sysconf("SC_CLK_TCK")
    signal.signal(signal.SIGTERM, _stop)
    began = time.monotonic()
    first = previous = read()
    samples = full = 0
    totals, last_scan = {}, scan()
    with open(argv[1], "w", encoding="utf-8") as out:
        out.write("# seconds busy%% iowait%% steal%% (every %g s, all CPUs)\n" % interval)
        out.flush()
        try:
            while True:
                time.sleep(interval)
                current = read()
                part = share(previous, current)
                previous = current
                samples += 1
                full += part["busy"] >= 95.0
                if samples % every == 0:
                    now = scan()
                    account(totals, last_scan, now)
                    last_scan = now
                elapsed = time.monotonic() - began
                out.write("%d %.1f %.1f %.1f\n" % (elapsed, part["busy"], part["iowait"], part["steal"]))
                out.flush()
        except Stop:
            pass
    account(totals, last_scan, scan())
    with open(argv[1], "a", encoding="utf-8") as out:
        out.write("# %s\n" % top(totals, hz, count=40))
    print(summary(first, read(), time.monotonic() - began, round(100.0 * full / samples) if samples else 0))
    print(top(totals, hz))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
