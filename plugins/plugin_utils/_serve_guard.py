# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What keeps one rank from starting: the serving image, then its checkpoint (the serve role's guard, issues #13 and #26).

The serving image absent from a running Docker engine is its own problem; the group refuses as for a checkpoint (a rank
that cannot start would leave the others half-started).
From this node's serve_node_info read (``node``: docker, image, snapshot_isdir, cache_mount, stamp, recheck) and the
group's facts:
the NFS mount at the cache path (the export's peers), the model directory, the checkpoint role's verified stamp (this
model and revision, the source's manifest) and the record of the verified files (size, mtime, ctime, inode). At most
one problem per kind, in that order; a missing mount or directory hides the stamp's and the record's problems (they
follow from it). Plain Python, no Ansible imports.
"""

from __future__ import annotations

FIX = "Fix: run playbooks/checkpoint.yml (or site.yml) for group %s"


def short(digest):
    """A digest as the messages show it: its first 12 characters (short values, '?' included, as they are)."""
    text = str(digest)
    return text if len(text) <= 17 else text[:12]


def _mount_problem(facts, node):
    if not facts["nfs_client"]:
        return []
    mount = node.get("cache_mount") or {}
    if mount.get("fstype", "") == "nfs4":
        return []
    return ["%s: %s (dspark_hf_cache) is not mounted from the NFS export of %s (%s mounted there), so the container would "
            "serve the local disk of this node. Fix: run playbooks/checkpoint.yml (or site.yml) for group %s, which mounts "
            "it; check with findmnt %s" % (facts["host"], facts["cache_path"], facts["nfs_server"],
                                           mount.get("fstype", "nothing"), facts["group"], facts["cache_path"])]


def _stamp_problem(facts, stamp, source_stamp):
    host, path, fix = facts["host"], facts["stamp_path"], FIX % facts["group"]
    if not stamp:
        return ["%s: no verified stamp at %s: the checkpoint was not verified on this node, or its last check failed. %s; "
                "for a cache the checkpoint role does not fill, set serve_require_checkpoint_stamp: false" % (host, path, fix)]
    if stamp.get("model", "") != facts["model"] or stamp.get("revision", "") != facts["revision"]:
        return ["%s: the stamp %s records %s@%s, not %s@%s. %s" % (
            host, path, stamp.get("model", "?"), stamp.get("revision", "?"), facts["model"], facts["revision"], fix)]
    if source_stamp and source_stamp.get("manifest_sha256", "") != stamp.get("manifest_sha256", ""):
        return ["%s: the stamp %s records manifest %s, the stamp of the source %s %s: this node was verified against "
                "another manifest. %s" % (host, path, short(stamp.get("manifest_sha256", "?")), facts["source"],
                                          short(source_stamp.get("manifest_sha256", "?")), fix)]
    return []


def _recheck_problem(facts, stamp, recheck):
    if recheck is None:
        return []
    if recheck.get("ok") and recheck.get("manifest_sha256", "") == stamp.get("manifest_sha256", ""):
        return []
    what = (recheck.get("msg", "") if not recheck.get("ok") else
            "the record of the verified files (%s) names manifest %s, not the one in the stamp" % (
                recheck.get("files_path", "?"), short(recheck.get("manifest_sha256", "?"))))
    return ["%s: %s. The checkpoint on this node is not the one that verified, so no rank starts on it. Fix: run "
            "playbooks/checkpoint.yml (or site.yml) for group %s: it verifies the files again (hashing only what changed), "
            "removes files the manifest does not list (SCP mode) and records them; look into who changed them if you did "
            "not" % (facts["host"], what, facts["group"])]


def problems(node, facts, source_node=None):
    """Lines naming what keeps this rank from starting (empty: nothing).

    facts: host, group, image (serve_image), model, revision, require_stamp, nfs_client, nfs_server, cache_path, snapshot_dir, stamp_path,
    source (the checkpoint's source host); source_node: the source's own serve_node_info read (its stamp), if any.
    """
    node = node or {}
    image = [] if not node.get("docker") or (node.get("image") or {}).get("id") else [
        "%s: serve_image=%s is not present on this node (%s); nothing was started. Fix: run the docker_runtime role "
        "(site.yml or playbooks/docker_runtime.yml) to pull or load it" % (
            facts["host"], facts.get("image", "?"), str((node.get("image") or {}).get("reason") or "no such image").strip())]
    return image + _checkpoint_problems(node, facts, source_node) + _sidecar_problems(node, facts)


def _sidecar_problems(node, facts):
    """A sidecar engine's checkpoint (issue #46) absent on this node: its snapshot directory, as the main one's. The
    checkpoint role distributes dspark_model only, so the operator puts a sidecar's checkpoint there."""
    found = []
    for engine in facts.get("sidecars") or []:
        if not (node.get("snapshots") or {}).get(engine["snapshot_dir"]):
            found.append("%s: sidecar %s's model directory %s (%s@%s) is absent in dspark_hf_cache; nothing was started. "
                         "Fix: download that revision into dspark_hf_cache on every member (huggingface-cli download %s "
                         "--revision %s --cache-dir %s/hub), or remove the sidecar from dspark_sidecars" % (
                             facts["host"], engine["name"], engine["snapshot_dir"], engine["model"], engine["revision"],
                             engine["model"], engine["revision"], facts["cache_path"]))
    return found


def _checkpoint_problems(node, facts, source_node):
    found = _mount_problem(facts, node)
    if not node.get("snapshot_isdir") and not found:
        found.append("%s: the model directory %s (%s@%s) is absent in dspark_hf_cache. %s" % (
            facts["host"], facts["snapshot_dir"], facts["model"], facts["revision"], FIX % facts["group"]))
    if not facts["require_stamp"] or found:
        return found
    stamp = node.get("stamp") or {}
    source_stamp = ((source_node or {}).get("stamp") or {}) if facts.get("source") else {}
    found = _stamp_problem(facts, stamp, source_stamp)
    return found or _recheck_problem(facts, stamp, node.get("recheck"))
