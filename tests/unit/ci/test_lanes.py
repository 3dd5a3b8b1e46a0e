"""tests/ci/lanes.sh: lanes beside each other, each in order until its first failure, one status for all."""

import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tests" / "ci" / "lanes.sh"

# A stand-in for make: `fakemake --no-print-directory STAGE` appends STAGE to the trace, fails for stages named
# fail*, and for slow* waits until the other lane has written "go" (so the lanes must overlap to finish).
FAKE_MAKE = """#!/bin/bash
stage=$2
case $stage in
  slow*) for _ in $(seq 1 200); do grep -qx go "$TRACE" && break; sleep 0.05; done ;;
esac
echo "$stage" >>"$TRACE"
case $stage in fail*) exit 4 ;; esac
exit 0
"""


def lanes(tmp_path, *lane):
    make = tmp_path / "fakemake"
    make.write_text(FAKE_MAKE)
    make.chmod(0o755)
    trace = tmp_path / "trace"
    env = {"PATH": "/usr/bin:/bin", "CI_LOGS": str(tmp_path / "logs"), "CI_TAIL": "3", "MAKE": str(make),
           "TRACE": str(trace)}
    result = subprocess.run(["bash", str(SCRIPT), *lane], env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    return result, trace.read_text().split() if trace.exists() else []


def test_every_lane_runs_its_stages_in_order_and_all_pass(tmp_path):
    result, trace = lanes(tmp_path, "a1 a2 a3", "b1 b2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [s for s in trace if s.startswith("a")] == ["a1", "a2", "a3"]
    assert [s for s in trace if s.startswith("b")] == ["b1", "b2"]
    lines = result.stdout.splitlines()
    assert sorted(line.split()[0] for line in lines if not line.startswith("cpu:")) == ["a1", "a2", "a3", "b1", "b2"]
    # The CPU sampler ran beside the lanes and said how busy the machine was, and what used it (tests/ci/cpu_sample.py).
    assert lines[-2].startswith("cpu: busy ") and lines[-1].startswith("cpu: most CPU: "), lines
    assert (tmp_path / "logs" / "cpu.log").read_text().startswith("# seconds busy% iowait% steal%")


def test_lanes_run_beside_each_other(tmp_path):
    # slow1 waits for "go", which only the other lane writes: run one after the other, slow1 would time out first.
    result, trace = lanes(tmp_path, "slow1 a2", "b1 go")
    assert result.returncode == 0
    assert trace.index("go") < trace.index("slow1")


def test_a_failed_stage_stops_its_lane_names_what_it_skipped_and_the_others_finish(tmp_path):
    result, trace = lanes(tmp_path, "a1 fail2 a3 a4", "b1 b2 b3")
    assert result.returncode == 1
    assert "a3" not in trace and "a4" not in trace
    assert ["b1", "b2", "b3"] == [s for s in trace if s.startswith("b")]
    assert "lane 1 stopped: a3 a4 not run" in result.stdout
    assert any(line.startswith("fail2") and "FAIL" in line and "(exit 4)" in line for line in result.stdout.splitlines())
    # Why it failed comes again as the output's last lines, after every lane's report and the CPU summary.
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("  ! ") and lines[-2].startswith("fail2 failed (exit 4) after "), lines[-4:]
    assert lines[-3].startswith("cpu: most CPU: "), lines[-4:]


def test_a_failure_in_the_last_stage_of_a_lane_fails_the_run(tmp_path):
    result = lanes(tmp_path, "a1", "b1 fail2")[0]
    assert result.returncode == 1
    assert "stopped" not in result.stdout


def test_a_why_file_left_by_an_earlier_run_is_not_printed(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "old.why").write_text("old failed (exit 1)\n")
    result = lanes(tmp_path, "a1", "b1")[0]
    assert result.returncode == 0
    assert "old failed" not in result.stdout


def test_the_pool_goes_to_the_lanes_that_end_first_in_order_and_joined_stages_stay_together(tmp_path):
    # Lane 2 ends at once and takes p1, then p2+p3 in order; slow1 holds lane 1 until "go" (p3's successor) is written.
    result, trace = lanes(tmp_path, "--pool", "p1 p2+p3+go p4", "slow1", "b1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(trace) == sorted(["slow1", "b1", "p1", "p2", "p3", "go", "p4"])
    assert trace.index("b1") < trace.index("p1") < trace.index("p2") < trace.index("p3") < trace.index("go")
    assert trace.index("go") < trace.index("slow1")        # lane 1 was still busy: the pool did not wait for it
    assert sorted(line.split()[0] for line in result.stdout.splitlines() if not line.startswith("cpu:")) == \
        sorted(["slow1", "b1", "p1", "p2", "p3", "go", "p4"])


def test_a_failed_pool_item_stops_its_lane_and_the_rest_of_the_pool_goes_to_another(tmp_path):
    result, trace = lanes(tmp_path, "--pool", "fail1+p2 p3 p4", "a1", "b1")
    assert result.returncode == 1
    assert "p2" not in trace and "p3" in trace and "p4" in trace
    assert "stopped: p2 not run" in result.stdout


def test_pool_items_no_lane_took_are_named_and_fail_the_run(tmp_path):
    result, trace = lanes(tmp_path, "--pool", "p1 p2", "fail1", "fail2")
    assert result.returncode == 1
    assert "p1" not in trace and "pool: p1 p2 not run (every lane stopped before it)" in result.stdout


def test_no_lane_is_a_usage_error(tmp_path):
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "usage" in result.stderr
