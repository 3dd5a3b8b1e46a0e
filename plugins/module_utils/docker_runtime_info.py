# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the docker_runtime role reads on a node before it configures dockerd, in one module run.

Pure logic, no Ansible imports, Python 3.8 compatible. Read only: nothing here changes the node. ``run_command`` is a
callable ``(argv) -> (rc, stdout, stderr)`` (AnsibleModule.run_command in the module, a fake in the tests).

- daemon.json, parsed (the runtimes that nvidia-ctk registered in it are kept by the role).
- ``stat`` of dockerd's configuration files (daemon.json, the proxy drop-in, its environment file): whether each exists
  and its modification time, in the shape of an ``ansible.builtin.stat`` loop's results (``item`` and ``stat``), which
  the ``dspark.cluster.dockerd_restart_reason`` filter reads.
- ``systemctl show docker.service`` (ActiveState, ActiveEnterTimestamp, NeedDaemonReload, UnitFileState).
- The running containers and whether the engine has live-restore (a daemon that does not answer runs nothing).
- ``docker compose version --short`` (compose v2 answers as a docker plugin).
"""

import json
import os
import re

from ansible_collections.dspark.cluster.plugins.module_utils.file_state import file_record

DOCKER_CLI = '/usr/bin/docker'
UNIT_PROPERTIES = 'ActiveState,ActiveEnterTimestamp,NeedDaemonReload,UnitFileState'
COMPOSE_V2 = re.compile(r'^v?2\.')


class StateError(Exception):
    """A read that must stop the role, with the message the role shows."""


def file_stats(paths):
    """[{"item": path, "stat": {"exists", "mtime"}}] for ``paths``, as an ``ansible.builtin.stat`` loop registers."""
    results = []
    for path in paths:
        try:
            found = os.stat(path)
        except OSError:
            results.append({'item': path, 'stat': {'exists': False}})
            continue
        results.append({'item': path, 'stat': {'exists': True, 'mtime': found.st_mtime}})
    return results


def file_digest(path):
    """{"sha256", "mode"} of a regular file (links followed, as copy writes through them), None when absent or
    unreadable. Only for files whose content the module returns anyway (daemon.json)."""
    record = file_record(path, follow=True)
    return {'sha256': record['sha256'], 'mode': record['mode']} if record else None


def docker_group_users(group='docker'):
    """The accounts that exist and are listed members of ``group`` in the group database ([] without the group)."""
    import grp
    import pwd
    try:
        members = grp.getgrnam(group).gr_mem
    except KeyError:
        return []
    found = []
    for name in members:
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        found.append(name)
    return sorted(found)


def read_daemon_json(path):
    """daemon.json as a dict ({} when the file is absent); StateError when it is not a JSON object."""
    try:
        with open(path, 'rb') as handle:
            raw = handle.read()
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise StateError('%s cannot be read (%s). Nothing was changed. Fix: repair or remove the file, then re-run.'
                         % (path, error.strerror or error)) from None
    try:
        data = json.loads(raw.decode('utf-8'))
        if not isinstance(data, dict):
            raise ValueError('not a JSON object')
    except ValueError as error:
        raise StateError('%s is not valid JSON, so the runtimes registered in it cannot be kept (%s). Nothing was '
                         'changed. Fix: repair or remove the file, then re-run.' % (path, str(error)[:300])) from None
    return data


def running_containers(run_command, docker=DOCKER_CLI):
    """Names of the running containers; [] when dockerd does not answer."""
    rc, out, _err = run_command([docker, 'ps', '--format', '{{.Names}}'])
    if rc != 0:
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def live_restore(run_command, docker=DOCKER_CLI):
    """Whether the running engine has live-restore; False when dockerd does not answer."""
    rc, out, _err = run_command([docker, 'info', '--format', '{{json .LiveRestoreEnabled}}'])
    return rc == 0 and out.strip() == 'true'


def image_id(run_command, ref, docker=DOCKER_CLI):
    """The local image ID of ``ref`` (as `docker image inspect` gives it), '' when it is not present."""
    rc, out, _err = run_command([docker, 'image', 'inspect', '--format', '{{.Id}}', ref])
    found = out.strip()
    return found if rc == 0 and found.startswith('sha256:') else ''


def compose_check(run_command, docker=DOCKER_CLI):
    """(version, problem): compose v2's version, and why it does not answer as a docker plugin ("" when it does)."""
    rc, out, err = run_command([docker, 'compose', 'version', '--short'])
    version = out.strip()
    if rc == 0 and COMPOSE_V2.match(version):
        return version, ''
    said = (err.strip() or version or 'no output')[:400]
    return version, '`docker compose version --short` exited %d: %s' % (rc, said)


def read_state(run_command, daemon_json, files, exists=None, docker=None, image=None):
    """Everything the role reads, as the module returns it (StateError: stop with its message)."""
    docker = docker or DOCKER_CLI
    cli = bool((exists or os.path.exists)(docker))
    result = {
        'cli': cli,
        'daemon_json': read_daemon_json(daemon_json),
        'daemon_json_file': file_digest(daemon_json),
        'config_stats': file_stats(files),
        'docker_group_users': docker_group_users(),
        'unit': '',
        'running': [],
        'live_restore': False,
        'compose_version': '',
        'compose_problem': '',
        'image_id': '',
    }
    if not cli:
        # A fresh node in check mode: nothing is installed, there is no dockerd to ask.
        return result
    rc, out, err = run_command(['systemctl', 'show', 'docker.service', '--timestamp=us+utc',
                                '--property=' + UNIT_PROPERTIES])
    if rc != 0:
        raise StateError('systemctl show docker.service exited %d: %s' % (rc, (err or out).strip()[:400]))
    result['unit'] = out
    result['running'] = running_containers(run_command, docker)
    result['live_restore'] = live_restore(run_command, docker)
    result['compose_version'], result['compose_problem'] = compose_check(run_command, docker)
    if image:
        result['image_id'] = image_id(run_command, image, docker)
    return result
