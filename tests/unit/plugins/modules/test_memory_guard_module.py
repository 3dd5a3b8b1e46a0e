"""memory_guard module: main() against a fake /proc/meminfo that is reclaimed while it waits, or never."""

import json

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.modules import memory_guard

TAKEN = "MemTotal: 8388608 kB\nMemAvailable: 1048576 kB\n"      # 8 GiB, 1 GiB free
FREED = "MemTotal: 8388608 kB\nMemAvailable: 7340032 kB\n"      # 7 GiB free


def run(monkeypatch, capsys, reads, args):
    texts = iter(reads)
    last = [reads[-1]]
    monkeypatch.setattr(memory_guard, "read_meminfo", lambda: next(texts, last[0]))
    monkeypatch.setattr(memory_guard.time, "sleep", lambda seconds: None)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            memory_guard.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_memory_reclaimed_while_waiting(monkeypatch, capsys):
    code, result = run(monkeypatch, capsys, [TAKEN, TAKEN, FREED], {"fraction": 0.8, "wait": 30, "poll_interval": 0.01})
    assert code == 0 and result["needs_reboot"] is False and result["required_mib"] == 6554


def test_memory_never_reclaimed_says_reboot(monkeypatch, capsys):
    code, result = run(monkeypatch, capsys, [TAKEN], {"need_mib": 4096, "wait": 0})
    assert code == 1 and result["needs_reboot"] is True
    assert "needs a reboot" in result["msg"] and "1024 MiB of 8192 MiB" in result["msg"]


def test_bad_arguments_fail(monkeypatch, capsys):
    code, result = run(monkeypatch, capsys, [FREED], {"fraction": 1.5})
    assert code == 1 and "fraction=1.5" in result["msg"]
