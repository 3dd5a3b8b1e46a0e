# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the checkpoint role keeps its records of model@revision, computed once for every reader.

The checkpoint role writes them, the serve role's guard reads the stamp and the per-file record, the monitoring
plan points its exporter at the stamp: all three go through ``paths`` (the filter dspark.cluster.checkpoint_paths),
so none rebuilds the file names or repeats the checkpoint role's defaults. Pure Python, no Ansible imports.
"""

from __future__ import annotations

from ansible_collections.dspark.cluster.plugins.plugin_utils import _inputs

# roles/checkpoint/defaults/main.yml (a unit test keeps them equal): what a role that does not load the checkpoint
# role's defaults (serve, monitoring) takes when the inventory does not set the variable.
DEFAULT_MANIFEST_DIR = "/var/lib/dspark/checkpoint"
DEFAULT_SOURCE_RANK = 1


def repo_folder(model):
    """The Hugging Face cache's folder of a model: ORG/NAME -> models--ORG--NAME."""
    return "models--%s" % str(model or "").replace("/", "--")


def paths(model, revision, manifest_dir=None, source_rank=None, nfs_export_rank=None):
    """The checkpoint records of ``model``@``revision`` under ``manifest_dir`` and the ranks they come from.

    ``None`` (or '') for ``manifest_dir``/``source_rank`` takes the checkpoint role's default; ``nfs_export_rank``
    defaults to the source rank (nfs_export's default). A rank that is not an integer stays as given, for the roles'
    own rules to name.
    """
    base = str(manifest_dir).rstrip("/") if manifest_dir not in (None, "") else DEFAULT_MANIFEST_DIR
    prefix = "%s/%s-%s" % (base or "/", repo_folder(model), revision if revision is not None else "")
    source = _inputs.as_int(source_rank) if source_rank not in (None, "") else DEFAULT_SOURCE_RANK
    if source is None:
        source = source_rank
    nfs = _inputs.as_int(nfs_export_rank) if nfs_export_rank not in (None, "") else source
    if nfs is None:
        nfs = nfs_export_rank
    return {
        "repo_folder": repo_folder(model),
        "manifest_dir": base,
        "manifest": prefix + ".json",
        "state": prefix + ".state.json",
        # Written only after this node's check passed; the serve role refuses a rank without it.
        "stamp": prefix + ".verified.json",
        # Per node: each snapshot file's size, mtime, ctime and inode as the passed check saw them.
        "files": prefix + ".verified-files.json",
        "known_hosts": (base.rstrip("/") or "") + "/known_hosts",
        "source_rank": source,
        "nfs_export_rank": nfs,
    }
