# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's trust file of a group (#26): read it, decide on the source's manifest (checkpoint.trust_decision)
and write it back atomically, 0600 in a 0700 directory. Used by the action plugin (on the controller, no module run)
and by the module of the same name."""

from __future__ import annotations

import errno
import json
import os
import tempfile

from ansible_collections.dspark.cluster.plugins.module_utils.checkpoint import (
    CheckpointError,
    dump_json,
    manifest_digest,
    trust_decision,
    trust_document,
    trust_records,
)


def read_document(path):
    """The trust file's JSON, None when there is none."""
    try:
        with open(path, 'rb') as f:
            text = f.read().decode('utf-8')
    except (IOError, OSError) as e:
        if e.errno == errno.ENOENT:
            return None
        raise CheckpointError('cannot read the trust file %s: %s' % (path, e), 'malformed_trust')
    try:
        return json.loads(text)
    except ValueError as e:
        raise CheckpointError('the trust file %s is not JSON: %s' % (path, e), 'malformed_trust')


def write_private(path, text):
    """``text`` to ``path`` atomically, mode 0600, its directory made (and kept) 0700."""
    directory = os.path.dirname(path) or '.'
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o700)
    os.chmod(directory, 0o700)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.%s.' % os.path.basename(path))
    try:
        with os.fdopen(fd, 'w') as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.rename(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check(path, group, manifest, rotate=False, check_mode=False):
    """(result, message): the decision on ``manifest`` for ``group`` and the file written when it is new or rotated
    (not in check mode); ``message`` is the failure's text for a mismatch, else None. CheckpointError: a malformed
    file or manifest."""
    digest = manifest_digest(manifest)
    model, revision = manifest.get('model'), manifest.get('revision')
    if not model or not revision:
        raise CheckpointError('the manifest names no model or revision', 'malformed_manifest')
    records = trust_records(read_document(path), group)
    known = records.get('%s@%s' % (model, revision))
    trusted = known.get('manifest_sha256') if isinstance(known, dict) else None
    decision, new_records = trust_decision(records, model, revision, digest, rotate=rotate)
    result = dict(changed=decision in ('new', 'rotated'), decision=decision, manifest_sha256=digest,
                  trusted_sha256=trusted, path=path)
    if decision == 'mismatch':
        return result, (
            'group %s: the source built a manifest of %s@%s with digest %s, but the controller trusts %s for it (%s). '
            'A revision is a commit: its files do not change, so the source snapshot changed after it was first '
            'trusted. Nothing was copied. Fix: find out what changed on the source (compare its manifest with a '
            'target\'s stored copy) and restore it; only if the change is intended, run with '
            'checkpoint_trust_rotate=true or remove the record %s@%s from %s'
            % (group, model, revision[:12], digest[:12], (trusted or '?')[:12], path, model, revision, path))
    if result['changed'] and not check_mode:
        write_private(path, dump_json(trust_document(group, new_records)))
    return result, None
