# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A file as a role's write would compare it: its content digest, mode and owner. The reading modules return it for
files that hold no secret, so that a converged node skips the write (issue #40)."""

from __future__ import annotations

import hashlib
import os
import stat


def file_record(path, follow=False):
    """A regular file's content sha256 (hex), octal mode, uid and gid; None when it is absent, unreadable or not a
    regular file. Links are followed only with ``follow`` (as copy writes through a link to the file)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        digest = hashlib.sha256()
        with open(path, 'rb') as f:
            for chunk in iter(lambda: f.read(1 << 20), b''):
                digest.update(chunk)
    except (IOError, OSError):
        return None
    return {'sha256': digest.hexdigest(), 'mode': '%04o' % stat.S_IMODE(st.st_mode), 'uid': st.st_uid, 'gid': st.st_gid}
