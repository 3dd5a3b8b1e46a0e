# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is a node's (unified) memory free enough to start its rank? Pure logic: /proc/meminfo text in, verdict out.

On a DGX Spark the GPU shares the system's memory: vLLM refuses to start when less than
gpu_memory_utilization x total is free, and a rank that died without releasing its memory (a leak, a zombie
engine) keeps it taken until the node reboots. Restarting a group on such a node only loops.
"""

from __future__ import annotations

import math

MIB = 1024


class MeminfoError(ValueError):
    """/proc/meminfo lacks what the verdict needs."""


def parse_meminfo(text):
    """{field: KiB} from /proc/meminfo text (values without a unit are kept as they are)."""
    fields = {}
    for line in (text or '').splitlines():
        name, sep, rest = line.partition(':')
        if not sep:
            continue
        parts = rest.split()
        if not parts:
            continue
        try:
            fields[name.strip()] = int(parts[0])
        except ValueError:
            continue
    return fields


def required_mib(total_mib, need_mib=0, fraction=None):
    """MiB that must be free: need_mib when positive, else ceil(fraction x total), else 0 (no guard)."""
    if need_mib and need_mib > 0:
        return int(need_mib)
    if fraction is not None and fraction > 0:
        return int(math.ceil(fraction * total_mib))
    return 0


def assess(meminfo_text, need_mib=0, fraction=None):
    """Verdict dict: total_mib, available_mib, required_mib, ok, msg."""
    fields = parse_meminfo(meminfo_text)
    if 'MemTotal' not in fields or 'MemAvailable' not in fields:
        raise MeminfoError('/proc/meminfo has no MemTotal/MemAvailable (kernel older than 3.14?)')
    total = fields['MemTotal'] // MIB
    available = fields['MemAvailable'] // MIB
    required = required_mib(total, need_mib, fraction)
    ok = available >= required
    if required == 0:
        msg = 'no memory requirement: %d MiB of %d MiB available' % (available, total)
    elif ok:
        msg = '%d MiB of %d MiB available, %d MiB needed' % (available, total, required)
    else:
        msg = ('only %d MiB of %d MiB available, %d MiB needed: memory of an earlier start was not reclaimed'
               % (available, total, required))
    return {'total_mib': total, 'available_mib': available, 'required_mib': required, 'ok': ok, 'msg': msg}
