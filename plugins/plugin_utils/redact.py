# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Redaction of API keys, tokens and URL passwords in log text (tp_ranks' excerpts, the saved rank logs).

Two passes: the secrets the caller knows (the serving group's API keys) wherever they occur, then the places where
vLLM, a shell or a client write a secret whatever its value: vLLM's ``non-default args: {...}`` dict
(``'api_key': [...]``), an ``--api-key`` argument, ``NAME=value`` of the known secret variables, ``Authorization:
Bearer ...``, Hugging Face tokens (``hf_...``) and the password of a ``scheme://user:password@`` URL. Plain Python,
no Ansible imports.
"""

from __future__ import annotations

import re

MARK = '[REDACTED]'

# Known secrets shorter than this are only redacted in the places below (a two-letter key would blank the log).
MIN_SECRET_LEN = 4

_NAMES = r'(?:api[_-]?keys?|vllm_api_key|dspark_api_keys|hf_token|hugging_?face_hub_token|hf_api_token|access_token)'

# 'api_key': ['k1', 'k2'] / "api_key": "k" / api_key=['k'] (dict and Namespace reprs, JSON).
_KEYED_RE = re.compile(
    r'(?P<lead>(?P<q>[\'"]?)\b' + _NAMES + r'(?P=q)\s*[:=]\s*)'
    r'(?P<value>\[[ \t]*(?:(?:\'[^\'\n]*\'|"[^"\n]*"|[^\]\'",\s]++)[ \t]*(?:,[ \t]*)?)*\]'
    r'|\'[^\'\n]*\'|"[^"\n]*"|(?!None\b|null\b)[^\s,;)}\]]+)',
    re.IGNORECASE)
# --api-key k1 k2 / --api-key=k: every value up to the next option.
_FLAG_RE = re.compile(r'(?P<lead>--api-key(?:=|[ \t]+))(?P<value>[^\s\'"]+(?:[ \t]+(?!-)[^\s\'"]+)*)')
_BEARER_RE = re.compile(r'(?P<lead>\bBearer[ \t]+)(?P<value>[^\s\'",;]+)', re.IGNORECASE)
_HF_RE = re.compile(r'\bhf_[A-Za-z0-9]{20,}\b')
_URL_RE = re.compile(r'(?P<lead>\b[a-z][a-z0-9+.-]*://[^\s/@:]*:)(?P<value>[^\s/@]+)(?=@)', re.IGNORECASE)


def _mask(match):
    value = match.group('value')
    if value.startswith('['):
        return match.group('lead') + '[' + repr(MARK) + ']'
    if value[:1] in ('"', "'"):
        return match.group('lead') + value[0] + MARK + value[0]
    return match.group('lead') + MARK


def redact(text, secrets=()):
    """text with every known secret and every secret-shaped value replaced by [REDACTED]."""
    if not text:
        return text
    text = _KEYED_RE.sub(_mask, text)
    text = _FLAG_RE.sub(_mask, text)
    text = _BEARER_RE.sub(_mask, text)
    text = _URL_RE.sub(_mask, text)
    text = _HF_RE.sub(MARK, text)
    # Then the known values wherever they are left (a key with a bracket or quote in it, a key in free text).
    for secret in sorted({s for s in secrets or () if isinstance(s, str) and len(s) >= MIN_SECRET_LEN},
                         key=len, reverse=True):
        text = text.replace(secret, MARK)
    return text


def redact_lines(lines, secrets=()):
    """redact() of each line of a list."""
    return [redact(line, secrets) for line in lines or []]
