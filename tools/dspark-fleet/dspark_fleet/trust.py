"""Refuse to supervise from paths that someone else can change (issue #26 point 3).

`dspark-fleet watch` runs as a service: every round it runs ansible-playbook from the checkout, with the venv's
Python, on the inventory's hosts, and the playbooks become root on every node. Whoever can write any of those
files runs code as the service user on the controller and as root on the nodes. So before anything runs (before
even `ansible-inventory`, whose inventory plugins and vars are code too), `check()` looks at:

- the checkout: the project directory itself, and recursively ``ansible.cfg``, ``site.yml``, ``playbooks/``,
  ``roles/``, ``plugins/``, ``meta/``, ``collections/`` and the directories Ansible loads from next to a playbook
  (``library/``, ``module_utils/``, ``*_plugins/``, ``group_vars/``, ``host_vars/``) where they exist;
- the code of dspark-fleet itself (this package's directory);
- the venv (``sys.prefix``, recursively) and the Python it was made from (the interpreter and its standard library);
- the inventory: a directory recursively, a file with the ``group_vars/`` and ``host_vars/`` beside it;
- the vault password file: a regular file, mode 0600 or 0400 (no execute bit: Ansible would run it).

Every one of those paths, every directory above it up to ``/``, and every symbolic link on the way (and the target's
directories) must be owned by root or by the user the supervisor runs as, and be writable by nobody else: no group
or world write bit. One exception, for parents only: a world-writable directory with the sticky bit (``/tmp``)
owned by root or the service user, since nobody else can replace what is in it (the child must then be owned by a
trusted user, which is checked anyway).

There is no option to turn this off: the fix is always a ``chown`` or ``chmod`` (named in the message), and an
option would be one more line an attacker only has to add to the unit. ACLs are seen through the mode's group bits
(a named user or group with write access sets the ACL mask's write bit).

``check()`` is pure apart from the injected ``lstat``, ``listdir`` and ``readlink`` (tests fake ownership).
"""

from __future__ import annotations

import os
import pwd
import grp
import stat as stat_mod
import sys
from dataclasses import dataclass

EXIT_UNTRUSTED = 3
MAX_LINES = 20

CHECKOUT_ENTRIES = ("ansible.cfg", "site.yml", "playbooks", "roles", "plugins", "meta", "collections", "library",
                    "module_utils", "action_plugins", "become_plugins", "cache_plugins", "callback_plugins",
                    "cliconf_plugins", "connection_plugins", "filter_plugins", "httpapi_plugins",
                    "inventory_plugins", "lookup_plugins", "netconf_plugins", "shell_plugins", "strategy_plugins",
                    "terminal_plugins", "test_plugins", "vars_plugins", "group_vars", "host_vars")
REQUIRED_CHECKOUT = ("ansible.cfg",)
INVENTORY_SIDES = ("group_vars", "host_vars")

NODE, TREE, SECRET = "node", "tree", "secret"
MISSING = "does not exist"


@dataclass(frozen=True)
class Finding:
    path: str
    what: str            # the checkout, the venv, the inventory, the vault password file, ...
    problem: str
    owner: str
    mode: str
    fix: str

    def line(self):
        return "%s: %s %s (owner %s, mode %s); fix: %s" % (self.what, self.path, self.problem, self.owner, self.mode,
                                                           self.fix)


def _name(lookup, ident):
    try:
        return lookup(ident)
    except (KeyError, OverflowError):
        return str(ident)


class Checker:
    """Checks paths for a service user `uid` (default: this process's effective uid); root is always trusted."""

    def __init__(self, uid=None, lstat=os.lstat, listdir=os.listdir, readlink=os.readlink, user_name=None,
                 group_name=None):
        self.uid = os.geteuid() if uid is None else uid
        self.trusted = {0, self.uid}
        self.lstat = lstat
        self.listdir = listdir
        self.readlink = readlink
        self.user_name = user_name or (lambda u: _name(lambda i: pwd.getpwuid(i).pw_name, u))
        self.group_name = group_name or (lambda g: _name(lambda i: grp.getgrgid(i).gr_name, g))
        self.findings = []
        self.walked = set()      # real paths of directories checked recursively (or being checked)
        self.roots = set()       # real paths named by the caller (a link to one is not walked again)
        self.seen = set()        # (path, what) already reported or checked as a node

    # ------------------------------------------------------------------ reporting

    def service_user(self):
        return "root" if self.uid == 0 else self.user_name(self.uid)

    def _owner(self, st):
        return "%s:%s" % (self.user_name(st.st_uid), self.group_name(st.st_gid))

    def _add(self, path, st, what, problem, fix):
        key = (path, problem)
        if key in self.seen:
            return
        self.seen.add(key)
        self.findings.append(Finding(path, what, problem,
                                     self._owner(st) if st is not None else "-",
                                     "%04o" % stat_mod.S_IMODE(st.st_mode) if st is not None else "-", fix))

    def _owner_ok(self, path, st, what):
        if st.st_uid in self.trusted:
            return True
        users = "root" if self.uid == 0 else "root or %s" % self.service_user()
        self._add(path, st, what, "is owned by %s, not by %s" % (self.user_name(st.st_uid), users),
                  "chown %s %s (and make sure its content is what you expect)" % (
                      "root" if self.uid == 0 else "root (or %s)" % self.service_user(), path))
        return False

    def _entry(self, path, st, what, parent=False):
        """Owner and write bits of one directory entry (not followed)."""
        if not self._owner_ok(path, st, what):
            return
        if stat_mod.S_ISLNK(st.st_mode):
            return               # a link's own mode means nothing; its owner and target are checked
        mode = stat_mod.S_IMODE(st.st_mode)
        writable = mode & 0o022
        if not writable:
            return
        if parent and stat_mod.S_ISDIR(st.st_mode) and mode & stat_mod.S_ISVTX:
            return               # /tmp-like: nobody can replace what a trusted user put there
        who = "its group and everyone" if writable == 0o022 else "its group" if writable == 0o020 else "everyone"
        self._add(path, st, what, "is writable by %s" % who, "chmod go-w %s" % path)

    # ------------------------------------------------------------------ paths

    def _lstat(self, path):
        try:
            return self.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _Unreadable(path, exc) from None

    def chain(self, path, what, depth=0):
        """Check every directory from / down to `path` and `path` itself, following links (each link's owner, then
        its target's chain). Returns (real path, lstat of it) or (path, None) when it does not exist."""
        if depth > 40:
            self._add(path, None, what, "has too many levels of symbolic links", "point it at a real path")
            return path, None
        current = "/"
        st = self._lstat("/")
        self._entry("/", st, what, parent=True)
        parts = [p for p in os.path.normpath(path).split("/") if p]
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            candidate = os.path.join(current, part)
            st = self._lstat(candidate)
            if st is None:
                return os.path.join(candidate, *parts[index + 1:]), None
            if stat_mod.S_ISLNK(st.st_mode):
                self._entry(candidate, st, what, parent=not last)
                target = os.path.normpath(os.path.join(current, self.readlink(candidate)))
                current, st = self.chain(target, what, depth + 1)
                if st is None:
                    return os.path.join(current, *parts[index + 1:]), None
            else:
                self._entry(candidate, st, what, parent=not last)
                current = candidate
        return current, st

    def tree(self, real, what):
        """Check everything under the directory `real` (a real path), following links out of it."""
        if real in self.walked:
            return
        self.walked.add(real)
        pending = [real]
        while pending:
            directory = pending.pop()
            try:
                names = sorted(self.listdir(directory))
            except OSError as exc:
                raise _Unreadable(directory, exc) from None
            for name in names:
                path = os.path.join(directory, name)
                st = self._lstat(path)
                if st is None:
                    continue     # gone meanwhile
                self._entry(path, st, what)
                if stat_mod.S_ISLNK(st.st_mode):
                    target, tst = self.chain(os.path.join(directory, self.readlink(path)), what)
                    if tst is not None and stat_mod.S_ISDIR(tst.st_mode) and not self._covered(target):
                        self.tree(target, what)
                elif stat_mod.S_ISDIR(st.st_mode):
                    if path not in self.walked:
                        self.walked.add(path)
                        pending.append(path)

    def _covered(self, real):
        if real in self.roots:
            return True
        path = real
        while True:
            if path in self.walked:
                return True
            parent = os.path.dirname(path)
            if parent == path:
                return False
            path = parent

    def check(self, path, what, kind=NODE, required=True):
        """Check `path` as a NODE (itself and its parents), a TREE (and everything under it) or a SECRET (a vault
        password file: also 0600/0400)."""
        path = os.path.abspath(path)
        real, st = self.chain(path, what)
        if st is None:
            if required:
                self._add(path, None, what, MISSING, "create it, or name the right path")
            return
        self.roots.add(real)
        if kind == TREE and stat_mod.S_ISDIR(st.st_mode):
            self.tree(real, what)
        elif kind == SECRET:
            mode = stat_mod.S_IMODE(st.st_mode)
            if not stat_mod.S_ISREG(st.st_mode):
                self._add(path, st, what, "is not a regular file", "make it a file, mode 0600")
            elif mode & 0o177 or not mode & 0o400:
                self._add(path, st, what, "must be mode 0600 or 0400 (nobody else may read it; an executable "
                          "one would be run by Ansible)", "chmod 0600 %s" % path)


class _Unreadable(Exception):
    def __init__(self, path, exc):
        super().__init__("%s: %s" % (path, exc))
        self.path = path
        self.exc = exc


def python_paths():
    """(path, what, kind) of the venv (or, outside a venv, the packages) and the interpreter the watch runs on."""
    out = []
    if sys.prefix != sys.base_prefix:
        out.append((sys.prefix, "the venv", TREE))
    else:
        import ansible  # pylint: disable=import-outside-toplevel
        import ansible_runner  # pylint: disable=import-outside-toplevel
        for module in (ansible, ansible_runner):
            out.append((os.path.dirname(os.path.abspath(module.__file__)), "the Python packages", TREE))
    out.append((os.path.realpath(sys.executable), "the Python interpreter", NODE))
    out.append((os.path.dirname(os.path.abspath(os.__file__)), "the Python standard library", TREE))
    return out


def watch_paths(project_dir, inventory, vault_files=(), python=None, package_dir=None, exists=os.path.lexists):
    """Every (path, what, kind) the supervisor depends on."""
    out = [(project_dir, "the checkout", NODE)]
    for entry in CHECKOUT_ENTRIES:
        path = os.path.join(project_dir, entry)
        if entry in REQUIRED_CHECKOUT or exists(path):
            out.append((path, "the checkout", TREE))
    out.append((package_dir or os.path.dirname(os.path.abspath(__file__)), "the dspark-fleet code", TREE))
    out += python_paths() if python is None else python
    if os.path.isdir(inventory):
        out.append((inventory, "the inventory", TREE))
    else:
        out.append((inventory, "the inventory", NODE))
        for side in INVENTORY_SIDES:
            path = os.path.join(os.path.dirname(inventory), side)
            if exists(path):
                out.append((path, "the inventory", TREE))
    for path in vault_files:
        out.append((path, "the vault password file", SECRET))
    return out


def check(paths, checker=None):
    """Findings for [(path, what, kind)], in order; a path that cannot be read is one finding."""
    checker = checker or Checker()
    for path, what, kind in paths:
        try:
            checker.check(path, what, kind)
        except _Unreadable as exc:
            checker.findings.append(Finding(exc.path, what, "cannot be read (%s)" % exc.exc.strerror, "-", "-",
                                            "let %s read it, or run as its owner" % checker.service_user()))
    return checker.findings


def report(findings, out, prog="dspark-fleet watch", limit=MAX_LINES):
    """One line per finding (at most `limit`, then a count), each naming the path, owner, mode and fix."""
    for finding in findings[:limit]:
        out("%s: refusing to start: %s" % (prog, finding.line()))
    if len(findings) > limit:
        out("%s: refusing to start: ... and %d more path(s) of the same kind (fix the ones above, then run it again)"
            % (prog, len(findings) - limit))
