"""lab/registry_push.py, the uploader lab/registry.sh runs in place of `docker push` (uncompressed layers through the
registry's HTTP API v2): its pure functions, the `docker save` stream in both layouts (legacy and OCI) against a fake
registry, the HTTP steps against a fake server, and once end to end: a small image made here put into a real
registry (dspark-lab/registry:trixie, Debian's docker-registry), pulled back by digest with the same image ID.
"""

import hashlib
import http.server
import io
import json
import os
import secrets
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "lab", "registry_push.py")
sys.path.insert(0, os.path.join(ROOT, "lab"))
import registry_push as rp  # noqa: E402  pylint: disable=wrong-import-position,import-error


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


CONFIG = b'{"architecture":"amd64","rootfs":{"type":"layers"}}'
LAYER_A = b"layer a" * 1000
LAYER_B = b"layer b" * 3000


def inspect_json(config=sha(CONFIG), layers=(sha(LAYER_A), sha(LAYER_B)), rootfs_type="layers"):
    return json.dumps([{"Id": config, "RootFS": {"Type": rootfs_type, "Layers": list(layers)}}])


# --- pure functions -------------------------------------------------------------------------------------------------

def test_parse_inspect_gives_the_config_digest_and_the_diff_ids_in_order():
    layers = (sha(LAYER_B), sha(LAYER_A), sha(LAYER_B))
    assert rp.parse_inspect(inspect_json(layers=layers)) == (sha(CONFIG), list(layers))


@pytest.mark.parametrize("text, message", [
    ("not json", "printed no JSON"),
    ("[]", "printed 0 images, wanted one"),
    (inspect_json(config="sha256:abc"), "the image's Id is not a sha256 digest"),
    (inspect_json(layers=["sha256:" + "0" * 63]), "a diff_id in RootFS.Layers is not a sha256 digest"),
    (inspect_json(rootfs_type="other"), "RootFS type is 'other'"),
])
def test_parse_inspect_names_what_is_wrong(text, message):
    with pytest.raises(rp.PushError, match=message):
        rp.parse_inspect(text)


@pytest.mark.parametrize("media_type", sorted(rp.MEDIA_TYPES))
def test_build_manifest_names_the_config_and_the_uncompressed_layers(media_type):
    layers = [(sha(LAYER_A), len(LAYER_A)), (sha(LAYER_B), len(LAYER_B)), (sha(LAYER_A), len(LAYER_A))]
    manifest = json.loads(rp.build_manifest(media_type, (sha(CONFIG), len(CONFIG)), layers))
    config_type, layer_type = rp.MEDIA_TYPES[media_type]
    assert manifest == {
        "schemaVersion": 2, "mediaType": media_type,
        "config": {"mediaType": config_type, "digest": sha(CONFIG), "size": len(CONFIG)},
        "layers": [{"mediaType": layer_type, "digest": d, "size": s} for d, s in layers]}
    assert not layer_type.endswith("gzip") and "gzip" not in layer_type


def test_the_manifest_type_put_is_oci_with_plain_tar_layers():
    assert rp.MANIFEST_TYPE == "application/vnd.oci.image.manifest.v1+json"
    assert rp.MEDIA_TYPES[rp.MANIFEST_TYPE][1] == "application/vnd.oci.image.layer.v1.tar"


def test_manifest_matches_only_this_config_with_exactly_these_layers():
    diff_ids = [sha(LAYER_A), sha(LAYER_B)]
    layers = [(d, 1) for d in diff_ids]
    for media_type in rp.MEDIA_TYPES:
        body = rp.build_manifest(media_type, (sha(CONFIG), 1), layers)
        assert rp.manifest_matches(body, sha(CONFIG), diff_ids)
        assert not rp.manifest_matches(body, sha(b"other config"), diff_ids)
        assert not rp.manifest_matches(body, sha(CONFIG), diff_ids[::-1])
        assert not rp.manifest_matches(body, sha(CONFIG), diff_ids[:1])
    # docker push's manifest: the same config, gzipped layers (other digests).
    gzipped = rp.build_manifest(rp.MANIFEST_DOCKER, (sha(CONFIG), 1), [(sha(b"gz a"), 1), (sha(b"gz b"), 1)])
    assert not rp.manifest_matches(gzipped, sha(CONFIG), diff_ids)
    for junk in (b"", b"not json", b"[]", b'{"mediaType": "x"}', json.dumps({"schemaVersion": 1}).encode()):
        assert not rp.manifest_matches(junk, sha(CONFIG), diff_ids)


@pytest.mark.parametrize("location, url", [
    ("/v2/r/blobs/uploads/u1?_state=s", "http://h:5/v2/r/blobs/uploads/u1?_state=s"),
    ("http://h:5/v2/r/blobs/uploads/u1?_state=s", "http://h:5/v2/r/blobs/uploads/u1?_state=s"),
    ("u1", "http://h:5/v2/r/blobs/uploads/u1"),
])
def test_join_location_takes_a_path_or_a_whole_url(location, url):
    assert rp.join_location("http://h:5/v2/r/blobs/uploads/", location) == url


@pytest.mark.parametrize("location, message", [(None, "no Location header"), ("ftp://h/x", "no http")])
def test_join_location_refuses_none_or_another_scheme(location, message):
    with pytest.raises(rp.PushError, match=message):
        rp.join_location("http://h:5/v2/r/blobs/uploads/", location)


def test_with_digest_adds_the_parameter_after_the_uploads_own():
    digest = sha(b"x")
    hexdigest = digest.split(":")[1]
    assert rp.with_digest("http://h/v2/r/blobs/uploads/u", digest) == "http://h/v2/r/blobs/uploads/u?digest=sha256%3A" + hexdigest
    assert rp.with_digest("http://h/u?_state=a%3D", digest) == "http://h/u?_state=a%3D&digest=sha256%3A" + hexdigest


def test_check_status_names_the_step_the_status_and_the_body():
    rp.check_status("a step", 201, b"", 201)
    rp.check_status("a step", 404, b"", 200, 404)
    with pytest.raises(rp.PushError) as error:
        rp.check_status("putting the manifest r:latest (PUT)", 400, b'{"errors":[{"code":"MANIFEST_INVALID"}]}\n', 201)
    assert str(error.value) == ('putting the manifest r:latest (PUT): HTTP 400 (wanted 201): '
                                '{"errors":[{"code":"MANIFEST_INVALID"}]}')
    with pytest.raises(rp.PushError, match=r"^x: HTTP 500 \(wanted 200 or 404\)$"):
        rp.check_status("x", 500, b"", 200, 404)


def member(name, kind=tarfile.REGTYPE):
    info = tarfile.TarInfo(name)
    info.type = kind
    return info


@pytest.mark.parametrize("name, kind, want", [
    ("blobs/sha256/" + "a" * 64, tarfile.REGTYPE, ("blob", "sha256:" + "a" * 64)),
    ("./blobs/sha256/" + "b" * 64, tarfile.REGTYPE, ("blob", "sha256:" + "b" * 64)),
    ("c" * 64 + ".json", tarfile.REGTYPE, ("blob", "sha256:" + "c" * 64)),
    ("d" * 64 + "/layer.tar", tarfile.REGTYPE, ("layer", None)),
    ("d" * 64 + "/layer.tar", tarfile.SYMTYPE, None),  # a layer that occurs twice: a link to the first
    ("d" * 64 + "/json", tarfile.REGTYPE, None),
    ("d" * 64 + "/VERSION", tarfile.REGTYPE, None),
    ("manifest.json", tarfile.REGTYPE, None),
    ("index.json", tarfile.REGTYPE, None),
    ("repositories", tarfile.REGTYPE, None),
    ("blobs/sha256/short", tarfile.REGTYPE, None),
    ("blobs/sha512/" + "a" * 128, tarfile.REGTYPE, None),
    ("blobs/sha256", tarfile.DIRTYPE, None),
])
def test_classify_member(name, kind, want):
    assert rp.classify_member(member(name, kind)) == want


def test_human():
    assert [rp.human(n) for n in (17, 812_000, 2_500_000_000)] == ["17 B", "812.0 kB", "2.5 GB"]


# --- the docker save stream against a fake registry -----------------------------------------------------------------

class FakeRegistry:
    """Registry.upload's contract: reads SIZE bytes, cancels what is not EXPECTED (PushError) or not KEPT (None)."""

    def __init__(self):
        self.stored = {}
        self.sent = []

    def upload(self, reader, size, expected=None, keep=None):
        data = reader.read(size)
        assert len(data) == size
        digest = sha(data)
        self.sent.append(digest)
        if expected and digest != expected:
            raise rp.PushError("mismatch")
        if keep and not keep(digest):
            return None
        self.stored[digest] = data
        return digest


def make_tar(entries):
    """A tar stream of (name, bytes) files and (name, '-> target') links, in order."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, content in entries:
            info = tarfile.TarInfo(name)
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content[3:]
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    out.seek(0)
    return out


def legacy_save():
    """Docker 20.10's layout: <id>/layer.tar (a repeated layer is a link), <config hex>.json, manifest.json last."""
    return make_tar([
        ("1" * 64 + "/VERSION", b"1.0"), ("1" * 64 + "/json", b"{}"), ("1" * 64 + "/layer.tar", LAYER_B),
        ("2" * 64 + "/json", b"{}"), ("2" * 64 + "/layer.tar", "-> ../" + "3" * 64 + "/layer.tar"),
        ("3" * 64 + "/json", b"{}"), ("3" * 64 + "/layer.tar", LAYER_A),
        (sha(CONFIG)[7:] + ".json", CONFIG), ("manifest.json", b"[]"), ("repositories", b"{}")])


def oci_save():
    """Newer Docker's OCI layout: every blob under blobs/sha256/<hex>, named by its digest."""
    index = b'{"manifests": []}'
    return make_tar([
        ("blobs/sha256/" + sha(index)[7:], index), ("blobs/sha256/" + sha(CONFIG)[7:], CONFIG),
        ("blobs/sha256/" + sha(LAYER_A)[7:], LAYER_A), ("blobs/sha256/" + sha(LAYER_B)[7:], LAYER_B),
        ("index.json", index), ("manifest.json", b"[]"), ("oci-layout", b"{}")])


@pytest.mark.parametrize("save", [legacy_save, oci_save])
def test_the_save_stream_gives_every_wanted_blob_once(save):
    registry = FakeRegistry()
    wanted = {sha(CONFIG), sha(LAYER_A), sha(LAYER_B)}
    sizes = rp.upload_save_stream(save(), wanted, registry)
    assert wanted == set()
    assert sizes == {sha(CONFIG): len(CONFIG), sha(LAYER_A): len(LAYER_A), sha(LAYER_B): len(LAYER_B)}
    assert registry.stored == {sha(CONFIG): CONFIG, sha(LAYER_A): LAYER_A, sha(LAYER_B): LAYER_B}


def test_a_blob_named_by_its_digest_is_sent_only_when_wanted():
    registry = FakeRegistry()
    wanted = {sha(LAYER_B)}
    assert rp.upload_save_stream(oci_save(), wanted, registry) == {sha(LAYER_B): len(LAYER_B)}
    assert registry.sent == [sha(LAYER_B)]


def test_a_legacy_layer_not_wanted_is_sent_but_not_kept():
    registry = FakeRegistry()
    wanted = {sha(LAYER_A)}  # the registry has LAYER_B and the config: LAYER_B comes first and is dropped
    assert rp.upload_save_stream(legacy_save(), wanted, registry) == {sha(LAYER_A): len(LAYER_A)}
    assert registry.sent == [sha(LAYER_B), sha(LAYER_A)] and set(registry.stored) == {sha(LAYER_A)}


def test_reading_stops_when_nothing_is_wanted_any_more():
    registry = FakeRegistry()
    wanted = {sha(LAYER_B)}  # the first layer.tar: LAYER_A's (a layer.tar, sent to learn its digest) is not read
    assert rp.upload_save_stream(legacy_save(), wanted, registry) == {sha(LAYER_B): len(LAYER_B)}
    assert registry.sent == [sha(LAYER_B)]


def test_a_stream_without_a_wanted_blob_leaves_it_wanted():
    registry = FakeRegistry()
    wanted = {sha(CONFIG), sha(b"a gzipped layer")}
    rp.upload_save_stream(oci_save(), wanted, registry)
    assert wanted == {sha(b"a gzipped layer")}


# --- the HTTP steps against a fake server ---------------------------------------------------------------------------

class FakeV2(http.server.BaseHTTPRequestHandler):
    """Just enough of the API v2 for one repository 'r': blob uploads (relative Locations), blob HEAD, manifests."""
    protocol_version = "HTTP/1.1"
    blobs = {}
    manifests = {}
    fail = {}  # method -> (status, body)
    calls = []

    def answer(self, status, headers=(), body=b""):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_one(self):
        self.calls.append((self.command, self.path))
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.command in self.fail:
            status, body = self.fail[self.command]
            return self.answer(status, body=body)
        path, dummy, query = self.path.partition("?")
        if self.command == "POST" and path == "/v2/r/blobs/uploads/":
            return self.answer(202, [("Location", "/v2/r/blobs/uploads/u1?_state=0")])
        if self.command == "PATCH":
            self.server.pending = data
            return self.answer(202, [("Location", "/v2/r/blobs/uploads/u1?_state=1")])
        if self.command == "DELETE":
            return self.answer(204)
        if self.command == "PUT" and path.startswith("/v2/r/blobs/uploads/"):
            digest = query.split("digest=")[1].replace("%3A", ":")
            assert query.startswith("_state=1&") and sha(self.server.pending) == digest
            self.blobs[digest] = self.server.pending
            return self.answer(201, [("Docker-Content-Digest", digest)])
        if self.command == "HEAD" and path.startswith("/v2/r/blobs/"):
            blob = self.blobs.get(path.rsplit("/", 1)[1])
            return self.answer(404) if blob is None else self.answer(200, [("Content-Length", str(len(blob)))])
        if self.command == "PUT" and path.startswith("/v2/r/manifests/"):
            self.manifests[sha(data)] = data
            return self.answer(201, [("Docker-Content-Digest", sha(data))])
        if self.command == "HEAD" and path.startswith("/v2/r/manifests/"):
            return self.answer(200 if path.rsplit("/", 1)[1] in self.manifests else 404)
        return self.answer(405)

    do_GET = do_HEAD = do_POST = do_PATCH = do_PUT = do_DELETE = handle_one  # noqa: N815

    def log_message(self, *args):
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that stopped sending (the short stream's test) is no news


@pytest.fixture
def fake_v2():
    FakeV2.blobs, FakeV2.manifests, FakeV2.fail, FakeV2.calls = {}, {}, {}, []
    server = QuietServer(("127.0.0.1", 0), FakeV2)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield rp.Registry("127.0.0.1:%d" % server.server_address[1], "r")
    server.shutdown()
    server.server_close()


def test_upload_posts_patches_and_puts_the_digest(fake_v2):
    assert fake_v2.blob_size(sha(LAYER_A)) is None
    assert fake_v2.upload(io.BytesIO(LAYER_A), len(LAYER_A)) == sha(LAYER_A)
    assert fake_v2.blob_size(sha(LAYER_A)) == len(LAYER_A)
    assert [c[0] for c in FakeV2.calls] == ["HEAD", "POST", "PATCH", "PUT", "HEAD"]


def test_an_upload_not_kept_is_cancelled(fake_v2):
    assert fake_v2.upload(io.BytesIO(LAYER_A), len(LAYER_A), keep=lambda digest: False) is None
    assert FakeV2.calls[-1][0] == "DELETE" and not FakeV2.blobs


def test_a_blob_whose_bytes_are_not_its_name_is_cancelled_and_named(fake_v2):
    with pytest.raises(rp.PushError, match="named %s has the digest %s" % (sha(LAYER_B), sha(LAYER_A))):
        fake_v2.upload(io.BytesIO(LAYER_A), len(LAYER_A), expected=sha(LAYER_B))
    assert FakeV2.calls[-1][0] == "DELETE" and not FakeV2.blobs


def test_a_refused_step_names_itself_the_status_and_the_body(fake_v2):
    FakeV2.fail["PATCH"] = (416, b'{"errors":[{"code":"BLOB_UPLOAD_INVALID"}]}')
    with pytest.raises(rp.PushError, match=r"sending 7.0 kB to the blob upload \(PATCH\): HTTP 416 \(wanted 202\): "
                                           r'\{"errors":\[\{"code":"BLOB_UPLOAD_INVALID"\}\]\}'):
        fake_v2.upload(io.BytesIO(LAYER_A), len(LAYER_A))


def test_a_short_stream_is_named(fake_v2):
    with pytest.raises(rp.PushError, match="ended 10 bytes before the end of a member"):
        fake_v2.upload(io.BytesIO(LAYER_A[:-10]), len(LAYER_A))


def test_put_manifest_checks_the_registrys_digest(fake_v2):
    body = rp.build_manifest(rp.MANIFEST_TYPE, (sha(CONFIG), len(CONFIG)), [(sha(LAYER_A), len(LAYER_A))])
    assert fake_v2.put_manifest("latest", rp.MANIFEST_TYPE, body) == sha(body)
    FakeV2.manifests.clear()
    FakeV2.fail["PUT"] = (201, b"")  # no Docker-Content-Digest
    with pytest.raises(rp.PushError, match="answered the digest None for the manifest, its bytes hash to"):
        fake_v2.put_manifest("latest", rp.MANIFEST_TYPE, body)


def test_no_registry_is_a_clear_error():
    registry = rp.Registry("127.0.0.1:9", "r")  # discard: nothing listens
    with pytest.raises(rp.PushError, match=r"HEAD http://127.0.0.1:9/v2/r/blobs/sha256:.*: .*(refused|Errno)"):
        registry.blob_size(sha(b"x"))


def test_usage():
    done = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and done.stdout == "" and "usage: registry_push.py IMAGE" in done.stderr


# --- end to end: a real registry, this host's Docker ----------------------------------------------------------------

REGISTRY_IMAGE = "dspark-lab/registry:trixie"


def docker(*args, check=True, timeout=120):
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode:
        raise AssertionError("docker %s failed (%d): %s" % (" ".join(args), done.returncode, done.stderr))
    return done.stdout.strip()


@pytest.fixture
def real_registry():
    """A throw-away lab registry container on 127.0.0.1:<free port>; its base URL."""
    try:
        docker("info", timeout=60)
    except (OSError, AssertionError, subprocess.TimeoutExpired) as error:
        pytest.skip("no Docker engine answers (docker info failed: %s)" % str(error).strip()[:200])
    if docker("image", "inspect", REGISTRY_IMAGE, check=False) == "[]":
        # Built as lab/registry.sh up builds it (on the lab's node image, which `make test`'s setup built).
        done = subprocess.run(["bash", "-c", 'source "$1" && ensure_image', "-", os.path.join(ROOT, "lab", "registry.sh")],
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    name = "dspark-test-registry-push-" + secrets.token_hex(4)
    docker("run", "-d", "--rm", "--name", name, "-p", "127.0.0.1::5000", REGISTRY_IMAGE)
    try:
        hostport = docker("port", name, "5000/tcp").splitlines()[0]
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen("http://%s/v2/" % hostport, timeout=5) as answer:
                    if answer.status == 200:
                        break
            except (OSError, urllib.error.URLError):
                pass
            assert time.monotonic() < deadline, "the registry does not answer: " + docker("logs", name, check=False)
            time.sleep(0.2)
        yield hostport
    finally:
        docker("rm", "-f", name, check=False)


def run_push(*args):
    done = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(line.startswith("registry: ") for line in done.stderr.splitlines()), done.stderr
    return done.stdout, done.stderr


def build(context, dockerfile, tag):
    (context / "Dockerfile").write_text(dockerfile)
    docker("build", "-q", "-t", tag, str(context))
    image_id, layers = docker("image", "inspect", "-f", "{{.Id}} {{json .RootFS.Layers}}", tag).split(" ", 1)
    return image_id, json.loads(layers)


def test_an_image_put_uncompressed_is_pulled_back_by_digest_with_its_image_id(real_registry, tmp_path):
    # Three layers, the third the first again (docker save's legacy layout links it; the manifest lists it twice);
    # a child with one more layer.
    (tmp_path / "a").write_bytes(secrets.token_bytes(3000))
    (tmp_path / "b").write_bytes(secrets.token_bytes(5000))
    (tmp_path / "c").write_bytes(secrets.token_bytes(7000))
    image = "dspark-test/registry-push:" + secrets.token_hex(4)
    child = image + "-child"
    pulled = []
    try:
        image_id, layers = build(tmp_path, "FROM scratch\nCOPY a /a\nCOPY b /b\nCOPY a /a\n", image)
        child_id, child_layers = build(tmp_path, "FROM %s\nCOPY c /c\n" % image, child)
        assert len(layers) == 3 and child_layers[:3] == layers
        out, err = run_push(image, real_registry, "test/tiny", "latest")
        digest = out.strip()
        assert out == digest + "\n" and rp.DIGEST_RE.match(digest), out
        assert "stored %s" % image_id in err and "nothing to upload" not in err

        request = urllib.request.Request("http://%s/v2/test/tiny/manifests/%s" % (real_registry, digest),
                                         headers={"Accept": rp.ACCEPT})
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = answer.read()
        manifest = json.loads(body)
        assert sha(body) == digest and manifest["mediaType"] == rp.MANIFEST_TYPE
        assert manifest["config"]["digest"] == image_id
        assert [layer["digest"] for layer in manifest["layers"]] == layers  # uncompressed: digest == diff_id
        assert {layer["mediaType"] for layer in manifest["layers"]} == {rp.MEDIA_TYPES[rp.MANIFEST_TYPE][1]}

        # Again: the tag already names it, nothing is read from docker save.
        out, err = run_push(image, real_registry, "test/tiny", "latest")
        assert out == digest + "\n" and "nothing to upload" in err and "docker save" not in err, err
        # Another tag: every blob is there, only the manifest is put (the same bytes, the same digest).
        out, err = run_push(image, real_registry, "test/tiny", "other")
        assert out == digest + "\n" and "lacks 0 of these" in err and "docker save" not in err, err
        # The child: only its own layer and config are missing (the sizes of the others come from the registry).
        out, err = run_push(child, real_registry, "test/tiny", "child")
        child_digest = out.strip()
        assert "lacks 2 of these 4" in err and "stored %s" % child_id in err and child_digest != digest, err
        # An upload that is not kept is cancelled: the real registry's answer to DELETE is accepted.
        registry = rp.Registry(real_registry, "test/tiny")
        assert registry.upload(io.BytesIO(b"not kept"), 8, keep=lambda d: False) is None
        assert registry.blob_size(sha(b"not kept")) is None

        # The images gone from this host, a pull by digest brings back the very same images.
        docker("rmi", child, image)
        for ref_digest, want_id, want_layers in ((digest, image_id, layers), (child_digest, child_id, child_layers)):
            pulled.append("%s/test/tiny@%s" % (real_registry, ref_digest))
            docker("pull", "-q", pulled[-1])
            assert docker("image", "inspect", "-f", "{{.Id}} {{json .RootFS.Layers}}", pulled[-1]) == \
                "%s %s" % (want_id, json.dumps(want_layers, separators=(",", ":")))
    finally:
        docker("rmi", "-f", child, image, *pulled[::-1], check=False)
