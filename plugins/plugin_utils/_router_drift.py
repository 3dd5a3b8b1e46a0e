# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether HAProxy runs the configuration its files hold (issue #26 point 8, the router half).

A run that writes haproxy.cfg (or the TLS certificate file) and then dies before the `Reload HAProxy` handler leaves
HAProxy on the old configuration, and the next run's writes report no change, so its handler never runs. systemd's
times cannot tell: a reload re-executes HAProxy's master in place (same PID, same ActiveEnterTimestamp and
ExecMainStartTimestamp). So the router role records what HAProxy loaded: after every run that leaves HAProxy on the
current files, the SHA-256 of each file (none for a missing one) goes into a small JSON record on the node
(router_loaded_stamp). The next run compares that record with the files before it writes anything: a file that
differs, or no record at all, means HAProxy may run something else, and the role reloads it (graceful: the old
process finishes its streams). A HAProxy that is not running needs no reload (starting it reads the files). systemd's
NeedDaemonReload=yes (a drop-in written by a run that died before `daemon-reload`) asks for a daemon reload.

Pure Python, no I/O: the role feeds it ``systemctl show`` output, its ``ansible.builtin.stat`` loop results and the
``ansible.builtin.slurp`` result of the record (filters ``dspark.cluster.router_drift`` and
``dspark.cluster.router_loaded_stamp``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json

from ansible_collections.dspark.cluster.plugins.plugin_utils._dockerd_drift import properties

RUNNING = ("active", "reloading")
VERSION = 1


def checksums(stat_results):
    """The role's ``stat`` loop results (get_checksum, sha256) as {path: checksum, or None for a missing file}."""
    found = {}
    for result in stat_results or ():
        path = result.get("item")
        stat = result.get("stat") or {}
        if not path:
            raise ValueError("a stat result without its item (the path): %r" % (result,))
        if stat.get("exists") and not stat.get("checksum"):
            raise ValueError("the stat result of %s has no checksum: read it with get_checksum: true" % path)
        found[str(path)] = stat.get("checksum") if stat.get("exists") else None
    return found


def stamp(stat_results):
    """The record's text for these files: what HAProxy runs once this run's reload (if any) is done. ``stat_results``
    may also be {path: the file's wanted text, or None for no file}: the record a converged router holds (the role's
    read compares it, so a router whose record and files are all as wanted skips the writes)."""
    if isinstance(stat_results, dict):
        loaded = {str(path): None if text is None else hashlib.sha256(str(text).encode("utf-8")).hexdigest()
                  for path, text in stat_results.items()}
    else:
        loaded = checksums(stat_results)
    return json.dumps({"version": VERSION, "loaded": loaded}, sort_keys=True, indent=1) + "\n"


def _record(slurped):
    """The record as {path: checksum} from the slurp result, None when there is none, ValueError when unreadable."""
    if not isinstance(slurped, dict) or "content" not in slurped:
        return None
    try:
        text = base64.b64decode(slurped["content"], validate=True).decode("utf-8")
        record = json.loads(text)
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError):
        raise ValueError("unreadable") from None
    loaded = record.get("loaded") if isinstance(record, dict) else None
    if not isinstance(loaded, dict):
        raise ValueError("unreadable")
    return loaded


def _short(checksum):
    return "missing" if checksum is None else "sha256 %s" % str(checksum)[:12]


def drift(show_text, slurped, stat_results, stamp_path="the record"):
    """{'reload': why HAProxy must reload to run its files ('' when it does, or is not running),
    'daemon_reload': whether systemd still holds haproxy.service as it was before its unit files changed}."""
    unit = properties(show_text)
    out = {"reload": "", "daemon_reload": unit.get("NeedDaemonReload") == "yes"}
    if unit.get("ActiveState") not in RUNNING:
        return out
    files = checksums(stat_results)
    try:
        loaded = _record(slurped)
    except ValueError:
        out["reload"] = ("%s, the record of what HAProxy last loaded, is unreadable: reload so that HAProxy runs its files "
                         "and the record is written again" % stamp_path)
        return out
    if loaded is None:
        out["reload"] = ("there is no record of what HAProxy last loaded (%s; a run that changed its configuration may have "
                         "ended before its reload): reload once so that HAProxy runs its files" % stamp_path)
        return out
    changed = ["%s (loaded: %s, now: %s)" % (path, _short(loaded.get(path)), _short(checksum))
               for path, checksum in sorted(files.items()) if loaded.get(path) != checksum]
    if changed:
        out["reload"] = ("HAProxy runs an older configuration than its files hold: %s changed after its last reload (a run "
                         "wrote it and ended before reloading)" % "; ".join(changed))
    return out
