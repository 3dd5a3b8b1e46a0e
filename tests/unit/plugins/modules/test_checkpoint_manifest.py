"""checkpoint_manifest module: main() on fake HF caches (source and a copied target), with patched module args."""

import hashlib
import importlib.util
import json
import os
import pathlib
import shutil
import stat

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.modules import checkpoint_manifest

ROOT = pathlib.Path(__file__).resolve().parents[4]
_spec = importlib.util.spec_from_file_location("fake_checkpoint", str(ROOT / "lab" / "fake_checkpoint.py"))
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)

MODEL = "deepseek-ai/DeepSeek-V4-Flash"
REV = "89abcdef0123456789abcdef0123456789abcdef"
SHARD = "model-00001-of-00003.safetensors"


@pytest.fixture
def source(tmp_path):
    info = fake.generate(str(tmp_path / "src"), model=MODEL, revision=REV, shards=3, shard_size=32 * 1024,
                         sparse_size=6 * 1024 * 1024, blobs=True)
    info["cache"] = str(tmp_path / "src")
    info["manifest_path"] = str(tmp_path / "manifests" / "dsv4.json")
    os.makedirs(os.path.dirname(info["manifest_path"]))
    return info


@pytest.fixture
def target(tmp_path, source):
    """The source cache copied like `rsync -a` (symlinks kept, mtimes preserved), with its own manifest dir."""
    shutil.copytree(source["cache"], str(tmp_path / "dst"), symlinks=True)
    out = dict(source, cache=str(tmp_path / "dst"), manifest_path=str(tmp_path / "tgt" / "dsv4.json"))
    out["snapshot"] = source["snapshot"].replace(source["cache"], out["cache"])
    os.makedirs(os.path.dirname(out["manifest_path"]))
    return out


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            checkpoint_manifest.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def build(capsys, info, **extra):
    args = {"state": "built", "model": MODEL, "revision": REV, "cache_dir": info["cache"],
            "manifest_path": info["manifest_path"]}
    args.update(extra)
    return run(capsys, args)


def check(capsys, info, **extra):
    args = {"model": MODEL, "cache_dir": info["cache"], "manifest_path": info["manifest_path"]}
    args.update(extra)
    return run(capsys, args)


def tree(path):
    """Everything about a directory tree a write could change."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, path)] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                             os.readlink(p) if os.path.islink(p) else None)
    return out


def publish(source, target):
    shutil.copy(source["manifest_path"], target["manifest_path"])


def test_built_writes_manifest_and_rerun_is_unchanged(capsys, source):
    rc, out = build(capsys, source)
    assert rc == 0 and out["changed"] is True
    m = out["manifest"]
    assert (m["model"], m["revision"], m["file_count"]) == (MODEL, REV, 8)
    assert out["hashed"] == 8 and out["index"]["shards_expected"] == 3 and out["index"]["missing"] == []
    path = source["manifest_path"]
    assert json.loads(pathlib.Path(path).read_text()) == m
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(path + ".state.json").st_mode) == 0o644
    assert os.listdir(os.path.dirname(path)) == ["dsv4.json", "dsv4.json.state.json"]  # no temp files left
    text, mtime = pathlib.Path(path).read_text(), os.stat(path).st_mtime_ns

    rc, again = build(capsys, source)
    assert rc == 0 and again["changed"] is False
    assert again["hashed"] == 0 and again["fast_path_hits"] == 8 and again["state_written"] is False
    assert again["manifest"] == m  # the stored created time is kept
    assert pathlib.Path(path).read_text() == text and os.stat(path).st_mtime_ns == mtime

    rc, full = build(capsys, source, full=True)
    assert rc == 0 and full["changed"] is False and full["hashed"] == 8


def test_built_follows_refs_main_and_detects_new_content(capsys, source):
    rc, out = build(capsys, source, revision=None)
    assert rc == 0 and out["revision"] == REV and out["refs_main"] == REV
    with open(os.path.join(source["snapshot"], "config.json"), "a") as f:
        f.write(" ")
    rc, out = build(capsys, source)
    assert rc == 0 and out["changed"] is True


def test_built_check_mode_writes_nothing(capsys, source):
    rc, out = build(capsys, source, _ansible_check_mode=True)
    assert rc == 0 and out["changed"] is True and out["manifest"]["file_count"] == 8
    assert "would be written" in out["report"]
    assert os.listdir(os.path.dirname(source["manifest_path"])) == []
    build(capsys, source)
    rc, out = build(capsys, source, _ansible_check_mode=True)
    assert rc == 0 and out["changed"] is False


def test_built_refuses_incomplete_source(capsys, source):
    os.unlink(os.path.join(source["snapshot"], SHARD))
    rc, out = build(capsys, source)
    assert rc == 1 and out["code"] == "incomplete_source" and SHARD in out["msg"]
    assert os.listdir(os.path.dirname(source["manifest_path"])) == []


def test_built_never_modifies_source(capsys, source):
    before = tree(source["cache"])
    build(capsys, source)
    build(capsys, source, full=True)
    assert tree(source["cache"]) == before


def test_verified_on_copy_then_fast_path(capsys, source, target):
    build(capsys, source)
    publish(source, target)
    rc, out = check(capsys, target)
    assert rc == 0 and out["changed"] is False and out["ok"] is True
    assert out["revision"] == REV and out["hashed"] == 8 and out["state_written"] is True
    assert out["index"]["shards_present"] == 3
    state = target["manifest_path"] + ".state.json"
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o644
    rc, out = check(capsys, target)
    assert rc == 0 and out["hashed"] == 0 and out["fast_path_hits"] == 8 and out["state_written"] is False
    assert "OK, 8 files verified (0 hashed, 8 unchanged" in out["report"]


def test_verified_missing_shard_fails_by_name(capsys, source, target):
    build(capsys, source)
    publish(source, target)
    os.unlink(os.path.join(target["snapshot"], SHARD))
    rc, out = check(capsys, target)
    assert rc == 1 and out["failed"] is True and out["code"] == "incomplete"
    assert out["missing"] == [SHARD] and out["index"]["missing"] == [SHARD]
    assert "missing: " + SHARD in out["msg"]


def test_verified_corruption_found_by_full(capsys, source, target):
    build(capsys, source)
    publish(source, target)
    assert check(capsys, target)[0] == 0
    path = os.path.join(target["snapshot"], SHARD)
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(4000)
        f.write(b"\0" if f.read(1) != b"\0" else b"\1")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    rc, out = check(capsys, target, full=True)
    assert rc == 1 and [c["path"] for c in out["corrupt"]] == [SHARD] and out["corrupt"][0]["reason"] == "sha256"
    assert SHARD in out["msg"] and "sha256" in out["msg"]
    # The failed file left the state, so the repair run re-hashes it even without full.
    shutil.copy2(os.path.join(source["snapshot"], SHARD), os.path.realpath(path))
    rc, out = check(capsys, target)
    assert rc == 0 and out["hashed"] == 1 and out["fast_path_hits"] == 7


def test_verified_never_writes_into_the_snapshot(capsys, source, target):
    build(capsys, source)
    publish(source, target)
    os.unlink(os.path.join(target["snapshot"], SHARD))  # a failing run must not touch it either
    before = tree(target["cache"])
    assert check(capsys, target)[0] == 1
    assert check(capsys, target, full=True)[0] == 1
    assert tree(target["cache"]) == before


def test_verified_check_mode_writes_no_state(capsys, source, target):
    build(capsys, source)
    publish(source, target)
    rc, out = check(capsys, target, _ansible_check_mode=True)
    assert rc == 0 and out["ok"] is True and out["state_written"] is False
    assert os.listdir(os.path.dirname(target["manifest_path"])) == ["dsv4.json"]


def test_verified_inline_manifest_and_state_path(capsys, source, target, tmp_path):
    rc, built = build(capsys, source)
    state = str(tmp_path / "tgt" / "inline.state.json")
    args = {"model": MODEL, "cache_dir": target["cache"], "manifest": built["manifest"]}
    rc, out = run(capsys, args)
    assert rc == 0 and out["ok"] and out["state_path"] is None and out["state_written"] is False
    rc, out = run(capsys, dict(args, state_path=state))
    assert rc == 0 and out["state_written"] is True and os.path.exists(state)
    rc, out = run(capsys, dict(args, state_path=state))
    assert out["hashed"] == 0


def test_verified_rejects_wrong_model_or_revision(capsys, source, target):
    build(capsys, source)
    publish(source, target)
    rc, out = check(capsys, target, model="deepseek-ai/Other")
    assert rc == 1 and out["code"] == "manifest_mismatch"
    rc, out = check(capsys, target, revision="f" * 40)
    assert rc == 1 and out["code"] == "manifest_mismatch"


def test_verified_malformed_manifest_file(capsys, target):
    pathlib.Path(target["manifest_path"]).write_text("{not json")
    rc, out = check(capsys, target)
    assert rc == 1 and out["code"] == "malformed_manifest"


def test_own_files_refused_inside_model_dir(capsys, source):
    inside = os.path.join(source["repo_dir"], "manifest.json")
    rc, out = build(capsys, source, manifest_path=inside)
    assert rc == 1 and out["code"] == "invalid_argument" and not os.path.exists(inside)


def test_escaping_symlink_fails(capsys, source, target, tmp_path):
    build(capsys, source)
    publish(source, target)
    link = os.path.join(target["snapshot"], "tokenizer.json")
    os.unlink(link)
    secret = tmp_path / "secret"
    secret.write_text("x")
    os.symlink(str(secret), link)
    rc, out = check(capsys, target)
    assert rc == 1 and out["code"] == "unsafe_path" and "tokenizer.json" in out["msg"]


def test_malformed_index_fails(capsys, source):
    with open(os.path.realpath(os.path.join(source["snapshot"], "model.safetensors.index.json")), "w") as f:
        f.write('{"weight_map": ')
    rc, out = build(capsys, source)
    assert rc == 1 and out["code"] == "malformed_index"
    rc, out = build(capsys, source, require_index=False)
    assert rc == 0 and out["index"] is None


def test_absent_snapshot_lists_all_missing(capsys, source, tmp_path):
    build(capsys, source)
    rc, out = check(capsys, dict(source, cache=str(tmp_path / "empty")))
    assert rc == 1 and out["code"] == "incomplete" and len(out["missing"]) == 8


def test_missing_manifest_dir_for_built(capsys, source, tmp_path):
    rc, out = build(capsys, source, manifest_path=str(tmp_path / "nope" / "m.json"))
    assert rc == 1 and out["code"] == "invalid_argument"


def test_refs_main_warning_only_about_a_verified_snapshot(capsys, source, target, tmp_path):
    """A target checked before its first copy has no refs/main yet: no warning then (it was the first converge's only
    warning on the real-engine lab); a verified snapshot whose refs/main names another revision is still warned about."""
    build(capsys, source)
    rc, out = check(capsys, dict(source, cache=str(tmp_path / "empty")))
    assert rc == 1 and out["code"] == "incomplete" and not out.get("warnings")
    publish(source, target)
    with open(os.path.join(target["cache"], "hub", "models--" + MODEL.replace("/", "--"), "refs", "main"), "w") as ref:
        ref.write("0" * 40)
    rc, out = check(capsys, target, revision=REV)
    assert rc == 0, out
    assert any("refs/main of %s names %s" % (MODEL, "0" * 40) in str(w) for w in out.get("warnings", [])), out


def test_verified_hostile_scan_lists_what_no_honest_copy_makes(capsys, source, tmp_path):
    # An SCP target as the copy leaves it: the links' files, no links.
    shutil.copytree(source["cache"], str(tmp_path / "plain"), symlinks=False)
    target = dict(source, cache=str(tmp_path / "plain"), manifest_path=str(tmp_path / "plain-m" / "dsv4.json"))
    os.makedirs(os.path.dirname(target["manifest_path"]))
    build(capsys, source)
    publish(source, target)
    rc, out = check(capsys, target, hostile_scan=True)
    assert rc == 0 and out["ok"] is True and out["hostile"] == []
    model_dir = os.path.join(target["cache"], "hub", "models--deepseek-ai--DeepSeek-V4-Flash")
    suid = os.path.join(model_dir, "suid")
    with open(suid, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(suid, 0o4755)
    os.mkfifo(os.path.join(model_dir, "pipe"))
    os.symlink("/etc", os.path.join(model_dir, "out"))
    rc, out = check(capsys, target, hostile_scan=True)
    # The snapshot still verifies; what the caller refuses is listed, by mode, owner and path.
    assert rc == 0 and out["ok"] is True
    assert [line.split(" ", 2)[2] for line in out["hostile"]] == [os.path.join(model_dir, n) for n in ("out", "pipe", "suid")]
    assert out["hostile"][2].startswith("-rwsr-xr-x ")
    rc, out = check(capsys, target)
    assert rc == 0 and "hostile" not in out


def test_verified_hostile_scan_only_after_a_passed_verification(capsys, source, target):
    build(capsys, source)
    publish(source, target)
    os.unlink(os.path.join(target["snapshot"], SHARD))
    rc, out = check(capsys, target, hostile_scan=True)
    assert rc == 1 and out["code"] == "incomplete" and "hostile" not in out


def test_records_report_content_digest_mode_and_owner_of_the_stamp_files(capsys, source, target, tmp_path):
    build(capsys, source)
    publish(source, target)
    stamp = tmp_path / "tgt" / "stamp.json"
    stamp.write_text("{}\n")
    os.chmod(str(stamp), 0o640)
    os.symlink(str(stamp), str(tmp_path / "tgt" / "link.json"))
    paths = [str(stamp), str(tmp_path / "tgt" / "absent.json"), str(tmp_path / "tgt" / "link.json")]
    rc, out = check(capsys, target, records=paths)
    assert rc == 0
    st = os.stat(str(stamp))
    assert out["records"] == {paths[0]: {"sha256": hashlib.sha256(b"{}\n").hexdigest(), "mode": "0640",
                                         "uid": st.st_uid, "gid": st.st_gid},
                              paths[1]: None, paths[2]: None}
    # Also when the verification fails, and never a path inside the model directory.
    os.unlink(os.path.join(target["snapshot"], SHARD))
    rc, out = check(capsys, target, records=paths[:1])
    assert rc == 1 and out["records"][paths[0]]["mode"] == "0640"
    rc, out = check(capsys, target, records=[os.path.join(target["snapshot"], "config.json")])
    assert rc == 1 and out["code"] == "invalid_argument" and "records" in out["msg"]
