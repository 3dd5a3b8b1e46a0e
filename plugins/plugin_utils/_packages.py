# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How every role of the collection installs distribution packages (the action dspark.cluster.packages).

One attempt from the node's current package lists; when it fails, the lists are refreshed once and the install
tried again. Package lists that look fresh can still lack a package: an image whose lists were emptied at build time
(their directory's mtime is recent, so a cache_valid_time skips the update), a trimmed image, a new mirror, lists
that name a version the mirror no longer holds. Installed packages cost no refresh at all. Check mode cannot refresh
the lists, so a package they lack is reported as what a real run would do, not as a failure. Pure logic here; the
action runs ansible.builtin.apt.
"""

from __future__ import annotations

APT = "ansible.builtin.apt"


def apt_args(names, install_recommends=None, refresh=False):
    """The arguments of one ansible.builtin.apt run."""
    args = {"name": list(names), "state": "present"}
    if install_recommends is not None:
        args["install_recommends"] = bool(install_recommends)
    if refresh:
        args["update_cache"] = True
    return args


def names_problem(names):
    """Why ``names`` is not a list of package names, else None."""
    if not isinstance(names, list) or not names:
        return "name must be a non-empty list of package names, got %r" % (names,)
    bad = [n for n in names if not isinstance(n, str) or not n.strip() or any(c.isspace() for c in n) or n.startswith("-")]
    if bad:
        return "name holds %s: each entry must be one package name (no spaces, no leading '-')" % ", ".join(repr(b) for b in bad)
    return None


def failed(result):
    """Whether an apt run failed on the node (an unreachable node is not a failed install: returned as it is)."""
    return bool(result.get("failed")) and not result.get("unreachable")


def check_mode_plan(names, first):
    """What check mode reports when the current lists cannot install ``names``: changed, not failed."""
    return {"changed": True, "refreshed": False,
            "msg": "would refresh the package lists and install %s (the current lists cannot: %s)"
                   % (", ".join(names), _short(first.get("msg")))}


def failure(names, first, second):
    """The result when the install failed even after a refresh: both reasons, and what to do."""
    return {"failed": True, "changed": bool(second.get("changed")), "refreshed": True,
            "msg": "could not install %s: %s (before the refresh of the package lists: %s). Fix: check the node's apt "
                   "sources and its access to the mirror (`apt-get update` on the node says which source fails)"
                   % (", ".join(names), _short(second.get("msg")), _short(first.get("msg")))}


def _short(text, limit=300):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
