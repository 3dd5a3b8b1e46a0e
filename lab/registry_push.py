# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Put a local Docker image into a registry with UNCOMPRESSED layers, through the registry HTTP API v2
(https://distribution.github.io/distribution/spec/api/). lab/registry.sh runs it in place of `docker push`.

Why: dockerd gzips every layer on push (the 2.8 GB real-engine image's push took 119 machine CPU-seconds on the
2-core CI machine, 45 this way: bench/results/registry_push.json). A layer sent as the plain tar that `docker save`
emits is not compressed at all: its digest is its diff_id, and a pull applies it as it is (Docker detects the
compression of what it downloads; none is fine; the pull costs about the same as a gzipped one).

Usage: registry_push.py IMAGE REGISTRY_HOSTPORT REPO_PATH [TAG]
  e.g. registry_push.py dspark-lab/vllm-cpu:0.32.0 127.0.0.1:5998 dspark-lab/vllm-cpu latest
Prints only the manifest digest (sha256:...) on stdout; progress and errors on stderr ("registry: ...").

Steps: `docker image inspect` gives the config digest (the image ID) and the diff_ids. A TAG whose manifest already
names exactly those is the answer (a re-run costs seconds). Otherwise the blobs the registry lacks are streamed from
`docker save` (never written to disk here) into blob uploads, then the manifest is PUT under TAG and checked.
Python standard library only.
"""

import hashlib
import http.client
import json
import re
import subprocess
import sys
import tarfile
import time
import urllib.parse

MANIFEST_OCI = "application/vnd.oci.image.manifest.v1+json"
MANIFEST_DOCKER = "application/vnd.docker.distribution.manifest.v2+json"
# Manifest media type -> (config media type, media type of an uncompressed layer).
MEDIA_TYPES = {
    MANIFEST_OCI: ("application/vnd.oci.image.config.v1+json", "application/vnd.oci.image.layer.v1.tar"),
    MANIFEST_DOCKER: ("application/vnd.docker.container.image.v1+json", "application/vnd.docker.image.rootfs.diff.tar"),
}
# The type this tool PUTs. Docker 20.10 (this host) and Docker 26 (the lab nodes) both pull an OCI manifest with
# uncompressed layers by digest. MANIFEST_DOCKER is only read: a tag that `docker push` wrote has that type.
MANIFEST_TYPE = MANIFEST_OCI
# Either type found under TAG is recognised (both name the config and the layers the same way).
ACCEPT = ", ".join(MEDIA_TYPES)
CHUNK = 1 << 20
# Seconds one socket operation may take: the registry's answer to the PUT that completes a 2.5 GB blob waits until
# it has checked and moved the blob.
TIMEOUT = 600
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
PREFIX = "registry: "


class PushError(Exception):
    """A step failed; the message names the step (and the HTTP status and body when the registry answered)."""


def log(message):
    """One progress line on stderr (stdout carries only the digest)."""
    print(PREFIX + message, file=sys.stderr, flush=True)


def human(size):
    """A byte count for people: '2.5 GB', '812.0 kB', '17 B'."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return "%.1f %s" % (size / scale, unit)
    return "%d B" % size


def check_digest(digest, what):
    """DIGEST itself when it is a sha256 digest (sha256:<64 lowercase hex>); PushError naming WHAT otherwise."""
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise PushError("%s is not a sha256 digest: %r" % (what, digest))
    return digest


def parse_inspect(text):
    """(config digest, [diff_id, ...]) from the JSON of `docker image inspect IMAGE`: the image ID is the digest of
    its config, RootFS.Layers are the digests of the uncompressed layer tars, in order (duplicates kept)."""
    try:
        images = json.loads(text)
    except ValueError as error:
        raise PushError("docker image inspect printed no JSON: %s" % error) from error
    if not isinstance(images, list) or len(images) != 1 or not isinstance(images[0], dict):
        count = len(images) if isinstance(images, list) else 0
        raise PushError("docker image inspect printed %d images, wanted one" % count)
    image = images[0]
    config = check_digest(image.get("Id"), "the image's Id")
    rootfs = image.get("RootFS") or {}
    if rootfs.get("Type") != "layers":
        raise PushError("the image's RootFS type is %r, wanted 'layers'" % rootfs.get("Type"))
    layers = rootfs.get("Layers") or []
    if not isinstance(layers, list):
        raise PushError("the image's RootFS.Layers is not a list: %r" % (layers,))
    return config, [check_digest(layer, "a diff_id in RootFS.Layers") for layer in layers]


def build_manifest(media_type, config, layers):
    """The bytes of an image manifest of MEDIA_TYPE (a key of MEDIA_TYPES): CONFIG and LAYERS are (digest, size)
    pairs, the layers in RootFS order, each an uncompressed tar (its digest is its diff_id)."""
    config_type, layer_type = MEDIA_TYPES[media_type]
    manifest = {
        "schemaVersion": 2,
        "mediaType": media_type,
        "config": {"mediaType": config_type, "digest": config[0], "size": config[1]},
        "layers": [{"mediaType": layer_type, "digest": digest, "size": size} for digest, size in layers],
    }
    return json.dumps(manifest, indent=2).encode() + b"\n"


def manifest_matches(body, config, diff_ids):
    """Whether manifest BODY (bytes, either type of MEDIA_TYPES) names config digest CONFIG and exactly the layers
    DIFF_IDS in that order, i.e. it is this image with uncompressed layers."""
    try:
        manifest = json.loads(body)
        return (manifest.get("mediaType") in MEDIA_TYPES and manifest["config"]["digest"] == config
                and [layer["digest"] for layer in manifest["layers"]] == list(diff_ids))
    except (ValueError, KeyError, TypeError, AttributeError):
        return False


def join_location(base, location):
    """The absolute URL of an upload's Location header (the registry may answer a path or a full URL), relative to
    BASE, the URL of the request that got it."""
    if not location:
        raise PushError("the registry answered no Location header to %s" % base)
    url = urllib.parse.urljoin(base, location)
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise PushError("the registry's Location %r is no http(s) URL" % location)
    return url


def with_digest(url, digest):
    """URL with the query parameter digest=DIGEST added (after its own parameters, e.g. _state)."""
    return url + ("&" if urllib.parse.urlsplit(url).query else "?") + "digest=" + urllib.parse.quote(digest, safe="")


def check_status(step, status, body, *wanted):
    """Nothing when STATUS is one of WANTED; PushError naming STEP, the status and the start of the body otherwise."""
    if status in wanted:
        return
    text = body.decode("utf-8", "replace").strip() if isinstance(body, bytes) else str(body or "")
    raise PushError("%s: HTTP %s (wanted %s)%s" % (step, status, " or ".join(map(str, wanted)),
                                                   ": " + text[:1000] if text else ""))


def classify_member(member):
    """What a member of a `docker save` stream may be: ('blob', digest) for a file named by its digest (an OCI
    layout's blobs/sha256/<hex>, or the legacy layout's top-level <hex>.json, the config); ('layer', None) for a
    legacy <id>/layer.tar (its digest is known only once it was read); None for anything else, including the
    legacy layout's symlinks (a layer that occurs twice is stored once, the second is a link to the first)."""
    if not member.isfile():
        return None
    name = member.name[2:] if member.name.startswith("./") else member.name
    parts = name.split("/")
    if len(parts) == 3 and parts[:2] == ["blobs", "sha256"] and re.fullmatch(r"[0-9a-f]{64}", parts[2]):
        return "blob", "sha256:" + parts[2]
    if len(parts) == 1 and re.fullmatch(r"[0-9a-f]{64}\.json", parts[0]):
        return "blob", "sha256:" + parts[0][:-5]
    if len(parts) == 2 and parts[1] == "layer.tar":
        return "layer", None
    return None


def upload_save_stream(fileobj, wanted, registry):
    """Read the tar stream of `docker save` from FILEOBJ and upload every blob whose digest is in WANTED (a set, the
    config and layers the registry lacks, emptied as they arrive) through REGISTRY.upload. Returns {digest: size} of
    what was uploaded; stops reading as soon as WANTED is empty. A legacy layer.tar is sent while it is hashed (the
    stream cannot be read twice): one that turns out not to be wanted is dropped by the registry, not stored."""
    sizes = {}
    with tarfile.open(fileobj=fileobj, mode="r|", bufsize=CHUNK) as tar:
        for member in tar:
            if not wanted:
                break
            kind = classify_member(member)
            if kind is None:
                continue
            what, digest = kind
            if what == "blob" and digest not in wanted:
                continue
            reader = tar.extractfile(member)
            if what == "blob":
                log("uploading %s (%s)" % (digest, human(member.size)))
                stored = registry.upload(reader, member.size, expected=digest)
            else:
                log("uploading %s (%s, its digest known once sent)" % (member.name, human(member.size)))
                stored = registry.upload(reader, member.size, keep=wanted.__contains__)
            if stored:
                wanted.discard(stored)
                sizes[stored] = member.size
    return sizes


class Registry:
    """A registry's API v2 for one repository, over http.client (one kept-alive connection per host)."""

    def __init__(self, hostport, repo, scheme="http"):
        self.base = "%s://%s" % (scheme, hostport)
        self.repo = repo
        self.connections = {}

    def url(self, path):
        """The absolute URL of PATH under /v2/REPO/."""
        return "%s/v2/%s/%s" % (self.base, self.repo, path)

    def connection(self, parts):
        key = (parts.scheme, parts.netloc)
        if key not in self.connections:
            cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            self.connections[key] = cls(parts.netloc, timeout=TIMEOUT)
        return self.connections[key]

    def request(self, method, url, body=b"", headers=None, reader=None, size=0, hasher=None):
        """(status, headers, body) of METHOD URL; with READER, SIZE bytes read from it are the request body (each
        chunk fed to HASHER too). A connection error becomes a PushError."""
        parts = urllib.parse.urlsplit(url)
        path = parts.path + ("?" + parts.query if parts.query else "")
        conn = self.connection(parts)
        try:
            conn.putrequest(method, path, skip_accept_encoding=True)
            for name, value in (headers or {}).items():
                conn.putheader(name, value)
            conn.putheader("Content-Length", str(size if reader else len(body)))
            conn.endheaders()
            if reader is None:
                if body:
                    conn.send(body)
            else:
                try:
                    self.send_stream(conn, reader, size, hasher)
                except OSError:
                    # The registry may have answered (an error) and closed: its answer says more than EPIPE.
                    response = conn.getresponse()
                    text = response.read()[:1000].decode("utf-8", "replace")
                    raise PushError("%s %s: the registry stopped reading the body and answered HTTP %s: %s"
                                    % (method, url, response.status, text)) from None
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as error:
            conn.close()
            raise PushError("%s %s: %s" % (method, url, error or type(error).__name__)) from error
        return response.status, response.headers, data

    @staticmethod
    def send_stream(conn, reader, size, hasher):
        left = size
        while left:
            chunk = reader.read(min(CHUNK, left))
            if not chunk:
                raise PushError("the docker save stream ended %d bytes before the end of a member" % left)
            hasher.update(chunk)
            conn.send(chunk)
            left -= len(chunk)

    def blob_size(self, digest):
        """The size of blob DIGEST in the repository, None when it has none."""
        status, headers, body = self.request("HEAD", self.url("blobs/" + digest))
        check_status("checking for blob %s (HEAD)" % digest, status, body, 200, 404)
        return int(headers.get("Content-Length", "-1")) if status == 200 else None

    def upload(self, reader, size, expected=None, keep=None):
        """Upload SIZE bytes from READER as one blob, hashed on the way: POST starts the upload, one PATCH carries
        the bytes, PUT ?digest= completes it. The digest is returned; but when it is not EXPECTED (PushError) or
        KEEP(digest) is false (None returned) the upload is cancelled instead (DELETE: nothing is stored)."""
        start = time.monotonic()
        url = self.url("blobs/uploads/")
        status, headers, body = self.request("POST", url)
        check_status("starting a blob upload (POST %s)" % url, status, body, 202)
        location = join_location(url, headers.get("Location"))
        hasher = hashlib.sha256()
        status, headers, body = self.request("PATCH", location, headers={"Content-Type": "application/octet-stream"},
                                             reader=reader, size=size, hasher=hasher)
        check_status("sending %s to the blob upload (PATCH)" % human(size), status, body, 202)
        location = join_location(location, headers.get("Location"))
        digest = "sha256:" + hasher.hexdigest()
        if (expected and digest != expected) or (keep and not keep(digest)):
            status, dummy, body = self.request("DELETE", location)
            check_status("cancelling the upload of %s (DELETE)" % digest, status, body, 204, 404)
            if expected and digest != expected:
                raise PushError("the docker save member named %s has the digest %s" % (expected, digest))
            log("dropped %s: not wanted" % digest)
            return None
        status, headers, body = self.request("PUT", with_digest(location, digest))
        check_status("completing the upload of %s (PUT ?digest=)" % digest, status, body, 201)
        answered = headers.get("Docker-Content-Digest")
        if answered and answered != digest:
            raise PushError("the registry stored %s as %s" % (digest, answered))
        seconds = time.monotonic() - start
        rate = ", %s/s" % human(size / seconds) if seconds > 1 else ""
        log("stored %s (%s in %.1f s%s)" % (digest, human(size), seconds, rate))
        return digest

    def get_manifest(self, reference):
        """(status, headers, body) of GET /v2/REPO/manifests/REFERENCE, accepting both manifest types."""
        return self.request("GET", self.url("manifests/" + reference), headers={"Accept": ACCEPT})

    def put_manifest(self, reference, media_type, body):
        """PUT manifest BODY under REFERENCE; returns its digest after checking that the registry computed the same
        one (the sha256 of BODY) and serves it by digest."""
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        status, headers, answer = self.request("PUT", self.url("manifests/" + reference), body=body,
                                               headers={"Content-Type": media_type})
        check_status("putting the manifest %s:%s (PUT)" % (self.repo, reference), status, answer, 201)
        if headers.get("Docker-Content-Digest") != digest:
            raise PushError("the registry answered the digest %r for the manifest, its bytes hash to %s"
                            % (headers.get("Docker-Content-Digest"), digest))
        status, dummy, answer = self.request("HEAD", self.url("manifests/" + digest), headers={"Accept": ACCEPT})
        check_status("checking the manifest %s@%s (HEAD)" % (self.repo, digest), status, answer, 200)
        return digest


def docker_inspect(image):
    """parse_inspect of `docker image inspect IMAGE`."""
    done = subprocess.run(["docker", "image", "inspect", image], capture_output=True, text=True, check=False)
    if done.returncode:
        raise PushError("docker image inspect %s failed: %s" % (image, done.stderr.strip()))
    return parse_inspect(done.stdout)


def upload_from_save(image, wanted, registry):
    """upload_save_stream of `docker save IMAGE` (a pipe: no copy on disk here); the process is stopped once
    nothing is wanted any more. PushError names any wanted blob the stream did not have."""
    log("streaming docker save %s (%d blob(s) to upload)" % (image, len(wanted)))
    # pylint: disable-next=consider-using-with  # reaped below, killed on any error
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        sizes = upload_save_stream(save.stdout, wanted, registry)
    except BaseException as error:
        save.kill()
        save.communicate()
        if isinstance(error, tarfile.TarError):
            raise PushError("reading docker save %s: %s" % (image, error)) from error
        raise
    stopped = not wanted and save.poll() is None
    if stopped:
        save.terminate()  # the rest of the stream holds nothing wanted
    err = save.communicate()[1].decode("utf-8", "replace").strip()
    if save.returncode and not stopped:
        raise PushError("docker save %s failed (exit %d): %s" % (image, save.returncode, err))
    if wanted:
        raise PushError("docker save %s had no uncompressed blob for %s (an image store that saves compressed "
                        "layers, e.g. containerd's, is not supported)" % (image, ", ".join(sorted(wanted))))
    return sizes


def push(image, hostport, repo, tag="latest"):
    """Put IMAGE into the registry at HOSTPORT as REPO:TAG with uncompressed layers; returns the manifest digest."""
    config, diff_ids = docker_inspect(image)
    registry = Registry(hostport, repo)
    status, headers, body = registry.get_manifest(tag)
    check_status("reading the manifest %s:%s (GET)" % (repo, tag), status, body, 200, 404)
    if status == 200 and manifest_matches(body, config, diff_ids):
        digest = headers.get("Docker-Content-Digest") or ""
        if digest == "sha256:" + hashlib.sha256(body).hexdigest():
            log("%s:%s already is %s with its %d layer(s) uncompressed: nothing to upload"
                % (repo, tag, image, len(diff_ids)))
            return digest
    sizes = {}
    blobs = list(dict.fromkeys([config] + diff_ids))  # in order, once each
    for digest in blobs:
        size = registry.blob_size(digest)
        if size is not None:
            sizes[digest] = size
    wanted = set(blobs) - set(sizes)
    log("%s: config and %d layer(s); the registry lacks %d of these %d blob(s)"
        % (image, len(diff_ids), len(wanted), len(blobs)))
    if wanted:
        sizes.update(upload_from_save(image, wanted, registry))
    body = build_manifest(MANIFEST_TYPE, (config, sizes[config]), [(d, sizes[d]) for d in diff_ids])
    digest = registry.put_manifest(tag, MANIFEST_TYPE, body)
    total = human(sum(sizes[d] for d in diff_ids))
    log("%s:%s is %s (%s, %s uncompressed)" % (repo, tag, digest, MANIFEST_TYPE, total))
    return digest


def main(argv):
    if len(argv) not in (3, 4):
        print("usage: registry_push.py IMAGE REGISTRY_HOSTPORT REPO_PATH [TAG]", file=sys.stderr)
        return 2
    image, hostport, repo = argv[:3]
    tag = argv[3] if len(argv) == 4 else "latest"
    try:
        print(push(image, hostport, repo, tag))
    except PushError as error:
        log("ERROR: %s" % error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
