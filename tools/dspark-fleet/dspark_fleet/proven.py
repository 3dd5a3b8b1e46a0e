"""The last proven image and model revision of each serving group, and the rollback decision (issue #29 item 6).

When a group's site.yml run ends successfully with its tp_ranks proof (`reprovision`, rolling or not), the
configuration it ran with is recorded in ``<state dir>/proven/<group>.json`` (written atomically: a temporary file,
then a rename): the image reference (``dspark_image``), the model (``dspark_model``) and its revision
(``dspark_model_revision``) as the run saw them (the last ``-e`` that sets one, else the head's inventory value,
untemplated), the image ID the proof found, and when.

`reprovision --rolling` reads it back when a group fails its proof: when the failed run's image, model or
revision differs from the record, the group is reprovisioned again with the recorded ones as extra vars (rolling.py).

A value that is a Jinja template (``{{ ... }}``) or not a string (a vaulted value) cannot be replayed as it was
when it was proven: it is recorded as ``None`` with its name under ``unresolved``, and a rollback to it is refused.
"""

from __future__ import annotations

import json
import os
import time

import yaml

from .events import GroupEvents, image_id
from .locks import lock_path
from .report import iso, write_atomic

SCHEMA = "dspark-fleet-proven/1"
FOLDER = "proven"
# The report's names -> the inventory variables a rollback sets.
VARIABLES = (("image", "dspark_image"), ("model", "dspark_model"), ("revision", "dspark_model_revision"))
KEYS = tuple(key for key, variable in VARIABLES)


def record_path(directory, group):
    """<state dir>/proven/<group>.json (the group name checked as the lock files' are)."""
    return os.path.join(directory, FOLDER, os.path.basename(lock_path(directory, group))[:-len(".lock")] + ".json")


# --------------------------------------------------------------------------- the configuration a run used


def _extra_vars_mapping(value, cwd=None):
    """The variables one ``-e VALUE`` sets, {} when they cannot be read here (ansible-playbook says why)."""
    text = value
    if value.startswith("@"):
        try:
            with open(os.path.join(cwd or os.getcwd(), os.path.expanduser(value[1:])), encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError):
            return {}
    elif not value.lstrip().startswith(("{", "[")):
        from ansible.parsing.splitter import parse_kv  # pylint: disable=import-outside-toplevel
        try:
            parsed = parse_kv(value)
        except Exception:  # pylint: disable=broad-except  # Ansible's own errors: it reports them itself
            return {}
        return {} if "_raw_params" in parsed else parsed
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:     # a vaulted file among them: its variables are not seen here
        return {}
    return data if isinstance(data, dict) else {}


def _usable(value):
    """(the value as a run would replay it, None) or (None, why it cannot be replayed)."""
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None, "not a plain value (vaulted?)"
    value = str(value)
    if "{{" in value or "{%" in value:
        return None, "a Jinja template"
    return value, None


def config_of(inventory, group, extra_vars=(), cwd=None):
    """{image, model, revision, unresolved} of `group` as a run with `extra_vars` sees them: the last -e that
    sets a variable wins over the head's inventory value (untemplated)."""
    overrides = {}
    for value in extra_vars or []:
        overrides.update(_extra_vars_mapping(value, cwd))
    config = {"unresolved": {}}
    for key, variable in VARIABLES:
        raw = overrides[variable] if variable in overrides else inventory.head_var(group, variable)
        if variable not in overrides and isinstance(raw, str) and raw.startswith("{") and '"__ansible_vault"' in raw:
            raw = {"vaulted": True}
        config[key], why = _usable(raw)
        if why:
            config["unresolved"][variable] = why
    return config


def same(config, record):
    """Whether a run with `config` used the recorded image, model and revision."""
    return all(config.get(key) == record.get(key) for key in KEYS) and \
        sorted(config.get("unresolved") or {}) == sorted(record.get("unresolved") or {})


def short(config):
    """'image X, model M@revision' for messages."""
    if not config:
        return "-"
    revision = config.get("revision")
    return "image %s, model %s%s" % (config.get("image") or "?", config.get("model") or "?",
                                     ("@" + revision[:12]) if revision else "")


# --------------------------------------------------------------------------- the record


class Store:
    """The records of one state dir."""

    def __init__(self, directory):
        self.directory = directory

    def path(self, group):
        return record_path(self.directory, group)

    def load(self, group):
        """The record of `group`, None when there is none or it cannot be read."""
        try:
            with open(self.path(group), encoding="utf-8") as handle:
                doc = json.load(handle)
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("group") != group:
            return None
        return doc

    def save(self, group, config, proof=None, run=None, now=None):
        """Record that `group` was proven with `config` (its tp_ranks proof `proof`); returns the record."""
        now = time.time() if now is None else now
        doc = {"schema": SCHEMA, "group": group,
               "image": config.get("image"), "model": config.get("model"), "revision": config.get("revision"),
               "unresolved": dict(config.get("unresolved") or {}),
               "image_id": image_id(proof), "proven_at": now, "proven_at_iso": iso(now), "run": run}
        path = self.path(group)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        write_atomic(path, json.dumps(doc, indent=2, sort_keys=False) + "\n")
        return doc


def run_proven(base, spec, event_handler=None, cancel_callback=None):
    """`base(spec, ...)` with its events also folded apart: (RunResult, the tp_ranks proof when the run ended
    successfully with one, else None)."""
    events = GroupEvents()

    def handle(event):
        events.feed(event)
        if event_handler is not None:
            event_handler(event)

    result = base(spec, event_handler=handle, cancel_callback=cancel_callback)
    proof = events.tp_ranks if result.status == "successful" and (events.tp_ranks or {}).get("ok") else None
    return result, proof


def recording_runner(store, configs, runner, on_error=None):
    """Wrap a `runner(spec, event_handler, cancel_callback)` of site.yml per group: a run that ends with its proof
    records the group's configuration (`configs[group]`) in `store`. `on_error(group, exc)` when it cannot."""

    def run(spec, event_handler=None, cancel_callback=None):
        result, proof = run_proven(runner, spec, event_handler, cancel_callback)
        if proof is not None and spec.ident in configs:
            try:
                store.save(spec.ident, configs[spec.ident], proof, run=spec.artifact_dir)
            except OSError as exc:
                if on_error is not None:
                    on_error(spec.ident, exc)
        return result
    return run


# --------------------------------------------------------------------------- the rollback decision


def new_rollback(config, record, path):
    """The report's `rollback` entry before anything is decided."""
    def view(conf):
        return None if conf is None else dict((key, conf.get(key)) for key in KEYS)
    return {"attempted": False, "from": view(config), "to": view(record), "result": "not_attempted",
            "reason": None, "record": path, "recorded_at": (record or {}).get("proven_at_iso"),
            "image_id": None, "error": None, "logs": None}


def proves(tags):
    """Whether a site.yml run with --tags `tags` (None: all) reaches the tp_ranks proof (the serve phase)."""
    return tags is None or "serve" in [t.strip() for t in str(tags).split(",")]


def decide(config, record, enabled=True, tags=None):
    """(roll back?, why not) for a group whose run with `config` failed its proof; `record` is its last proof."""
    if not enabled:
        return False, "rollback turned off (--no-rollback)"
    if not proves(tags):
        return False, "--tags %s: the run does not reach the tp_ranks proof (serve), a rollback could not be " \
                      "proven" % tags
    if record is None:
        return False, "no record of a proven image and revision for this group (it was never proven by a " \
                      "reprovision with this state dir)"
    if config is None:
        return False, "the failed run's image and revision are unknown"
    if same(config, record):
        return False, "the failed run used the last proven image, model and revision (%s): nothing to go back to; " \
                      "the cause is elsewhere" % short(record)
    if record.get("unresolved"):
        return False, "the last proven %s cannot be replayed (%s)" % (
            ", ".join(sorted(record["unresolved"])),
            "; ".join("%s: %s" % item for item in sorted(record["unresolved"].items())))
    if not any(record.get(key) for key in KEYS):
        return False, "the record holds no image, model or revision"
    return True, None


def rollback_vars(record):
    """The extra vars of the rollback run: the recorded values that are set."""
    return dict((variable, record[key]) for key, variable in VARIABLES if record.get(key) is not None)
