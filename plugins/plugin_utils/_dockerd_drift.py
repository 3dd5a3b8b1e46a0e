# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether dockerd runs on the configuration its files hold (issue #13 point 5, the docker_runtime half).

A run that writes daemon.json, the proxy drop-in or its environment file and then dies before the `Restart dockerd`
handler leaves the engine on the old settings, and the next run's writes report no change. So the role asks the
node's state instead of a handler: dockerd is stale when systemd says its unit files changed since they were loaded
(NeedDaemonReload, e.g. a drop-in written or removed), or when one of the files is newer than the moment the
service last became active. Both times come from the node's own clock. Pure Python, no I/O: the role feeds it
``systemctl show --timestamp=us+utc`` and the files' ``stat``, both read by module
``dspark.cluster.docker_runtime_info`` in the shape of a ``stat`` loop's results (filter
``dspark.cluster.dockerd_restart_reason``).
"""

from __future__ import annotations

import datetime

# systemctl show --timestamp=us+utc prints e.g. "Tue 2026-12-01 05:41:01.123456 UTC" (systemd >= 248).
_STAMP = "%Y-%m-%d %H:%M:%S.%f"


def properties(show_text):
    """KEY=VALUE lines of ``systemctl show`` as a dict (values may contain '=')."""
    found = {}
    for line in (show_text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            found[key.strip()] = value.strip()
    return found


def epoch(stamp):
    """Seconds since the epoch of a ``--timestamp=us+utc`` value; None when systemd printed none ("" or "n/a")."""
    text = (stamp or "").strip()
    if text in ("", "n/a"):
        return None
    parts = text.split()
    try:
        if len(parts) != 4 or parts[3] != "UTC":
            raise ValueError(text)
        moment = datetime.datetime.strptime("%s %s" % (parts[1], parts[2]), _STAMP)
    except ValueError:
        raise ValueError("not a systemd timestamp printed with --timestamp=us+utc: %r" % text) from None
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


def newer_files(started, stats):
    """Paths of the existing files in ``stats`` ({"path", "exists", "mtime"} each) changed after ``started``."""
    return [entry["path"] for entry in stats if entry.get("exists") and float(entry["mtime"]) > started]


def restart_reason(show_text, stats):
    """Why dockerd must restart to run what its files hold ("" when it already does, or is not running)."""
    unit = properties(show_text)
    if unit.get("ActiveState") != "active":
        # Not running: the role's start step reads the files as they are.
        return ""
    if unit.get("NeedDaemonReload") == "yes":
        return "systemd still holds docker.service as it was before its unit files or drop-ins last changed"
    started = epoch(unit.get("ActiveEnterTimestamp"))
    if started is None:
        return ""
    newer = newer_files(started, stats)
    if newer:
        return "dockerd has run since %s UTC, before %s last changed" % (
            datetime.datetime.fromtimestamp(started, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
            ", ".join(newer))
    return ""


def from_stat_results(results):
    """The role's registered ``stat`` loop results as {"path", "exists", "mtime"} entries."""
    stats = []
    for result in results or ():
        stat = result.get("stat") or {}
        stats.append({"path": result.get("item"), "exists": bool(stat.get("exists")), "mtime": stat.get("mtime", 0)})
    return stats
