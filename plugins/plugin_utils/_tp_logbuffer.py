# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The log buffer of a tp_ranks poll: each container's log merged by timestamp across polls.

Also what is made of the buffers: the ``assess_group`` input per rank and the excerpts of a failed result. Every
chunk is redacted (plugin_utils/redact.py) before it is kept, so no diagnosis, evidence line or excerpt carries an API
key or token. No Ansible imports, no I/O.
"""

from __future__ import annotations

import bisect
import re

from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_docker import KEY_LINE_NEEDLES
from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_loglines import strip_ansi
from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_plan import log_key
from ansible_collections.dspark.cluster.plugins.plugin_utils.redact import redact

# Last lines of each rank's log put into a failed result.
EXCERPT_LINES = 40


_TS_RE = re.compile(r'^(?P<ts>(?P<base>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d{1,9}))?'
                    r'(?:Z|[+-]\d{2}:\d{2}))\s?')


def _ts_key(line):
    """(sortable instant, raw timestamp, message) of a ``docker logs --timestamps`` line."""
    match = _TS_RE.match(line)
    if not match:
        return None, None, line
    key = match.group('base') + '.' + (match.group('frac') or '').ljust(9, '0')
    return key, match.group('ts'), line[match.end():]


class LogBuffer:
    """One container's log, merged across polls.

    ``docker logs --timestamps`` lines are merged by timestamp without
    duplicates, so a registration line that scrolled out of ``--tail`` stays
    known. Output without timestamps replaces the buffer. The oldest lines
    are dropped beyond ``max_lines``, except those with a key needle.
    Text is redacted on the way in: the known ``secrets`` and every secret-shaped value.
    """

    def __init__(self, max_lines=20000, secrets=()):
        self.max_lines = max_lines
        self.secrets = tuple(secrets or ())
        self.reset()

    def reset(self):
        self._keys = []
        self._lines = []
        self._counts = {}
        self.last_ts = None

    def __len__(self):
        return len(self._lines)

    def add(self, text):
        """Merge a chunk of output; returns the number of new lines."""
        if not text:
            return 0
        if isinstance(text, bytes):
            text = text.decode('utf-8', 'replace')
        lines = redact(text, self.secrets).split('\n')
        if lines and lines[-1] == '':
            lines.pop()
        if not lines:
            return 0
        parsed = [_ts_key(line) for line in lines]
        if not any(key for key, _raw, _msg in parsed):
            self.reset()
            self._lines = list(lines)
            self._keys = [''] * len(lines)
            return len(lines)
        added = 0
        seen_now = {}
        key = raw = None
        for line, (line_key, line_raw, message) in zip(lines, parsed):
            if line_key is not None:
                key, raw = line_key, line_raw
            elif key is None:
                continue            # untimestamped head of a chunk: nothing to anchor it to
            # Docker trims trailing zeros of the fraction: compare instants, not their spelling.
            ident = (key, message)
            seen_now[ident] = seen_now.get(ident, 0) + 1
            if seen_now[ident] <= self._counts.get(ident, 0):
                continue
            self._counts[ident] = self._counts.get(ident, 0) + 1
            if not self._keys or key >= self._keys[-1]:
                self._keys.append(key)
                self._lines.append(line)
                self.last_ts = raw
            else:
                pos = bisect.bisect_right(self._keys, key)
                self._keys.insert(pos, key)
                self._lines.insert(pos, line)
            added += 1
        self._trim()
        return added

    def _trim(self):
        excess = len(self._lines) - self.max_lines
        if excess <= 0:
            return
        keep_keys = []
        keep_lines = []
        for key, line in zip(self._keys, self._lines):
            if excess > 0 and not any(needle in line for needle in KEY_LINE_NEEDLES):
                ident = (key, _ts_key(line)[2])
                self._counts[ident] -= 1
                if not self._counts[ident]:
                    del self._counts[ident]
                excess -= 1
                continue
            keep_keys.append(key)
            keep_lines.append(line)
        self._keys = keep_keys
        self._lines = keep_lines

    def text(self):
        return '\n'.join(self._lines) + ('\n' if self._lines else '')

    def tail(self, count=EXCERPT_LINES):
        lines = []
        for line in self._lines[-count:] if count else []:
            lines.extend(part for part in strip_ansi(line).rstrip().split('\n') if part.strip())
        return lines[-count:] if count else []


def logs_by_rank(plan, observations, buffers):
    """The ``assess_group`` input: {first rank of node: {node, log, container_state, exit_code, oom_killed,
    finished_at}}.

    observations: node -> parse_inspect() result (or None when the node could
    not be reached this round); buffers: node -> LogBuffer.
    """
    out = {}
    for member in plan['members']:
        node = member['node']
        obs = observations.get(node) or {}
        buf = buffers.get(node)
        out[log_key(member)] = {
            'node': node,
            'log': buf.text() if buf is not None else '',
            'container_state': obs.get('state'),
            'exit_code': obs.get('exit_code'),
        }
        # When docker said: OOMKilled and FinishedAt tell the rank that failed first.
        for key in ('oom_killed', 'finished_at'):
            if obs.get(key) is not None:
                out[log_key(member)][key] = obs[key]
    return out


def log_excerpts(plan, buffers, count=EXCERPT_LINES):
    """{first rank of each node: last `count` lines (ANSI-stripped)}."""
    out = {}
    for member in plan['members']:
        buf = buffers.get(member['node'])
        out[log_key(member)] = buf.tail(count) if buf is not None else []
    return out
