#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checkpoint_copy
short_description: Copy a Hugging Face model directory to another node in parallel rsync streams over SSH
version_added: 0.1.0
description:
  - Run on the checkpoint's source node. One rsync over SSH is bound by one SSH cipher stream on one core;
    this module splits the files into O(streams) buckets of similar size (largest file first, each into the
    least-filled bucket) and runs one C(rsync --files-from) per bucket at the same time.
  - First one C(--dry-run) pass with O(filters) lists what differs (one SSH login). When nothing does, the
    module reports no change and stops there. Otherwise only the files to send are bucketed (a resumed copy
    balances what is left). When the destination directory does not exist yet, one pass of directories only
    creates it first, because rsync's C(mkdir) of a missing destination fails when a parallel stream made it first.
    A last single rsync pass with O(filters) follows (the whole copy when
    O(streams=1)). It sends links and C(refs/main), sets the directories' times, and makes a second run
    report no change.
  - With C(--copy-links) (C(-L)) in O(rsync_options) the snapshot's links arrive as regular files and
    C(blobs/) is not listed (the role's layout for a receiver that munges symlinks); file sizes follow the links.
  - In check mode only the dry-run pass runs and lists what would be copied.
  - A stream that fails does not stop the others. The module then fails and names, per stream, rsync's exit
    meaning, its bucket and the last file it started; the partial file (C(--partial)) is resumed by the
    next run.
author:
  - dspark.cluster contributors (@dspark)
options:
  src:
    description: The model directory on this node (C(<cache>/hub/models--ORG--NAME)).
    type: path
    required: true
  dest:
    description: The rsync destination, C(user@address:path) (the path as the target's rrsync sees it).
    type: str
    required: true
  revision:
    description: The snapshot's 40-hex commit id; its snapshot, C(refs/main) and C(blobs/) are copied.
    type: str
    required: true
  streams:
    description: How many rsync processes copy at once. V(1) is a single rsync.
    type: int
    default: 4
  rsync_options:
    description: rsync options of every pass (for example C(--archive --sparse --partial --timeout=300)).
    type: list
    elements: str
    default: [--archive, --partial]
  filters:
    description: rsync filter rules of the final pass (the streams copy their explicit file lists).
    type: list
    elements: str
    default: []
  ssh_command:
    description: The ssh command line for rsync C(-e), without cipher and compression options.
    type: str
    default: ssh
  cipher:
    description:
      - OpenSSH cipher preference list (comma-separated) for every stream; compression is always off.
    type: str
    default: aes128-gcm@openssh.com,chacha20-poly1305@openssh.com
  connect_timeout:
    description: SSH C(ConnectTimeout) in seconds (TCP connect and handshake); V(0) leaves ssh's default.
    type: int
    default: 20
  alive_interval:
    description:
      - SSH C(ServerAliveInterval) in seconds; after 3 unanswered keepalives ssh ends the stream, so a dead
        peer stops it instead of hanging. V(0) sends none. rsync's C(--timeout) covers a silent peer.
    type: int
    default: 15
  retries:
    description:
      - How many more times a pass that failed on the network (rsync exit 10, 12, 30, 35 or ssh's 255, without
        a refused login, host key, cipher or rrsync refusal in its output) is started again, resuming its
        partial file (C(--partial)). Failed streams are retried together.
    type: int
    default: 2
  retry_delay:
    description: Seconds to wait before each retry.
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    description: Only the C(--dry-run) pass runs; it lists what would be copied and reports it as a change.
  diff_mode:
    support: none
    description: The itemized list of rsync is returned in RV(stdout_lines) instead of a diff.
"""

EXAMPLES = r"""
- name: Copy the snapshot in 4 streams
  dspark.cluster.checkpoint_copy:
    src: /var/lib/dspark/hf-cache/hub/models--org--name
    dest: root@192.168.100.1:models--org--name
    revision: 0123456789abcdef0123456789abcdef01234567
    streams: 4
    rsync_options: [--archive, --sparse, --partial, --timeout=300]
"""

RETURN = r"""
stdout_lines:
  description: rsync's itemized changes of every stream and the final pass (empty when nothing was copied).
  returned: always
  type: list
  elements: str
bytes_to_send:
  description: The bytes of the files the dry run found missing or different.
  returned: always
  type: int
streams:
  description: >-
    Per pass (dry run, directories when the destination is new, each stream, final pass), its name, number of files,
    bytes, exit status, attempts and seconds.
  returned: always
  type: list
  elements: dict
bytes:
  description: The bytes of the files selected for the copy.
  returned: always
  type: int
seconds:
  description: Wall time of the copy.
  returned: always
  type: float
"""

import os
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dspark.cluster.plugins.module_utils.checkpoint_copy import (
    DIRECTORIES_ONLY, balance, copies_links, creates_dest, diagnose, finish, list_files, rsync_argv, ssh_command, start,
    to_send, transient)


def run_with_retries(module, argvs, retries, delay):
    """Start every argv at once, wait for all, start the ones that failed on the network again (up to
    `retries` more rounds). Returns per argv (rc, stdout, stderr, attempts, seconds) of its last attempt;
    stdout holds the itemized lines of every attempt."""
    results = {}
    pending = list(range(len(argvs)))
    attempt = 0
    while pending:
        attempt += 1
        procs = [(i, time.monotonic(), start(argvs[i])) for i in pending]
        pending = []
        for i, t0, proc in procs:
            rc, out, err = finish(proc)
            previous = results[i][1] if i in results else ''
            results[i] = (rc, previous + out, err, attempt, round(time.monotonic() - t0, 3))
            if rc != 0 and attempt <= retries and transient(rc, err):
                pending.append(i)
        if pending:
            module.warn('checkpoint_copy: %d rsync pass(es) failed on the network (%s); attempt %d of %d in %d s'
                        % (len(pending), ', '.join('rc=%s' % results[i][0] for i in pending), attempt + 1,
                           retries + 1, delay))
            time.sleep(delay)
    return [results[i] for i in range(len(argvs))]


def run(module):
    p = module.params
    started = time.monotonic()
    try:
        ssh = ssh_command(p['ssh_command'], p['cipher'], p['connect_timeout'], p['alive_interval'])
    except ValueError as e:
        module.fail_json(msg='checkpoint_scp_cipher: %s. Fix: a list such as aes128-gcm@openssh.com,chacha20-poly1305@openssh.com.' % e)
    if p['streams'] < 1:
        module.fail_json(msg='streams=%s: at least 1. Fix: set checkpoint_scp_streams to 1 or more.' % p['streams'])
    if not os.path.isdir(p['src']):
        module.fail_json(msg='%s is not a directory on the source.' % p['src'])
    if p['retries'] < 0 or p['retry_delay'] < 0:
        module.fail_json(msg='retries=%s, retry_delay=%s: neither may be negative.' % (p['retries'], p['retry_delay']))
    files = list_files(p['src'], p['revision'], copy_links=copies_links(p['rsync_options']))
    sizes = dict(files)
    result = dict(changed=False, stdout_lines=[], streams=[], bytes=sum(sizes.values()), bytes_to_send=0, rc=0)
    failures = []

    def single_pass(name, dry_run, filters=()):
        t0 = time.monotonic()
        argv = rsync_argv(p['rsync_options'], ssh, p['src'], p['dest'], filters=list(filters) + p['filters'],
                          dry_run=dry_run)
        rc, out, err, attempts, dummy = run_with_retries(module, [argv], p['retries'], p['retry_delay'])[0]
        lines = [line for line in out.splitlines() if line.strip()]
        result['streams'].append(dict(name=name, files=len(files), rc=rc, attempts=attempts,
                                      seconds=round(time.monotonic() - t0, 3)))
        # A dry run's partial-transfer codes (a file in the way, a vanished source file) still list the work:
        # the real passes meet the same problem and report it with their bucket (check mode reports it here).
        if rc != 0 and not (dry_run and rc in (23, 24) and not module.check_mode):
            failures.append(diagnose(p['dest'], 'the ' + name, rc, err, None, lines))
        return lines

    # One SSH session finds what is missing or differs: a present checkpoint costs one login, as before.
    planned = single_pass('dry run', True)
    pending = to_send(planned, sizes)
    result['bytes_to_send'] = sum(size for dummy, size in pending)
    if module.check_mode or failures or not planned:
        result['stdout_lines'] = planned
    else:
        parallel = p['streams'] > 1 and len(pending) > 1
        if parallel and creates_dest(planned):
            result['stdout_lines'] += single_pass('directories', False, [DIRECTORIES_ONLY])
        if parallel and not failures:
            buckets = balance(pending, p['streams'])
            tmp = tempfile.mkdtemp(prefix='dspark-checkpoint-')
            try:
                argvs = []
                for i, bucket in enumerate(buckets):
                    listing = os.path.join(tmp, 'bucket-%d' % i)
                    with open(listing, 'wb') as f:
                        f.write(b''.join(path.encode('utf-8') + b'\0' for path in bucket['files']))
                    argvs.append(rsync_argv(p['rsync_options'], ssh, p['src'], p['dest'], files_from=listing))
                outcomes = run_with_retries(module, argvs, p['retries'], p['retry_delay'])
                for i, (bucket, (rc, out, err, attempts, seconds)) in enumerate(zip(buckets, outcomes)):
                    name = 'stream %d/%d' % (i + 1, len(buckets))
                    lines = [line for line in out.splitlines() if line.strip()]
                    result['stdout_lines'] += lines
                    result['streams'].append(dict(name=name, files=len(bucket['files']), bytes=bucket['bytes'], rc=rc,
                                                  attempts=attempts, seconds=seconds))
                    if rc != 0:
                        failures.append(diagnose(p['dest'], name, rc, err, bucket, lines))
            finally:
                shutil.rmtree(tmp)
        if not failures:
            # links, refs, directories and their times; everything when streams == 1
            result['stdout_lines'] += single_pass('final pass', False)

    result['seconds'] = round(time.monotonic() - started, 3)
    result['changed'] = bool(result['stdout_lines'])
    if failures:
        result['rc'] = 1
        module.fail_json(msg='The checkpoint copy was interrupted. ' + ' '.join(failures), **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            src=dict(type='path', required=True),
            dest=dict(type='str', required=True),
            revision=dict(type='str', required=True),
            streams=dict(type='int', default=4),
            rsync_options=dict(type='list', elements='str', default=['--archive', '--partial']),
            filters=dict(type='list', elements='str', default=[]),
            ssh_command=dict(type='str', default='ssh'),
            cipher=dict(type='str', default='aes128-gcm@openssh.com,chacha20-poly1305@openssh.com'),
            connect_timeout=dict(type='int', default=20),
            alive_interval=dict(type='int', default=15),
            retries=dict(type='int', default=2),
            retry_delay=dict(type='int', default=10),
        ),
        supports_check_mode=True,
    )
    run(module)


if __name__ == '__main__':
    main()
