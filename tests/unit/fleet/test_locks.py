"""locks: per-group flock files shared by reprovision and watch (non-blocking, released when the holder dies)."""

import subprocess
import sys
import threading
import time

import pytest

from dspark_fleet import locks
from dspark_fleet.runner_exec import RunResult, RunSpec


def test_state_dir_option_env_default(tmp_path):
    assert locks.state_dir(str(tmp_path / "opt"), {"DSPARK_FLEET_STATE_DIR": "/x"}) == str(tmp_path / "opt")
    assert locks.state_dir(None, {"DSPARK_FLEET_STATE_DIR": str(tmp_path)}) == str(tmp_path)
    assert locks.state_dir(None, {}).endswith(".dspark-fleet")


def test_second_holder_is_refused_without_blocking(tmp_path):
    first = locks.GroupLock(str(tmp_path), "pair_a", "reprovision")
    second = locks.GroupLock(str(tmp_path), "pair_a", "watch")
    other = locks.GroupLock(str(tmp_path), "pair_b", "watch")
    assert first.acquire()
    started = time.monotonic()
    assert not second.acquire()
    assert time.monotonic() - started < 1
    assert other.acquire()                               # one lock per group
    holder = second.holder()
    assert holder["purpose"] == "reprovision" and isinstance(holder["pid"], int)
    assert "reprovision (pid" in locks.describe(holder)
    first.release()
    assert second.acquire()
    assert second.holder()["purpose"] == "watch"
    second.release()
    other.release()
    assert (tmp_path / "locks" / "pair_a.lock").is_file()


def test_context_manager_raises_when_busy(tmp_path):
    with locks.GroupLock(str(tmp_path), "g", "reprovision"):
        with pytest.raises(locks.LockBusy) as info:
            with locks.GroupLock(str(tmp_path), "g", "watch"):
                pass
        assert "reprovision" in str(info.value)
    with locks.GroupLock(str(tmp_path), "g", "watch"):
        pass


def test_lock_of_a_killed_holder_is_free(tmp_path):
    code = ("import sys, time; sys.path.insert(0, %r); from dspark_fleet import locks; "
            "l = locks.GroupLock(%r, 'g', 'reprovision'); assert l.acquire(); print('held', flush=True); "
            "time.sleep(60)") % (sys.path[0], str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        lock = locks.GroupLock(str(tmp_path), "g", "watch")
        assert not lock.acquire()
        assert lock.holder()["pid"] == proc.pid
    finally:
        proc.kill()
        proc.wait()
    assert lock.acquire()
    lock.release()


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", None])
def test_bad_group_names(tmp_path, name):
    with pytest.raises(ValueError):
        locks.lock_path(str(tmp_path), name)


def _spec(tmp_path, ident):
    return RunSpec(ident=ident, playbook="p.yml", inventory="i", project_dir=str(tmp_path),
                   artifacts_dir=str(tmp_path), private_dir=str(tmp_path))


def test_locked_runner_holds_the_lock_while_it_runs(tmp_path):
    seen = {}

    def runner(spec, event_handler=None, cancel_callback=None):
        seen["free"] = locks.GroupLock(str(tmp_path), spec.ident, "watch").acquire()
        return RunResult(status="successful", rc=0)

    run = locks.locked_runner(str(tmp_path), runner)
    assert run(_spec(tmp_path, "g")).status == "successful"
    assert seen["free"] is False
    assert locks.GroupLock(str(tmp_path), "g", "watch").acquire()


def test_locked_runner_waits_for_the_holder_and_can_be_cancelled(tmp_path):
    held = locks.GroupLock(str(tmp_path), "g", "watch")
    assert held.acquire()
    waits, ran = [], []

    def runner(spec, event_handler=None, cancel_callback=None):
        ran.append(time.monotonic())
        return RunResult(status="successful", rc=0)

    run = locks.locked_runner(str(tmp_path), runner, on_wait=lambda g, h: waits.append((g, h)), poll=0.05)
    timer = threading.Timer(0.3, held.release)
    timer.start()
    began = time.monotonic()
    assert run(_spec(tmp_path, "g")).status == "successful"
    assert ran and ran[0] - began >= 0.25
    assert waits and waits[0][0] == "g" and waits[0][1]["purpose"] == "watch"

    assert held.acquire()
    result = run(_spec(tmp_path, "g"), cancel_callback=lambda: True)
    assert result.status == "canceled" and "lock" in result.error
    held.release()
