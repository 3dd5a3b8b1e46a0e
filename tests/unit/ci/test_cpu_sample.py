"""tests/ci/cpu_sample.py: /proc/stat's aggregate line, the shares between two samples, the summary, the run."""

import pathlib
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "ci"))

import cpu_sample  # noqa: E402  pylint: disable=wrong-import-position

STAT = """cpu  4047068 891565 1570549 1615795 124188 0 30041 55164 0 0
cpu0 1963071 437772 775594 907727 46085 0 9097 26677 0 0
intr 111792315 0 0
"""


def test_parse_reads_the_aggregate_line_only():
    assert cpu_sample.parse(STAT) == {"user": 4047068, "nice": 891565, "system": 1570549, "idle": 1615795,
                                      "iowait": 124188, "irq": 0, "softirq": 30041, "steal": 55164}
    with pytest.raises(ValueError):
        cpu_sample.parse("cpu0 1 2 3 4\n")


def test_share_counts_busy_apart_from_idle_iowait_and_steal():
    before = dict.fromkeys(cpu_sample.FIELDS, 0)
    after = dict(before, user=50, system=20, softirq=5, idle=10, iowait=10, steal=5)
    assert cpu_sample.share(before, after) == {"busy": 75.0, "iowait": 10.0, "steal": 5.0}
    assert cpu_sample.share(after, after) == {"busy": 0.0, "iowait": 0.0, "steal": 0.0}


def test_summary_names_every_share_and_the_saturated_samples():
    before = dict.fromkeys(cpu_sample.FIELDS, 0)
    line = cpu_sample.summary(before, dict(before, user=9, idle=1), 3600.4, 80)
    assert line == ("cpu: busy 90.0 %, iowait 0.0 %, steal 0.0 % of all CPUs over 3600 s; 80 % of the samples at "
                    "95 % busy or more")


def test_the_sampler_writes_samples_until_sigterm_and_then_its_summary(tmp_path):
    out = tmp_path / "cpu.log"
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "ci" / "cpu_sample.py"), str(out), "0.1"],
                            stdout=subprocess.PIPE, text=True)
    time.sleep(0.6)
    proc.send_signal(signal.SIGTERM)
    stdout, dummy = proc.communicate(timeout=10)
    assert proc.returncode == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("# seconds") and len(lines) >= 3
    for line in lines[1:]:
        seconds, busy, iowait, steal = line.split()
        assert 0 <= float(busy) <= 100 and 0 <= float(iowait) <= 100 and 0 <= float(steal) <= 100
    assert stdout.startswith("cpu: busy ") and "of the samples at 95 % busy or more" in stdout
