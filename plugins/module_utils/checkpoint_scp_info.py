# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The reads of the checkpoint role's SCP mode (modules/checkpoint_scp_info.py), pure where they can be: the tools,
the copy key's files on the source, a target's host key, the receiving account's password state, the mount options."""

from __future__ import annotations

import os
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
