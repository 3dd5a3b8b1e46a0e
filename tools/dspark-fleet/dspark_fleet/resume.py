"""--resume: which groups a previous reprovision report lets us skip (pure, apart from reading the file).

A group is skipped when its previous result was converged (or skipped, i.e. converged earlier) AND its
inputs fingerprint is unchanged. Everything else runs again: failed, cancelled, not started, changed
inputs, or absent from the previous report.
"""

from __future__ import annotations

import json

from .report import SCHEMA_ID
from .scheduler import CONVERGED, SKIPPED


class ResumeError(Exception):
    """The previous report cannot be used (bad input: exit 2)."""


def load_previous(path):
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise ResumeError("cannot read the report %s: %s" % (path, exc.strerror or exc)) from None
    except ValueError as exc:
        raise ResumeError("the report %s is not JSON: %s" % (path, exc)) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA_ID:
        raise ResumeError("%s is not a dspark-fleet report (schema %s expected)" % (path, SCHEMA_ID))
    if (data.get("command") or {}).get("subcommand") != "reprovision":
        raise ResumeError("%s is the report of '%s', not of 'reprovision'" % (
            path, (data.get("command") or {}).get("subcommand")))
    if not isinstance(data.get("groups"), dict):
        raise ResumeError("%s has no groups" % path)
    return data


def decide(previous, fingerprints):
    """{group: (skip, reason)} for every group of `fingerprints` ({group: current fingerprint})."""
    groups = previous.get("groups") or {}
    out = {}
    for group, current in fingerprints.items():
        before = groups.get(group)
        if not isinstance(before, dict):
            out[group] = (False, "not in the previous report")
        elif before.get("result") not in (CONVERGED, SKIPPED):
            out[group] = (False, "previous result %s" % before.get("result"))
        elif before.get("fingerprint") != current:
            out[group] = (False, "inputs changed since it converged")
        else:
            out[group] = (True, "converged before with the same inputs fingerprint")
    return out
