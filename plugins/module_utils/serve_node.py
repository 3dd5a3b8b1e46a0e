# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the serve role reads on a node before it decides anything, in one module run (serve_node_info).

Pure logic, no Ansible imports, Python 3.8 compatible. Read only: nothing here changes the node. The commands
(docker, findmnt, nft, systemctl) run through a ``run(argv)`` callable that returns ``(rc, stdout, stderr)``, so the
tests feed it canned answers.

- The container definition's probes: the RDMA devices, the docker CLI, the image's ID, how the model cache is
  mounted (read-only NFS on the clients of the NFS mode) and the running container's state and fingerprint label.
- The checkpoint guard's reads: the snapshot directory, the NFS mount on the exporting node's peers, the checkpoint
  role's verified stamp and the per-file re-check against its record (size, mtime, ctime, inode).
- Whether the recipe's hotfix tree is whole (every file against the controller's checksums).
- The firewall's state: nft, the live table, what the last apply recorded.
- Files the role writes, by content digest, mode and owner, which packages are installed and whether a systemd unit
  is enabled or active: when all are as wanted, the role does not reach the tasks that write them.
"""

import errno
import json
import os
import re
import stat

from ansible_collections.dspark.cluster.plugins.module_utils.file_state import file_record
from ansible_collections.dspark.cluster.plugins.module_utils.checkpoint import (
    CheckpointError,
    load_verified_files,
    model_dir,
    recheck,
    render_recheck,
    resolve_revision,
    sha256_file,
    snapshot_dir,
)

# sha256sum(1) check lines: "<64 hex>  <name>" (text) or "<64 hex> *<name>" (binary).
_SUM_LINE = re.compile(r'^([0-9a-f]{64}) [ *](.+)$')
CONFIG_LABEL = 'dspark.cluster/config'


def _read(path):
    try:
        with open(path, 'rb') as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def file_sha256(path):
    """sha256 hex digest of a regular file's bytes (None when it is not a readable regular file); the checkpoint's
    chunked reader does the hashing."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        return sha256_file(path, sparse=False)
    except (IOError, OSError):
        return None


def file_digest(path):
    """{"sha256", "mode"} of a regular file (links not followed), None when absent or no regular file. Only for files
    that hold no secret: the digest is returned."""
    record = file_record(path)
    return {'sha256': record['sha256'], 'mode': record['mode']} if record else None


def file_current(path, sha256=None, mode=None, kind='file', uid=None, gid=None):
    """Whether ``path`` is a regular file (or a directory, or a socket) with that content digest, mode and owner (each
    when given); with kind 'absent', whether nothing is there."""
    try:
        info = os.lstat(path)
    except OSError as e:
        return kind == 'absent' and e.errno == errno.ENOENT
    if kind == 'absent':
        return False
    if kind == 'directory':
        if not stat.S_ISDIR(info.st_mode):
            return False
    elif kind == 'socket':
        if not stat.S_ISSOCK(info.st_mode):
            return False
    elif not stat.S_ISREG(info.st_mode):
        return False
    if mode and '%04o' % stat.S_IMODE(info.st_mode) != '%04o' % int(str(mode), 8):
        return False
    if (uid is not None and info.st_uid != uid) or (gid is not None and info.st_gid != gid):
        return False
    return not sha256 or (kind == 'file' and file_sha256(path) == sha256)


def tree_held(directory, sums):
    """Whether every file that the sha256sum(1) check text ``sums`` names under ``directory`` has its digest.

    Anything unusual (an empty or malformed line, an escaped name, a path leaving the directory) reads as not held,
    so the role's own `sha256sum --check --strict` decides.
    """
    lines = (sums or '').splitlines()
    if not lines or not os.path.isdir(directory):
        return False
    for line in lines:
        found = _SUM_LINE.match(line)
        if not found or line.startswith('\\'):
            return False
        name = found.group(2)
        if name.startswith('/') or '..' in name.split('/'):
            return False
        if file_sha256(os.path.join(directory, name)) != found.group(1):
            return False
    return True


def packages_installed(names, rc, stdout):
    """`dpkg-query --show --showformat '${Package} ${db:Status-Abbrev}\\n' NAME...`: name -> whether it is installed
    (status `ii`). A name dpkg does not know, or no dpkg at all, reads as not installed; rc is 1 when any is unknown,
    so the output decides."""
    found = {}
    for line in (stdout or '').splitlines():
        parts = line.split()
        if len(parts) >= 2:
            found[parts[0].split(':')[0]] = parts[1] == 'ii'
    return dict((name, bool(found.get(name))) for name in names) if rc in (0, 1) else dict((n, False) for n in names)


def cache_read_only(rc, stdout):
    """`findmnt --noheadings --output FSTYPE,OPTIONS --target <cache>`: whether the options hold `ro`."""
    return rc == 0 and 'ro' in ((stdout or '').split() + ['', ''])[1].split(',')


def mounted_filesystem(rc, stdout):
    """The first filesystem of `findmnt --json` output ({source, fstype, options}), {} when none or unreadable."""
    if rc != 0:
        return {}
    try:
        found = json.loads(stdout).get('filesystems') or []
    except (ValueError, AttributeError):
        return {}
    return found[0] if found and isinstance(found[0], dict) else {}


def read_stamp(path):
    """The checkpoint role's verified stamp as a dict ({} when absent, empty or not a JSON object)."""
    data = _read(path)
    if data is None:
        return {}
    text = data.decode('utf-8', 'replace')
    if not text.strip().startswith('{'):
        return {}
    try:
        stamp = json.loads(text)
    except ValueError:
        return {}
    return stamp if isinstance(stamp, dict) else {}


def image_state(rc, stdout, stderr):
    """`docker image inspect --format {{.Id}} <image>` -> {'id': ID or None, 'reason': why not, '' for no such image}."""
    image_id = (stdout or '').strip().splitlines()[0].strip() if rc == 0 and (stdout or '').strip() else None
    if image_id:
        return {'id': image_id, 'reason': ''}
    text = (stderr or stdout or '').strip()
    return {'id': None, 'reason': '' if 'no such image' in text.lower() else text}


def container_state(rc, stdout):
    """`docker container inspect <name>` -> {'exists', 'status', 'config'} (the fingerprint label); nothing else,
    since the container's environment holds the API key."""
    absent = {'exists': False, 'status': '', 'config': ''}
    if rc != 0:
        return absent
    try:
        found = json.loads(stdout)
    except ValueError:
        return absent
    if isinstance(found, list):
        found = found[0] if found else None
    if not isinstance(found, dict):
        return absent
    labels = (found.get('Config') or {}).get('Labels') or {}
    return {'exists': True, 'status': (found.get('State') or {}).get('Status') or '',
            'config': labels.get(CONFIG_LABEL, '') if isinstance(labels, dict) else ''}


ENGINE_LABEL = 'dspark.cluster/engine'
# One line per container: its name, state, engine label and fingerprint label (tab-separated; none of them holds a tab).
ENGINES_FORMAT = '{{.Names}}\t{{.State}}\t{{.Label "%s"}}\t{{.Label "%s"}}' % (ENGINE_LABEL, CONFIG_LABEL)


def engine_containers(rc, stdout):
    """`docker ps -a --filter label=dspark.cluster/engine --format ENGINES_FORMAT` -> {container: {'engine', 'status',
    'config'}}: every sidecar engine's container on the node (issue #46), wanted or left over; {} when docker failed."""
    found = {}
    if rc != 0:
        return found
    for line in (stdout or '').splitlines():
        parts = line.split('\t')
        if len(parts) == 4 and parts[0]:
            found[parts[0]] = {'engine': parts[2], 'status': parts[1], 'config': parts[3]}
    return found


def recheck_checkpoint(model, revision, cache_dir, files_path):
    """The checkpoint_manifest module's state=rechecked, as a result dict (never raises).

    {ok, msg, code, manifest_sha256, files_path, ...}: ``ok`` false with ``msg`` when a file changed since the
    verification, the record is missing or malformed, or the input is bad.
    """
    try:
        repo = os.path.realpath(model_dir(cache_dir, model))
        if os.path.realpath(files_path).startswith(repo + os.sep):
            raise CheckpointError('files_path %s is inside the model directory %s' % (files_path, repo), 'invalid_argument')
        revision = resolve_revision(cache_dir, model, revision)
        snap = snapshot_dir(cache_dir, model, revision)
        label = '%s@%s' % (model, revision[:12])
        try:
            with open(files_path, 'rb') as handle:
                text = handle.read().decode('utf-8', 'replace')
        except (IOError, OSError) as e:
            raise CheckpointError('%s: no verification record at %s (%s): the checkpoint role writes it beside its stamp '
                                  'after a passed verification' % (label, files_path, e.strerror or e), 'no_record')
        try:
            record = load_verified_files(text, model, revision)
        except CheckpointError as e:
            raise CheckpointError('%s: %s (%s)' % (label, e.message, files_path), e.code)
        outcome = recheck(snap, record['files'])
    except CheckpointError as e:
        return {'ok': False, 'msg': e.message, 'code': e.code, 'files_path': files_path}
    except (IOError, OSError) as e:
        return {'ok': False, 'msg': '%s: %s' % (type(e).__name__, e), 'code': 'io_error', 'files_path': files_path}
    report = render_recheck(outcome, label)
    result = {'ok': outcome['ok'], 'msg': '' if outcome['ok'] else report, 'code': '' if outcome['ok'] else 'changed_since_verification',
              'report': report, 'files_path': files_path, 'manifest_sha256': record.get('manifest_sha256'),
              'changed_files': outcome['changed'], 'missing': outcome['missing'], 'extra': outcome['extra'],
              'checked': outcome['checked']}
    return result


def _snapshot_isdir(path):
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def read_node(params, run):
    """The module's result for ``params`` (its arguments); ``run(argv)`` -> (rc, stdout, stderr)."""
    p = params
    result = {'changed': False, 'engines': {}}
    result['infiniband'] = os.path.lexists(p['infiniband_path'])
    docker = p['docker_path']
    result['docker'] = os.path.lexists(docker)

    image = {'id': None, 'reason': ''}
    container = {'exists': False, 'status': '', 'config': ''}
    lmcache = dict(container)
    if result['docker']:
        if p.get('image'):
            image = image_state(*run([docker, 'image', 'inspect', '--format', '{{.Id}}', p['image']]))
        if p.get('container'):
            rc, out, dummy = run([docker, 'container', 'inspect', p['container']])
            container = container_state(rc, out)
        if p.get('lmcache_container'):
            rc, out, dummy = run([docker, 'container', 'inspect', p['lmcache_container']])
            lmcache = container_state(rc, out)
        if p.get('engines'):
            result['engines'] = engine_containers(*run([docker, 'ps', '--all', '--no-trunc', '--filter', 'label=' + ENGINE_LABEL,
                                                        '--format', ENGINES_FORMAT])[:2])
    result['image'] = image
    result['container'] = container
    result['lmcache'] = lmcache

    result['cache_read_only'] = False
    if p.get('cache_dir'):
        rc, out, dummy = run(['findmnt', '--noheadings', '--output', 'FSTYPE,OPTIONS', '--target', p['cache_dir']])
        result['cache_read_only'] = cache_read_only(rc, out)

    result['snapshot_isdir'] = _snapshot_isdir(p['snapshot_dir']) if p.get('snapshot_dir') else False
    result['snapshots'] = dict((path, _snapshot_isdir(path)) for path in p.get('snapshot_dirs') or [])
    result['cache_mount'] = None
    if p.get('nfs_mountpoint'):
        rc, out, dummy = run(['findmnt', '--json', '--output', 'SOURCE,FSTYPE,OPTIONS', '--mountpoint', p['nfs_mountpoint']])
        result['cache_mount'] = mounted_filesystem(rc, out)
    result['stamp'] = read_stamp(p['stamp_path']) if p.get('stamp_path') else {}
    result['recheck'] = None
    wanted = p.get('recheck') or {}
    if wanted.get('files_path') and result['snapshot_isdir']:
        result['recheck'] = recheck_checkpoint(wanted.get('model'), wanted.get('revision'), wanted.get('cache_dir'),
                                               wanted['files_path'])

    result['hotfix_held'] = tree_held(p['hotfix_dir'], p.get('hotfix_sums')) if p.get('hotfix_dir') else False

    result['firewall'] = None
    if p.get('firewall_table'):
        nft = p['nft_path']
        firewall = {'nft': os.path.lexists(nft), 'live_rc': 1, 'live': '', 'state': None}
        if firewall['nft']:
            rc, out, dummy = run([nft] + (['-s'] if p.get('firewall_stateless') else []) + ['list', 'table', 'inet', p['firewall_table']])
            # As the command module returns it, so that it compares with the record of `nft list table` (a command task).
            firewall.update(live_rc=rc, live=(out or '').rstrip('\r\n'))
        if p.get('firewall_state'):
            data = _read(p['firewall_state'])
            try:
                state = json.loads(data.decode('utf-8')) if data is not None else None
            except (ValueError, UnicodeDecodeError):
                state = None
            firewall['state'] = state if isinstance(state, dict) else None
        result['firewall'] = firewall

    # secret_files: the same comparison; their digests came in an argument the module hides (no_log).
    result['files'] = dict((f['path'], file_current(f['path'], f.get('sha256'), f.get('mode'), f.get('kind') or 'file',
                                                    f.get('uid'), f.get('gid')))
                           for f in (p.get('files') or []) + (p.get('secret_files') or []))
    result['packages'] = {}
    if p.get('packages'):
        rc, out, dummy = run(['dpkg-query', '--show', '--showformat', '${Package} ${db:Status-Abbrev}\n'] + list(p['packages']))
        result['packages'] = packages_installed(p['packages'], rc, out)
    result['digests'] = dict((path, file_digest(path)) for path in p.get('digests') or [])
    result['units'] = {}
    for unit in p.get('units') or []:
        # Only `enabled` counts: anything else (disabled, static, enabled-runtime, no systemd) goes to the role's task.
        rc, out, dummy = run(['systemctl', 'is-enabled', unit])
        result['units'][unit] = rc == 0 and (out or '').strip() == 'enabled'
    result['active'] = {}
    for unit in p.get('active_units') or []:
        rc, out, dummy = run(['systemctl', 'is-active', unit])
        result['active'][unit] = rc == 0 and (out or '').strip() == 'active'
    result['need_daemon_reload'] = {}
    for unit in p.get('reload_units') or []:
        # Unknown (no systemd, an error) reads as needing one: the role's own tasks decide then.
        rc, out, dummy = run(['systemctl', 'show', unit, '--property=NeedDaemonReload', '--value'])
        result['need_daemon_reload'][unit] = not (rc == 0 and (out or '').strip() == 'no')
    return result
