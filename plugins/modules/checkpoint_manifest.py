#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checkpoint_manifest
short_description: Build or verify the integrity manifest of a Hugging Face checkpoint snapshot
version_added: 0.1.0
description:
  - Guards checkpoint distribution against silently incomplete copies. A missing or damaged shard
    otherwise shows only after a long vLLM start.
  - With O(state=built), run on the source node, the module lists every file of the snapshot
    C(<cache_dir>/hub/models--ORG--NAME/snapshots/<revision>) with its size and sha256 and writes
    this manifest as JSON to O(manifest_path). The write is atomic. The manifest is rewritten only
    when something other than its creation time changes, so a re-run reports no change.
  - With O(state=verified), run on each target node, the module compares the local snapshot with a
    manifest from O(manifest_path) or O(manifest). It fails and names every missing or corrupt file,
    and every file the manifest does not list, so the next copy step knows what to repair.
  - With O(state=rechecked), run before a start, the module compares each file's size, mtime, ctime and
    inode with the record a verification left in O(files_path) (RV(files), written beside the
    checkpoint role's verified stamp). It reads metadata only, one stat per file, and fails naming
    every changed, missing and unrecorded file.
  - Snapshot entries may be plain files or symlinks into the model's C(blobs/) directory, as in a
    real Hugging Face cache. A symlink that leaves the model directory is never followed and makes
    the module fail.
  - Hashing about 155 GB takes minutes. A local state file records the size, mtime, ctime, inode
    and sha256 of each file that verified. A later run hashes only files whose metadata changed,
    so an unchanged checkpoint re-verifies in seconds. Use O(full=true) to hash everything again.
  - Sparse regions are hashed as zeros without reading them (C(SEEK_DATA)/C(SEEK_HOLE)). The
    digest is the same as for a plain read.
  - The module only reads the snapshot. It never writes into the model directory.
  - Nothing in the snapshot is exempt from the check for files the manifest does not list. In a Hugging Face
    cache, huggingface_hub writes only the repository's files into C(snapshots/<revision>), and the
    collection's own files (manifest, state, stamp) live outside the model directory.
author:
  - dspark.cluster contributors (@dspark)
options:
  model:
    description:
      - Hugging Face model id, C(ORG/NAME), for example C(deepseek-ai/DeepSeek-V4-Flash).
      - When verifying, it must match the model recorded in the manifest.
    type: str
    required: true
  revision:
    description:
      - The 40-hex commit id of the snapshot, or a ref name such as C(main) that is read from
        C(refs/) in the cache.
      - When omitted, O(state=built) reads C(refs/main) and O(state=verified) uses the revision
        recorded in the manifest.
    type: str
  cache_dir:
    description:
      - The Hugging Face home directory, the one the serving container sees as C(HF_HOME).
        Models live under its C(hub/) subdirectory.
    type: path
    required: true
  manifest_path:
    description:
      - Manifest file. O(state=built) writes it (mode C(0644)) and its parent directory must exist.
        O(state=verified) reads it.
      - Must be outside the model directory.
      - Required with O(state=built). O(state=verified) needs it or O(manifest).
    type: path
  manifest:
    description:
      - Inline manifest for O(state=verified), as returned by O(state=built) in RV(manifest).
      - Mutually exclusive with O(manifest_path). Without O(state_path) there is no fast path,
        so every file is hashed.
    type: dict
  state_path:
    description:
      - Local verification state file (mode C(0644)) that lets unchanged files skip hashing.
      - Defaults to O(manifest_path) with C(.state.json) appended. Must be outside the model directory.
    type: path
  files_path:
    description:
      - For O(state=rechecked), the verification record to compare with. It is a JSON document of format
        C(dspark.cluster/checkpoint-verified-files) holding C(model), C(revision), C(manifest_sha256) and
        C(files) (RV(files) of a passed verification).
      - Required with O(state=rechecked), together with O(revision). Must be outside the model directory.
    type: path
  state:
    description:
      - V(built) writes the manifest of the local snapshot (source node).
      - V(verified) checks the local snapshot against the manifest (target node).
      - V(rechecked) compares the local snapshot's file metadata with O(files_path) (before a start).
    type: str
    choices: [built, verified, rechecked]
    default: verified
  full:
    description:
      - Hash every file even if the state file says it is unchanged.
    type: bool
    default: false
  require_index:
    description:
      - Require C(model.safetensors.index.json) and every shard named in its C(weight_map).
      - With O(state=built), a missing shard fails the run before a manifest of an incomplete
        download is written.
      - Set to V(false) for single-file checkpoints without an index.
    type: bool
    default: true
  records:
    description:
      - Files outside the model directory (the checkpoint role's verified stamp and files record) whose content
        digest, mode and owner RV(records) returns, so that the caller rewrites only those that differ. Read only.
    type: list
    elements: path
    default: []
  hostile_scan:
    description:
      - With O(state=verified), once the snapshot verified, also list in RV(hostile) every entry of the model's
        directory (C(<cache_dir>/hub/models--ORG--NAME), itself included, links not followed, other filesystems
        not entered) that an honest copy never makes - a link, a device, FIFO or socket, or a setuid, setgid,
        group- or world-writable entry. An SCP target runs it, since whoever holds the copy key could write there.
      - Part of the tree that cannot be read fails the run.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description:
      - With O(state=built), the manifest is computed and the result reports a change if it would be
        rewritten. Nothing is written.
      - With O(state=verified), the snapshot is verified read-only and the state file is not written.
      - O(state=rechecked) only reads, in check mode as in a real run.
  diff_mode:
    support: none
    description: The manifest is large and machine-made, so no diff is shown.
  platform:
    support: full
    platforms: posix
    description: Needs a POSIX filesystem with symlinks. Sparse-file detection uses C(SEEK_DATA) when available.
notes:
  - Files in the snapshot that are not in the manifest are returned in RV(extra) and fail the
    verification.
  - Writing the state file does not count as a change. RV(state_written) tells whether it was written.
  - Error results carry a RV(code). V(incomplete) means files are missing or corrupt. V(incomplete_source)
    means the source snapshot has absent shards or dangling symlinks. V(unsafe_path) means a symlink
    leaves the model directory. V(no_index) and V(malformed_index) report a missing or broken shard index,
    V(malformed_manifest) and V(manifest_mismatch) a bad manifest. V(no_snapshot), V(no_ref), V(bad_ref)
    and V(invalid_argument) report bad input. With O(state=rechecked), V(changed_since_verification) means
    files changed, went missing or appeared since the verification, and V(no_record) that O(files_path) is
    absent or not a record of this model and revision.
seealso:
  - name: Hugging Face cache layout
    description: How C(hub/models--ORG--NAME) holds refs, snapshots and blobs.
    link: https://huggingface.co/docs/huggingface_hub/guides/manage-cache
"""

EXAMPLES = r"""
- name: Describe the downloaded checkpoint on the head node
  dspark.cluster.checkpoint_manifest:
    state: built
    model: deepseek-ai/DeepSeek-V4-Flash
    revision: "{{ dspark_model_revision }}"
    cache_dir: "{{ dspark_hf_cache }}"
    manifest_path: /var/lib/dspark/manifests/DeepSeek-V4-Flash.json
  register: manifest
  delegate_to: "{{ groups['dspark_head'][0] }}"
  run_once: true

- name: Verify the copy on every node (fails naming missing or corrupt files)
  dspark.cluster.checkpoint_manifest:
    state: verified
    model: deepseek-ai/DeepSeek-V4-Flash
    cache_dir: "{{ dspark_hf_cache }}"
    manifest: "{{ manifest.manifest }}"
    state_path: /var/lib/dspark/manifests/DeepSeek-V4-Flash.state.json

- name: Before a start, compare every file's metadata with what the verification recorded (read-only)
  dspark.cluster.checkpoint_manifest:
    state: rechecked
    model: deepseek-ai/DeepSeek-V4-Flash
    revision: "{{ dspark_model_revision }}"
    cache_dir: "{{ dspark_hf_cache }}"
    files_path: /var/lib/dspark/checkpoint/models--deepseek-ai--DeepSeek-V4-Flash-{{ dspark_model_revision }}.verified-files.json

- name: Re-hash everything after a suspected disk problem
  dspark.cluster.checkpoint_manifest:
    model: deepseek-ai/DeepSeek-V4-Flash
    cache_dir: "{{ dspark_hf_cache }}"
    manifest_path: /var/lib/dspark/manifests/DeepSeek-V4-Flash.json
    full: true
"""

RETURN = r"""
model:
  description: The model id.
  returned: success
  type: str
  sample: deepseek-ai/DeepSeek-V4-Flash
revision:
  description: The commit id of the snapshot that was built or verified.
  returned: success
  type: str
  sample: 0123456789abcdef0123456789abcdef01234567
snapshot:
  description: The snapshot directory.
  returned: success
  type: str
  sample: /var/lib/dspark/hf-cache/hub/models--deepseek-ai--DeepSeek-V4-Flash/snapshots/0123456789abcdef0123456789abcdef01234567
refs_main:
  description: The revision C(refs/main) names in the local cache, or null if it is absent or unreadable.
  returned: success
  type: str
manifest_path:
  description: The manifest file, or null for an inline manifest.
  returned: success
  type: str
state_path:
  description: The local state file used for the fast path, or null if there is none.
  returned: success
  type: str
state_written:
  description: Whether the state file was written.
  returned: success
  type: bool
manifest:
  description:
    - The manifest, with C(format), C(version), C(model), C(revision), C(created), C(algorithm),
      C(file_count), C(total_size) and C(entries) (each with C(path), C(size) and C(sha256)).
    - If the stored manifest is unchanged, its C(created) time is kept.
  returned: state=built
  type: dict
  sample:
    format: dspark.cluster/checkpoint-manifest
    version: 1
    model: deepseek-ai/DeepSeek-V4-Flash
    revision: 0123456789abcdef0123456789abcdef01234567
    created: "2025-01-01T00:00:00Z"
    algorithm: sha256
    file_count: 1
    total_size: 123
    entries:
      - path: config.json
        size: 123
        sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
ok:
  description:
    - With O(state=verified), whether the snapshot holds exactly the manifest's files with the expected size and sha256.
    - With O(state=rechecked), whether every recorded file is unchanged and no other file appeared.
  returned: state=verified or state=rechecked
  type: bool
missing:
  description: Manifest (or recorded) paths absent from the snapshot (including dangling symlinks).
  returned: state=verified or state=rechecked
  type: list
  elements: str
  sample: [model-00002-of-00046.safetensors]
corrupt:
  description: Files whose C(size) or C(sha256) differ, with the C(expected) and C(actual) values.
  returned: state=verified
  type: list
  elements: dict
  sample: [{"path": "model-00003-of-00046.safetensors", "reason": "sha256", "expected": "ab12...", "actual": "cd34..."}]
extra:
  description: Files in the snapshot that the manifest (or, with O(state=rechecked), the record) does not list.
  returned: state=verified or state=rechecked
  type: list
  elements: str
changed_files:
  description: With O(state=rechecked), recorded files whose metadata differ, each with the C(fields) that differ.
  returned: state=rechecked
  type: list
  elements: dict
  sample: [{"path": "model-00003-of-00046.safetensors", "fields": ["mtime_ns", "ctime_ns"]}]
files:
  description:
    - Per file, C(size), C(mtime_ns), C(ctime_ns) and C(ino) as the run saw them (with O(state=verified), of the
      files that verified). The checkpoint role keeps it beside its stamp for O(state=rechecked).
  returned: state=built or state=verified
  type: dict
  sample: {"config.json": {"size": 123, "mtime_ns": 1700000000000000000, "ctime_ns": 1700000000000000000, "ino": 1234}}
manifest_sha256:
  description: With O(state=rechecked), the manifest digest the record names (the same as the stamp's).
  returned: state=rechecked
  type: str
checked:
  description: Manifest files present in the snapshot.
  returned: success
  type: int
hashed:
  description: Files hashed in this run.
  returned: success
  type: int
fast_path_hits:
  description: Files accepted from the state file without hashing.
  returned: success
  type: int
bytes_hashed:
  description: Bytes hashed in this run (apparent size).
  returned: success
  type: int
index:
  description: Shard completeness against C(model.safetensors.index.json), or null if not checked.
  returned: success
  type: dict
  contains:
    shards_expected:
      description: Distinct shard files named by C(weight_map).
      type: int
    shards_present:
      description: How many of those exist.
      type: int
    missing:
      description: Shards named by C(weight_map) that are absent.
      type: list
      elements: str
  sample: {"index": "model.safetensors.index.json", "shards_expected": 46, "shards_present": 46, "missing": []}
report:
  description: A short human-readable summary that names missing and corrupt files.
  returned: always
  type: str
  sample: "deepseek-ai/DeepSeek-V4-Flash@0123456789ab: OK, 52 files verified (0 hashed, 52 unchanged since the last verification)"
records:
  description:
    - O(records) -> its content's sha256, octal mode, uid and gid; null when it is absent, unreadable or not a
      regular file.
  returned: success and failure, with O(state=built) or O(state=verified)
  type: dict
  sample: {"/var/lib/dspark/checkpoint/models--org--name-0123.verified.json": {"sha256": "9f86d0...", "mode": "0644",
           "uid": 0, "gid": 0}}
hostile:
  description:
    - With O(hostile_scan), the entries only a hostile sender makes, each as C(MODE OWNER PATH); empty when none.
  returned: when O(hostile_scan) is set and the snapshot verified
  type: list
  elements: str
  sample: ["-rwsr-sr-x dspark-ckpt /var/lib/dspark/hf-cache/hub/models--org--name/suid"]
code:
  description: Machine-readable failure reason.
  returned: failure
  type: str
  sample: incomplete
details:
  description: What was found when an error other than V(incomplete) stopped the run, for example the unsafe paths.
  returned: failure
  type: dict
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dspark.cluster.plugins.module_utils.file_state import file_record
from ansible_collections.dspark.cluster.plugins.module_utils.checkpoint import (
    CheckpointError,
    INDEX_FILE,
    build_manifest,
    dump_json,
    hostile_entries,
    index_completeness,
    load_manifest,
    model_dir,
    read_ref,
    render_report,
    resolve_revision,
    load_verified_files,
    recheck,
    render_recheck,
    same_content,
    snapshot_dir,
    stat_table,
    state_document,
    state_entries,
    verify,
)


def read_json(path):
    """Parsed content of a JSON file, None when absent or unreadable as JSON."""
    try:
        with open(path, 'rb') as f:
            return json.loads(f.read().decode('utf-8'))
    except (IOError, OSError, ValueError, UnicodeDecodeError):
        return None


def write_atomic(module, path, text):
    """Write text next to `path` and rename it over, so a reader never sees half a file."""
    directory = os.path.dirname(path) or '.'
    if not os.path.isdir(directory):
        module.fail_json(msg='directory %s for %s does not exist' % (directory, path), code='invalid_argument')
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.%s.' % os.path.basename(path))
    try:
        with os.fdopen(fd, 'w') as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        module.atomic_move(tmp, path)
        os.chmod(path, 0o644)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def run(module):
    p = module.params
    model = p['model']
    repo = os.path.realpath(model_dir(p['cache_dir'], model))
    for option in ('manifest_path', 'state_path', 'files_path'):
        # Keep our own files out of the model directory: the snapshot must stay exactly as copied.
        if p[option] and os.path.realpath(p[option]).startswith(repo + os.sep):
            raise CheckpointError('%s %s is inside the model directory %s' % (option, p[option], repo), 'invalid_argument')
    for path in p['records']:
        if os.path.realpath(path).startswith(repo + os.sep):
            raise CheckpointError('records: %s is inside the model directory %s' % (path, repo), 'invalid_argument')
    if p['state'] == 'rechecked':
        return run_recheck(module, model)
    state_path = p['state_path'] or (p['manifest_path'] + '.state.json' if p['manifest_path'] else None)

    stored = None
    if p['state'] == 'verified':
        if p['manifest'] is not None:
            stored = load_manifest(p['manifest'])
        else:
            try:
                with open(p['manifest_path'], 'rb') as f:
                    stored = load_manifest(f.read().decode('utf-8', 'replace'))
            except (IOError, OSError) as e:
                raise CheckpointError('cannot read manifest %s: %s' % (p['manifest_path'], e), 'malformed_manifest')
        if stored.get('model') != model:
            raise CheckpointError('the manifest describes model %r, not %r' % (stored.get('model'), model),
                                  'manifest_mismatch')
    revision = stored['revision'] if stored and not p['revision'] else resolve_revision(p['cache_dir'], model, p['revision'])
    if stored and stored.get('revision') != revision:
        raise CheckpointError('the manifest describes revision %s, not %s' % (stored.get('revision'), revision),
                              'manifest_mismatch')
    snap = snapshot_dir(p['cache_dir'], model, revision)
    label = '%s@%s' % (model, revision[:12])
    try:
        refs_main = read_ref(p['cache_dir'], model)
    except CheckpointError as e:
        module.warn(e.message)
        refs_main = None

    previous_state = read_json(state_path) if state_path else None
    records = state_entries(previous_state, snap)
    result = dict(model=model, revision=revision, snapshot=snap, refs_main=refs_main,
                  manifest_path=p['manifest_path'], state_path=state_path, state_written=False, index=None,
                  records=dict((path, file_record(path)) for path in p['records']))

    if p['state'] == 'built':
        if not os.path.isdir(os.path.dirname(p['manifest_path']) or '.'):
            raise CheckpointError('directory %s for manifest_path does not exist' % os.path.dirname(p['manifest_path']),
                                  'invalid_argument')
        index = None
        if p['require_index']:
            index = index_completeness(snap)
            if index['missing']:
                raise CheckpointError('%s: the source snapshot lacks %d shard(s) named by %s: %s'
                                      % (label, len(index['missing']), INDEX_FILE, ', '.join(index['missing'])),
                                      'incomplete_source', {'index': index})
        stats = {}
        manifest = build_manifest(snap, model=model, revision=revision, state=records, full=p['full'], stats=stats)
        old = read_json(p['manifest_path'])
        changed = not same_content(old, manifest)
        if not changed:
            manifest['created'] = old['created']
        elif not module.check_mode:
            write_atomic(module, p['manifest_path'], dump_json(manifest))
        result.update(stats, changed=changed, manifest=manifest, index=index, checked=manifest['file_count'],
                      files=stat_table(records),
                      report='%s: manifest of %d files, %d bytes%s' % (
                          label, manifest['file_count'], manifest['total_size'],
                          ' (would be written)' if changed and module.check_mode else ' (written)' if changed else ' (unchanged)'))
    else:
        outcome = verify(snap, stored, state=records, full=p['full'])
        index = None
        if p['require_index'] and INDEX_FILE not in outcome['missing']:
            index = index_completeness(snap)
        result.update(outcome, changed=False, index=index, report=render_report(outcome, label, index),
                      files=stat_table(records))

    new_state = state_document(snap, records)
    if state_path and not module.check_mode and new_state != previous_state:
        write_atomic(module, state_path, dump_json(new_state))
        result['state_written'] = True

    if p['state'] == 'verified' and p['hostile_scan'] and result['ok'] and not (index and index['missing']):
        result['hostile'] = hostile_entries(model_dir(p['cache_dir'], model))
    if p['state'] == 'verified' and not (result['ok'] and not (index and index['missing'])):
        module.fail_json(msg=result['report'], code='incomplete', **result)
    # Only about a snapshot that verified: a target checked before its first copy has no refs/main yet.
    if p['state'] == 'verified' and refs_main != revision:
        module.warn('refs/main of %s names %s, not the verified revision %s: serving by bare model id would not '
                    'load this snapshot' % (model, refs_main or 'nothing', revision))
    module.exit_json(**result)


def run_recheck(module, model):
    """state=rechecked: the snapshot's metadata against the verification's record; reads only."""
    p = module.params
    revision = resolve_revision(p['cache_dir'], model, p['revision'])
    snap = snapshot_dir(p['cache_dir'], model, revision)
    label = '%s@%s' % (model, revision[:12])
    try:
        with open(p['files_path'], 'rb') as f:
            text = f.read().decode('utf-8', 'replace')
    except (IOError, OSError) as e:
        raise CheckpointError('%s: no verification record at %s (%s): the checkpoint role writes it beside its stamp '
                              'after a passed verification' % (label, p['files_path'], e.strerror or e), 'no_record')
    try:
        record = load_verified_files(text, model, revision)
    except CheckpointError as e:
        raise CheckpointError('%s: %s (%s)' % (label, e.message, p['files_path']), e.code)
    outcome = recheck(snap, record['files'])
    result = dict(changed=False, model=model, revision=revision, snapshot=snap, files_path=p['files_path'],
                  manifest_sha256=record.get('manifest_sha256'), ok=outcome['ok'], changed_files=outcome['changed'],
                  missing=outcome['missing'], extra=outcome['extra'], checked=outcome['checked'],
                  report=render_recheck(outcome, label))
    if not outcome['ok']:
        module.fail_json(msg=result['report'], code='changed_since_verification', **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            model=dict(type='str', required=True),
            revision=dict(type='str'),
            cache_dir=dict(type='path', required=True),
            manifest_path=dict(type='path'),
            manifest=dict(type='dict'),
            state_path=dict(type='path'),
            files_path=dict(type='path'),
            state=dict(type='str', default='verified', choices=['built', 'verified', 'rechecked']),
            full=dict(type='bool', default=False),
            require_index=dict(type='bool', default=True),
            hostile_scan=dict(type='bool', default=False),
            records=dict(type='list', elements='path', default=[]),
        ),
        mutually_exclusive=[('manifest_path', 'manifest'), ('files_path', 'manifest'), ('files_path', 'manifest_path')],
        required_if=[('state', 'built', ('manifest_path',)), ('state', 'verified', ('manifest_path', 'manifest'), True),
                     ('state', 'rechecked', ('files_path', 'revision'))],
        supports_check_mode=True,
    )
    try:
        run(module)
    except CheckpointError as e:
        module.fail_json(msg=e.message, code=e.code, details=e.details)
    except (IOError, OSError) as e:
        module.fail_json(msg='%s: %s' % (type(e).__name__, e), code='io_error')


if __name__ == '__main__':
    main()
