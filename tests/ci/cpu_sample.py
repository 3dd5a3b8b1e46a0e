"""How busy the machine was while `make test`'s lanes ran: /proc/stat sampled every INTERVAL seconds until SIGTERM,
one line per sample in OUT (seconds since start, busy/iowait/steal percent of all CPUs), then two summary lines on
stdout: the shares, and the commands that used the most CPU (scanned from /proc every SCAN seconds: each process's own
time by command, and the time of children too short for a scan under "<parent>'s children"). Why: CI time
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
    """(command, own ticks, reaped children's ticks, parent PID) of one process from /proc/PID/stat and
    /proc/PID/cmdline. The command is the kernel's name, or for an interpreter the script it runs."""
    name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
    own, children = int(rest[11]) + int(rest[12]), int(rest[13]) + int(rest[14])    # fields 14-15 and 16-17
    if name.startswith("kworker/"):                    # the kernel's workers, one name per CPU and queue
        name = "kworker"
    args = [a for a in cmdline.split("\0") if a]
    if (name.startswith(("python", "perl")) or name in ("bash", "sh", "dash")) and len(args) > 1:
        if "-c" in args:                                # code on the command line: its first word names it
            code = args[args.index("-c") + 1:] or [""]
            words = code[0].split()
            name = "%s -c %s" % (name, os.path.basename(words[0]) if words else "")
        else:
            script = next((a for a in args[1:] if not a.startswith("-")), None)
            if script:
                name = os.path.basename(script)
    # One line per summary: a name the kernel or a command line gave with a newline (or none) stays on it.
    return " ".join(name.split()) or "?", own, children, int(rest[1])


def scan(proc="/proc"):
    """{pid: (command, own, children, ppid)} of every process readable now (those that end meanwhile are skipped)."""
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
    """Adds the ticks used between two scans: each process's own time to its command; the time of the children it
    reaped meanwhile, less what earlier scans already charged to them, to "<command>'s children" (processes too short
    for a scan: a node's Ansible modules under its sshd). A process new since `before` counts whole; a reused PID with
    another command counts as new. Nothing is charged twice."""
    alive = dict((pid, info) for pid, info in after.items() if pid in before and before[pid][0] == info[0])
    charged = {}                  # surviving ancestor -> what was charged to its descendants that ended since
    for pid, (dummy, own, children, ppid) in before.items():
        if pid in alive:
            continue
        while ppid in before and ppid not in alive:   # up to the nearest ancestor still alive
            ppid = before[ppid][3]
        charged[ppid] = charged.get(ppid, 0) + own + children
    for pid, (name, own, children, dummy) in after.items():
        old = alive.get(pid) and before[pid]
        own_used = own - old[1] if old else own
        reaped = max(0, (children - old[2] if old else children) - charged.get(pid, 0))
        totals[name] = totals.get(name, 0) + own_used
        if reaped:
            key = "%s's children" % name
            totals[key] = totals.get(key, 0) + reaped


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
