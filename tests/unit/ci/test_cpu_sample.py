"""tests/ci/cpu_sample.py: /proc/stat's aggregate line, the shares between two samples, the summary, the run."""

import os
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
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "ci" / "cpu_sample.py"), str(out), "0.1", "0.2"],
                            stdout=subprocess.PIPE, text=True)
    time.sleep(0.6)
    proc.send_signal(signal.SIGTERM)
    stdout, dummy = proc.communicate(timeout=10)
    assert proc.returncode == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("# seconds") and len(lines) >= 4
    assert lines[-1].startswith("# cpu: most CPU: ")                  # the whole ranking, after the samples
    for line in lines[1:-1]:
        seconds, busy, iowait, steal = line.split()
        assert 0 <= float(busy) <= 100 and 0 <= float(iowait) <= 100 and 0 <= float(steal) <= 100
    busy, most = stdout.splitlines()
    assert busy.startswith("cpu: busy ") and "of the samples at 95 % busy or more" in busy
    assert most.startswith("cpu: most CPU: ")


def test_a_process_is_named_by_its_script_with_its_own_and_its_reaped_childrens_time():
    stat = "4242 (python3) S 1 4242 4242 0 -1 4194560 100 0 0 0 120 30 7 3 20 0 1 0 500 1000 100"
    assert cpu_sample.process(stat, "/usr/bin/python3\0/work/.venv/bin/ansible-playbook\0-i\0x\0") == (
        "ansible-playbook", 150, 10, 1)
    assert cpu_sample.process(stat, "python3\0-u\0-m\0pytest\0")[0] == "pytest"
    assert cpu_sample.process(stat, "python3\0-c\0sum(range(9))\0")[0] == "python3 -c sum(range(9))"
    shell = "8 (bash) S 1 8 8 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 1 1 1"
    assert cpu_sample.process(shell, "bash\0-c\0/usr/bin/make -C x test; exit $rc\0")[0] == "bash -c make"
    assert cpu_sample.process(shell, "bash\0tests/ci/lanes.sh\0a b\0")[0] == "lanes.sh"
    odd = "77 (qemu-system-x86) R 1 77 77 0 -1 0 0 0 0 0 500 100 0 0 20 0 1 0 1 1 1"
    assert cpu_sample.process(odd, "qemu-system-x86_64\0-name\0vm\0") == ("qemu-system-x86", 600, 0, 1)
    spaced = "9 (tmux: server) S 7 9 9 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 1 1 1"
    assert cpu_sample.process(spaced, "") == ("tmux: server", 10, 0, 7)


def test_account_charges_own_time_and_short_childrens_time_once():
    totals = {}
    before = {1: ("sshd", 100, 0, 0), 2: ("qemu", 50, 0, 0), 3: ("old", 10, 0, 1),
              10: ("bash", 5, 20, 1), 11: ("python3", 30, 0, 10), 12: ("python3", 8, 0, 11)}
    # 10's subtree ended (its python3 and that one's child too) and sshd reaped it: sshd's children grew by the
    # subtree's final time, 5+20+(30+2)+(8+1) = 66, of which 5+20+30+8 = 63 were charged by earlier scans; "old"
    # (10, all charged) ended too and its PID was reused; 50 are of children no scan saw.
    after = {1: ("sshd", 130, 66 + 10 + 50, 0), 2: ("qemu", 150, 0, 0), 4: ("ansible-playbook", 40, 7, 1),
             3: ("reused", 5, 0, 1)}
    cpu_sample.account(totals, before, after)
    assert totals == {"sshd": 30, "sshd's children": 3 + 50, "qemu": 100, "ansible-playbook": 40,
                      "ansible-playbook's children": 7, "reused": 5}
    assert cpu_sample.top(totals, 10, count=2) == "cpu: most CPU: qemu 10 s, sshd's children 5 s"


def test_scan_reads_this_process():
    name, own, children, ppid = cpu_sample.scan()[os.getpid()]
    assert own > 0 and children >= 0 and name and ppid == os.getppid()


def test_the_kernels_workers_are_one_command():
    stat = "5 (kworker/0:1-events) I 2 0 0 0 -1 0 0 0 0 0 0 4 0 0 20 0 1 0 1 1 1"
    assert cpu_sample.process(stat, "") == ("kworker", 4, 0, 2)


def test_a_name_with_a_newline_or_none_stays_on_the_summary_line():
    # /proc/PID/stat's fields after the name: state, ppid, then 11 more before utime, stime, cutime, cstime.
    tail = "S 42 " + " ".join(["0"] * 9) + " 7 3 2 1"
    assert cpu_sample.process("12 (a\nb) " + tail, "")[:2] == ("a b", 10)
    assert cpu_sample.process("12 () " + tail, "")[0] == "?"
    assert cpu_sample.process("12 (python3) " + tail, "python3\0/opt/tool/\0")[0] == "?"
