"""checkpoint trust (#26): the fast re-check at every start (metadata against the verification's record), the record's
document, and the module's state=rechecked."""

import importlib.util
import json
import os
import pathlib

import pytest

from ansible_collections.dspark.cluster.plugins.module_utils import checkpoint as ck
from ansible_collections.dspark.cluster.plugins.module_utils.checkpoint import CheckpointError

ROOT = pathlib.Path(__file__).resolve().parents[4]
_spec = importlib.util.spec_from_file_location("fake_checkpoint", str(ROOT / "lab" / "fake_checkpoint.py"))
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)

MODEL = "deepseek-ai/DeepSeek-V4-Flash"
REV = "0123456789abcdef0123456789abcdef01234567"
SHARD = "model-00002-of-00004.safetensors"


@pytest.fixture(params=[True, False], ids=["blobs", "plain"])
def verified(tmp_path, request):
    """A snapshot that verified, and the table its verification returned (what the role keeps beside the stamp)."""
    info = fake.generate(str(tmp_path / "hf"), model=MODEL, revision=REV, shards=4, shard_size=64 * 1024,
                         sparse_size=4 * 1024 * 1024, blobs=request.param)
    snap = info["snapshot"]
    manifest = ck.build_manifest(snap, model=MODEL, revision=REV)
    state = {}
    assert ck.verify(snap, manifest, state=state)["ok"]
    return snap, ck.stat_table(state)


def test_unchanged_snapshot_passes(verified):
    snap, table = verified
    assert len(table) == 9 and set(table[SHARD]) == {"size", "mtime_ns", "ctime_ns", "ino"}
    result = ck.recheck(snap, table)
    assert result == {"ok": True, "changed": [], "missing": [], "extra": [], "checked": 9}
    assert ck.render_recheck(result, "m@r") == "m@r: OK, 9 files unchanged since the verification (size, mtime, ctime, inode)"


def test_rewrite_with_mtime_restored_is_noticed(verified):
    """Same size and mtime: a sneaky in-place rewrite still moves ctime (no tool can set it back)."""
    snap, table = verified
    path = os.path.join(snap, SHARD)
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(b"X")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    result = ck.recheck(snap, table)
    assert not result["ok"] and result["changed"] == [{"path": SHARD, "fields": ["ctime_ns"]}]


def test_replaced_missing_and_planted_files_are_named(verified):
    snap, table = verified
    real = os.path.realpath(os.path.join(snap, SHARD))
    data = open(real, "rb").read()
    with open(os.path.join(snap, "new"), "wb") as f:   # a new inode (both exist at once), a new mtime
        f.write(data + b"!")
    os.replace(os.path.join(snap, "new"), os.path.join(snap, SHARD))
    os.unlink(os.path.join(snap, "config.json"))
    with open(os.path.join(snap, "modeling_evil.py"), "w") as f:
        f.write("import os\n")
    result = ck.recheck(snap, table)
    assert not result["ok"]
    assert result["missing"] == ["config.json"] and result["extra"] == ["modeling_evil.py"]
    assert [c["path"] for c in result["changed"]] == [SHARD]
    assert {"size", "ino"} <= set(result["changed"][0]["fields"])
    line = ck.render_recheck(result, "m@r")
    assert line.startswith("m@r: CHANGED SINCE ITS VERIFICATION: changed: %s (size, " % SHARD)
    assert "missing: config.json" in line and "not in the verified checkpoint: modeling_evil.py" in line


def test_absent_snapshot_lists_every_file_missing(verified, tmp_path):
    dummy, table = verified
    result = ck.recheck(str(tmp_path / "nowhere"), table)
    assert not result["ok"] and result["missing"] == sorted(table) and result["checked"] == 0


def test_recheck_never_follows_a_link_out(verified, tmp_path):
    snap, table = verified
    os.symlink("/etc/passwd", os.path.join(snap, "tokenizer.model"))
    with pytest.raises(CheckpointError) as e:
        ck.recheck(snap, table)
    assert e.value.code == "unsafe_path"


def test_record_document_round_trip_and_refusals(verified):
    dummy, table = verified
    doc = ck.verified_files_document(MODEL, REV, "d" * 64, dict((p, dict(i, sha256="x")) for p, i in table.items()))
    assert doc["files"] == table and doc["format"] == ck.VERIFIED_FILES_FORMAT
    assert ck.load_verified_files(json.dumps(doc), MODEL, REV)["files"] == table
    for bad, text in (("{", "not JSON"), ({}, "not a dspark.cluster/checkpoint-verified-files document"),
                      (dict(doc, revision="f" * 40), "is of %s@%s, not" % (MODEL, "f" * 40)),
                      (dict(doc, files={"../x": table[SHARD]}), "malformed entries: ../x"),
                      (dict(doc, files={SHARD: dict(table[SHARD], ino="1")}), "malformed entries: " + SHARD)):
        with pytest.raises(CheckpointError) as e:
            ck.load_verified_files(bad, MODEL, REV)
        assert e.value.code == "no_record" and text in e.value.message


def test_stat_table_keeps_only_the_compared_fields():
    assert ck.stat_table({"b": {"size": 1, "mtime_ns": 2, "ctime_ns": 3, "ino": 4, "sha256": "s"}, "a": None}) == {
        "b": {"size": 1, "mtime_ns": 2, "ctime_ns": 3, "ino": 4}}
    assert ck.stat_table(None) == {}


# --- the module (checkpoint_manifest state=verified with extra files, state=rechecked) ---------------------------

from ansible.module_utils.testing import patch_module_args  # noqa: E402  (module tests below)

from ansible_collections.dspark.cluster.plugins.modules import checkpoint_manifest  # noqa: E402


def module(capsys, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            checkpoint_manifest.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def cache(tmp_path):
    fake.generate(str(tmp_path / "hf"), model=MODEL, revision=REV, shards=3, shard_size=32 * 1024,
                  sparse_size=4 * 1024 * 1024, blobs=True)
    (tmp_path / "ck").mkdir()
    return {"cache": str(tmp_path / "hf"), "dir": tmp_path / "ck",
            "snapshot": str(tmp_path / "hf" / "hub" / ck.repo_folder(MODEL) / "snapshots" / REV)}


def verified_record(capsys, cache):
    """The module's verification, and the record the checkpoint role writes from its `files` (stamp.yml)."""
    rc, built = module(capsys, {"state": "built", "model": MODEL, "revision": REV, "cache_dir": cache["cache"],
                                "manifest_path": str(cache["dir"] / "m.json")})
    assert rc == 0, built
    rc, out = module(capsys, {"model": MODEL, "cache_dir": cache["cache"], "manifest_path": str(cache["dir"] / "m.json")})
    assert rc == 0 and out["ok"] and set(out["files"]) == set(e["path"] for e in built["manifest"]["entries"]), out
    assert built["files"] == out["files"]  # the source's record and a target's are the same kind of table
    path = cache["dir"] / "m.verified-files.json"
    path.write_text(json.dumps(ck.verified_files_document(MODEL, REV, "e" * 64, out["files"])))
    return str(path)


def recheck_args(cache, files_path):
    return {"state": "rechecked", "model": MODEL, "revision": REV, "cache_dir": cache["cache"], "files_path": files_path}


def test_module_fails_on_a_planted_file_and_names_it(capsys, cache):
    verified_record(capsys, cache)
    with open(os.path.join(cache["snapshot"], "modeling_x.py"), "w") as f:
        f.write("import os\n")
    rc, out = module(capsys, {"model": MODEL, "cache_dir": cache["cache"], "manifest_path": str(cache["dir"] / "m.json")})
    assert rc == 1 and out["code"] == "incomplete" and out["ok"] is False and out["extra"] == ["modeling_x.py"]
    assert "not in the manifest: modeling_x.py" in out["msg"] and "re-run the copy" in out["msg"]


@pytest.mark.parametrize("check_mode", [False, True])
def test_module_recheck_passes_then_names_a_change(capsys, cache, check_mode):
    files_path = verified_record(capsys, cache)
    rc, out = module(capsys, recheck_args(cache, files_path), check_mode)
    assert rc == 0 and out["ok"] and out["changed"] is False and out["manifest_sha256"] == "e" * 64, out
    assert out["report"].startswith("%s@%s: OK, 8 files unchanged" % (MODEL, REV[:12]))
    shard = os.path.join(cache["snapshot"], "model-00001-of-00003.safetensors")
    os.utime(shard, ns=(0, 10 ** 18))
    rc, out = module(capsys, recheck_args(cache, files_path), check_mode)
    assert rc == 1 and out["code"] == "changed_since_verification" and out["changed"] is False
    assert [c["path"] for c in out["changed_files"]] == ["model-00001-of-00003.safetensors"]
    assert "CHANGED SINCE ITS VERIFICATION: changed: model-00001-of-00003.safetensors (mtime_ns" in out["msg"]


def test_module_recheck_without_a_record(capsys, cache):
    rc, out = module(capsys, recheck_args(cache, str(cache["dir"] / "absent.json")))
    assert rc == 1 and out["code"] == "no_record" and "no verification record at" in out["msg"]
    rc, out = module(capsys, {"state": "rechecked", "model": MODEL, "cache_dir": cache["cache"]})
    assert rc == 1 and "files_path" in out["msg"] and "revision" in out["msg"]


# --- the controller's trusted manifest per group (checkpoint_trust) --------------------------------------------

from ansible_collections.dspark.cluster.plugins.modules import checkpoint_trust  # noqa: E402


def test_manifest_digest_is_the_stamps(tmp_path):
    """The same digest as the role's `{'model', 'revision', 'entries'} | to_json(sort_keys=true) | hash('sha256')`."""
    from ansible.plugins.filter.core import to_json
    import hashlib
    info = fake.generate(str(tmp_path / "hf"), model=MODEL, revision=REV, shards=2, shard_size=1024, sparse_size=4096)
    manifest = ck.build_manifest(info["snapshot"], model=MODEL, revision=REV)
    core = {"model": manifest["model"], "revision": manifest["revision"], "entries": manifest["entries"]}
    assert ck.manifest_digest(manifest) == hashlib.sha256(to_json(core, sort_keys=True).encode()).hexdigest()
    assert ck.manifest_digest(dict(manifest, created="2000-01-01T00:00:00Z")) == ck.manifest_digest(manifest)


def test_trust_decision():
    records = {}
    decision, records = ck.trust_decision(records, MODEL, REV, "a" * 64)
    assert decision == "new" and records == {MODEL + "@" + REV: {"model": MODEL, "revision": REV, "manifest_sha256": "a" * 64}}
    assert ck.trust_decision(records, MODEL, REV, "a" * 64) == ("trusted", records)
    assert ck.trust_decision(records, MODEL, REV, "b" * 64) == ("mismatch", records)
    decision, rotated = ck.trust_decision(records, MODEL, REV, "b" * 64, rotate=True)
    assert decision == "rotated" and rotated[MODEL + "@" + REV]["manifest_sha256"] == "b" * 64
    decision, both = ck.trust_decision(records, MODEL, "f" * 40, "c" * 64)  # a new revision: a new record
    assert decision == "new" and len(both) == 2 and both[MODEL + "@" + REV] == records[MODEL + "@" + REV]


def test_trust_records_refuse_other_files():
    assert ck.trust_records(None, "g") == {}
    doc = ck.trust_document("g", {"k": {"manifest_sha256": "a"}})
    assert ck.trust_records(doc, "g") == {"k": {"manifest_sha256": "a"}}
    for bad, text in (({}, "not a dspark.cluster/checkpoint-trust document"), (doc, "names group 'g', not 'h'")):
        with pytest.raises(CheckpointError) as e:
            ck.trust_records(bad, "h" if bad is doc else "g")
        assert e.value.code == "malformed_trust" and text in e.value.message


def trust_module(capsys, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            checkpoint_trust.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_trust_module_first_use_then_refuses_another_manifest(capsys, tmp_path):
    info = fake.generate(str(tmp_path / "hf"), model=MODEL, revision=REV, shards=2, shard_size=1024, sparse_size=4096)
    manifest = ck.build_manifest(info["snapshot"], model=MODEL, revision=REV)
    path = tmp_path / "inv" / ".dspark" / "trust" / "pair_a.json"
    args = {"path": str(path), "group": "pair_a", "manifest": manifest}
    rc, out = trust_module(capsys, args, check_mode=True)
    assert rc == 0 and out["changed"] and out["decision"] == "new" and not path.exists()
    rc, out = trust_module(capsys, args)
    assert rc == 0 and out["changed"] and out["decision"] == "new" and out["trusted_sha256"] is None
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    rc, out = trust_module(capsys, args)
    assert rc == 0 and not out["changed"] and out["decision"] == "trusted"
    # The source's snapshot changed under the same revision: refused, named, nothing rewritten.
    changed = dict(manifest, entries=[dict(e, sha256="0" * 64) if e["path"] == "config.json" else e for e in manifest["entries"]])
    before = path.read_text()
    rc, out = trust_module(capsys, dict(args, manifest=changed))
    assert rc == 1 and out["code"] == "manifest_mismatch" and out["decision"] == "mismatch"
    assert "group pair_a: the source built a manifest of %s@%s with digest %s" % (MODEL, REV[:12], out["manifest_sha256"][:12]) \
        in out["msg"]
    assert "checkpoint_trust_rotate=true" in out["msg"] and path.read_text() == before
    rc, out = trust_module(capsys, dict(args, manifest=changed, rotate=True))
    assert rc == 0 and out["changed"] and out["decision"] == "rotated"
    rc, out = trust_module(capsys, dict(args, group="pair_b"))
    assert rc == 1 and out["code"] == "malformed_trust"
