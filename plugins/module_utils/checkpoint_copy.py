# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint role's SCP copy in parallel streams: the file list, its buckets, the rsync command lines and
the diagnosis of a stream that stopped, and starting the rsync processes (no AnsibleModule), run on the source node."""

from __future__ import annotations

import os
import re
import subprocess

# rsync(1) EXIT VALUES, the ones a copy over SSH can end with.
RSYNC_EXIT = {
    1: 'syntax or usage error (an option the remote rsync or rrsync refuses)',
    2: 'protocol incompatibility',
    3: 'errors selecting input/output files or directories',
    5: 'error starting the client-server protocol (rrsync refused the command?)',
    10: 'error in socket I/O',
    11: 'error in file I/O (disk full on the target?)',
    12: 'error in the rsync protocol data stream (the connection dropped)',
    13: 'errors with program diagnostics',
    20: 'received SIGUSR1 or SIGINT (interrupted)',
    23: 'partial transfer due to error',
    24: 'partial transfer due to vanished source files',
    30: 'timeout in data send/receive (--timeout)',
    35: 'timeout waiting for daemon connection',
    255: 'ssh failed (connection, key, host key or cipher)',
}

CIPHER_RE = re.compile(r'^[A-Za-z0-9@._-]+(,[A-Za-z0-9@._-]+)*$')


def copies_links(options):
    """Whether rsync `options` dereference symlinks (--copy-links / -L in a short-option cluster)."""
    for opt in options:
        if opt == '--copy-links' or (opt.startswith('-') and not opt.startswith('--') and 'L' in opt[1:]):
            return True
    return False


def list_files(model_dir, revision, copy_links=False):
    """The files the copy moves, as (path relative to model_dir, bytes), sorted by path.

    Same selection as the role's rsync filters: refs/main, the revision's snapshot and every blob. Symlinks
    count as 0 bytes (rsync sends the link, not its target); directories are implied by their files.
    With `copy_links` (rsync --copy-links: the snapshot's links arrive as regular files, blobs/ is not sent)
    a link counts its referent's bytes and blobs/ is left out.
    """
    out = []
    roots = ['refs/main', 'snapshots/%s' % revision] + ([] if copy_links else ['blobs'])

    def size_of(path):
        if not os.path.islink(path):
            return os.lstat(path).st_size
        if not copy_links:
            return 0
        try:
            return os.stat(path).st_size
        except OSError:  # dangling: rsync reports it, the manifest check names it
            return 0

    for root in roots:
        top = os.path.join(model_dir, root)
        if os.path.islink(top) or os.path.isfile(top):
            out.append((root, size_of(top)))
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in filenames:
                full = os.path.join(dirpath, name)
                out.append((os.path.relpath(full, model_dir), size_of(full)))
            # symlinked directories are not descended (os.walk default) but rsync -a sends them as links
            for name in list(dirnames):
                full = os.path.join(dirpath, name)
                if os.path.islink(full):
                    out.append((os.path.relpath(full, model_dir), 0))
    return sorted(out)


ITEMIZED_RE = re.compile(r'^[<>ch.*][fdLDS][^ ]{9} (.+)$')


def to_send(itemized, sizes):
    """The files a dry run says must be sent (itemize lines '<f...', '>f...' for a local copy), as (path, bytes).

    `sizes` maps path -> source bytes (list_files); a path not in it (outside the list) counts 0 bytes.
    Directories, links and other lines are left to the final single pass.
    """
    out = []
    for line in itemized:
        m = ITEMIZED_RE.match(line)
        if m and line[:2] in ('<f', '>f'):
            out.append((m.group(1), sizes.get(m.group(1), 0)))
    return out


# rsync creates a missing destination directory with a plain mkdir and stops (rc 11, "File exists") when a
# parallel stream made it first; deeper directories are created race-free. A directories-only pass goes first.
DIRECTORIES_ONLY = '--filter=-! */'


def creates_dest(itemized):
    """True when a dry run's output says the destination directory itself does not exist yet."""
    return any(line.startswith('created directory ') for line in itemized)


def balance(files, streams):
    """Split (path, bytes) pairs into at most `streams` buckets of similar total size.

    Largest file first, each into the bucket with the fewest bytes so far (ties: the fewest files, then the
    lowest index). Deterministic for the same input. Empty buckets are dropped, so fewer files than streams
    gives one bucket per file. Returns a list of {'files': [paths in rsync order], 'bytes': total}.
    """
    streams = int(streams)
    if streams < 1:
        raise ValueError('streams must be at least 1, got %r' % streams)
    buckets = [{'files': [], 'bytes': 0} for dummy in range(streams)]
    for path, size in sorted(files, key=lambda f: (-int(f[1]), f[0])):
        target = min(range(streams), key=lambda i: (buckets[i]['bytes'], len(buckets[i]['files']), i))
        buckets[target]['files'].append(path)
        buckets[target]['bytes'] += int(size)
    for b in buckets:
        b['files'].sort()
    return [b for b in buckets if b['files']]


def ssh_command(base, cipher, connect_timeout=None, alive_interval=None, alive_count=3):
    """The rsync -e command: the role's ssh options, the cipher preference list, no compression.

    `connect_timeout` (s) bounds the TCP connect and SSH handshake; `alive_interval` (s) sends SSH keepalives
    and gives up after `alive_count` unanswered ones, so a dead peer ends the stream (ssh rc 255) instead of
    hanging it (rsync's own --timeout covers a silent rsync on a live connection).
    """
    if not CIPHER_RE.match(cipher or ''):
        raise ValueError('cipher %r is not an OpenSSH cipher list (comma-separated names)' % cipher)
    cmd = '%s -o Ciphers=%s -o Compression=no' % (' '.join(base.split()), cipher)
    if connect_timeout:
        cmd += ' -o ConnectTimeout=%d' % int(connect_timeout)
    if alive_interval:
        cmd += ' -o ServerAliveInterval=%d -o ServerAliveCountMax=%d' % (int(alive_interval), int(alive_count))
    return cmd


# rsync exit codes worth another attempt: the connection or the peer went away or stalled (--partial keeps the
# work done). A refused login, an unknown host key or cipher, rrsync's refusal or a usage error are not.
TRANSIENT_RC = (10, 12, 30, 35, 255)
PERMANENT_SIGNS = ('Permission denied', 'Host key verification failed', 'no matching cipher',
                   'already accessing this directory', 'has been disabled on this server', 'Could not resolve hostname',
                   'REMOTE HOST IDENTIFICATION HAS CHANGED', 'No space left on device')


def transient(rc, stderr):
    """Whether a pass that ended with `rc` and `stderr` may succeed when simply run again."""
    return rc in TRANSIENT_RC and not any(s in (stderr or '') for s in PERMANENT_SIGNS)


def rsync_argv(options, ssh, src, dest, files_from=None, filters=(), dry_run=False):
    """One rsync command line. With files_from, the stream copies exactly that list (NUL-separated file);
    without, it is the role's single full pass with its filters."""
    argv = ['rsync'] + list(options)
    if dry_run:
        argv.append('--dry-run')
    argv += ['--itemize-changes', '-e', ssh]
    if files_from:
        argv += ['--from0', '--files-from=%s' % files_from]
    else:
        argv += list(filters)
    return argv + [src.rstrip('/') + '/', dest.rstrip('/') + '/']


SSH_FAILURES = ('ssh: ', 'Permission denied', 'Host key verification failed', 'no matching cipher',
                'Connection closed by', 'Connection refused', 'Connection timed out', 'No route to host',
                'Could not resolve hostname')


def start(argv):
    """Start one rsync without waiting (the streams run at once: AnsibleModule.run_command blocks)."""
    # run_command blocks until its one command ends: the streams must run at once
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                            stdin=subprocess.DEVNULL)


def finish(proc):
    """Wait for a started rsync: (rc, stdout, stderr) as text."""
    out, err = proc.communicate()
    return proc.returncode, out.decode('utf-8', 'replace'), err.decode('utf-8', 'replace')


def diagnose(dest, label, rc, stderr, bucket, itemized=()):
    """One paragraph for a pass that ended with rc != 0: what stopped, what is kept, how to go on.

    `label` names the pass ('stream 2/4', 'the dry run', 'the final pass'). rsync reports a failed SSH login
    as a protocol error (rc 12), so ssh's own words in stderr decide the advice.
    """
    stderr = stderr or ''
    what = RSYNC_EXIT.get(rc, 'exit status %s' % rc) if rc >= 0 else 'killed by signal %d' % -rc
    started = [line.split(' ', 1)[1] for line in itemized if ' ' in line and line[:1] in '<>c']
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    text = '%s: %s stopped: rsync %s (rc=%s).' % (dest, label, what, rc)
    if bucket is not None:
        text += ' Its bucket: %d file(s), %s bytes' % (len(bucket['files']), bucket['bytes'])
        if started:
            text += '; last started: %s' % started[-1]
        text += '.'
    if lines:
        text += ' rsync said: %s.' % ' | '.join(lines[-3:])
    if 'no matching cipher' in stderr:
        text += (' Fix: set checkpoint_scp_cipher to a cipher both ends support '
                 '(ssh -Q cipher on the source, sshd -T | grep ciphers on the target).')
    elif 'already accessing this directory' in stderr:
        text += (' Fix: another copy into this cache is running (rrsync\'s lock); wait for it, or the key lacks'
                 ' -no-lock for parallel streams: run the playbook again to rewrite it.')
    elif rc == 255 or any(s in stderr for s in SSH_FAILURES):
        text += (' The SSH login failed: nothing was copied by this pass. Fix: check that the target is reachable'
                 ' on the fabric, its sshd running and its host key in the known_hosts file, then run the'
                 ' playbook again.')
    else:
        text += (' Files copied whole are kept and an interrupted one stays as a partial file (--partial): '
                 'run the playbook again to resume; the manifest check runs after the copy.')
    return text
