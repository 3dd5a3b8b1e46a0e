"""checkpoint: HF cache paths, scan, hashing (sparse and plain), manifest, verify with the fast path, index."""

import hashlib
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
SPARSE_SHARD = "model-00004-of-00004.safetensors"


def make(cache, blobs=True, **kw):
    args = dict(model=MODEL, revision=REV, shards=4, shard_size=64 * 1024, sparse_size=8 * 1024 * 1024, blobs=blobs)
    args.update(kw)
    return fake.generate(str(cache), **args)


@pytest.fixture(params=[True, False], ids=["blobs", "plain"])
def ckpt(tmp_path, request):
    return make(tmp_path / "hf", blobs=request.param)


def manifest_of(snap, state=None):
    return ck.build_manifest(snap, model=MODEL, revision=REV, state=state)


def rewrite_byte(path, offset, keep_times=True):
    """Flip one byte in place (same size); optionally restore atime/mtime like a sneaky rewrite."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(1)
        f.seek(offset)
        f.write(bytes([old[0] ^ 0xFF]))
    if keep_times:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


# --- HF cache paths ---------------------------------------------------------------------------

def test_repo_folder_and_paths(tmp_path):
    assert ck.repo_folder(MODEL) == "models--deepseek-ai--DeepSeek-V4-Flash"
    assert ck.repo_folder("gpt2") == "models--gpt2"
    assert ck.snapshot_dir("/c", MODEL, REV) == "/c/hub/models--deepseek-ai--DeepSeek-V4-Flash/snapshots/" + REV
    for bad in ("", "a/b/c", "../x", "org/..", "a--b/c", "/abs", "org/name with space", None):
        with pytest.raises(CheckpointError) as e:
            ck.repo_folder(bad)
        assert e.value.code == "invalid_argument"
    for bad in ("main", REV[:39], REV.upper(), REV + "0", "../" + REV[3:]):
        with pytest.raises(CheckpointError):
            ck.snapshot_dir("/c", MODEL, bad)
    assert ck.is_revision(REV) and not ck.is_revision("g" * 40) and not ck.is_revision(None)


def test_refs_main_read_and_validated(tmp_path):
    cache = str(tmp_path)
    assert ck.read_ref(cache, MODEL) is None
    with pytest.raises(CheckpointError) as e:
        ck.resolve_revision(cache, MODEL)
    assert e.value.code == "no_ref"
    refs = tmp_path / "hub" / "models--deepseek-ai--DeepSeek-V4-Flash" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text(REV)
    assert ck.read_ref(cache, MODEL) == REV
    assert ck.resolve_revision(cache, MODEL) == REV
    assert ck.resolve_revision(cache, MODEL, "main") == REV
    assert ck.resolve_revision(cache, MODEL, REV.upper()) == REV
    (refs / "main").write_text(REV + "\n")  # tolerated: written by hand
    assert ck.read_ref(cache, MODEL) == REV
    (refs / "main").write_text("not-a-commit")
    with pytest.raises(CheckpointError) as e:
        ck.read_ref(cache, MODEL)
    assert e.value.code == "bad_ref" and "not-a-commit" in e.value.message
    with pytest.raises(CheckpointError):
        ck.read_ref(cache, MODEL, "../../etc")


# --- scan -----------------------------------------------------------------------------------

def test_scan_blobs_and_plain_agree(tmp_path):
    a = make(tmp_path / "a", blobs=True)
    b = make(tmp_path / "b", blobs=False)
    fa, fb = ck.scan(a["snapshot"]), ck.scan(b["snapshot"])
    assert list(fa) == list(fb) == sorted(fa)
    assert SPARSE_SHARD in fa and "model.safetensors.index.json" in fa and "config.json" in fa
    assert [v["size"] for v in fa.values()] == [v["size"] for v in fb.values()]
    assert fa[SPARSE_SHARD]["size"] == 8 * 1024 * 1024
    assert os.path.islink(os.path.join(a["snapshot"], SHARD))
    # Same seed and arguments give the same bytes, whatever the layout.
    assert ck.sha256_file(os.path.join(a["snapshot"], SHARD)) == ck.sha256_file(os.path.join(b["snapshot"], SHARD))


def test_scan_nested_directories(tmp_path):
    info = make(tmp_path, blobs=False)
    sub = pathlib.Path(info["snapshot"]) / "original"
    sub.mkdir()
    (sub / "params.json").write_text("{}")
    assert "original/params.json" in ck.scan(info["snapshot"])


@pytest.mark.parametrize("target", ["outside_file", "absolute", "chain"])
def test_escaping_symlink_rejected(tmp_path, target):
    info = make(tmp_path / "hf", blobs=True)
    snap = pathlib.Path(info["snapshot"])
    outside = tmp_path / "secret.txt"
    outside.write_text("not part of the model")
    link = snap / "tokenizer.json"
    link.unlink()
    if target == "outside_file":
        link.symlink_to(os.path.relpath(str(outside), str(snap)))
    elif target == "absolute":
        link.symlink_to(str(outside))
    else:  # an in-model link that points at a blob which itself leaves the model directory
        blob = pathlib.Path(info["repo_dir"]) / "blobs" / "hop"
        blob.symlink_to(str(outside))
        link.symlink_to("../../blobs/hop")
    with pytest.raises(CheckpointError) as e:
        ck.scan(str(snap))
    assert e.value.code == "unsafe_path"
    assert "tokenizer.json" in e.value.message
    with pytest.raises(CheckpointError):
        ck.build_manifest(str(snap))


def test_symlinked_directory_and_dangling_link(tmp_path):
    info = make(tmp_path, blobs=True)
    snap = pathlib.Path(info["snapshot"])
    (snap / "sub").symlink_to("../../blobs")
    with pytest.raises(CheckpointError) as e:
        ck.scan(str(snap))
    assert "sub (not a regular file)" in e.value.message
    (snap / "sub").unlink()
    (snap / "extra.bin").symlink_to("../../blobs/never-downloaded")
    assert ck.scan(str(snap))["extra.bin"] is None
    with pytest.raises(CheckpointError) as e:
        ck.build_manifest(str(snap))
    assert e.value.code == "incomplete_source" and "extra.bin" in e.value.message


# --- hashing --------------------------------------------------------------------------------

def test_sparse_hash_equals_plain_read(tmp_path):
    path = str(tmp_path / "holes.bin")
    size = 40 * 1024 * 1024 + 123
    with open(path, "wb") as f:
        f.seek(12 * 1024 * 1024)
        f.write(b"data in the middle" * 1000)
        f.seek(30 * 1024 * 1024 + 7)
        f.write(os.urandom(5000))
        f.truncate(size)  # ends in a hole
    with open(path, "rb") as f:
        expected = hashlib.sha256(f.read()).hexdigest()
    fd = os.open(path, os.O_RDONLY)
    try:
        regions = list(ck._hole_aware_regions(fd, size))
    finally:
        os.close(fd)
    assert sum(r[1] for r in regions) == size and regions[0][0] == 0
    if not any(not r[2] for r in regions):
        pytest.skip("this filesystem reports no holes; only the plain path is exercised")
    assert ck.sha256_file(path, sparse=True) == expected
    assert ck.sha256_file(path, sparse=False) == expected


@pytest.mark.parametrize("size", [0, 1, ck.CHUNK, ck.CHUNK + 1, 3 * ck.CHUNK])
def test_all_hole_and_small_files_hash_like_hashlib(tmp_path, size):
    path = str(tmp_path / "f")
    with open(path, "wb") as f:
        f.truncate(size)
    assert ck.sha256_file(path) == ck.sha256_file(path, sparse=False) == hashlib.sha256(bytes(size)).hexdigest()


def test_fake_sparse_shard_hash(ckpt):
    path = os.path.join(ckpt["snapshot"], SPARSE_SHARD)
    assert os.stat(path).st_blocks * 512 < 4 * 1024 * 1024  # really sparse (8 MiB apparent)
    with open(path, "rb") as f:
        assert ck.sha256_file(path) == hashlib.sha256(f.read()).hexdigest()


# --- manifest -------------------------------------------------------------------------------

def test_manifest_format(ckpt):
    m = manifest_of(ckpt["snapshot"])
    assert m["format"] == "dspark.cluster/checkpoint-manifest" and m["version"] == 1
    assert (m["model"], m["revision"], m["algorithm"]) == (MODEL, REV, "sha256")
    assert m["file_count"] == len(m["entries"]) == ckpt["files"] == 9
    assert m["total_size"] == ckpt["apparent_bytes"]
    assert [e["path"] for e in m["entries"]] == sorted(e["path"] for e in m["entries"])
    assert all(set(e) == {"path", "size", "sha256"} for e in m["entries"])
    assert ck.load_manifest(ck.dump_json(m)) == m
    listing = ck.build_manifest(ckpt["snapshot"], hash=False)
    assert all("sha256" not in e for e in listing["entries"])


def test_same_content_ignores_created_only(ckpt):
    a = manifest_of(ckpt["snapshot"])
    b = dict(a, created="1999-01-01T00:00:00Z")
    assert ck.same_content(a, b)
    assert not ck.same_content(a, dict(b, revision="f" * 40))
    assert not ck.same_content(a, None)


@pytest.mark.parametrize("bad", [
    "not json",
    [],
    {"format": "other", "version": 1, "entries": []},
    {"format": ck.MANIFEST_FORMAT, "version": 2, "entries": []},
    {"format": ck.MANIFEST_FORMAT, "version": 1, "entries": [{"path": "../etc/passwd", "size": 1, "sha256": "0" * 64}]},
    {"format": ck.MANIFEST_FORMAT, "version": 1, "entries": [{"path": "/abs", "size": 1, "sha256": "0" * 64}]},
    {"format": ck.MANIFEST_FORMAT, "version": 1, "entries": [{"path": "a", "size": -1, "sha256": "0" * 64}]},
    {"format": ck.MANIFEST_FORMAT, "version": 1, "entries": [{"path": "a", "size": 1, "sha256": "xyz"}]},
    {"format": ck.MANIFEST_FORMAT, "version": 1, "entries": [{"path": "a", "size": 1, "sha256": "0" * 64}] * 2},
    {"format": ck.MANIFEST_FORMAT, "version": 1, "revision": "main", "entries": []},
])
def test_malformed_manifest_rejected(bad):
    with pytest.raises(CheckpointError) as e:
        ck.load_manifest(json.dumps(bad) if not isinstance(bad, str) else bad)
    assert e.value.code == "malformed_manifest"


# --- verify ---------------------------------------------------------------------------------

def test_round_trip_then_fast_path(ckpt):
    snap = ckpt["snapshot"]
    m = manifest_of(snap)
    state = {}
    first = ck.verify(snap, m, state=state)
    assert first == {"ok": True, "missing": [], "corrupt": [], "extra": [], "checked": 9, "hashed": 9,
                     "fast_path_hits": 0, "bytes_hashed": ckpt["apparent_bytes"]}
    assert sorted(state) == [e["path"] for e in m["entries"]]
    second = ck.verify(snap, m, state=state)
    assert second["ok"] and second["hashed"] == 0 and second["fast_path_hits"] == 9 and second["bytes_hashed"] == 0
    forced = ck.verify(snap, m, state=state, full=True)
    assert forced["ok"] and forced["hashed"] == 9
    assert ck.verify(snap, m, state=state, jobs=1) == second


def test_build_manifest_fast_path_and_stats(ckpt):
    state, stats = {}, {}
    a = ck.build_manifest(ckpt["snapshot"], state=state, stats=stats)
    assert stats["hashed"] == 9
    b = ck.build_manifest(ckpt["snapshot"], state=state, stats=stats)
    assert stats == {"hashed": 0, "fast_path_hits": 9, "bytes_hashed": 0}
    assert ck.same_content(a, b)
    ck.build_manifest(ckpt["snapshot"], state=state, stats=stats, full=True)
    assert stats["hashed"] == 9


def test_missing_shard_reported_by_name(ckpt):
    snap = ckpt["snapshot"]
    m = manifest_of(snap)
    os.unlink(os.path.join(snap, SHARD))
    r = ck.verify(snap, m)
    assert not r["ok"] and r["missing"] == [SHARD] and r["corrupt"] == [] and r["checked"] == 8
    report = ck.render_report(r, "dsv4@0123")
    assert "INCOMPLETE" in report and "missing: " + SHARD in report


def test_dangling_blob_link_is_missing(tmp_path):
    info = make(tmp_path, blobs=True)
    snap = info["snapshot"]
    m = manifest_of(snap)
    os.unlink(os.path.realpath(os.path.join(snap, SHARD)))  # blob gone, link left behind
    r = ck.verify(snap, m)
    assert r["missing"] == [SHARD] and not r["ok"]


def test_corrupt_byte_with_restored_mtime(ckpt):
    """Same size, mtime put back: a full verify catches it; the fast path does too, via ctime."""
    snap = ckpt["snapshot"]
    m = manifest_of(snap)
    state = {}
    assert ck.verify(snap, m, state=state)["ok"]
    path = os.path.join(snap, SPARSE_SHARD)
    before = os.stat(path)
    rewrite_byte(path, 5 * 1024 * 1024)  # inside the hole
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    full = ck.verify(snap, m, state=dict(state), full=True)
    assert not full["ok"] and [c["path"] for c in full["corrupt"]] == [SPARSE_SHARD]
    c = full["corrupt"][0]
    assert c["reason"] == "sha256" and c["expected"] != c["actual"] and len(c["actual"]) == 64
    fast = ck.verify(snap, m, state=state)
    assert [c["path"] for c in fast["corrupt"]] == [SPARSE_SHARD] and fast["hashed"] == 1
    assert SPARSE_SHARD not in state  # a corrupt file is never trusted on the next run
    assert SPARSE_SHARD in ck.render_report(fast)


def test_changed_mtime_forces_rehash(ckpt):
    """The fast path trusts a record only while size and mtime (and ctime, inode) still match."""
    snap = ckpt["snapshot"]
    m = manifest_of(snap)
    state = {}
    ck.verify(snap, m, state=state)
    path = os.path.join(snap, SHARD)
    rewrite_byte(path, 100, keep_times=False)
    os.utime(path, ns=(0, state[SHARD]["mtime_ns"] + 10 ** 9))
    # Pretend ctime and inode gave no hint, so only mtime can tell the file changed.
    st = os.stat(path)
    state[SHARD].update(ctime_ns=st.st_ctime_ns, ino=st.st_ino)
    r = ck.verify(snap, m, state=state)
    assert r["hashed"] == 1 and r["fast_path_hits"] == 8
    assert [c["path"] for c in r["corrupt"]] == [SHARD]
    # Only mtime changed, content intact: re-hashed once, verified, then fast again.
    rewrite_byte(path, 100, keep_times=False)
    r = ck.verify(snap, m, state=state)
    assert r["ok"] and r["hashed"] == 1
    assert ck.verify(snap, m, state=state)["hashed"] == 0


def test_fast_path_is_blind_to_a_forged_record(ckpt):
    """Documents the trade-off: with every metadata field matching, only full=True re-reads."""
    snap = ckpt["snapshot"]
    m = manifest_of(snap)
    state = {}
    ck.verify(snap, m, state=state)
    path = os.path.join(snap, SHARD)
    rewrite_byte(path, 100)
    st = os.stat(path)
    state[SHARD].update(mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns, ino=st.st_ino)
    assert ck.verify(snap, m, state=dict(state))["ok"]
    assert not ck.verify(snap, m, state=state, full=True)["ok"]


def test_truncated_file(ckpt):
    snap = ckpt["snapshot"]
    m = manifest_of(snap)
    path = os.path.join(snap, SHARD)
    with open(path, "r+b") as f:
        f.truncate(1000)
    r = ck.verify(snap, m, state={})
    assert r["corrupt"] == [{"path": SHARD, "reason": "size", "expected": 64 * 1024, "actual": 1000}]
    assert r["hashed"] == 8  # a size mismatch needs no hashing
    assert "%s (size: expected 65536, actual 1000)" % SHARD in ck.render_report(r)


def test_extra_files_fail_the_verification(ckpt):
    """#26: a file the manifest does not list (planted, or left by an interrupted receiver) fails, by name, with the fix."""
    snap = ckpt["snapshot"]
    m = manifest_of(snap)
    with open(os.path.join(snap, "README.md"), "w") as f:
        f.write("hi")
    os.makedirs(os.path.join(snap, "sub"))
    with open(os.path.join(snap, "sub", ".model.py.Ab12Cd"), "w") as f:
        f.write("import os")
    r = ck.verify(snap, m)
    assert not r["ok"] and r["extra"] == ["README.md", "sub/.model.py.Ab12Cd"]
    assert not r["missing"] and not r["corrupt"]
    report = ck.render_report(r)
    assert report.startswith("checkpoint: UNEXPECTED FILES: 0 missing, 0 corrupt of 9 files in the manifest, 2 file(s) not in it")
    assert "not in the manifest: README.md, sub/.model.py.Ab12Cd" in report
    assert "remove them from the snapshot, or re-run the copy" in report
    assert "copy the named files again" not in report


def test_absent_snapshot_lists_every_file_missing(ckpt, tmp_path):
    m = manifest_of(ckpt["snapshot"])
    r = ck.verify(str(tmp_path / "nowhere"), m)
    assert not r["ok"] and r["missing"] == [e["path"] for e in m["entries"]] and r["checked"] == 0
    report = ck.render_report(r, limit=3)
    assert "9 missing" in report and "and 6 more" in report


def test_state_document_bound_to_snapshot(ckpt, tmp_path):
    doc = ck.state_document(ckpt["snapshot"], {"a": {"size": 1}})
    assert ck.state_entries(json.loads(ck.dump_json(doc)), ckpt["snapshot"]) == {"a": {"size": 1}}
    assert ck.state_entries(doc, str(tmp_path)) == {}
    assert ck.state_entries(None, ckpt["snapshot"]) == {}
    assert ck.state_entries(dict(doc, version=99), ckpt["snapshot"]) == {}


# --- index ----------------------------------------------------------------------------------

def test_index_complete(ckpt):
    idx = ck.index_completeness(ckpt["snapshot"])
    assert (idx["shards_expected"], idx["shards_present"], idx["missing"]) == (4, 4, [])
    assert idx["shards"] == ckpt["shards"]


def test_index_names_absent_shard(ckpt):
    snap = ckpt["snapshot"]
    os.unlink(os.path.join(snap, SHARD))
    idx = ck.index_completeness(snap)
    assert (idx["shards_expected"], idx["shards_present"], idx["missing"]) == (4, 3, [SHARD])
    report = ck.render_report({"ok": True, "missing": [], "corrupt": [], "extra": [], "checked": 8,
                               "hashed": 0, "fast_path_hits": 8}, index=idx)
    assert "INCOMPLETE" in report and SHARD in report


def write_index(snap, text):
    path = os.path.join(snap, ck.INDEX_FILE)
    real = os.path.realpath(path)
    with open(real, "w") as f:
        f.write(text)


@pytest.mark.parametrize("text,needle", [
    ('{"weight_map": {"a": "model-00001', "not JSON"),
    ('["weight_map"]', "weight_map"),
    ('{"metadata": {}}', "weight_map"),
    ('{"weight_map": {}}', "weight_map"),
    ('{"weight_map": {"a": 3}}', "relative file names"),
    ('{"weight_map": {"a": "../../blobs/x"}}', "relative file names"),
    (b'\xff\xfe'.decode("latin-1"), "not JSON"),
])
def test_malformed_index(ckpt, text, needle):
    write_index(ckpt["snapshot"], text)
    with pytest.raises(CheckpointError) as e:
        ck.index_completeness(ckpt["snapshot"])
    assert e.value.code == "malformed_index" and needle in e.value.message
    assert ck.INDEX_FILE in e.value.message


def test_no_index(tmp_path):
    info = make(tmp_path, blobs=False)
    os.unlink(os.path.join(info["snapshot"], ck.INDEX_FILE))
    with pytest.raises(CheckpointError) as e:
        ck.index_completeness(info["snapshot"])
    assert e.value.code == "no_index"


def test_fake_checkpoint_is_deterministic(tmp_path):
    a = make(tmp_path / "a", blobs=False, seed=7)
    b = make(tmp_path / "b", blobs=True, seed=7)
    c = make(tmp_path / "c", blobs=False, seed=8)
    ma, mb, mc = (ck.build_manifest(x["snapshot"]) for x in (a, b, c))
    assert ma["entries"] == mb["entries"]
    assert ma["entries"] != mc["entries"]
    assert fake.parse_size("3.75G") == int(3.75 * 1024 ** 3) and fake.parse_size("4MiB") == 4 * 1024 * 1024


def test_hostile_entries_name_links_specials_and_loose_modes(tmp_path):
    top = tmp_path / "models--org--x"
    (top / "snapshots" / "r").mkdir(parents=True)
    for d in (top, top / "snapshots", top / "snapshots" / "r"):
        os.chmod(d, 0o755)
    (top / "snapshots" / "r" / "config.json").write_text("{}")
    os.chmod(top / "snapshots" / "r" / "config.json", 0o644)
    assert ck.hostile_entries(str(top)) == []
    os.symlink("config.json", top / "snapshots" / "r" / "rel")   # any link: the copy sends files
    os.mkfifo(top / "fifo")
    (top / "open").mkdir()
    os.chmod(top / "open", 0o777)
    (top / "sgid").write_text("")
    os.chmod(top / "sgid", 0o2644)
    os.chmod(top, 0o775)                                         # the directory itself counts
    found = ck.hostile_entries(str(top))
    paths = [line.split(" ", 2)[2] for line in found]
    assert paths == sorted(str(p) for p in (top, top / "fifo", top / "open", top / "sgid", top / "snapshots" / "r" / "rel"))
    modes = dict(reversed(line.split(" ", 2)[::2]) for line in found)
    assert modes[str(top / "sgid")] == "-rw-r-Sr--" and modes[str(top / "fifo")].startswith("p")


def test_hostile_entries_of_a_directory_that_is_not_there(tmp_path):
    with pytest.raises(CheckpointError) as err:
        ck.hostile_entries(str(tmp_path / "absent"))
    assert err.value.code == "io_error" and "absent" in err.value.message
