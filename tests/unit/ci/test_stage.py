"""tests/ci/stage.sh: one line per stage, the whole output in its log, the log's tail and the status on failure."""

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tests" / "ci" / "stage.sh"


def stage(tmp_path, name, command, tail="40"):
    env = {"PATH": "/usr/bin:/bin", "CI_LOGS": str(tmp_path / "logs"), "CI_TAIL": tail}
    return subprocess.run(["bash", str(SCRIPT), name, "bash", "-c", command], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_a_passing_stage_prints_one_line_and_logs_everything(tmp_path):
    result = stage(tmp_path, "lint", "echo out; echo err >&2")
    assert result.returncode == 0
    assert re.fullmatch(r"lint +ok +\d+ s\n", result.stdout)
    lines = (tmp_path / "logs" / "lint.log").read_text().splitlines()
    # Each line stamped with the seconds since the stage began.
    assert re.fullmatch(r" +\d+ # stage lint: bash -c .*", lines[0])
    assert [re.sub(r"^ +\d+ ", "", line) for line in lines[1:]] == ["out", "err"]


def test_a_failing_stage_keeps_its_status_and_prints_the_tail_of_its_log(tmp_path):
    result = stage(tmp_path, "unit", "for i in $(seq 1 30); do echo line $i; done; exit 3", tail="5")
    assert result.returncode == 3
    head, said, *tail = result.stdout.splitlines()
    assert re.match(r"unit +FAIL +\d+ s  \(exit 3\), whole output in .*/logs/unit\.log", head)
    assert said == "  its last 5 lines:"
    assert [re.sub(r"^  \| +\d+ ", "", line) for line in tail] == ["line %d" % i for i in range(26, 31)]


def test_a_failed_test_is_named_even_when_a_teardown_fills_the_tail(tmp_path):
    command = ("echo 'tests/fleet/test_x.py::test_long PASSED [ 50%]'; "
               "echo 'tests/fleet/test_x.py::test_roll FAILED [100%]'; "
               "echo 'E       AssertionError: cut_sessions 0 != 1'; "
               "echo 'fatal: [spark-b0]: FAILED! => {\"msg\": \"rank 1 never joined\"}'; "
               "echo 'FAILED tests/fleet/test_x.py::test_roll - AssertionError'; "
               "for i in $(seq 1 30); do echo lab: removing $i; done; exit 1")
    result = stage(tmp_path, "fleettest", command, tail="3")
    assert result.returncode == 1
    said = [line[4:] for line in result.stdout.splitlines() if line.startswith("  ! ")]
    said = [re.sub(r"^ +\d+ ", "", line) for line in said]
    assert said == ["tests/fleet/test_x.py::test_roll FAILED [100%]", "E       AssertionError: cut_sessions 0 != 1",
                    'fatal: [spark-b0]: FAILED! => {"msg": "rank 1 never joined"}',
                    "FAILED tests/fleet/test_x.py::test_roll - AssertionError"]
    assert result.stdout.splitlines()[-1].endswith("lab: removing 30")


def test_a_stage_reads_no_input(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "CI_LOGS": str(tmp_path)}
    result = subprocess.run(["bash", str(SCRIPT), "quiet", "cat"], input="never read\n", capture_output=True,
                            text=True, timeout=60, check=False, env=env)
    assert result.returncode == 0
    assert "never read" not in (tmp_path / "quiet.log").read_text()


# Molecule's converge as CI printed it (YAML results): an ignored failure, then the real one, then the teardown.
CONVERGE = r"""
echo 'TASK [dspark.cluster.fabric : Read the optional module] ***'
echo 'fatal: [spark-head]: FAILED! => changed=false'
echo '  msg: no such module'
echo '...ignoring'
echo 'TASK [Gathering Facts] ***'
echo 'fatal: [spark-worker]: UNREACHABLE! => changed=false'
echo '  msg: Failed to connect to the host via ssh: Connection timed out during banner exchange'
echo '  unreachable: true'
echo 'PLAY RECAP ***'
echo 'spark-worker : ok=0 changed=0 unreachable=1 failed=0'
for i in $(seq 1 30); do echo destroy: $i; done
exit 4
"""


def test_a_failed_task_is_named_with_its_task_and_result_and_ignored_failures_are_left_out(tmp_path):
    # From a file: the log's first line repeats the command, and this one spans lines.
    script = tmp_path / "converge.sh"
    script.write_text(CONVERGE)
    result = stage(tmp_path, "molecule-vmlab", "bash %s" % script, tail="3")
    assert result.returncode == 4
    said = [re.sub(r"^ +\d+ ", "", line[4:]) for line in result.stdout.splitlines() if line.startswith("  ! ")]
    assert said == ["TASK [Gathering Facts] ***", "fatal: [spark-worker]: UNREACHABLE! => changed=false",
                    "  msg: Failed to connect to the host via ssh: Connection timed out during banner exchange",
                    "  unreachable: true"]
    # The same, headed by the stage, in molecule-vmlab.why for tests/ci/lanes.sh to print last.
    why = (tmp_path / "logs" / "molecule-vmlab.why").read_text().splitlines()
    assert re.fullmatch(r"molecule-vmlab failed \(exit 4\) after \d+ s, in .*/molecule-vmlab\.log:", why[0])
    assert [re.sub(r"^  ! +\d+ ", "", line) for line in why[1:5]] == said
    # The first failure again, last: here it is the only one.
    assert why[5] == "  its first failure:" and [re.sub(r"^  ! +\d+ ", "", line) for line in why[6:]] == said


# Session 26's landing CI: the head's fabric check failed with a long result, then the group gate stopped the worker
# with one of its own; the last 12 failure lines held only the worker's, the head's cause was lost.
CAUSE = r"""
echo 'TASK [dspark.cluster.fabric : Check the fabric result] ***'
echo 'fatal: [spark-head]: FAILED! =>'
echo '    assertion: fabric_check_result.ok'
echo '    changed: false'
echo '    evaluated_to: false'
echo '    msg: |-'
echo '        spark-head: the fabric check failed. ib_write_bw spark-head -> spark-worker failed:'
echo '        Failed status 12: wr_id 0 syndrom 0x81'
echo 'TASK [dspark.cluster.preflight : Stop this node when a member of its group failed earlier] ***'
echo 'fatal: [spark-worker]: FAILED! =>'
for i in $(seq 1 4); do echo "    msg: line $i of the gate"; done
echo 'PLAY RECAP ***'
for i in $(seq 1 8); do echo "ERROR    molecule line $i"; done
exit 2
"""


def test_the_first_failure_ends_the_why_file_whole_when_later_ones_fill_the_last_lines(tmp_path):
    script = tmp_path / "converge.sh"
    script.write_text(CAUSE)
    assert stage(tmp_path, "molecule-vmlab", "bash %s" % script).returncode == 2
    why = [re.sub(r"^  ! +\d+ ", "", line) for line in (tmp_path / "logs" / "molecule-vmlab.why").read_text().splitlines()]
    assert "spark-head" not in "".join(why[1:13])
    assert why[13] == "  its first failure:"
    assert why[14:] == ["TASK [dspark.cluster.fabric : Check the fabric result] ***", "fatal: [spark-head]: FAILED! =>",
                        "    assertion: fabric_check_result.ok", "    changed: false", "    evaluated_to: false", "    msg: |-",
                        "        spark-head: the fabric check failed. ib_write_bw spark-head -> spark-worker failed:",
                        "        Failed status 12: wr_id 0 syndrom 0x81"]


def test_without_failure_lines_the_why_file_holds_the_last_lines_and_a_pass_removes_it(tmp_path):
    result = stage(tmp_path, "build", "echo one; echo two; exit 2")
    assert result.returncode == 2
    why = (tmp_path / "logs" / "build.why").read_text().splitlines()
    assert [re.sub(r"^  ! +\d+ ", "", line) for line in why[-2:]] == ["one", "two"]
    assert stage(tmp_path, "build", "true").returncode == 0
    assert not (tmp_path / "logs" / "build.why").exists()
