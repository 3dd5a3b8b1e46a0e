"""The installed supervisor's marker, and the refusal of a `reprovision` that would not share its state dir.

playbooks/supervisor.yml writes ``/etc/dspark-fleet/supervisor.json`` (root-owned, 0644; ``$DSPARK_FLEET_SUPERVISOR_
MARKER`` overrides the path) while ``dspark-fleet-watch.service`` is enabled: the service's state dir, user, unit,
inventory and environment. The per-group locks (locks.py) and the proven records (proven.py) live in the state dir,
so a `reprovision` with another one (the default ``.dspark-fleet`` of the checkout) would restart nothing in step
with the service: the service could restart a group while it is reprovisioned, and the rollback records would
differ. `check()` refuses such a run (exit 2) before anything runs, with the fix; ``--ignore-supervisor`` (the
service stopped first) skips it and is recorded in the report.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex

MARKER_ENV = "DSPARK_FLEET_SUPERVISOR_MARKER"
DEFAULT_MARKER = "/etc/dspark-fleet/supervisor.json"
# Subcommands that take group locks or write proven records (watch is the supervisor itself).
GUARDED = ("reprovision",)
# The unit's environment shown in the fix, in this order (the state dir first).
SHOWN_ENV = ("DSPARK_FLEET_STATE_DIR", "HOME", "ANSIBLE_HOME", "ANSIBLE_LOCAL_TEMP", "ANSIBLE_PRIVATE_KEY_FILE")


class MarkerError(Exception):
    """The marker exists but cannot be read or is not the playbook's."""


def marker_path(environ=None):
    environ = os.environ if environ is None else environ
    return environ.get(MARKER_ENV) or DEFAULT_MARKER


def load(path):
    """The marker as a dict, None when there is none (no supervisor installed); MarkerError otherwise."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise MarkerError("cannot read it: %s" % (getattr(exc, "strerror", None) or exc)) from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise MarkerError("it is not JSON (%s)" % exc) from None
    if not isinstance(doc, dict):
        raise MarkerError("it is not a JSON object")
    for key in ("state_dir", "user"):
        value = doc.get(key)
        if not isinstance(value, str) or not value or (key == "state_dir" and not os.path.isabs(value)):
            wanted = "an absolute path" if key == "state_dir" else "a user name"
            raise MarkerError("its %r is %s, not %s" % (key, json.dumps(value), wanted))
    env = doc.get("environment")
    if env is not None and (not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values())):
        raise MarkerError("its 'environment' is not an object of strings")
    return doc


def current_user():
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _same_dir(one, other):
    return os.path.realpath(one) == os.path.realpath(other)


def fix_command(marker, subcommand):
    """`sudo -u <user> env DSPARK_FLEET_STATE_DIR=... <command> <subcommand> ...` from the marker."""
    env = dict(marker.get("environment") or {})
    env["DSPARK_FLEET_STATE_DIR"] = marker["state_dir"]
    assignments = ["%s=%s" % (name, shlex.quote(env[name])) for name in SHOWN_ENV if env.get(name)]
    command = marker.get("command") if isinstance(marker.get("command"), str) and marker.get("command") else (
        "dspark-fleet")
    return " ".join(["sudo", "-u", shlex.quote(marker["user"]), "env"] + assignments
                    + [shlex.quote(command), subcommand, "..."])


def check(subcommand, state_dir, ignore=False, environ=None, user=None):
    """None when the run may go on; else the refusal's message (exit 2). `state_dir` is this run's (absolute)."""
    if subcommand not in GUARDED or ignore:
        return None
    path = marker_path(environ)
    try:
        marker = load(path)
    except MarkerError as exc:
        return ("the supervisor's marker %s is unusable: %s. It says where dspark-fleet-watch.service keeps its "
                "locks and proven records, which %s shares. Fix: rerun playbooks/supervisor.yml (it rewrites the "
                "marker, root-owned 0644), or, with the supervisor stopped (systemctl stop dspark-fleet-watch), "
                "pass --ignore-supervisor" % (path, exc, subcommand))
    if marker is None:
        return None
    user = user or current_user()
    unit = marker.get("unit") if isinstance(marker.get("unit"), str) else "dspark-fleet-watch.service"
    same_dir = _same_dir(state_dir, marker["state_dir"])
    if same_dir and user == marker["user"]:
        return None
    if not same_dir:
        why = ("this run's state dir is %s, the supervisor's (%s, user %s, per %s) is %s: its group locks and proven "
               "records would not be shared, so the supervisor could restart a group while this run reprovisions it "
               "and the rollback records would differ" % (state_dir, unit, marker["user"], path, marker["state_dir"]))
    else:
        why = ("this run is user %s, the supervisor (%s, per %s) is user %s: lock files and proven records this run "
               "created in %s could not be opened by the supervisor"
               % (user, unit, path, marker["user"], marker["state_dir"]))
    return ("a supervisor is installed: %s. Fix: run it as the supervisor's user with its state dir, e.g. `%s`, or "
            "stop the supervisor first (systemctl stop %s) and pass --ignore-supervisor"
            % (why, fix_command(marker, subcommand), unit))
