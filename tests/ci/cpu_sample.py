#!/usr/bin/env python3
"""How busy the machine was while `make test`'s lanes ran: /proc/stat sampled every INTERVAL seconds until SIGTERM,
one line per sample in OUT (seconds since start, busy/iowait/steal percent of all CPUs), then a summary line on
stdout. Why: CI time on the 2-core machine is decided by whether the lanes wait on each other's CPU or on timers;
this says which (docs/design-lab.md, CI time).

Usage: cpu_sample.py OUT [INTERVAL]   (the lanes script starts it and stops it with SIGTERM)
"""

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


class Stop(Exception):
    """SIGTERM: the lanes are done."""


def _stop(*dummy):
    raise Stop()


def read():
    with open("/proc/stat", encoding="ascii") as handle:
        return parse(handle.read())


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    interval = float(argv[2]) if len(argv) == 3 else 10.0
    signal.signal(signal.SIGTERM, _stop)
    began = time.monotonic()
    first = previous = read()
    samples = full = 0
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
                elapsed = time.monotonic() - began
                out.write("%d %.1f %.1f %.1f\n" % (elapsed, part["busy"], part["iowait"], part["steal"]))
                out.flush()
        except Stop:
            pass
    print(summary(first, read(), time.monotonic() - began, round(100.0 * full / samples) if samples else 0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
