"""Inputs fingerprint of a serving group: what a converged run depended on, as one sha256.

fingerprint = sha256 over (canonical JSON of)
  - the group's name, members and every member's inventory variables (``ansible-inventory --list``);
  - the extra vars as given (an ``@file`` counts by its content);
  - the tags (``--tags``);
  - the collection's code: the content of site.yml, playbooks/, roles/ and plugins/.

Only hashes leave this module: the report never holds a variable's value.
"""

from __future__ import annotations

import hashlib
import json
import os

CODE_PATHS = ("site.yml", "playbooks", "roles", "plugins")
SKIP_DIRS = ("__pycache__", ".pytest_cache")
SKIP_SUFFIXES = (".pyc", ".pyo", ".swp", "~")


class ExtraVarsError(Exception):
    """An ``-e @file`` that cannot be read (bad input: exit 2)."""


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=True)


def code_files(project_dir, paths=CODE_PATHS):
    """Relative POSIX paths of the code files, sorted (symlinked directories are not followed)."""
    found = []
    for top in paths:
        full = os.path.join(project_dir, top)
        if os.path.isfile(full):
            found.append(top)
            continue
        for root, dirs, files in os.walk(full):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for name in files:
                if name.endswith(SKIP_SUFFIXES):
                    continue
                rel = os.path.relpath(os.path.join(root, name), project_dir)
                found.append(rel.replace(os.sep, "/"))
    return sorted(found)


def code_digest(project_dir, paths=CODE_PATHS):
    """sha256 over every code file's path and content."""
    digest = hashlib.sha256()
    for rel in code_files(project_dir, paths):
        digest.update(rel.encode("utf-8") + b"\0")
        with open(os.path.join(project_dir, rel), "rb") as handle:
            digest.update(_sha256(handle.read()).encode("ascii") + b"\0")
    return digest.hexdigest()


def extra_vars_digest(values, cwd=None):
    """sha256 over the ``-e`` values in order; ``@file`` by its content (unreadable -> ExtraVarsError)."""
    parts = []
    for value in values or []:
        if value.startswith("@"):
            path = os.path.join(cwd or os.getcwd(), os.path.expanduser(value[1:]))
            try:
                with open(path, "rb") as handle:
                    parts.append("@sha256:" + _sha256(handle.read()))
            except OSError as exc:
                raise ExtraVarsError("extra vars file %s: %s" % (value[1:], exc.strerror or exc)) from None
        else:
            parts.append("=" + value)
    return _sha256(canonical(parts).encode("utf-8"))


def group_fingerprint(group, member_vars, extra_digest, tags, code):
    """'sha256:<hex>' of one group's inputs."""
    payload = {"group": group, "members": member_vars, "extra_vars": extra_digest, "tags": tags or None,
               "code": code}
    return "sha256:" + _sha256(canonical(payload).encode("utf-8"))
