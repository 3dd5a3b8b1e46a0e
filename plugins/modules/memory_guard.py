#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: memory_guard
short_description: Wait until a node's memory is free enough to start its rank, or say that it needs a reboot
version_added: 0.2.0
description:
  - Reads C(/proc/meminfo) and compares C(MemAvailable) with what the rank needs, O(need_mib) when positive,
    otherwise O(fraction) of C(MemTotal) (on a DGX Spark, vLLM's C(gpu_memory_utilization) of the unified memory).
  - Polls for up to O(wait) seconds, since a stopped engine releases its memory over a few seconds. When the memory
    is still taken, it fails with a message that says the node needs a reboot, since restarting the group would only loop.
  - Never changes anything.
author:
  - dspark.cluster contributors (@dspark)
options:
  need_mib:
    description:
      - MiB that must be available. 0 derives it from O(fraction).
    type: int
    default: 0
  fraction:
    description:
      - Fraction of C(MemTotal) that must be available when O(need_mib) is 0. 0 turns the guard off.
    type: float
    default: 0.0
  wait:
    description:
      - Seconds to wait for the memory to be reclaimed before failing.
    type: int
    default: 30
  poll_interval:
    description:
      - Seconds between two reads of C(/proc/meminfo).
    type: float
    default: 2.0
extends_documentation_fragment:
  - dspark.cluster.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux (C(/proc/meminfo) with C(MemAvailable)).
"""

EXAMPLES = r"""
- name: Check that the unified memory of the last start was reclaimed
  dspark.cluster.memory_guard:
    fraction: 0.835
    wait: 30
"""

RETURN = r"""
total_mib:
  description: C(MemTotal) in MiB.
  type: int
  returned: always
  sample: 124546
available_mib:
  description: C(MemAvailable) in MiB at the last read.
  type: int
  returned: always
  sample: 118000
required_mib:
  description: MiB the rank needs available (0 when the guard is off).
  type: int
  returned: always
  sample: 103996
waited:
  description: Seconds spent waiting for the memory.
  type: float
  returned: always
needs_reboot:
  description: True when the memory stayed taken for O(wait) seconds.
  type: bool
  returned: always
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dspark.cluster.plugins.module_utils import memory_guard

MEMINFO = '/proc/meminfo'


def read_meminfo():
    with open(MEMINFO, encoding='ascii', errors='replace') as handle:
        return handle.read()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            need_mib=dict(type='int', default=0),
            fraction=dict(type='float', default=0.0),
            wait=dict(type='int', default=30),
            poll_interval=dict(type='float', default=2.0),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params['need_mib'] < 0 or not 0 <= params['fraction'] <= 1 or params['wait'] < 0 or params['poll_interval'] <= 0:
        module.fail_json(msg='memory_guard: need_mib=%s must be >= 0, fraction=%s within 0..1, wait=%s >= 0 and '
                             'poll_interval=%s > 0' % (params['need_mib'], params['fraction'], params['wait'],
                                                       params['poll_interval']))
    start = time.monotonic()
    while True:
        try:
            verdict = memory_guard.assess(read_meminfo(), params['need_mib'], params['fraction'])
        except (OSError, memory_guard.MeminfoError) as exc:
            module.fail_json(msg='memory_guard: cannot read %s: %s' % (MEMINFO, exc))
        waited = round(time.monotonic() - start, 1)
        if verdict['ok'] or waited >= params['wait']:
            break
        time.sleep(min(params['poll_interval'], max(0.1, params['wait'] - waited)))
    result = dict(changed=False, total_mib=verdict['total_mib'], available_mib=verdict['available_mib'],
                  required_mib=verdict['required_mib'], waited=waited, needs_reboot=not verdict['ok'])
    if not verdict['ok']:
        module.fail_json(msg='%s after waiting %s s; the node needs a reboot before its rank can start again '
                             '(restarting the group would only loop)' % (verdict['msg'], waited), **result)
    module.exit_json(msg=verdict['msg'], **result)


if __name__ == '__main__':
    main()
