"""Serving groups, their members and inventory variables, from ``ansible-inventory -i INV --list``.

A serving group is a child group of ``dspark``; its members are its hosts (nested children included) and
its head is the member with ``dspark_rank`` 0. The variables are the merged (untemplated) host variables
``ansible-inventory --list`` prints: what the playbooks will see, before templating. Members are ordered and the
head found by the collection's own group model (plugin_utils/_group_model.py), as every role and tp_ranks do.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess

from . import collection

PARENT_GROUP = "dspark"


class InventoryError(Exception):
    """The inventory cannot be read or has no serving groups (bad input: exit 2)."""


def list_inventory(inventory, project_dir, env, executable="ansible-inventory", timeout=300):
    """The JSON of ``ansible-inventory -i INVENTORY --list``, run in the project with its ansible.cfg."""
    argv = [executable, "-i", inventory, "--list"]
    try:
        proc = subprocess.run(argv, cwd=project_dir, env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InventoryError("cannot run %s: %s" % (" ".join(argv), exc)) from None
    if proc.returncode != 0:
        raise InventoryError("%s failed (rc %d): %s" % (" ".join(argv), proc.returncode,
                                                        (proc.stderr or proc.stdout).strip()[-2000:]))
    try:
        data = json.loads(proc.stdout)
    except ValueError as exc:
        raise InventoryError("%s printed no JSON: %s" % (" ".join(argv), exc)) from None
    if not isinstance(data, dict):
        raise InventoryError("%s printed %s, not a JSON object" % (" ".join(argv), type(data).__name__))
    return data


def _hosts_of(data, group, seen=None):
    seen = set() if seen is None else seen
    if group in seen:
        return []
    seen.add(group)
    entry = data.get(group) or {}
    hosts = list(entry.get("hosts") or [])
    for child in entry.get("children") or []:
        for host in _hosts_of(data, child, seen):
            if host not in hosts:
                hosts.append(host)
    return hosts


def group_model(project_dir=None):
    """The collection's plugin_utils._group_model (ImportError when the collection cannot be found)."""
    return collection.plugin_utils("_group_model", project_dir)


class Inventory:
    """The serving groups of one ``ansible-inventory --list`` document."""

    def __init__(self, data, parent=PARENT_GROUP, project_dir=None):
        self._model = group_model(project_dir)
        if parent not in data:
            raise InventoryError("the inventory has no group '%s' (the serving groups are its child groups)" % parent)
        self.hostvars = (data.get("_meta") or {}).get("hostvars") or {}
        self.groups = list((data.get(parent) or {}).get("children") or [])
        if not self.groups:
            raise InventoryError("group '%s' has no child groups: no serving group to work on" % parent)
        self.members = dict((g, _hosts_of(data, g)) for g in self.groups)
        self._data = data

    def hosts_of(self, group):
        """Every host of an inventory group (children included), [] when there is no such group."""
        return _hosts_of(self._data, group)

    def vars_of(self, host):
        return self.hostvars.get(host) or {}

    def rank(self, host):
        """The host's dspark_rank as an integer (the collection's one reading), None when unusable."""
        return self._model.as_int(self.vars_of(host).get("dspark_rank"))

    def ordered_members(self, group):
        """Members in rank order (members without a usable rank last, in inventory order): _group_model's order."""
        return self._model.members_by_rank(self.members.get(group) or [],
                                           lambda host: self.vars_of(host).get("dspark_rank"))

    def head(self, group):
        """The member with dspark_rank 0, None when no member has it."""
        for host in self.members.get(group) or []:
            if self.rank(host) == 0:
                return host
        return None

    def head_var(self, group, name):
        head = self.head(group)
        if head is None:
            return None
        value = self.vars_of(head).get(name)
        return value if isinstance(value, (str, int, float)) or value is None else json.dumps(value, sort_keys=True)

    def member_vars(self, group):
        """{host: its variables} of every member: the inventory part of the group's inputs fingerprint."""
        return dict((host, self.vars_of(host)) for host in self.members.get(group) or [])

    def select(self, patterns):
        """The serving groups matching any of `patterns` (names or fnmatch patterns), in inventory order.

        Raises InventoryError naming every pattern that matches no serving group.
        """
        if not patterns:
            return list(self.groups)
        unknown = [p for p in patterns if not any(fnmatch.fnmatchcase(g, p) for g in self.groups)]
        if unknown:
            raise InventoryError("no serving group matches %s (serving groups: %s)" % (
                ", ".join(repr(p) for p in unknown), ", ".join(self.groups)))
        return [g for g in self.groups if any(fnmatch.fnmatchcase(g, p) for p in patterns)]


def split_patterns(values):
    """['a,b', 'c'] -> ['a', 'b', 'c'] (comma-separated or repeated --groups)."""
    out = []
    for value in values or []:
        for part in value.split(","):
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return out


def inventory_path(path, cwd=None):
    """Absolute path of an inventory source that exists (a file or a directory)."""
    full = os.path.abspath(os.path.join(cwd or os.getcwd(), os.path.expanduser(path)))
    if not os.path.exists(full):
        raise InventoryError("inventory %s does not exist" % path)
    if not os.access(full, os.R_OK):
        raise InventoryError("inventory %s is not readable" % path)
    return full
