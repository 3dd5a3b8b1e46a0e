#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_bandwidth
short_description: Measure RDMA write bandwidth between two nodes with ib_write_bw
version_added: 0.1.0
description:
  - Runs perftest's C(ib_write_bw) on one RDMA device, either as the server (without
    O(server_address)) or as the client that connects to O(server_address) and sends.
  - Start the server first on the receiving node with O(background=true), which returns at once and
    leaves the server running, then the client on the sending node. The client retries while the server
    does not accept the connection yet, up to O(timeout) seconds.
  - The client returns the average bandwidth in Gb/s and whether it reaches O(min_gbits). A
    measurement below the threshold is a warning, never a failure; the caller decides.
author:
  - dspark.cluster contributors (@dspark)
options:
  device:
    description: RDMA device (C(-d)), for example C(rocep1s0f1).
    type: str
    required: true
  ib_port:
    description: Port of O(device) (C(-i)).
    type: int
    default: 1
  gid_index:
    description: RoCE v2 GID index of this node (C(-x)); see M(dspark.cluster.roce_gid_index).
    type: int
    required: true
  server_address:
    description: Address of the node running the server. Omit to run the server.
    type: str
  tcp_port:
    description: TCP port of perftest's side channel (C(-p)); use one port per concurrent test.
    type: int
    default: 18515
  duration:
    description: Seconds of traffic (C(-D)). Give both sides the same value.
    type: int
    default: 5
  size:
    description: Message size in bytes (C(-s)).
    type: int
    default: 65536
  timeout:
    description:
      - Server, seconds to wait for the client and the test. Client, seconds to keep retrying the
        connection; the run itself gets O(duration) plus 60 seconds more.
    type: int
    default: 120
  min_gbits:
    description: Threshold for RV(meets_threshold), in Gb/s; 0 means no threshold.
    type: float
    default: 0
  extra_args:
    description: More C(ib_write_bw) arguments, appended as given on both sides.
    type: list
    elements: str
    default: []
  background:
    description:
      - Server only. Start the server in its own session and return at once, instead of waiting for the
        client; coreutils C(timeout) stops it after O(timeout) seconds if no client came. A server that
        exits within its first second (a wrong device or GID index, a port in use) fails the task.
      - Use it instead of an C(async) task with C(poll=0), which Mitogen's strategy does not run for this module.
    type: bool
    default: false
  executable:
    description: The perftest binary to run.
    type: str
    default: ib_write_bw
extends_documentation_fragment:
  - dspark.cluster.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: Needs perftest (C(ib_write_bw)) and an RDMA device (mlx5, rxe).
seealso:
  - module: dspark.cluster.fabric_check
  - module: dspark.cluster.roce_gid_index
"""

EXAMPLES = r"""
- name: Receive on the worker
  dspark.cluster.rdma_bandwidth:
    device: rocep1s0f1
    gid_index: 3
    duration: 5
    background: true
  when: dspark_rank | int == 1

- name: Send from the head
  dspark.cluster.rdma_bandwidth:
    device: rocep1s0f1
    gid_index: 3
    duration: 5
    server_address: 10.77.77.2
    min_gbits: 80
  register: bw
  when: dspark_rank | int == 0
"""

RETURN = r"""
gbits_average:
  description: Average bandwidth in Gb/s.
  returned: success
  type: float
  sample: 96.4
gbits_peak:
  description: Peak bandwidth in Gb/s (0 with a duration run, where perftest does not measure it).
  returned: success
  type: float
  sample: 0.0
msg_rate_mpps:
  description: Message rate in millions of packets per second.
  returned: success
  type: float
  sample: 0.18
bytes:
  description: Message size of the run.
  returned: success
  type: int
  sample: 65536
iterations:
  description: Messages sent.
  returned: success
  type: int
  sample: 1000
meets_threshold:
  description: Whether RV(gbits_average) reaches O(min_gbits) (always true when O(min_gbits) is 0).
  returned: success
  type: bool
  sample: true
mode:
  description: C(client) or C(server).
  returned: always
  type: str
  sample: client
pid:
  description: Process ID of the server's C(timeout) wrapper (the leader of its own session), with O(background=true).
  returned: success, with O(background=true)
  type: int
  sample: 4711
attempts:
  description: Client runs until the server accepted the connection.
  returned: success
  type: int
  sample: 1
cmd:
  description: The command that ran.
  returned: always
  type: list
  elements: str
  sample: ["ib_write_bw", "-d", "rocep1s0f1", "-i", "1", "-x", "3", "-F", "--report_gbits", "-D", "5", "-p", "18515", "10.77.77.2"]
stdout:
  description: Output of the last run.
  returned: always
  type: str
"""

import os
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dspark.cluster.plugins.module_utils.fabric_check import is_connect_error, parse_ib_write_bw


def run(cmd, timeout):
    """(rc, output); rc None on timeout."""
    try:
        # run_command takes no timeout, and a bandwidth client with no server answering would wait for ever
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,  # pylint: disable=ansible-bad-function
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        out = e.output or b''
        return None, out.decode('utf-8', 'replace')
    return proc.returncode, proc.stdout.decode('utf-8', 'replace')


# A server that fails at start (a wrong device or GID index, a port in use) exits within this many seconds.
EARLY_EXIT_S = 1.0
# sh starts the server in the background with its output in the log ($0) and prints its PID, then exits: the server
# holds none of this task's pipes, so the task returns at once under any strategy. setsid: its own session, so the
# end of the task's login or sudo does not signal it.
DETACH = '"$@" >"$0" 2>&1 </dev/null & echo $!'


def running(pid):
    """Whether `pid` is still a live process (not gone, not a zombie waiting for init)."""
    try:
        with open('/proc/%d/stat' % pid) as stat:
            return stat.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except (OSError, IndexError):
        return False


def spawn(module, cmd, timeout):
    """Starts `cmd` in its own session under coreutils timeout: (pid, None) while it runs, or (None, its output) when
    it exited within EARLY_EXIT_S. The log is unlinked once open here: nothing is left on the node."""
    fd, log = tempfile.mkstemp(prefix='dspark-ib_write_bw-', suffix='.log')
    try:
        rc, out, err = module.run_command(['/bin/sh', '-c', DETACH, log, module.get_bin_path('setsid', required=True),
                                           module.get_bin_path('timeout', required=True), '--kill-after=10',
                                           str(timeout)] + cmd)
        os.unlink(log)
        if rc != 0 or not out.strip().isdigit():
            return None, (out + err).strip()
        pid = int(out)
        deadline = time.time() + EARLY_EXIT_S
        while running(pid) and time.time() < deadline:
            time.sleep(0.1)
        if running(pid):
            return pid, None
        return None, os.read(fd, 65536).decode('utf-8', 'replace')
    finally:
        os.close(fd)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            device=dict(type='str', required=True),
            ib_port=dict(type='int', default=1),
            gid_index=dict(type='int', required=True),
            server_address=dict(type='str'),
            tcp_port=dict(type='int', default=18515),
            duration=dict(type='int', default=5),
            size=dict(type='int', default=65536),
            timeout=dict(type='int', default=120),
            min_gbits=dict(type='float', default=0),
            extra_args=dict(type='list', elements='str', default=[]),
            background=dict(type='bool', default=False),
            executable=dict(type='str', default='ib_write_bw'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p['background'] and p['server_address']:
        module.fail_json(msg='background applies to the server only: omit server_address or background',
                         mode='client', cmd=[], stdout='')
    binary = module.get_bin_path(p['executable'])
    if not binary:
        module.fail_json(msg='%s is not installed. Fix: install perftest (apt-get install perftest)' % p['executable'],
                         mode='client' if p['server_address'] else 'server', cmd=[], stdout='')
    cmd = [binary, '-d', p['device'], '-i', str(p['ib_port']), '-x', str(p['gid_index']), '-F', '--report_gbits',
           '-D', str(p['duration']), '-s', str(p['size']), '-p', str(p['tcp_port'])] + p['extra_args']
    mode = 'server'
    if p['server_address']:
        mode = 'client'
        cmd.append(p['server_address'])

    if mode == 'server' and p['background']:
        pid, out = spawn(module, cmd, p['timeout'])
        if pid is not None:
            module.exit_json(changed=False, mode=mode, cmd=cmd, stdout='', pid=pid)
        module.fail_json(msg='ib_write_bw server on %s (port %d) exited at start: %s'
                         % (p['device'], p['tcp_port'], out.strip()[-600:]), mode=mode, cmd=cmd, stdout=out)
    if mode == 'server':
        rc, out = run(cmd, p['timeout'])
        if rc is None:
            module.fail_json(msg='ib_write_bw server on %s (port %d) got no client within %d s'
                             % (p['device'], p['tcp_port'], p['timeout']), mode=mode, cmd=cmd, stdout=out)
        attempts = 1
    else:
        deadline = time.time() + p['timeout']
        attempts = 0
        while True:
            attempts += 1
            rc, out = run(cmd, p['duration'] + 60)
            if rc == 0 or rc is None or not is_connect_error(out) or time.time() >= deadline:
                break
            time.sleep(1)
    result = parse_ib_write_bw(out)
    if rc != 0 or result is None:
        if rc is None:
            why = 'did not finish in time'
        elif is_connect_error(out):
            why = 'could not reach the server at %s:%d within %d s (is the server running there?)' % (
                p['server_address'], p['tcp_port'], p['timeout'])
        else:
            why = 'exit %s without a result' % rc
        module.fail_json(msg='ib_write_bw %s on %s %s: %s' % (mode, p['device'], why, out.strip()[-600:]),
                         mode=mode, cmd=cmd, stdout=out, attempts=attempts)
    meets = p['min_gbits'] <= 0 or result['gbits_average'] >= p['min_gbits']
    if mode == 'client' and not meets:
        module.warn('RDMA write bandwidth from %s to %s is %.3f Gb/s, below %s Gb/s' % (
            p['device'], p['server_address'], result['gbits_average'], p['min_gbits']))
    module.exit_json(changed=False, mode=mode, cmd=cmd, stdout=out, attempts=attempts, meets_threshold=meets,
                     gbits_average=result['gbits_average'], gbits_peak=result['gbits_peak'],
                     msg_rate_mpps=result['msg_rate_mpps'], bytes=result['bytes'], iterations=result['iterations'])


if __name__ == '__main__':
    main()
