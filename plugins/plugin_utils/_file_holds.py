"""Whether a file as a reading module recorded it (module_utils.file_state.file_record, or its sha256 and mode) already
holds what a role's write would put there: the one comparison behind every write a converged node skips (issue #40)."""

from __future__ import annotations

import hashlib


def holds(record, text, mode, uid=None, gid=None):
    """True when ``record`` (None: absent) has ``text``'s sha256 and ``mode``, and ``uid``/``gid`` where given."""
    if not isinstance(record, dict):
        return False
    want = {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "mode": mode}
    if uid is not None:
        want["uid"] = uid
    if gid is not None:
        want["gid"] = gid
    return all(record.get(key) == value for key, value in want.items())
