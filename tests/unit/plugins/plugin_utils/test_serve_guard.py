"""The serve role's checkpoint guard (plugin_utils/_serve_guard.py): one problem per kind, in order, each with its fix."""

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_guard

DIGEST = "a" * 64
OTHER = "b" * 64
FACTS = {"host": "a-head", "group": "pair_a", "model": "org/m", "revision": "r1", "require_stamp": True,
         "nfs_client": False, "nfs_server": "", "cache_path": "/var/lib/dspark/hf",
         "snapshot_dir": "/var/lib/dspark/hf/hub/models--org--m/snapshots/r1", "stamp_path": "/var/lib/dspark/m.json",
         "source": "a-worker"}
STAMP = {"model": "org/m", "revision": "r1", "manifest_sha256": DIGEST}
GOOD = {"snapshot_isdir": True, "cache_mount": None, "stamp": STAMP, "recheck": {"ok": True, "manifest_sha256": DIGEST}}


def facts(**changes):
    return dict(FACTS, **changes)


def node(**changes):
    return dict(GOOD, **changes)


def test_a_verified_rank_may_start():
    assert _serve_guard.problems(node(), facts(), {"stamp": STAMP}) == []


def test_no_stamp_required_skips_the_stamp_and_the_record():
    assert _serve_guard.problems(node(stamp={}, recheck={"ok": False, "msg": "x"}), facts(require_stamp=False)) == []


@pytest.mark.parametrize("fstype, shown", [(None, "None"), ("ext4", "ext4")])
def test_an_nfs_client_without_the_export_mounted(fstype, shown):
    read = node(cache_mount={"fstype": fstype}, snapshot_isdir=False, stamp={})
    found = _serve_guard.problems(read, facts(nfs_client=True, nfs_server="a-worker"))
    assert len(found) == 1, found   # the directory and the stamp follow from the mount: not said again
    assert found[0].startswith("a-head: /var/lib/dspark/hf (dspark_hf_cache) is not mounted from the NFS export of "
                               "a-worker (%s mounted there)" % shown), found
    assert "findmnt /var/lib/dspark/hf" in found[0]


def test_nothing_mounted_is_named_as_nothing():
    found = _serve_guard.problems(node(cache_mount=None), facts(nfs_client=True, nfs_server="a-worker"))
    assert "(nothing mounted there)" in found[0], found


def test_an_nfs_client_with_the_export_mounted_passes():
    assert _serve_guard.problems(node(cache_mount={"fstype": "nfs4"}), facts(nfs_client=True), {"stamp": STAMP}) == []


def test_an_absent_model_directory_hides_the_stamp():
    found = _serve_guard.problems(node(snapshot_isdir=False, stamp={}), facts())
    assert found == ["a-head: the model directory /var/lib/dspark/hf/hub/models--org--m/snapshots/r1 (org/m@r1) is absent "
                     "in dspark_hf_cache. Fix: run playbooks/checkpoint.yml (or site.yml) for group pair_a"]


def test_no_stamp():
    found = _serve_guard.problems(node(stamp=None, recheck=None), facts())
    assert found == ["a-head: no verified stamp at /var/lib/dspark/m.json: the checkpoint was not verified on this node, or "
                     "its last check failed. Fix: run playbooks/checkpoint.yml (or site.yml) for group pair_a; for a cache "
                     "the checkpoint role does not fill, set serve_require_checkpoint_stamp: false"]


def test_a_stamp_of_another_revision():
    found = _serve_guard.problems(node(stamp=dict(STAMP, revision="r0")), facts())
    assert found == ["a-head: the stamp /var/lib/dspark/m.json records org/m@r0, not org/m@r1. Fix: run "
                     "playbooks/checkpoint.yml (or site.yml) for group pair_a"]


def test_a_stamp_of_another_manifest_than_the_source():
    found = _serve_guard.problems(node(), facts(), {"stamp": dict(STAMP, manifest_sha256=OTHER)})
    assert found == ["a-head: the stamp /var/lib/dspark/m.json records manifest aaaaaaaaaaaa, the stamp of the source "
                     "a-worker bbbbbbbbbbbb: this node was verified against another manifest. Fix: run "
                     "playbooks/checkpoint.yml (or site.yml) for group pair_a"]


def test_the_source_without_a_stamp_or_no_source_is_not_compared():
    assert _serve_guard.problems(node(), facts(), {"stamp": None}) == []
    assert _serve_guard.problems(node(), facts(source=""), {"stamp": dict(STAMP, manifest_sha256=OTHER)}) == []


def test_files_changed_since_they_verified():
    read = node(recheck={"ok": False, "msg": "model-00001.safetensors changed (size 10 -> 11)"})
    found = _serve_guard.problems(read, facts(), {"stamp": STAMP})
    assert len(found) == 1 and found[0].startswith(
        "a-head: model-00001.safetensors changed (size 10 -> 11). The checkpoint on this node is not the one that verified, "
        "so no rank starts on it. Fix: run playbooks/checkpoint.yml (or site.yml) for group pair_a: it verifies"), found


def test_a_record_of_another_manifest():
    read = node(recheck={"ok": True, "manifest_sha256": OTHER, "files_path": "/var/lib/dspark/m.files.json"})
    found = _serve_guard.problems(read, facts())
    assert found[0].startswith("a-head: the record of the verified files (/var/lib/dspark/m.files.json) names manifest "
                               "bbbbbbbbbbbb, not the one in the stamp."), found


def test_no_record_read_is_no_problem():
    assert _serve_guard.problems(node(recheck=None), facts()) == []


@pytest.mark.parametrize("digest, shown", [("?", "?"), ("abc", "abc"), ("0123456789abcdefg", "0123456789abcdefg"),
                                           ("0123456789abcdefgh", "0123456789ab")])
def test_short_digests_as_jinja_truncate_with_its_leeway(digest, shown):
    assert _serve_guard.short(digest) == shown


def test_an_absent_image_comes_first_and_the_checkpoint_is_still_judged():
    read = node(docker=True, image={"id": "", "reason": "No such image: x "}, stamp={})
    found = _serve_guard.problems(read, facts(image="ghcr.io/anemll/dspark-vllm-gx10@sha256:" + DIGEST))
    assert len(found) == 2, found
    assert found[0] == ("a-head: serve_image=ghcr.io/anemll/dspark-vllm-gx10@sha256:%s is not present on this node (No such "
                        "image: x); nothing was started. Fix: run the docker_runtime role (site.yml or "
                        "playbooks/docker_runtime.yml) to pull or load it" % DIGEST)
    assert found[1].startswith("a-head: no verified stamp at")


@pytest.mark.parametrize("read", [{"docker": True, "image": {"id": "sha256:" + DIGEST}}, {"docker": False, "image": {}}, {}])
def test_the_image_is_judged_only_where_docker_answered(read):
    assert _serve_guard.problems(node(**read), facts(), {"stamp": STAMP}) == []


def test_a_sidecar_checkpoint_absent_on_a_rank_keeps_the_group_from_starting():
    """#46: every sidecar's snapshot directory must be on every member, as the main one's."""
    vl = {"name": "vl", "model": "org/vl", "revision": "c" * 40, "snapshot_dir": "/var/lib/dspark/hf/hub/models--org--vl/snapshots/" + "c" * 40}
    here = node(snapshots={vl["snapshot_dir"]: True})
    assert _serve_guard.problems(here, facts(sidecars=[vl]), {"stamp": STAMP}) == []
    found = _serve_guard.problems(node(snapshots={vl["snapshot_dir"]: False}), facts(sidecars=[vl]), {"stamp": STAMP})
    expected = "a-head: sidecar vl's model directory %s (org/vl@%s) is absent" % (vl["snapshot_dir"], "c" * 40)
    assert len(found) == 1 and found[0].startswith(expected)
    assert "huggingface-cli download org/vl --revision %s --cache-dir /var/lib/dspark/hf/hub" % ("c" * 40) in found[0]
