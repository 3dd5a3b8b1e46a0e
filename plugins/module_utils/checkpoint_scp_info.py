# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The reads of the checkpoint role's SCP mode (modules/checkpoint_scp_info.py), pure where they can be: the tools,
the copy key's files on the source, a target's host key, the receiving account's password state, whether the receiver
is as the role leaves it, the keys authorized on the target (as digests), the mount options."""

from __future__ import annotations

import hashlib
import os
import re
import stat

# What a mount holding the model directory should set (the copy makes neither setuid files nor devices).
MOUNT_OPTIONS = ('nosuid', 'nodev')


def missing_tools(paths):
    """The paths in ``paths`` that do not exist."""
    return [p for p in paths if not os.path.exists(p)]


def _owned_by_root_with_mode(path, mode, kind):
    """Whether ``path`` (not followed) is a ``kind`` (stat.S_ISDIR/S_ISREG) owned by root:root with ``mode``."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return kind(st.st_mode) and st.st_uid == 0 and st.st_gid == 0 and stat.S_IMODE(st.st_mode) == mode


def key_state(key_path):
    """The copy key on the source as the role's key tasks leave it: its directory root's 0700, the private key
    root's 0600, the public key's text (None when absent). ``ready``: nothing for those tasks to do."""
    directory = os.path.dirname(key_path)
    dir_ok = _owned_by_root_with_mode(directory, 0o700, stat.S_ISDIR)
    private_ok = _owned_by_root_with_mode(key_path, 0o600, stat.S_ISREG)
    public = None
    try:
        with open(key_path + '.pub', 'r') as f:
            public = f.read().strip() or None
    except (OSError, UnicodeDecodeError):
        public = None
    return {'dir_ok': dir_ok, 'private_ok': private_ok, 'public': public,
            'ready': bool(dir_ok and private_ok and public)}


def read_host_key(path):
    """The host key line (type and key, no comment), or None when it cannot be read."""
    try:
        with open(path, 'r') as f:
            fields = f.read().split()
    except (OSError, UnicodeDecodeError):
        return None
    return ' '.join(fields[:2]) if len(fields) >= 2 else None


def account_state(passwd_line, shadow_line):
    """From `getent passwd USER` and `getent shadow USER` (either '' when absent): whether the account exists and
    whether its password field is locked ("!..."). The password field itself is never returned."""
    exists = bool(passwd_line.strip())
    field = (shadow_line.strip().split(':') + ['', ''])[1] if shadow_line.strip() else ''
    return {'exists': exists, 'locked': exists and field.startswith('!')}


# An authorized_keys line's key: its type, then the base64 blob (options, when present, come before the type).
_KEY_RE = re.compile(r'(?:^|\s)((?:ssh|ecdsa-sha2|sk-ssh|sk-ecdsa-sha2)-[A-Za-z0-9@.-]+)\s+([A-Za-z0-9+/]+={0,2})(?:\s|$)')


def key_digest(blob):
    """The sha256 (hex) of a key's base64 blob as written: what the role compares, never the key itself."""
    return hashlib.sha256(blob.encode('ascii')).hexdigest()


def authorized_key_digests(text):
    """key_digest of every key in an authorized_keys text, in file order; comments and blank lines skipped."""
    digests = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        match = _KEY_RE.search(line)
        if match:
            digests.append(key_digest(match.group(2)))
    return digests


def read_authorized_key_digests(home):
    """authorized_key_digests of ``home``/.ssh/authorized_keys ([] when absent or unreadable)."""
    try:
        with open(os.path.join(home, '.ssh', 'authorized_keys'), 'r') as f:
            return authorized_key_digests(f.read())
    except (OSError, UnicodeDecodeError):
        return []


def passwd_fields(line):
    """`getent passwd USER`'s line as a dict (None when empty or malformed)."""
    fields = line.strip().split(':')
    if len(fields) != 7:
        return None
    return {'name': fields[0], 'uid': int(fields[2]) if fields[2].isdigit() else None,
            'gid': int(fields[3]) if fields[3].isdigit() else None, 'comment': fields[4], 'home': fields[5],
            'shell': fields[6]}


def not_owned(top, uid, gid, limit=5):
    """Up to ``limit`` entries under ``top`` (itself included, links not followed) not owned by uid:gid; one line
    saying so when ``top`` is absent or not a directory."""
    try:
        if not stat.S_ISDIR(os.lstat(top).st_mode):
            return ['%s is not a directory' % top]
    except OSError:
        return ['%s is absent' % top]
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        paths = [top] if dirpath == top else []
        paths += [os.path.join(dirpath, name) for name in dirnames + filenames]
        for path in paths:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if (st.st_uid, st.st_gid) != (uid, gid):
                found.append('%s is owned by %d:%d' % (path, st.st_uid, st.st_gid))
                if len(found) >= limit:
                    return found
    return found


def receiver_problems(account, locked, expected, group_gid, home_is_dir, hub_mode, model_dir_problems):
    """What keeps the receiver from being as the role's receiver tasks leave it ([] = nothing for them to do).
    ``account``: passwd_fields of the user (None when absent); ``expected``: home, comment, shell; ``group_gid``:
    the gid of the group named like the user (None when absent); ``hub_mode``: the hub directory's mode (None when
    it is not a directory); ``model_dir_problems``: not_owned of the model directory."""
    if account is None:
        return ['the receiving account is absent']
    problems = []
    if locked:
        problems.append('the receiving account is locked')
    if not home_is_dir:
        problems.append('its home directory is absent')
    for key in ('home', 'comment', 'shell'):
        if account[key] != expected[key]:
            problems.append('its %s is %r, not %r' % (key, account[key], expected[key]))
    if group_gid is None:
        problems.append('no group of its name')
    if hub_mode != 0o755:
        problems.append('the hub directory is %s' % ('absent' if hub_mode is None else oct(hub_mode)))
    return problems + model_dir_problems


def existing_ancestor(path):
    """``path`` or its nearest existing ancestor (findmnt --target needs an existing path)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and path != os.path.dirname(path):
        path = os.path.dirname(path)
    return path


def mount_state(findmnt_stdout):
    """From `findmnt --noheadings --output TARGET,OPTIONS --target PATH`: the mount point, its options and the
    options of MOUNT_OPTIONS it lacks when it is its own mount (not /). None when the output is not two fields."""
    fields = findmnt_stdout.split()
    if len(fields) != 2:
        return None
    target, options = fields[0], fields[1].split(',')
    lacking = [o for o in MOUNT_OPTIONS if o not in options] if target != '/' else []
    return {'target': target, 'options': options, 'lacking': lacking}


def mount_warning(node, mount, holding):
    """The warning for a mount that lacks nosuid,nodev ('' when none)."""
    if not mount or not mount['lacking']:
        return ''
    return ('%s: %s (holding %s) is mounted without %s. The copy makes neither setuid files nor devices, but the mount '
            'would honour them. Fix: add nosuid,nodev to its /etc/fstab line and remount.'
            % (node, mount['target'], holding, ','.join(mount['lacking'])))
