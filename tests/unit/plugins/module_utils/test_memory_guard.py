"""memory_guard: /proc/meminfo parsing and the free-memory verdict (a DGX Spark-sized and a lab-sized node)."""

import pytest

from ansible_collections.dspark.cluster.plugins.module_utils import memory_guard

# A DGX Spark after a clean boot (128 GB unified memory), trimmed /proc/meminfo.
SPARK_CLEAN = """MemTotal:       127535184 kB
MemFree:        120123456 kB
MemAvailable:   122880000 kB
Buffers:           12345 kB
HugePages_Total:       0
"""
# The same node with a leaked engine holding ~90 GiB.
SPARK_LEAKED = SPARK_CLEAN.replace("122880000", "30000000")


def test_parse_keeps_numbers_and_skips_noise():
    fields = memory_guard.parse_meminfo(SPARK_CLEAN + "garbage line\nEmpty:\nBad: x kB\n")
    assert fields["MemTotal"] == 127535184
    assert fields["HugePages_Total"] == 0
    assert "Bad" not in fields and "Empty" not in fields


@pytest.mark.parametrize("need, fraction, expected", [
    (0, 0.835, 103996),    # ceil(0.835 x 124546)
    (5000, 0.835, 5000),   # an explicit need wins
    (0, None, 0),
    (0, 0.0, 0),
])
def test_required(need, fraction, expected):
    assert memory_guard.required_mib(124546, need, fraction) == expected


def test_clean_node_passes_at_the_default_utilisation():
    verdict = memory_guard.assess(SPARK_CLEAN, fraction=0.835)
    assert verdict["ok"] and verdict["total_mib"] == 124546 and verdict["available_mib"] == 120000


def test_leaked_memory_fails_and_says_why():
    verdict = memory_guard.assess(SPARK_LEAKED, fraction=0.835)
    assert not verdict["ok"]
    assert "not reclaimed" in verdict["msg"] and "29296 MiB" in verdict["msg"]


def test_no_requirement_always_passes():
    verdict = memory_guard.assess(SPARK_LEAKED)
    assert verdict["ok"] and verdict["required_mib"] == 0


def test_missing_fields_raise():
    with pytest.raises(memory_guard.MeminfoError):
        memory_guard.assess("MemTotal: 100 kB\n", fraction=0.5)
