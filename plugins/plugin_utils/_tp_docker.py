# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The docker CLI of a tp_ranks poll: the commands run on each member and the parsing of their output.

``docker inspect`` limited to identity and state, ``docker logs --timestamps`` (only what is new), the key lines of
the whole log on a first look; plain commands, run with the task's become by the member connections
(_tp_connections). No Ansible imports, no I/O.
"""

from __future__ import annotations

import json
import shlex

# Lines kept from the whole container log on the first look at a container,
# so that an already running group whose start-up scrolled out of the tail
# still shows its registration and readiness lines. Fixed strings (grep -F).
KEY_LINE_NEEDLES = (
    'world_size=',
    ' in world size ',
    'Inferred data_parallel_rank',
    'non-default args: ',
    'headless multiproc executor',
    'server version ',
    'Available KV cache memory',
    # "GPU KV cache size" on a GPU build, "CPU KV cache size" on the CPU build (any device prefix).
    ' KV cache size: ',
    # Each worker's own KV cache line: --kv-cache-memory-bytes on a GPU build, and the CPU build's workers.
    'GiB memory for KV Cache as specified',
    'GiB for KV cache on node',
    'Maximum concurrency for',
    'init engine (profile',
    'Starting vLLM',
    'Application startup complete.',
    'vLLM is using nccl==',
)
KEY_LINES_MAX = 2000


INSPECT_FORMAT = ('{"Id":{{json .Id}},"Name":{{json .Name}},"RestartCount":{{json .RestartCount}},'
                  '"Image":{{json .Config.Image}},"State":{{json .State}}}')


def inspect_command(container):
    """docker inspect limited to identity and state (the full output carries the environment, secrets included)."""
    return 'docker inspect --type container --format %s %s' % (shlex.quote(INSPECT_FORMAT), shlex.quote(container))


def logs_command(container, lines, since=None):
    """Timestamped stdout+stderr of the container: the last `lines`, only those at or after `since` if given."""
    parts = ['docker', 'logs', '--timestamps']
    if since:
        parts += ['--since', shlex.quote(since)]
    parts += ['--tail', str(int(lines)), shlex.quote(container), '2>&1']
    return ' '.join(parts)


def key_lines_command(container):
    """The registration/readiness lines of the whole log (first look at a container)."""
    needles = ' '.join('-e %s' % shlex.quote(n) for n in KEY_LINE_NEEDLES)
    return 'docker logs --timestamps %s 2>&1 | grep -a -F %s | tail -n %d' % (
        shlex.quote(container), needles, KEY_LINES_MAX)


def parse_inspect(rc, stdout, stderr=''):
    """Container facts from `inspect_command` output, or from a plain ``docker inspect`` JSON list.

    Returns {exists, state, running, exit_code, restart_count, started_at,
    finished_at, oom_killed, error, id, name, image, health, problem}; problem is None,
    'missing' or 'docker_error' (docker unusable: not installed, no permission,
    become failed, e.g. sudo needs a password).
    """
    out = {'exists': False, 'state': None, 'running': False, 'exit_code': None, 'restart_count': None,
           'started_at': None, 'finished_at': None, 'oom_killed': None, 'error': None, 'id': None, 'name': None,
           'image': None, 'problem': None, 'message': None, 'health': None}
    text = (stdout or '').strip()
    err = (stderr or '').strip()
    if rc != 0 or not text:
        message = (err or text or 'docker inspect exited with %s' % rc).splitlines()
        message = message[-1] if message else ''
        low = (err + '\n' + text).lower()
        if 'no such object' in low or 'no such container' in low:
            out.update(state='missing', problem='missing', message=message)
        else:
            out.update(problem='docker_error', message=message)
        return out
    try:
        data = json.loads(text)
    except ValueError:
        first = text.splitlines()[0] if text else ''
        out.update(problem='docker_error', message='unexpected docker inspect output: %s' % first[:200])
        return out
    if isinstance(data, list):
        if not data:
            out.update(state='missing', problem='missing', message='docker inspect returned no container')
            return out
        data = data[0]
    state = data.get('State') or {}
    status = state.get('Status')
    if not status:
        status = 'running' if state.get('Running') else ('restarting' if state.get('Restarting') else 'exited')
    out.update(
        exists=True, state=status, running=status == 'running', exit_code=state.get('ExitCode'),
        restart_count=data.get('RestartCount'), started_at=state.get('StartedAt'),
        finished_at=state.get('FinishedAt'), oom_killed=state.get('OOMKilled'), error=state.get('Error') or None,
        id=data.get('Id'), name=(data.get('Name') or '').lstrip('/') or None,
        # The container's health check (healthy, unhealthy, starting), None without one.
        health=(state.get('Health') or {}).get('Status') if isinstance(state.get('Health'), dict) else None,
        # Full `docker inspect`: Image is the image id and Config.Image the reference.
        image=(data.get('Config') or {}).get('Image') or data.get('Image'))
    return out
