# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The support bundle's pure logic (issue #43, `dspark-fleet bundle`): which values are secrets, redaction with a
count per kind, the final sweep, the size bounds and the manifest. Private; plain Python, no Ansible imports.

Secrets come from the variables (``secret_values``): every string under a variable or key whose name
``_role_rules.is_secret`` calls secret (API keys, tokens, passwords, proxies), and every vault-encrypted value. The
redaction (``Redactor``) first replaces those known values wherever they are (also JSON- or URL-escaped, and split by a
line break), then every key-shaped string (redact.py's places, plus ``sk-...`` keys and ``NAME=value`` of secret
names). ``sweep`` looks for the known values again in what is about to be written: a hit refuses the bundle.
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote

from ansible_collections.dspark.cluster.plugins.plugin_utils import redact as _redact

MARK = _redact.MARK
# Known values shorter than this are left to the shaped passes (a short password would blank the bundle).
MIN_SECRET_LEN = 6
# What Ansible's inventory JSON (ansible-inventory --list) and to_json write for a vault-encrypted value.
VAULT_KEYS = ("__ansible_vault",)
VAULT_PREFIX = "$ANSIBLE_VAULT;"
_SECRET_NAME_RE = re.compile(r"api_?keys?|token|passw|secret|proxy", re.IGNORECASE)

_SK_RE = re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}")
# NAME=value / NAME: value / "NAME": "value" where NAME ends in a secret word (VLLM_API_KEY=..., HF_TOKEN: ...).
_ENV_RE = re.compile(
    r"(?P<lead>(?P<q>[\'\"]?)\b[A-Za-z0-9_.-]*(?:api[_-]?keys?|access[_-]?key|token|passw(?:or)?d|secret)"
    r"(?P=q)[ \t]*[=:][ \t]*)"
    r"(?P<value>\"[^\"\n]+\"|'[^'\n]+'|(?!None\b|null\b|true\b|false\b|\[REDACTED\])[^\s,;)}\]\"']{4,})",
    re.IGNORECASE)

# Kind -> (regex, replacement), in order; the known values go first (KNOWN).
KNOWN = "known_secret"
SHAPES = (
    ("api_key_field", _redact._KEYED_RE, _redact._mask),    # pylint: disable=protected-access
    ("api_key_flag", _redact._FLAG_RE, _redact._mask),      # pylint: disable=protected-access
    ("bearer_token", _redact._BEARER_RE, _redact._mask),    # pylint: disable=protected-access
    ("url_password", _redact._URL_RE, _redact._mask),       # pylint: disable=protected-access
    ("hf_token", _redact._HF_RE, MARK),                     # pylint: disable=protected-access
    ("sk_key", _SK_RE, MARK),
    ("secret_assignment", _ENV_RE, _redact._mask),          # pylint: disable=protected-access
)


def is_secret_name(name, pattern=None):
    """_role_rules.is_secret's rule by name (the caller passes its pattern; this one is a copy for the tests)."""
    return bool((pattern or _SECRET_NAME_RE).search(str(name)))


def _is_vaulted(value):
    if isinstance(value, dict) and any(k in value for k in VAULT_KEYS):
        return True
    return isinstance(value, str) and value.lstrip().startswith(VAULT_PREFIX)


def _leaves(value):
    if isinstance(value, dict):
        for key, sub in value.items():
            if key in VAULT_KEYS:
                continue
            yield from _leaves(sub)
    elif isinstance(value, (list, tuple)):
        for sub in value:
            yield from _leaves(sub)
    elif isinstance(value, str):
        yield value
    elif isinstance(value, int) and not isinstance(value, bool) and len(str(value)) >= MIN_SECRET_LEN:
        yield str(value)


def secret_values(variables, is_secret=is_secret_name):
    """Every string in `variables` ({name: value}) that is a secret: all the leaves under a name (at any depth)
    that is_secret(name) calls secret, and vault-encrypted values (their decrypted text where the caller has it)."""
    found = set()

    def walk(value, secret):
        if _is_vaulted(value):
            return      # ciphertext is no secret; the caller passes the decrypted value under its name
        if secret:
            found.update(v for v in _leaves(value) if _usable(v))
        elif isinstance(value, dict):
            for key, sub in value.items():
                walk(sub, is_secret(str(key)))
        elif isinstance(value, (list, tuple)):
            for sub in value:
                walk(sub, False)

    for name, value in (variables or {}).items():
        walk(value, is_secret(str(name)))
    return found


def secret_names(variables, is_secret=is_secret_name):
    """Top-level names of `variables` that hold a secret: secret by name, vault-encrypted, or with a secret-named
    key or a vault-encrypted value somewhere inside (their templated value is read on the node side)."""
    def holds(value):
        if _is_vaulted(value):
            return True
        if isinstance(value, dict):
            return any(is_secret(str(k)) or holds(v) for k, v in value.items())
        if isinstance(value, (list, tuple)):
            return any(holds(v) for v in value)
        return False
    return sorted(n for n, v in (variables or {}).items() if is_secret(str(n)) or holds(v))


def _usable(value):
    value = value.strip()
    return len(value) >= MIN_SECRET_LEN and "{{" not in value and not value.startswith(VAULT_PREFIX)


def variants(secret):
    """The spellings of a secret in text: as is, JSON-escaped, URL-quoted, Python-repr-escaped (no duplicates)."""
    out = [secret, json.dumps(secret)[1:-1], quote(secret, safe=""), repr(secret)[1:-1]]
    seen = []
    for item in out:
        if item and item not in seen:
            seen.append(item)
    return seen


_BREAK = r"(?:\r?\n|\\r\\n|\\n)?"


def _known_regex(secrets):
    """One regex for every spelling of every known secret, each allowing a line break (raw or JSON-escaped) between
    any two characters; longest first."""
    spellings = set()
    for secret in secrets:
        spellings.update(variants(secret))
    if not spellings:
        return None
    parts = [_BREAK.join(re.escape(c) for c in s) for s in sorted(spellings, key=len, reverse=True)]
    return re.compile("|".join(parts))


class _Replace:
    """A pass's replacement that counts its hits; a value redacted already (by an earlier pass) stays, uncounted."""

    def __init__(self, replacement):
        self.replacement = replacement
        self.hits = 0

    def __call__(self, match):
        value = match.groupdict().get("value", match.group(0))
        if value.strip("[]'\"") == MARK.strip("[]"):
            return match.group(0)
        self.hits += 1
        return self.replacement(match) if callable(self.replacement) else self.replacement


class Redactor:
    """redact(text) with the counts of what it replaced, per kind (never the values)."""

    def __init__(self, secrets=()):
        self.secrets = sorted({s.strip() for s in secrets or () if isinstance(s, str) and _usable(s)},
                              key=len, reverse=True)
        self._known = _known_regex(self.secrets)
        self.counts = {}

    def _count(self, kind, number):
        if number:
            self.counts[kind] = self.counts.get(kind, 0) + number

    def redact(self, text):
        if not text:
            return text
        if self._known is not None:
            text, number = self._known.subn(MARK, text)
            self._count(KNOWN, number)
        for kind, regex, replacement in SHAPES:
            replace = _Replace(replacement)
            text = regex.sub(replace, text)
            self._count(kind, replace.hits)
        return text

    def redact_data(self, data):
        """A JSON-able structure with every string (keys too) redacted."""
        if isinstance(data, dict):
            return dict((self.redact(k) if isinstance(k, str) else k, self.redact_data(v)) for k, v in data.items())
        if isinstance(data, (list, tuple)):
            return [self.redact_data(v) for v in data]
        if isinstance(data, str):
            return self.redact(data)
        return data


def sweep(files, secrets):
    """[name] of the files ({name: bytes or text}) in which a known secret (any spelling, also split by a line break)
    is still found: the bundle must not be written then. The secrets are never part of the result."""
    regex = _known_regex({s.strip() for s in secrets or () if isinstance(s, str) and _usable(s)})
    if regex is None:
        return []
    hits = []
    for name, content in files.items():
        text = content.decode("utf-8", "replace") if isinstance(content, bytes) else str(content)
        if regex.search(text):
            hits.append(name)
    return hits


# -- size bounds ---------------------------------------------------------------------------------------------------

TRUNCATED_NOTE = "\n[... truncated by dspark-fleet bundle: %d of %d bytes kept ...]\n"


def _cut(data, keep, tail):
    """keep bytes of data (its end when tail), whole UTF-8 characters only."""
    if keep <= 0:
        return b""
    part = data[-keep:] if tail else data[:keep]
    return part.decode("utf-8", "ignore").encode("utf-8")


class Bounds:
    """A total budget (max_bytes) and a cap per file; what was cut is recorded (file, original and kept bytes)."""

    def __init__(self, max_bytes, per_file_bytes, reserve=65536):
        self.max_bytes = int(max_bytes)
        self.per_file_bytes = int(per_file_bytes)
        self.reserve = min(int(reserve), self.max_bytes // 4)      # kept for the manifest
        self.used = 0
        self.truncated = []

    def fit(self, name, data, tail=False):
        """data (bytes) within both caps: the end of a log (tail), the start of anything else; b'' when no room is
        left. Records every cut."""
        room = min(self.per_file_bytes, self.max_bytes - self.reserve - self.used)
        if len(data) <= room:
            self.used += len(data)
            return data
        note = TRUNCATED_NOTE % (0, len(data))
        keep = max(0, room - len(note) - 16)
        kept = _cut(data, keep, tail)
        note = (TRUNCATED_NOTE % (len(kept), len(data))).encode("utf-8")
        out = (note + kept) if tail else (kept + note)
        if room <= len(note):
            out = b""
        self.used += len(out)
        self.truncated.append({"file": name, "bytes": len(data), "kept_bytes": len(kept) if out else 0,
                               "kept": ("end" if tail else "start") if out else "none",
                               "reason": "per-file cap %d" % self.per_file_bytes if self.per_file_bytes < len(data)
                               and room == self.per_file_bytes else "total cap %d" % self.max_bytes})
        return out

    def view(self):
        return {"max_bytes": self.max_bytes, "per_file_bytes": self.per_file_bytes, "used_bytes": self.used,
                "truncated": list(self.truncated)}


def tail_lines(text, lines):
    """The last `lines` lines of text."""
    parts = (text or "").splitlines()
    return "\n".join(parts[-lines:]) + ("\n" if parts else "") if lines > 0 else ""


# -- manifest ------------------------------------------------------------------------------------------------------

SCHEMA = "dspark-fleet-bundle/1"
OK, ERROR, ABSENT = "ok", "error", "absent"


def section(name, file, state=OK, error=None, bytes_=0, hosts=None):
    """One manifest entry: state ok (collected), error (with the reason) or absent (nothing of the kind exists)."""
    entry = {"name": name, "file": file, "bytes": bytes_, "ok": state != ERROR, "state": state, "error": error}
    if hosts is not None:
        entry["hosts"] = hosts
    return entry


def manifest(group, created, members, sections, redacted, bounds, tool, collection):
    """The bundle's manifest.json: what was collected (ok/error per section), what was redacted (counts per kind),
    the bounds applied, the tool's and the collection's versions."""
    return {"schema": SCHEMA, "group": group, "created": created, "members": members,
            "sections": sections, "ok": all(s["ok"] for s in sections),
            "redacted": {"counts": dict(sorted(redacted.items())), "total": sum(redacted.values())},
            "bounds": bounds, "tool": tool, "collection": collection}
