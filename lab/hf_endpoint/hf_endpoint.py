# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The LAB Hugging Face endpoint (issue #24 item 2): serves ONE model at ONE revision from a hub-layout directory
(what huggingface_hub's snapshot_download writes, e.g. .lab/model/hf made by lab/model/make.sh) over the subset of
the Hub's HTTP API that snapshot_download uses, and, optionally, a PEP 503 package index of a wheelhouse (so that
lab nodes without PyPI can install huggingface_hub). Python standard library only; lab/hf_endpoint/hf_endpoint.sh
starts and stops it. NOT a Hub: no uploads, no listing, no other repository, no xet.

Hub API (every request needs `Authorization: Bearer <token>`, the token read from a 0600 file; 401 otherwise):
  GET  /api/models/{repo}[/revision/{rev}]     model info: sha, siblings (with ?blobs=true: size, blobId, lfs)
  GET  /api/models/{repo}/tree/{rev}[/{path}]  tree listing (?recursive=true), the entries of list_repo_tree
  HEAD|GET /{repo}/resolve/{rev}/{file}        the file: X-Repo-Commit, ETag (git blob sha1), Content-Length,
                                               Accept-Ranges, Range (206/416); an LFS file (its blob named by its
                                               sha256) answers 302 with X-Linked-Etag (sha256), X-Linked-Size and a
                                               same-host Location, as the Hub redirects LFS files to its storage
  HEAD|GET /_lfs/{sha256}                      the LFS blob itself (same headers, ETag = sha256, Range)
  GET  /api/whoami-v2                          {"type": "user", "name": "lab"}: is my token right?
  GET  /api/agent-harnesses                    (no token, as on the Hub) an empty registry: huggingface_hub 1.x asks
`rev` is the served revision (40 hex) or `main` (an alias of it). Errors carry X-Error-Code as the Hub's do
(GatedRepo 401, RepoNotFound, RevisionNotFound, EntryNotFound 404 with X-Repo-Commit), so huggingface_hub raises
its usual exceptions.
Package index (no token: public packages, as on PyPI; pip cannot send a bearer token):
  GET  /simple/  /simple/{project}/            PEP 503 pages; links carry #sha256=... (pip checks them)
  GET  /wheels/{file}                          the wheel

Every file served is listed when the server starts (nothing outside them is reachable, whatever the path says), each
snapshot file must resolve inside the model's directory, and its content is checked against its etag (sha256 for
LFS blobs, git's blob sha1 for the rest) unless --no-verify. One access-log line per request: time, client, method,
path, status, bytes, auth=ok|missing|wrong|public, seconds. The Authorization header is never logged nor echoed.

Usage: hf_endpoint.py --hub DIR --repo-id ORG/NAME --token-file FILE [--revision REV] [--bind ADDR] [--port N]
                      [--wheels DIR] [--log FILE] [--pid-file FILE] [--no-verify] [--interrupt-once BYTES]
"""

import argparse
import datetime
import hashlib
import hmac
import html
import http.server
import json
import os
import re
import socket
import stat
import sys
import threading
import time
import urllib.parse

REV_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
GIT_SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
# Snapshot files without a blob (a copied snapshot): these are LFS files on the Hub (its default .gitattributes).
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".onnx", ".msgpack", ".h5", ".model",
                ".npz", ".tflite", ".ot", ".zip", ".tar", ".gz")
LFS_MIN_SIZE = 10 * 1024 * 1024
CHUNK = 1024 * 1024
WHEEL_RE = re.compile(r"^([A-Za-z0-9_.]+)-[^-]+(-[^-]+)?-[^-]+-[^-]+-[^-]+\.whl$")


class Refused(Exception):
    """The hub directory or the wheelhouse cannot be served as given."""


def git_blob_sha1(path):
    h = hashlib.sha1()
    h.update(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def lfs_pointer(sha256, size):
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha256.encode(), size)


def git_sha1_of(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def normalize_project(name):
    return re.sub(r"[-_.]+", "-", name).lower()


class Model:
    """The files of snapshots/<revision> of one model in a hub-layout directory."""

    def __init__(self, hub, repo_id, revision=None, verify=True):
        if not REPO_RE.match(repo_id):
            raise Refused("--repo-id %r is not ORG/NAME" % repo_id)
        hub = os.path.abspath(hub)
        folder = "models--" + repo_id.replace("/", "--")
        for candidate in (os.path.join(hub, "hub", folder), os.path.join(hub, folder), hub):
            if os.path.isdir(os.path.join(candidate, "snapshots")) and os.path.basename(candidate) == folder:
                self.model_dir = os.path.realpath(candidate)
                break
        else:
            raise Refused("%s has no %s/snapshots (give an HF_HOME, its hub/ or the model's directory)" % (hub, folder))
        if revision is None:
            try:
                with open(os.path.join(self.model_dir, "refs", "main")) as f:
                    revision = f.read().strip()
            except OSError as error:
                raise Refused("no --revision and no refs/main in %s (%s)" % (self.model_dir, error)) from error
        if not REV_RE.match(revision):
            raise Refused("revision %r is not a 40-hex commit id" % revision)
        self.repo_id = repo_id
        self.revision = revision
        self.snapshot = os.path.join(self.model_dir, "snapshots", revision)
        if not os.path.isdir(self.snapshot):
            raise Refused("%s does not exist" % self.snapshot)
        self.files = {}  # path in repo -> dict(real, size, etag, lfs, blob_id)
        for top, dirs, names in os.walk(self.snapshot):
            dirs.sort()
            for name in sorted(names):
                link = os.path.join(top, name)
                rel = os.path.relpath(link, self.snapshot).replace(os.sep, "/")
                self.files[rel] = self._describe(rel, link, verify)
        if not self.files:
            raise Refused("%s holds no file" % self.snapshot)
        self.dirs = sorted({"/".join(p.split("/")[:i]) for p in self.files for i in range(1, p.count("/") + 1)})
        self.by_sha256 = {f["etag"]: f for f in self.files.values() if f["lfs"]}

    def _describe(self, rel, link, verify):
        real = os.path.realpath(link)
        if not real.startswith(self.model_dir + os.sep):
            raise Refused("%s resolves to %s, outside %s" % (link, real, self.model_dir))
        st = os.stat(real)
        if not stat.S_ISREG(st.st_mode):
            raise Refused("%s is not a regular file" % link)
        blobs = os.path.join(self.model_dir, "blobs") + os.sep
        etag = os.path.basename(real) if real.startswith(blobs) else None
        if etag is not None and not (SHA256_RE.match(etag) or GIT_SHA1_RE.match(etag)):
            raise Refused("%s: blob name %s is neither a sha256 nor a git sha1" % (link, etag))
        if etag is None:  # a plain file: what the Hub would have
            lfs = rel.endswith(LFS_SUFFIXES) or st.st_size >= LFS_MIN_SIZE
            etag = sha256_file(real) if lfs else git_blob_sha1(real)
        elif verify:
            have = sha256_file(real) if SHA256_RE.match(etag) else git_blob_sha1(real)
            if have != etag:
                raise Refused("%s is corrupt: its content hashes to %s, its blob is named %s" % (link, have, etag))
        lfs = bool(SHA256_RE.match(etag))
        pointer = lfs_pointer(etag, st.st_size) if lfs else None
        return {"path": rel, "real": real, "size": st.st_size, "etag": etag, "lfs": lfs,
                "blob_id": git_sha1_of(pointer) if lfs else etag, "pointer_size": len(pointer) if lfs else None}

    def info(self, blobs):
        siblings = []
        for f in self.files.values():
            entry = {"rfilename": f["path"]}
            if blobs:
                entry.update(size=f["size"], blobId=f["blob_id"])
                if f["lfs"]:
                    entry["lfs"] = {"sha256": f["etag"], "size": f["size"], "pointerSize": f["pointer_size"]}
            siblings.append(entry)
        return {"_id": "lab-" + self.revision[:24], "id": self.repo_id, "modelId": self.repo_id,
                "author": self.repo_id.split("/")[0], "sha": self.revision, "lastModified": "2025-01-01T00:00:00.000Z",
                "private": False, "gated": "manual", "disabled": False, "downloads": 0, "likes": 0, "tags": ["lab"],
                "library_name": "transformers", "siblings": siblings}

    def tree(self, path, recursive):
        path = path.strip("/")
        if path and path not in self.dirs:
            return None
        prefix = path + "/" if path else ""
        entries = []
        for d in self.dirs:
            if d.startswith(prefix) and (recursive or "/" not in d[len(prefix):]):
                entries.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d})
        for f in self.files.values():
            if f["path"].startswith(prefix) and (recursive or "/" not in f["path"][len(prefix):]):
                entry = {"type": "file", "oid": f["blob_id"], "size": f["size"], "path": f["path"]}
                if f["lfs"]:
                    entry["lfs"] = {"oid": f["etag"], "size": f["size"], "pointerSize": f["pointer_size"]}
                entries.append(entry)
        return sorted(entries, key=lambda e: e["path"])


class Wheelhouse:
    """A directory of wheels as a PEP 503 index."""

    def __init__(self, directory):
        self.files = {}
        self.projects = {}
        if not directory:
            return
        if not os.path.isdir(directory):
            raise Refused("--wheels %s is not a directory" % directory)
        for name in sorted(os.listdir(directory)):
            m = WHEEL_RE.match(name)
            if not m:
                continue
            path = os.path.join(directory, name)
            self.files[name] = {"real": path, "size": os.path.getsize(path), "sha256": sha256_file(path)}
            self.projects.setdefault(normalize_project(m.group(1)), []).append(name)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address, model, wheels, token, log, interrupt_once=0):
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.address_family = family
        self.model = model
        self.wheels = wheels
        self.token = token.encode()
        self.log = log
        self.log_lock = threading.Lock()
        self.interrupt_once = interrupt_once
        self.interrupted = set()
        super().__init__(address, Handler)

    def write_log(self, line):
        with self.log_lock:
            self.log.write(line + "\n")
            self.log.flush()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "dspark-lab-hf-endpoint/1"
    sys_version = ""

    # -- plumbing ------------------------------------------------------------------------------------------------
    def log_message(self, format, *args):  # noqa: A002 (BaseHTTPRequestHandler's signature)
        # Only malformed requests end here (send_error before the handler ran): the request line, never a header.
        self.server.write_log("%s %s - %s" % (now(), self.client_address[0], (format % args).replace("\n", " ")))

    def log_request(self, code="-", size="-"):
        pass  # one line per request from _done instead

    def _done(self, status, sent):
        self.server.write_log("%s %s %s %s %s %s auth=%s %.3fs" % (
            now(), self.client_address[0], self.command, self.path[:400], status, sent, self._auth,
            time.monotonic() - self._t0))

    def _send(self, status, body=b"", headers=None, content_type="application/json"):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if body is not None:
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        self._done(status, 0 if self.command == "HEAD" else len(body))

    def _json(self, status, data, headers=None):
        self._send(status, json.dumps(data).encode() + b"\n", headers)

    def _error(self, status, code, message, headers=None):
        headers = dict(headers or {}, **{"X-Error-Code": code, "X-Error-Message": message})
        self._json(status, {"error": message}, headers)

    def _authorized(self):
        value = self.headers.get("Authorization", "")
        if not value:
            self._auth = "missing"
        elif value.startswith("Bearer ") and hmac.compare_digest(value[7:].strip().encode(), self.server.token):
            self._auth = "ok"
            return True
        else:
            self._auth = "wrong"
        message = ("Access to model %s is restricted: a valid token is required (Authorization: Bearer)." % self.server.model.repo_id
                   if self._auth == "missing" else "Invalid credentials in Authorization header")
        self._error(401, "GatedRepo", message, {"WWW-Authenticate": 'Bearer realm="dspark-lab-hf-endpoint"'})
        return False

    # -- dispatch ------------------------------------------------------------------------------------------------
    def do_HEAD(self):  # noqa: N802
        self._route()

    def do_GET(self):  # noqa: N802
        self._route()

    def do_POST(self):  # noqa: N802
        self._t0 = time.monotonic()
        self._auth = "-"
        length = int(self.headers.get("Content-Length") or 0)
        if 0 < length <= 1 << 20:
            self.rfile.read(length)
        self._error(405, "MethodNotAllowed", "the lab endpoint only serves downloads", {"Connection": "close"})
        self.close_connection = True

    def _route(self):
        self._t0 = time.monotonic()
        self._auth = "-"
        try:
            split = urllib.parse.urlsplit(self.path)
            raw, query = split.path, urllib.parse.parse_qs(split.query)
            if raw == "/simple" or raw.startswith("/simple/") or raw.startswith("/wheels/"):
                self._auth = "public"
                return self._index(raw)
            if raw == "/api/agent-harnesses":
                # Public on the Hub too: huggingface_hub 1.x fetches it (no token) once a day. Empty: no agent detected.
                self._auth = "public"
                return self._json(200, {"standardEnvVars": [], "harnesses": {}})
            if not self._authorized():
                return None
            model = self.server.model
            if raw == "/api/whoami-v2":
                return self._json(200, {"type": "user", "name": "lab", "auth": {"type": "access_token"}})
            m = re.match(r"^/api/models/([^/]+/[^/]+)(/revision/([^/]+)|/tree/([^/]+)(/.*)?)?/?$", raw)
            if m:
                repo = urllib.parse.unquote(m.group(1))
                if repo != model.repo_id:
                    return self._repo_not_found(repo)
                rev = urllib.parse.unquote(m.group(3) or m.group(4) or "main")
                if not self._revision_ok(rev):
                    return None
                if m.group(4) is not None:
                    listing = model.tree(urllib.parse.unquote(m.group(5) or ""), _true(query.get("recursive")))
                    if listing is None:
                        return self._error(404, "EntryNotFound", "%s does not exist at %s" % (m.group(5), rev),
                                           {"X-Repo-Commit": model.revision})
                    return self._json(200, listing)
                return self._json(200, model.info(_true(query.get("blobs"))))
            if raw.startswith("/_lfs/"):
                blob = model.by_sha256.get(raw[len("/_lfs/"):])
                if blob is None:
                    return self._error(404, "EntryNotFound", "no such LFS object", {"X-Repo-Commit": model.revision})
                return self._file(blob)
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", raw)
            if m:
                repo = urllib.parse.unquote(m.group(1))
                if repo != model.repo_id:
                    return self._repo_not_found(repo)
                rev = urllib.parse.unquote(m.group(2))
                if not self._revision_ok(rev):
                    return None
                name = urllib.parse.unquote(m.group(3))
                entry = model.files.get(name)
                if entry is None:
                    return self._error(404, "EntryNotFound", "%s does not exist at %s" % (name, rev),
                                       {"X-Repo-Commit": model.revision})
                if entry["lfs"]:
                    # As the Hub: the LFS file's metadata on the redirect, the bytes at the storage location.
                    return self._send(302, b"", {"Location": "/_lfs/" + entry["etag"], "X-Repo-Commit": model.revision,
                                                 "X-Linked-Etag": '"%s"' % entry["etag"],
                                                 "X-Linked-Size": str(entry["size"]),
                                                 "ETag": '"%s"' % entry["blob_id"]}, "text/plain")
                return self._file(entry)
            return self._error(404, "RepoNotFound", "not served by the lab endpoint: %s" % raw[:200])
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            self._done("gone", "-")
        return None

    def _repo_not_found(self, repo):
        self._error(404, "RepoNotFound", "Repository Not Found for %s: the lab endpoint serves only %s"
                    % (repo[:200], self.server.model.repo_id))

    def _revision_ok(self, rev):
        if rev in (self.server.model.revision, "main"):
            return True
        self._error(404, "RevisionNotFound", "Invalid rev id: %s" % rev[:100])
        return False

    def _index(self, raw):
        wheels = self.server.wheels
        if raw.startswith("/wheels/"):
            entry = wheels.files.get(urllib.parse.unquote(raw[len("/wheels/"):]))
            if entry is None:
                return self._send(404, b"no such file\n", content_type="text/plain")
            return self._file({"real": entry["real"], "size": entry["size"], "etag": entry["sha256"]}, plain=True)
        if raw in ("/simple", "/simple/"):
            links = "".join('<a href="%s/">%s</a>\n' % (p, p) for p in sorted(wheels.projects))
            return self._html("Simple index", links)
        project = raw[len("/simple/"):].strip("/")
        if normalize_project(project) != project and normalize_project(project) in wheels.projects:
            return self._send(301, b"", {"Location": "/simple/%s/" % normalize_project(project)}, "text/plain")
        names = wheels.projects.get(project)
        if names is None:
            return self._send(404, b"not in the lab wheelhouse\n", content_type="text/plain")
        links = "".join('<a href="../../wheels/%s#sha256=%s">%s</a>\n'
                        % (urllib.parse.quote(n), wheels.files[n]["sha256"], html.escape(n)) for n in names)
        return self._html("Links for %s" % project, links)

    def _html(self, title, body):
        page = ('<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" content="1.0"><title>%s</title></head>\n'
                '<body>\n%s</body></html>\n' % (title, body))
        self._send(200, page.encode(), content_type="text/html")

    def _file(self, entry, plain=False):
        size = entry["size"]
        headers = {"Accept-Ranges": "bytes", "ETag": '"%s"' % entry["etag"]}
        if not plain:
            headers["X-Repo-Commit"] = self.server.model.revision
        start, end, status = 0, size - 1, 200
        wanted = self.headers.get("Range")
        if wanted:
            m = re.match(r"^bytes=(\d*)-(\d*)$", wanted.strip())
            if m and (m.group(1) or m.group(2)):
                if m.group(1):
                    start = int(m.group(1))
                    end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
                else:  # the last N bytes
                    start = max(size - int(m.group(2)), 0)
                if start >= size or start > end:
                    return self._send(416, b"", dict(headers, **{"Content-Range": "bytes */%d" % size}), "text/plain")
                status = 206
                headers["Content-Range"] = "bytes %d-%d/%d" % (start, end, size)
            # anything else (several ranges, other units): the whole file, as RFC 9110 allows
        length = end - start + 1 if size else 0
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if self.command == "HEAD":
            return self._done(status, 0)
        limit = length
        key = entry["etag"]
        if self.server.interrupt_once and status == 200 and length > self.server.interrupt_once and key not in self.server.interrupted:
            # Fault injection for tests: the first full GET of each large file stops after N bytes (the client resumes).
            self.server.interrupted.add(key)
            limit = self.server.interrupt_once
        sent = 0
        with open(entry["real"], "rb") as f:
            f.seek(start)
            while sent < limit:
                chunk = f.read(min(CHUNK, limit - sent))
                if not chunk:
                    break
                self.wfile.write(chunk)
                sent += len(chunk)
        if sent < length:
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return self._done("%d-cut" % status, sent)
        return self._done(status, sent)


def _true(values):
    return bool(values) and values[-1].lower() in ("1", "true", "yes")


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


def read_token(path):
    st = os.stat(path)
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise Refused("the token file %s is mode %o: others may read it. Fix: chmod 600 %s" % (path, stat.S_IMODE(st.st_mode), path))
    with open(path) as f:
        token = f.read().strip()
    if not token or any(c.isspace() or ord(c) < 33 or ord(c) > 126 for c in token):
        raise Refused("the token file %s must hold one token of printable ASCII without spaces" % path)
    return token


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--hub", required=True, help="an HF_HOME, its hub/ directory or the model's directory")
    parser.add_argument("--repo-id", required=True)
    parser.add_argument("--revision", help="default: the model's refs/main")
    parser.add_argument("--token-file", required=True, help="the token clients must send (mode 0600)")
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed, and in --pid-file's neighbour)")
    parser.add_argument("--wheels", help="a directory of wheels to serve as /simple/")
    parser.add_argument("--log", help="access log (default: stderr)")
    parser.add_argument("--pid-file", help="written once the socket listens: PID PORT")
    parser.add_argument("--no-verify", action="store_true", help="do not hash the files against their etags at start")
    parser.add_argument("--interrupt-once", type=int, default=0, metavar="BYTES", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        token = read_token(args.token_file)
        model = Model(args.hub, args.repo_id, args.revision, verify=not args.no_verify)
        wheels = Wheelhouse(args.wheels)
    except (Refused, OSError) as error:
        print("hf_endpoint: ERROR: %s" % error, file=sys.stderr)
        return 2
    log = open(args.log, "a", buffering=1) if args.log else sys.stderr
    try:
        server = Server((args.bind, args.port), model, wheels, token, log, args.interrupt_once)
    except OSError as error:
        print("hf_endpoint: ERROR: cannot listen on %s:%s: %s" % (args.bind, args.port, error), file=sys.stderr)
        return 2
    port = server.server_address[1]
    server.write_log("%s start %s@%s: %d files, %d bytes, %d wheels; listening on %s:%d (pid %d)" % (
        now(), model.repo_id, model.revision, len(model.files), sum(f["size"] for f in model.files.values()),
        len(wheels.files), args.bind, port, os.getpid()))
    if args.pid_file:
        tmp = args.pid_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d %d\n" % (os.getpid(), port))
        os.replace(tmp, args.pid_file)
    print("hf_endpoint: listening on %s:%d" % (args.bind, port), file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
