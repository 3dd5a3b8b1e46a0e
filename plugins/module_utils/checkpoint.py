# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checkpoint integrity for Hugging Face cache snapshots: manifest, verify, shard completeness.

Pure logic, no Ansible imports, Python 3.8 compatible.

A silently incomplete copy of a ~155 GB checkpoint costs a 25-minute start, so the source node
writes a manifest (relative path, size, sha256) and every target verifies its copy against it.
Hashing 155 GB takes minutes; a local *state* (path -> size, mtime_ns, ctime_ns, ino, sha256 of
files that verified) lets an unchanged copy re-verify with one stat per file.

Layout (``cache_dir`` is what serving sees as HF_HOME)::

    <cache_dir>/hub/models--ORG--NAME/refs/main            -> "<40-hex revision>"
    <cache_dir>/hub/models--ORG--NAME/snapshots/<rev>/...   files, or symlinks into ../../blobs/<id>
    <cache_dir>/hub/models--ORG--NAME/blobs/<id>

Nothing here writes to the snapshot: the source is only read.
"""

import errno
import hashlib
import json
import os
import re
import stat
import time
from concurrent.futures import ThreadPoolExecutor

MANIFEST_FORMAT = 'dspark.cluster/checkpoint-manifest'
STATE_FORMAT = 'dspark.cluster/checkpoint-state'
MANIFEST_VERSION = 1
INDEX_FILE = 'model.safetensors.index.json'
CHUNK = 8 * 1024 * 1024
# hashlib releases the GIL on large updates, so threads hash several shards at once.
DEFAULT_JOBS = 4

_REVISION_RE = re.compile(r'^[0-9a-f]{40}$')
_NAME_PART = r'[A-Za-z0-9][A-Za-z0-9._-]*'
_MODEL_ID_RE = re.compile(r'^%s(/%s)?$' % (_NAME_PART, _NAME_PART))
_REF_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]*$')
_ZEROS = memoryview(bytes(CHUNK))


class CheckpointError(Exception):
    """A problem the caller cannot repair by copying again (bad input, unsafe tree, malformed file)."""

    def __init__(self, message, code='checkpoint_error', details=None):
        super(CheckpointError, self).__init__(message)
        self.message = message
        self.code = code
        self.details = details or {}


# --- Hugging Face cache paths -------------------------------------------------------------------

def is_revision(value):
    """True for a full 40-hex commit id, the only thing a snapshot directory is named after."""
    return isinstance(value, str) and bool(_REVISION_RE.match(value))


def repo_folder(model_id):
    """'ORG/NAME' -> 'models--ORG--NAME', as huggingface_hub names the cache folder."""
    if not isinstance(model_id, str) or not _MODEL_ID_RE.match(model_id) or '--' in model_id or '..' in model_id:
        raise CheckpointError("invalid model id %r: expected ORG/NAME" % (model_id,), 'invalid_argument')
    return 'models--' + model_id.replace('/', '--')


def model_dir(cache_dir, model_id):
    return os.path.join(cache_dir, 'hub', repo_folder(model_id))


def snapshot_dir(cache_dir, model_id, revision):
    if not is_revision(revision):
        raise CheckpointError("invalid revision %r: expected a 40-hex commit id" % (revision,), 'invalid_argument')
    return os.path.join(model_dir(cache_dir, model_id), 'snapshots', revision)


def read_ref(cache_dir, model_id, ref='main'):
    """The revision refs/<ref> names, None when the ref file is absent; a bad ref file is an error."""
    if not _REF_RE.match(ref) or '..' in ref:
        raise CheckpointError("invalid ref name %r" % (ref,), 'invalid_argument')
    path = os.path.join(model_dir(cache_dir, model_id), 'refs', ref)
    try:
        with open(path, 'r') as f:
            value = f.read(200).strip()
    except IOError as e:
        if e.errno == errno.ENOENT:
            return None
        raise CheckpointError("cannot read %s: %s" % (path, e), 'bad_ref')
    if not is_revision(value):
        raise CheckpointError("%s holds %r, not a 40-hex commit id" % (path, value[:80]), 'bad_ref')
    return value


def resolve_revision(cache_dir, model_id, revision=None):
    """A commit id as given (lower-cased), or the commit a ref (default refs/main) names."""
    if revision and re.match(r'^[0-9a-fA-F]{40}$', revision):
        return revision.lower()
    ref = revision or 'main'
    value = read_ref(cache_dir, model_id, ref)
    if value is None:
        raise CheckpointError("no revision given and %s has no refs/%s"
                              % (model_dir(cache_dir, model_id), ref), 'no_ref')
    return value


# --- scanning and hashing -----------------------------------------------------------------------

def _containment_root(snapshot):
    # A snapshot lives at <model>/snapshots/<rev>; its symlinks may point anywhere in <model>
    # (normally ../../blobs), never outside. A bare directory only contains itself.
    real = os.path.realpath(snapshot)
    parent = os.path.dirname(real)
    if os.path.basename(parent) == 'snapshots':
        return os.path.dirname(parent)
    return real


def _inside(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def scan(snapshot, root=None):
    """Regular files under ``snapshot``: {relpath: {size, mtime_ns, ctime_ns, ino}}.

    Symlinks are resolved when their target stays inside the model directory (``root``); a
    dangling one maps to None (the caller reports it missing). A symlink leaving the model
    directory, or anything that is not a regular file, raises CheckpointError: it is never followed.
    Paths use '/' and are sorted.
    """
    if not os.path.isdir(snapshot):
        raise CheckpointError("snapshot directory %s does not exist" % snapshot, 'no_snapshot')
    root = os.path.realpath(root) if root else _containment_root(snapshot)
    files, unsafe = {}, []
    for dirpath, dirnames, filenames in os.walk(snapshot):
        # os.walk lists symlinked directories in dirnames without entering them: treat as files.
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, snapshot).replace(os.sep, '/')
            if os.path.islink(path):
                target = os.path.realpath(path)
                if not _inside(target, root):
                    unsafe.append('%s -> %s' % (rel, os.readlink(path)))
                    continue
                if not os.path.lexists(target):
                    files[rel] = None
                    continue
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                unsafe.append('%s (not a regular file)' % rel)
                continue
            files[rel] = {'size': st.st_size, 'mtime_ns': st.st_mtime_ns, 'ctime_ns': st.st_ctime_ns, 'ino': st.st_ino}
    if unsafe:
        raise CheckpointError("refusing to follow %d path(s) in %s that leave the model directory %s or are not "
                              "regular files: %s" % (len(unsafe), snapshot, root, ', '.join(sorted(unsafe))),
                              'unsafe_path', {'paths': sorted(unsafe)})
    return dict(sorted(files.items()))


def _hole_aware_regions(fd, size):
    """(offset, length, is_data) covering [0, size); holes found with SEEK_DATA/SEEK_HOLE."""
    pos = 0
    while pos < size:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # only a hole is left
                data = size
            else:
                raise
        data = min(data, size)
        if data > pos:
            yield pos, data - pos, False
        if data >= size:
            return
        hole = min(os.lseek(fd, data, os.SEEK_HOLE), size)
        yield data, hole - data, True
        pos = hole


def sha256_file(path, sparse=True):
    """sha256 of the file, read in 8 MiB chunks.

    With ``sparse`` (and SEEK_DATA support) holes are fed to the hash as zeros without reading
    them; the digest is identical to a plain read. Only ``size`` bytes from open time are hashed.
    """
    digest = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        regions = [(0, size, True)]
        if sparse and hasattr(os, 'SEEK_DATA'):
            try:
                regions = list(_hole_aware_regions(fd, size))
            except OSError:  # filesystem without SEEK_DATA: read everything
                regions = [(0, size, True)]
        for offset, length, is_data in regions:
            if not is_data:
                while length > 0:
                    n = min(length, CHUNK)
                    digest.update(_ZEROS[:n])
                    length -= n
                continue
            os.lseek(fd, offset, os.SEEK_SET)
            while length > 0:
                n = os.readv(fd, [view[:min(length, CHUNK)]])
                if n == 0:  # truncated while hashing: the digest will not match
                    break
                digest.update(view[:n])
                length -= n
    finally:
        os.close(fd)
    return digest.hexdigest()


def _hash_many(snapshot, paths, jobs, sparse):
    def one(rel):
        return rel, sha256_file(os.path.join(snapshot, rel), sparse=sparse)
    if jobs <= 1 or len(paths) <= 1:
        return dict(one(p) for p in paths)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(pool.map(one, paths))


def _state_hit(record, info):
    # ctime and inode cannot be set back by a tool, so a rewrite that restores mtime is still noticed.
    return (isinstance(record, dict) and isinstance(info, dict) and record.get('sha256')
            and all(record.get(k) == info[k] for k in ('size', 'mtime_ns', 'ctime_ns', 'ino')))


# --- manifest -----------------------------------------------------------------------------------

def build_manifest(snapshot, hash=True, model=None, revision=None, state=None, full=False,
                   jobs=DEFAULT_JOBS, sparse=True, stats=None):
    """Manifest of every file in the snapshot: entries of {path, size, sha256}.

    ``state`` (optional dict path -> record) is read for the fast path unless ``full`` and is
    updated in place with the records of this run; ``stats`` (optional dict) receives hashed,
    fast_path_hits and bytes_hashed. A dangling symlink is an error: the source must be complete
    before it describes what targets should hold.
    """
    files = scan(snapshot)
    broken = sorted(p for p, info in files.items() if info is None)
    if broken:
        raise CheckpointError("snapshot %s has dangling symlinks (incomplete download?): %s"
                              % (snapshot, ', '.join(broken)), 'incomplete_source', {'missing': broken})
    digests = {}
    if hash:
        state = state if state is not None else {}
        todo = []
        for rel, info in files.items():
            if not full and _state_hit(state.get(rel), info):
                digests[rel] = state[rel]['sha256']
            else:
                todo.append(rel)
        digests.update(_hash_many(snapshot, todo, jobs, sparse))
        fresh = dict((rel, dict(files[rel], sha256=digests[rel])) for rel in files)
        state.clear()
        state.update(fresh)
        if stats is not None:
            stats.update(hashed=len(todo), fast_path_hits=len(files) - len(todo),
                         bytes_hashed=sum(files[p]['size'] for p in todo))
    entries = []
    for rel, info in files.items():
        entry = {'path': rel, 'size': info['size']}
        if hash:
            entry['sha256'] = digests[rel]
        entries.append(entry)
    return {
        'format': MANIFEST_FORMAT,
        'version': MANIFEST_VERSION,
        'model': model,
        'revision': revision,
        'created': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
        'algorithm': 'sha256',
        'file_count': len(entries),
        'total_size': sum(e['size'] for e in entries),
        'entries': entries,
    }


def _safe_relpath(path):
    return (isinstance(path, str) and path and not path.startswith('/') and '\\' not in path
            and all(part not in ('', '.', '..') for part in path.split('/')))


def load_manifest(data):
    """Validate a manifest given as JSON text or a dict; returns the dict or raises CheckpointError."""
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except ValueError as e:
            raise CheckpointError("manifest is not valid JSON: %s" % e, 'malformed_manifest')
    problems = []
    if not isinstance(data, dict):
        raise CheckpointError("manifest must be a JSON object", 'malformed_manifest')
    if data.get('format') != MANIFEST_FORMAT or data.get('version') != MANIFEST_VERSION:
        problems.append("format/version must be %s/%d, got %r/%r"
                        % (MANIFEST_FORMAT, MANIFEST_VERSION, data.get('format'), data.get('version')))
    if data.get('revision') is not None and not is_revision(data.get('revision')):
        problems.append("revision %r is not a 40-hex commit id" % (data.get('revision'),))
    entries = data.get('entries')
    seen = set()
    if not isinstance(entries, list):
        problems.append("entries must be a list")
        entries = []
    for i, e in enumerate(entries):
        if not (isinstance(e, dict) and _safe_relpath(e.get('path')) and isinstance(e.get('size'), int)
                and e['size'] >= 0 and re.match(r'^[0-9a-f]{64}$', str(e.get('sha256'))) and e['path'] not in seen):
            problems.append("entry %d is not {path (relative, unique), size, sha256}: %r" % (i, e))
        else:
            seen.add(e['path'])
    if problems:
        raise CheckpointError("malformed manifest: " + '; '.join(problems[:5]), 'malformed_manifest')
    return data


def dump_json(data):
    """Stable text (sorted keys) so an unchanged manifest is byte-identical apart from 'created'."""
    return json.dumps(data, indent=1, sort_keys=True) + '\n'


def same_content(a, b):
    """True when two manifests differ at most in their creation time."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    return dict((k, v) for k, v in a.items() if k != 'created') == dict((k, v) for k, v in b.items() if k != 'created')


# --- verification -------------------------------------------------------------------------------

def verify(snapshot, manifest, state=None, full=False, jobs=DEFAULT_JOBS, sparse=True):
    """Compare the local snapshot with a manifest; only reads the snapshot.

    Returns {ok, missing[], corrupt[{path, reason, expected, actual}], extra[], checked, hashed,
    fast_path_hits, bytes_hashed}. ``ok`` is false on ``extra`` files too (#26): a file the manifest
    does not list (planted by whoever holds the copy key, or left by an interrupted receiver) could be
    read by a loader (a tokenizer file, Python that config.json names), so the snapshot must hold the
    manifest's files and nothing else. Nothing is exempt: in a cache (``HF_HOME``) huggingface_hub
    writes only the repository's own files into ``snapshots/<rev>`` (``.gitattributes`` and the like
    are repository files, so they are in the source's manifest; ``.cache/huggingface/`` exists only
    in ``--local-dir`` downloads, which the checkpoint role never makes), and the role's own files
    (manifest, state, verified stamp) live outside the model directory.
    ``state`` (dict) is read for the fast path unless ``full`` and rewritten in place to hold only
    files that verified, so a corrupt or repaired file is always hashed again.
    """
    manifest = load_manifest(manifest)
    state = state if state is not None else {}
    # No snapshot at all (nothing copied yet) is the extreme of incomplete: every file is missing.
    files = scan(snapshot) if os.path.lexists(snapshot) else {}
    expected = dict((e['path'], e) for e in manifest['entries'])
    missing = sorted(p for p in expected if files.get(p) is None)
    extra = sorted(p for p in files if p not in expected)
    corrupt, digests, todo, hits = [], {}, [], 0
    for rel in sorted(expected):
        info, want = files.get(rel), expected[rel]
        if info is None:
            continue
        if info['size'] != want['size']:
            corrupt.append({'path': rel, 'reason': 'size', 'expected': want['size'], 'actual': info['size']})
        elif not full and _state_hit(state.get(rel), info):
            digests[rel] = state[rel]['sha256']
            hits += 1
        else:
            todo.append(rel)
    digests.update(_hash_many(snapshot, todo, jobs, sparse))
    verified = {}
    for rel in sorted(digests):
        if digests[rel] == expected[rel]['sha256']:
            verified[rel] = dict(files[rel], sha256=digests[rel])
        else:
            corrupt.append({'path': rel, 'reason': 'sha256', 'expected': expected[rel]['sha256'],
                            'actual': digests[rel]})
    state.clear()
    state.update(verified)
    corrupt.sort(key=lambda c: c['path'])
    return {
        'ok': not missing and not corrupt and not extra,
        'missing': missing,
        'corrupt': corrupt,
        'extra': extra,
        'checked': len(expected) - len(missing),
        'hashed': len(todo),
        'fast_path_hits': hits,
        'bytes_hashed': sum(files[p]['size'] for p in todo),
    }


def state_document(snapshot, entries):
    """The local state file's content: hash records bound to one snapshot directory."""
    return {'format': STATE_FORMAT, 'version': MANIFEST_VERSION, 'snapshot': os.path.realpath(snapshot),
            'entries': entries}


def state_entries(document, snapshot):
    """Records of a state document when it belongs to this snapshot; anything else starts over."""
    if (isinstance(document, dict) and document.get('format') == STATE_FORMAT
            and document.get('version') == MANIFEST_VERSION
            and document.get('snapshot') == os.path.realpath(snapshot) and isinstance(document.get('entries'), dict)):
        return dict(document['entries'])
    return {}


def index_completeness(snapshot, files=None):
    """Shards named by model.safetensors.index.json's weight_map against the files present.

    Returns {index, shards_expected, shards_present, missing[], shards[]}. No index, or an index
    that is not JSON with a non-empty weight_map of relative file names, raises CheckpointError.
    """
    files = scan(snapshot) if files is None else files
    if files.get(INDEX_FILE) is None:
        raise CheckpointError("%s has no %s" % (snapshot, INDEX_FILE), 'no_index')
    path = os.path.join(snapshot, INDEX_FILE)
    try:
        with open(path, 'rb') as f:
            index = json.loads(f.read().decode('utf-8'))
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError("malformed %s: not JSON (%s)" % (path, e), 'malformed_index')
    weight_map = index.get('weight_map') if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError("malformed %s: no non-empty 'weight_map' object" % path, 'malformed_index')
    bad = sorted(set(repr(v) for v in weight_map.values() if not _safe_relpath(v)))
    if bad:
        raise CheckpointError("malformed %s: weight_map values must be relative file names, got %s"
                              % (path, ', '.join(bad[:5])), 'malformed_index')
    shards = sorted(set(weight_map.values()))
    missing = [s for s in shards if files.get(s) is None]
    return {'index': INDEX_FILE, 'shards_expected': len(shards), 'shards_present': len(shards) - len(missing),
            'missing': missing, 'shards': shards}


def _names(items, limit):
    shown = ', '.join(items[:limit])
    return shown + (' and %d more' % (len(items) - limit) if len(items) > limit else '')


def render_report(result, label='checkpoint', index=None, limit=10):
    """A few lines naming what is missing, corrupt or not in the manifest, so a re-run knows what to repair."""
    missing = list(result.get('missing', []))
    corrupt = result.get('corrupt', [])
    extra = list(result.get('extra', []))
    index_missing = [s for s in (index or {}).get('missing', []) if s not in missing]
    if result.get('ok') and not extra and not index_missing:
        return "%s: OK, %d files verified (%d hashed, %d unchanged since the last verification)" % (
            label, result['checked'], result['hashed'], result['fast_path_hits'])
    incomplete = missing or corrupt or index_missing
    lines = ["%s: %s: %d missing, %d corrupt of %d files in the manifest%s"
             % (label, 'INCOMPLETE' if incomplete else 'UNEXPECTED FILES', len(missing), len(corrupt),
                result.get('checked', 0) + len(missing), ', %d file(s) not in it' % len(extra) if extra else '')]
    if extra:
        lines.append("not in the manifest: " + _names(extra, limit))
    if missing:
        lines.append("missing: " + _names(missing, limit))
    if corrupt:
        lines.append("corrupt: " + _names(['%s (%s: expected %s, actual %s)' % (
            c['path'], c['reason'], str(c['expected'])[:12], str(c['actual'])[:12]) for c in corrupt], limit))
    if index_missing:
        lines.append("shards named by %s but absent: %s" % (index['index'], _names(index_missing, limit)))
    if incomplete:
        lines.append("copy the named files again from the source, then re-run the verification")
    if extra:
        lines.append("files not in the manifest fail the verification (planted, or left by an interrupted copy): remove "
                     "them from the snapshot, or re-run the copy (the SCP mode removes them on the target first)")
    return '\n'.join(lines)


# --- what only a hostile sender makes (SCP targets) ---------------------------------------------

# Mode bits an honest copy never leaves (it sends directories 0755 and files 0644): setuid, setgid, group or world
# writable.
_HOSTILE_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_IWGRP | stat.S_IWOTH


def _owner_name(uid):
    try:
        import pwd
        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def hostile_reason(st):
    """Why an entry with lstat ``st`` is one the copy never makes, or None: a link (the copy sends what links point
    to; rrsync -munge turns a sender's links into "/rsyncd-munged/..."), a device, FIFO or socket, or a setuid/setgid
    or group/world-writable entry."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return 'link'
    if stat.S_ISBLK(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return 'special file'
    if stat.S_IMODE(mode) & _HOSTILE_BITS:
        return 'mode'
    return None


def hostile_entries(directory):
    """Every entry under ``directory`` (itself included; links not followed; other filesystems not entered) that
    only a hostile sender makes (hostile_reason), each as "MODE OWNER PATH" (find's -printf '%M %u %p'). Raises
    CheckpointError when part of the tree cannot be read: an unread subtree proves nothing."""
    found = []

    def consider(path, st):
        if hostile_reason(st):
            found.append('%s %s %s' % (stat.filemode(st.st_mode), _owner_name(st.st_uid), path))

    try:
        top = os.lstat(directory)
    except OSError as e:
        raise CheckpointError('cannot read %s: %s' % (directory, e.strerror or e), 'io_error')
    consider(directory, top)
    if not stat.S_ISDIR(top.st_mode):
        return found
    pending = [directory]
    while pending:
        current = pending.pop()
        try:
            names = sorted(os.listdir(current))
        except OSError as e:
            raise CheckpointError('cannot list %s: %s' % (current, e.strerror or e), 'io_error')
        for name in names:
            path = os.path.join(current, name)
            try:
                st = os.lstat(path)
            except OSError as e:
                raise CheckpointError('cannot read %s: %s' % (path, e.strerror or e), 'io_error')
            consider(path, st)
            if stat.S_ISDIR(st.st_mode) and st.st_dev == top.st_dev:
                pending.append(path)
    return sorted(found, key=lambda line: line.split(' ', 2)[2])


# --- fast re-check at every start (#26) ------------------------------------------------------------

VERIFIED_FILES_FORMAT = 'dspark.cluster/checkpoint-verified-files'
# What a start compares, per file, with the verification's record. ctime and the inode cannot be set back by a
# tool, so content rewritten in place with its mtime restored is noticed too; nothing is read but metadata.
RECHECK_FIELDS = ('size', 'mtime_ns', 'ctime_ns', 'ino')


def stat_table(records):
    """{path: {size, mtime_ns, ctime_ns, ino}} of scan or state records (sha256 and anything else dropped)."""
    return dict((rel, dict((k, info[k]) for k in RECHECK_FIELDS))
                for rel, info in sorted((records or {}).items()) if isinstance(info, dict))


def verified_files_document(model, revision, manifest_sha256, files):
    """The per-node record a verification leaves beside the stamp: what recheck() compares a start with."""
    return {'format': VERIFIED_FILES_FORMAT, 'version': MANIFEST_VERSION, 'model': model, 'revision': revision,
            'manifest_sha256': manifest_sha256, 'files': stat_table(files)}


def load_verified_files(data, model, revision):
    """The table of a verified-files document for model@revision; CheckpointError('no_record') otherwise."""
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except ValueError as e:
            raise CheckpointError("the verification record is not JSON: %s" % e, 'no_record')
    if not (isinstance(data, dict) and data.get('format') == VERIFIED_FILES_FORMAT
            and data.get('version') == MANIFEST_VERSION and isinstance(data.get('files'), dict)):
        raise CheckpointError("the verification record is not a %s document" % VERIFIED_FILES_FORMAT, 'no_record')
    if data.get('model') != model or data.get('revision') != revision:
        raise CheckpointError("the verification record is of %s@%s, not %s@%s" % (
            data.get('model'), data.get('revision'), model, revision), 'no_record')
    bad = sorted(p for p, info in data['files'].items()
                 if not (_safe_relpath(p) and isinstance(info, dict)
                         and all(isinstance(info.get(k), int) and not isinstance(info.get(k), bool) for k in RECHECK_FIELDS)))
    if bad:
        raise CheckpointError("the verification record has malformed entries: %s" % _names(bad, 5), 'no_record')
    return data


def recheck(snapshot, table, root=None):
    """Compare the snapshot's files with the verification's table by metadata only (one stat per file).

    ``table`` is {path: {size, mtime_ns, ctime_ns, ino}} (stat_table). Returns {ok, changed[{path, fields[]}],
    missing[], extra[], checked}: ``changed`` names the fields that differ, ``missing`` recorded files that are gone
    (or dangling links), ``extra`` files the verification never saw. Pure: reads metadata, writes nothing.
    """
    files = scan(snapshot, root) if os.path.lexists(snapshot) else {}
    missing = sorted(p for p in table if files.get(p) is None)
    extra = sorted(p for p in files if p not in table)
    changed = []
    for rel in sorted(table):
        info = files.get(rel)
        if info is None:
            continue
        fields = [k for k in RECHECK_FIELDS if info[k] != table[rel].get(k)]
        if fields:
            changed.append({'path': rel, 'fields': fields})
    return {'ok': not (missing or extra or changed), 'changed': changed, 'missing': missing, 'extra': extra,
            'checked': len(table) - len(missing)}


def render_recheck(result, label='checkpoint', limit=10):
    """One line: OK, or what changed since the verification, by name."""
    if result.get('ok'):
        return "%s: OK, %d files unchanged since the verification (size, mtime, ctime, inode)" % (label, result['checked'])
    parts = []
    if result.get('changed'):
        parts.append("changed: " + _names(['%s (%s)' % (c['path'], ', '.join(c['fields'])) for c in result['changed']],
                                          limit))
    if result.get('missing'):
        parts.append("missing: " + _names(result['missing'], limit))
    if result.get('extra'):
        parts.append("not in the verified checkpoint: " + _names(result['extra'], limit))
    return "%s: CHANGED SINCE ITS VERIFICATION: %s" % (label, '; '.join(parts))


# --- the controller's trusted manifest per group (#26) -------------------------------------------

TRUST_FORMAT = 'dspark.cluster/checkpoint-trust'


def manifest_digest(manifest):
    """sha256 of the manifest without its creation time, as the checkpoint role's stamp records it (Ansible's
    ``{'model', 'revision', 'entries'} | to_json(sort_keys=true) | hash('sha256')``: json.dumps' defaults)."""
    manifest = load_manifest(manifest)
    core = {'model': manifest.get('model'), 'revision': manifest.get('revision'), 'entries': manifest['entries']}
    return hashlib.sha256(json.dumps(core, sort_keys=True).encode('utf-8')).hexdigest()


def trust_records(document, group):
    """{"<model>@<revision>": {model, revision, manifest_sha256}} of a group's trust file; None (no file) is empty."""
    if document is None:
        return {}
    if not (isinstance(document, dict) and document.get('format') == TRUST_FORMAT
            and document.get('version') == MANIFEST_VERSION and isinstance(document.get('records'), dict)):
        raise CheckpointError("the trust file of group %s is not a %s document" % (group, TRUST_FORMAT), 'malformed_trust')
    if document.get('group') != group:
        raise CheckpointError("the trust file names group %r, not %r" % (document.get('group'), group), 'malformed_trust')
    return dict(document['records'])


def trust_decision(records, model, revision, digest, rotate=False):
    """What the controller does with a group's manifest: ('trusted' | 'new' | 'rotated' | 'mismatch', records').

    The first manifest of a model@revision is recorded ('new'); the same digest later is 'trusted'; another digest for
    the same model@revision is a 'mismatch' (a revision is a commit: its files never change) unless ``rotate`` says
    the operator accepts it ('rotated', the record replaced). A new revision is a new record; old ones stay.
    """
    key = '%s@%s' % (model, revision)
    record = {'model': model, 'revision': revision, 'manifest_sha256': digest}
    known = records.get(key)
    out = dict(records)
    if isinstance(known, dict) and known.get('manifest_sha256') == digest:
        return 'trusted', out
    out[key] = record
    if known is None:
        return 'new', out
    return ('rotated' if rotate else 'mismatch'), (out if rotate else dict(records))


def trust_document(group, records):
    return {'format': TRUST_FORMAT, 'version': MANIFEST_VERSION, 'group': group, 'records': dict(sorted(records.items()))}
