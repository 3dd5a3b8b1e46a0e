"""The only module that calls ansible-runner: one ansible-playbook run per call, quiet, in its own artifact dir.

Layout under the fleet's artifacts directory (reprovision.py and group_runs.py name the runs):

- ``.runner/``: ansible-runner's private data dir (only ``env/settings``: a 1 s poll so that a cancel takes
  effect within about a second); nothing else is written there (``suppress_env_files``);
- ``preflight/``, ``groups/<group>/``: each run's artifacts: ``stdout`` (the whole Ansible output), ``job_events/``, ``command``,
  ``rc``, ``status``.

The env of a run: the caller's, plus ANSIBLE_CONFIG of the project, the venv's bin first on PATH and
the project's host key checking setting (ansible-runner would otherwise turn host key checking off).

Extra vars never reach a process list (issue #26 point 7): each ``-e VALUE`` of a run is written to a 0600 file in
the private data dir and passed as ``-e @file``, removed when the run ends.
"""

from __future__ import annotations

import configparser
import json
import os
import shlex
import signal
import sys
from dataclasses import dataclass, field

import ansible_runner
from ansible.parsing.splitter import parse_kv

PRIVATE_DIR = ".runner"
EXTRA_VARS_DIR = "extravars"
RUNNER_SETTINGS = {"pexpect_timeout": 1}


@dataclass
class RunSpec:
    """One ansible-playbook run."""

    ident: str                   # artifact dir name under `artifacts_dir`
    playbook: str                # absolute path
    inventory: str               # absolute path
    project_dir: str             # cwd of ansible-playbook; its ansible.cfg is used
    artifacts_dir: str           # the directory that holds this run's artifact dir
    private_dir: str             # ansible-runner's private data dir (see prepare())
    limit: str | None = None
    args: list = field(default_factory=list)   # more ansible-playbook arguments (--check, --tags, -e ...)
    envvars: dict = field(default_factory=dict)

    @property
    def artifact_dir(self):
        return os.path.join(self.artifacts_dir, self.ident)

    @property
    def stdout_path(self):
        return os.path.join(self.artifact_dir, "stdout")


@dataclass
class RunResult:
    status: str                  # ansible-runner's: successful, failed, canceled, timeout; or error
    rc: int | None
    error: str | None = None     # why ansible-runner itself could not run the playbook


def bin_dir():
    """The directory of this Python's console scripts (the venv's bin), where ansible-playbook lives."""
    return os.path.dirname(sys.executable)


def tool(name):
    """Path of an Ansible command next to this Python, or the bare name (found on PATH)."""
    candidate = os.path.join(bin_dir(), name)
    return candidate if os.access(candidate, os.X_OK) else name


def host_key_checking(project_dir, environ):
    """What ansible-playbook would use (env, else the project's ansible.cfg, else True) as a string."""
    if "ANSIBLE_HOST_KEY_CHECKING" in environ:
        return environ["ANSIBLE_HOST_KEY_CHECKING"]
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"))
    try:
        parser.read(os.path.join(project_dir, "ansible.cfg"))
        value = parser.get("defaults", "host_key_checking", fallback=None)
    except configparser.Error:
        value = None
    return value.strip() if value else "True"


def ansible_env(project_dir, environ=None):
    """Environment variables added to every Ansible command of the fleet."""
    environ = os.environ if environ is None else environ
    return {
        "ANSIBLE_CONFIG": os.path.join(project_dir, "ansible.cfg"),
        "PATH": bin_dir() + os.pathsep + environ.get("PATH", os.defpath),
        "ANSIBLE_HOST_KEY_CHECKING": host_key_checking(project_dir, environ),
        "ANSIBLE_NOCOLOR": "1",
    }


def prepare(artifacts_root):
    """Create the fleet's artifacts dir and ansible-runner's private data dir in it; returns the latter.

    Mode 0700: a run's artifacts hold its command line (extra vars) and environment.
    """
    os.makedirs(artifacts_root, mode=0o700, exist_ok=True)
    private = os.path.join(artifacts_root, PRIVATE_DIR)
    os.makedirs(os.path.join(private, "env"), mode=0o700, exist_ok=True)
    with open(os.path.join(private, "env", "settings"), "w", encoding="utf-8") as handle:
        json.dump(RUNNER_SETTINGS, handle)
    return private


def descendants(pid, proc="/proc"):
    """PIDs of every live descendant of `pid` (children first), read from /proc/<pid>/stat."""
    parents = {}
    try:
        entries = os.listdir(proc)
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc, entry, "stat"), encoding="ascii", errors="replace") as handle:
                stat = handle.read()
            # The command name may hold spaces and parentheses: the fields after the last ')' are fixed.
            parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = [], [int(pid)]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found.extend(children)
        frontier = children
    return found


def kill_tree(pid):
    """SIGKILL the descendants of ansible-playbook's main process. ansible-core's workers call setsid(), so
    ansible-runner's killpg() of the main process group misses them and a cancelled task would go on alone."""
    for child in descendants(pid):
        try:
            os.kill(child, signal.SIGKILL)
        except OSError:
            pass


def _extra_vars_text(value):
    """What ansible-playbook would read from ``-e value``, as a YAML/JSON document for an ``@file``: JSON or YAML
    text as it is (Ansible reads it as YAML), ``key=value`` pairs as the mapping Ansible parses them into."""
    if value.lstrip().startswith(("{", "[")):
        return value
    parsed = parse_kv(value)
    if "_raw_params" in parsed:
        return value    # not key=value: ansible-playbook refuses it from the file as it would inline
    return json.dumps(parsed)


def extra_vars_files(args, folder, stem):
    """(args with every inline ``-e VALUE`` replaced by ``-e @<file>``, the files written). Each file 0600 in
    ``folder``; an ``@file`` argument stays as it is."""
    out, written = [], []
    os.makedirs(folder, mode=0o700, exist_ok=True)
    index = 0
    pending = False
    for arg in args:
        value = None
        if pending:
            value, pending = arg, False
        elif arg in ("-e", "--extra-vars"):
            pending = True
            continue
        elif arg.startswith("--extra-vars="):
            value = arg[len("--extra-vars="):]
        else:
            out.append(arg)
            continue
        if value.startswith("@"):
            out += ["-e", value]
            continue
        index += 1
        path = os.path.join(folder, "%s-%d.yml" % (stem, index))
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(_extra_vars_text(value))
        written.append(path)
        out += ["-e", "@" + path]
    if pending:
        out.append("-e")    # as given: ansible-playbook reports the missing value
    return out, written


def run_playbook(spec, event_handler=None, cancel_callback=None):
    """Run one playbook to its end (blocking); events go to `event_handler`, `cancel_callback` stops it."""
    os.makedirs(spec.artifacts_dir, mode=0o700, exist_ok=True)
    try:
        args, files = extra_vars_files(spec.args, os.path.join(spec.private_dir, EXTRA_VARS_DIR),
                                       spec.ident.replace(os.sep, "_"))
    except (OSError, ValueError) as exc:
        return RunResult(status="error", rc=None, error="cannot write the extra vars file: %s" % exc)
    try:
        return _run(spec, args, event_handler, cancel_callback)
    finally:
        for path in files:
            try:
                os.unlink(path)
            except OSError:
                pass


def _run(spec, args, event_handler, cancel_callback):
    main_pid = []

    def keep(event):
        if not main_pid and event.get("pid"):
            main_pid.append(event["pid"])
        if event_handler is not None:
            event_handler(event)
        return True

    def cancelled():
        if not (cancel_callback is not None and cancel_callback()):
            return False
        if main_pid:
            kill_tree(main_pid[0])
        return True

    try:
        runner = ansible_runner.run(
            private_data_dir=spec.private_dir,
            artifact_dir=spec.artifacts_dir,
            ident=spec.ident,
            project_dir=spec.project_dir,
            playbook=spec.playbook,
            inventory=spec.inventory,
            limit=spec.limit,
            cmdline=shlex.join(args) if args else None,
            envvars=dict(spec.envvars),
            quiet=True,
            suppress_env_files=True,
            event_handler=keep,
            cancel_callback=cancelled,
        )
    except Exception as exc:  # pylint: disable=broad-except
        return RunResult(status="error", rc=None, error="ansible-runner failed: %s: %s" % (type(exc).__name__, exc))
    return RunResult(status=runner.status, rc=runner.rc)


def vm_hwm_kib(pid):
    """Peak resident memory (VmHWM, KiB) of a live process from /proc, or None (gone, or no /proc)."""
    if not pid:
        return None
    try:
        with open("/proc/%d/status" % int(pid), encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def stdout_tail(path, lines=15):
    """The last lines of a run's stdout (for a failure without a failed task)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()[-20000:]
    except OSError:
        return ""
    return "\n".join(line.rstrip() for line in text.strip().splitlines()[-lines:])
