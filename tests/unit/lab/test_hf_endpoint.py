"""lab/hf_endpoint/hf_endpoint.py, the lab's Hugging Face endpoint (issue #24 item 2), against a small hub-layout tree
made here: its HTTP answers checked with urllib (401 without the token, model info and tree, resolve with the Hub's
headers, the LFS redirect, Range, 404s with the Hub's error codes, the pip index), what it refuses to serve, that the
token is in no log and on no command line, and the real huggingface_hub snapshot_download against it (a dropped
transfer resumed with Range). The last part needs huggingface_hub: the interpreter in DSPARK_TEST_HF_PYTHON, or this
one when it has it; skipped otherwise (the project's venv does not install it).
"""

import hashlib
import http.client
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SERVER = ROOT / "lab" / "hf_endpoint" / "hf_endpoint.py"
REPO_ID = "lab-org/tiny"
REV = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_testSENTINEL_9c1f0e7d2b"
BIG = 12 * 1024 * 1024 + 321  # over huggingface_hub's 10 MiB read chunk: a cut after 10.5 MiB resumes with Range


def git_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def make_hub(root, big=BIG):
    """An HF_HOME as snapshot_download leaves it: blobs named by etag, the snapshot's files linking to them."""
    files = {
        "config.json": b'{"model_type": "llama"}\n',
        "nested/dir/notes.txt": b"a file below two directories\n",
        "model-00001-of-00001.safetensors": bytes(range(256)) * (big // 256) + b"x" * (big % 256),
    }
    model = root / "hf" / "hub" / ("models--" + REPO_ID.replace("/", "--"))
    (model / "blobs").mkdir(parents=True)
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text(REV)
    snapshot = model / "snapshots" / REV
    meta = {}
    for name, data in files.items():
        lfs = name.endswith(".safetensors")
        etag = hashlib.sha256(data).hexdigest() if lfs else git_sha1(data)
        (model / "blobs" / etag).write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(model / "blobs" / etag, link.parent))
        meta[name] = {"data": data, "etag": etag, "lfs": lfs}
    return root / "hf", model, meta


def write_token(path, token=TOKEN, mode=0o600):
    path.write_text(token + "\n")
    path.chmod(mode)
    return path


def start(tmp_path, *extra, hub=None, token_file=None, wait=True):
    """Start the server on a free port; (process, base URL, access log path)."""
    token_file = token_file or write_token(tmp_path / "token")
    pid_file = tmp_path / "pid"
    log = tmp_path / "access.log"
    command = [sys.executable, str(SERVER), "--hub", str(hub or tmp_path / "hf"), "--repo-id", REPO_ID,
               "--token-file", str(token_file), "--port", "0", "--pid-file", str(pid_file), "--log", str(log), *extra]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not wait:
        return proc, None, log
    deadline = time.monotonic() + 60
    while not pid_file.exists():
        if proc.poll() is not None:
            raise AssertionError("the server exited: %s" % proc.stderr.read())
        assert time.monotonic() < deadline, "the server did not listen within 60 s"
        time.sleep(0.05)
    port = int(pid_file.read_text().split()[1])
    return proc, "http://127.0.0.1:%d" % port, log


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


OPENER = urllib.request.build_opener(NoRedirect)


def request(url, method="GET", token=TOKEN, headers=None):
    """(status, headers, body) of one request, redirects not followed."""
    all_headers = dict(headers or {})
    if token is not None:
        all_headers["Authorization"] = "Bearer " + token
    req = urllib.request.Request(url, method=method, headers=all_headers)
    try:
        with OPENER.open(req, timeout=20) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hfe")
    dummy, model, meta = make_hub(tmp)
    wheels = tmp / "wheels"
    wheels.mkdir()
    (wheels / "Demo_Pkg-1.0-py3-none-any.whl").write_bytes(b"not really a wheel")
    (wheels / "README").write_text("not a wheel: not listed")
    proc, base, log = start(tmp, "--wheels", str(wheels))
    yield {"base": base, "meta": meta, "log": log, "proc": proc, "model": model, "wheels": wheels}
    stop(proc)


def resolve(served, name, rev=REV):
    return "%s/%s/resolve/%s/%s" % (served["base"], REPO_ID, rev, name)


def test_401_without_or_with_a_wrong_token(served):
    for token in (None, "hf_wrong", ""):
        for url in (resolve(served, "config.json"), "%s/api/models/%s/revision/%s" % (served["base"], REPO_ID, REV),
                    "%s/api/models/%s/tree/%s" % (served["base"], REPO_ID, REV), served["base"] + "/api/whoami-v2"):
            status, headers, body = request(url, token=token)
            assert status == 401, (url, token, status)
            assert headers["X-Error-Code"] == "GatedRepo"
            assert headers["WWW-Authenticate"].startswith("Bearer")
            assert TOKEN.encode() not in body
    status, headers, dummy = request(resolve(served, "config.json"), method="HEAD", token=None)
    assert status == 401
    status, dummy, body = request(served["base"] + "/api/whoami-v2")
    assert status == 200 and json.loads(body)["name"] == "lab"


def test_model_info_lists_the_siblings_and_the_revision(served):
    for rev in (REV, "main"):
        status, dummy, body = request("%s/api/models/%s/revision/%s" % (served["base"], REPO_ID, rev))
        assert status == 200
        info = json.loads(body)
        assert info["id"] == REPO_ID and info["sha"] == REV
        assert sorted(s["rfilename"] for s in info["siblings"]) == sorted(served["meta"])
        assert "size" not in info["siblings"][0]
    status, dummy, body = request("%s/api/models/%s?blobs=true" % (served["base"], REPO_ID))
    assert status == 200
    siblings = {s["rfilename"]: s for s in json.loads(body)["siblings"]}
    big = served["meta"]["model-00001-of-00001.safetensors"]
    lfs = siblings["model-00001-of-00001.safetensors"]["lfs"]
    assert lfs["sha256"] == big["etag"] and lfs["size"] == BIG
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (big["etag"].encode(), BIG)
    assert lfs["pointerSize"] == len(pointer)
    assert siblings["model-00001-of-00001.safetensors"]["blobId"] == git_sha1(pointer)
    assert siblings["config.json"] == {"rfilename": "config.json", "size": len(served["meta"]["config.json"]["data"]),
                                       "blobId": served["meta"]["config.json"]["etag"]}


def test_tree_lists_files_and_directories(served):
    status, dummy, body = request("%s/api/models/%s/tree/%s?recursive=true&expand=false" % (served["base"], REPO_ID, REV))
    assert status == 200
    tree = {e["path"]: e for e in json.loads(body)}
    assert tree["nested"]["type"] == tree["nested/dir"]["type"] == "directory"
    assert tree["nested/dir/notes.txt"]["type"] == "file"
    assert tree["config.json"]["oid"] == served["meta"]["config.json"]["etag"] and "lfs" not in tree["config.json"]
    assert tree["model-00001-of-00001.safetensors"]["lfs"]["oid"] == served["meta"]["model-00001-of-00001.safetensors"]["etag"]
    status, dummy, body = request("%s/api/models/%s/tree/%s" % (served["base"], REPO_ID, REV))
    assert sorted(e["path"] for e in json.loads(body)) == ["config.json", "model-00001-of-00001.safetensors", "nested"]
    status, dummy, body = request("%s/api/models/%s/tree/%s/nested/dir" % (served["base"], REPO_ID, REV))
    assert status == 200 and [e["path"] for e in json.loads(body)] == ["nested/dir/notes.txt"]
    status, headers, dummy = request("%s/api/models/%s/tree/%s/nowhere" % (served["base"], REPO_ID, REV))
    assert status == 404 and headers["X-Error-Code"] == "EntryNotFound"


def test_resolve_a_small_file_with_the_hub_headers(served):
    data, etag = served["meta"]["config.json"]["data"], served["meta"]["config.json"]["etag"]
    for method in ("HEAD", "GET"):
        status, headers, body = request(resolve(served, "config.json"), method=method, headers={"Accept-Encoding": "identity"})
        assert status == 200
        assert headers["X-Repo-Commit"] == REV
        assert headers["ETag"] == '"%s"' % etag
        assert headers["Content-Length"] == str(len(data))
        assert headers["Accept-Ranges"] == "bytes"
        assert body == (data if method == "GET" else b"")
    status, dummy, body = request(resolve(served, "nested/dir/notes.txt", rev="main"))
    assert status == 200 and body == served["meta"]["nested/dir/notes.txt"]["data"]


def test_an_lfs_file_redirects_with_its_linked_etag_and_size(served):
    big = served["meta"]["model-00001-of-00001.safetensors"]
    status, headers, dummy = request(resolve(served, "model-00001-of-00001.safetensors"), method="HEAD")
    assert status == 302
    assert headers["Location"] == "/_lfs/" + big["etag"]
    assert headers["X-Linked-Etag"] == '"%s"' % big["etag"]
    assert headers["X-Linked-Size"] == str(BIG)
    assert headers["X-Repo-Commit"] == REV
    status, headers, body = request(served["base"] + headers["Location"])
    assert status == 200 and headers["ETag"] == '"%s"' % big["etag"] and headers["X-Repo-Commit"] == REV
    assert hashlib.sha256(body).hexdigest() == big["etag"]
    status, dummy, dummy = request(served["base"] + headers.get("Location", "/_lfs/" + big["etag"]), token=None)
    assert status == 401
    status, headers, dummy = request(served["base"] + "/_lfs/" + "0" * 64)
    assert status == 404 and headers["X-Error-Code"] == "EntryNotFound"


@pytest.mark.parametrize("wanted, start, end", [
    ("bytes=10-", 10, BIG - 1),
    ("bytes=0-0", 0, 0),
    ("bytes=100-199", 100, 199),
    ("bytes=-7", BIG - 7, BIG - 1),
    ("bytes=%d-%d" % (BIG - 3, BIG + 100), BIG - 3, BIG - 1),
])
def test_range_requests_answer_206_with_the_slice(served, wanted, start, end):
    big = served["meta"]["model-00001-of-00001.safetensors"]
    status, headers, body = request(served["base"] + "/_lfs/" + big["etag"], headers={"Range": wanted})
    assert status == 206
    assert headers["Content-Range"] == "bytes %d-%d/%d" % (start, end, BIG)
    assert headers["Content-Length"] == str(end - start + 1)
    assert body == big["data"][start:end + 1]


def test_unsatisfiable_range_is_416_and_a_range_on_a_small_file_works(served):
    big = served["meta"]["model-00001-of-00001.safetensors"]
    status, headers, dummy = request(served["base"] + "/_lfs/" + big["etag"], headers={"Range": "bytes=%d-" % BIG})
    assert status == 416 and headers["Content-Range"] == "bytes */%d" % BIG
    status, dummy, body = request(resolve(served, "config.json"), headers={"Range": "bytes=2-5"})
    assert status == 206 and body == served["meta"]["config.json"]["data"][2:6]
    status, dummy, body = request(resolve(served, "config.json"), headers={"Range": "bytes=0-1,4-5"})
    assert status == 200 and body == served["meta"]["config.json"]["data"]  # several ranges: the whole file


def test_unknown_file_revision_and_repo_are_404_with_the_hub_error_codes(served):
    status, headers, body = request(resolve(served, "missing.bin"))
    assert status == 404 and headers["X-Error-Code"] == "EntryNotFound" and headers["X-Repo-Commit"] == REV
    status, headers, dummy = request(resolve(served, "missing.bin"), method="HEAD")
    assert status == 404 and headers["X-Error-Code"] == "EntryNotFound"
    other = "f" * 40
    for url in (resolve(served, "config.json", rev=other), "%s/api/models/%s/revision/%s" % (served["base"], REPO_ID, other),
                "%s/api/models/%s/tree/v1.0" % (served["base"], REPO_ID)):
        status, headers, dummy = request(url)
        assert status == 404 and headers["X-Error-Code"] == "RevisionNotFound", url
    for url in ("%s/other-org/tiny/resolve/%s/config.json" % (served["base"], REV),
                "%s/api/models/other-org/tiny/revision/%s" % (served["base"], REV), served["base"] + "/etc/passwd"):
        status, headers, dummy = request(url)
        assert status == 404 and headers["X-Error-Code"] == "RepoNotFound", url
    # Nothing outside the listed files, whatever the path says.
    for name in ("../../blobs/" + served["meta"]["config.json"]["etag"], "%2e%2e/%2e%2e/refs/main", "/etc/passwd"):
        status, dummy, dummy = request(resolve(served, name))
        assert status == 404, name
    status, dummy, dummy = request(served["base"] + "/api/models/%s/revision/%s" % (REPO_ID, REV), method="POST")
    assert status == 405


def test_the_pip_index_needs_no_token_and_links_with_sha256(served):
    status, dummy, body = request(served["base"] + "/simple/", token=None)
    assert status == 200 and b'<a href="demo-pkg/">demo-pkg</a>' in body
    status, dummy, body = request(served["base"] + "/simple/demo-pkg/", token=None)
    digest = hashlib.sha256(b"not really a wheel").hexdigest()
    assert status == 200
    assert ('href="../../wheels/Demo_Pkg-1.0-py3-none-any.whl#sha256=%s"' % digest).encode() in body
    status, headers, dummy = request(served["base"] + "/simple/Demo_Pkg/", token=None)
    assert status == 301 and headers["Location"] == "/simple/demo-pkg/"
    status, dummy, body = request(served["base"] + "/wheels/Demo_Pkg-1.0-py3-none-any.whl", token=None)
    assert status == 200 and body == b"not really a wheel"
    for path in ("/wheels/README", "/wheels/..%2FREADME", "/simple/nothing/"):
        status, dummy, dummy = request(served["base"] + path, token=None)
        assert status == 404, path
    status, dummy, body = request(served["base"] + "/api/agent-harnesses", token=None)
    assert status == 200 and json.loads(body) == {"standardEnvVars": [], "harnesses": {}}


def test_keep_alive_serves_several_requests_on_one_connection(served):
    host, port = served["base"][len("http://"):].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    for name in ("config.json", "nested/dir/notes.txt", "config.json"):
        connection.request("GET", "/%s/resolve/%s/%s" % (REPO_ID, REV, name), headers={"Authorization": "Bearer " + TOKEN})
        answer = connection.getresponse()
        assert answer.status == 200 and answer.read() == served["meta"][name]["data"]
    connection.close()


def test_the_token_is_in_no_log_and_not_on_the_command_line(served):
    request(resolve(served, "config.json"))
    request(resolve(served, "config.json"), token="hf_wrong_TOKEN_value")
    text = served["log"].read_text()
    assert TOKEN not in text and "hf_wrong_TOKEN_value" not in text
    assert " auth=ok " in text and " auth=missing " in text and " auth=wrong " in text and " auth=public " in text
    assert "GET /%s/resolve/%s/config.json 200 " % (REPO_ID, REV) in text
    cmdline = pathlib.Path("/proc/%d/cmdline" % served["proc"].pid).read_bytes()
    assert TOKEN.encode() not in cmdline and b"--token-file" in cmdline


@pytest.mark.parametrize("case, message", [
    ("token readable by others", "others may read it"),
    ("empty token", "must hold one token"),
    ("corrupt blob", "is corrupt"),
    ("link out of the model", "outside"),
    ("no snapshot of the revision", "does not exist"),
    ("no such model", "has no models--lab-org--tiny/snapshots"),
])
def test_refuses_to_serve(tmp_path, case, message):
    hub, model, meta = make_hub(tmp_path, big=1000)
    token_file = write_token(tmp_path / "token")
    extra = []
    if case == "token readable by others":
        token_file.chmod(0o644)
    elif case == "empty token":
        write_token(token_file, token="")
    elif case == "corrupt blob":
        with open(model / "blobs" / meta["config.json"]["etag"], "ab") as f:
            f.write(b" ")
    elif case == "link out of the model":
        (tmp_path / "secret").write_text("outside")
        (model / "snapshots" / REV / "leak.txt").symlink_to(tmp_path / "secret")
    elif case == "no snapshot of the revision":
        extra = ["--revision", "a" * 40]
    elif case == "no such model":
        hub = tmp_path / "nowhere"
        hub.mkdir()
    proc, dummy, dummy = start(tmp_path, *extra, hub=hub, token_file=token_file, wait=False)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out, err)
    assert message in err and "hf_endpoint: ERROR: " in err


def test_a_copied_snapshot_of_plain_files_is_served_with_computed_etags(tmp_path):
    model = tmp_path / "models--lab-org--tiny"
    snapshot = model / "snapshots" / REV
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_bytes(b"{}")
    (snapshot / "model.safetensors").write_bytes(b"weights")
    proc, base, dummy = start(tmp_path, "--revision", REV, hub=model)
    try:
        status, headers, dummy = request("%s/%s/resolve/%s/config.json" % (base, REPO_ID, REV), method="HEAD")
        assert status == 200 and headers["ETag"] == '"%s"' % git_sha1(b"{}")
        status, headers, dummy = request("%s/%s/resolve/%s/model.safetensors" % (base, REPO_ID, REV), method="HEAD")
        assert status == 302 and headers["X-Linked-Etag"] == '"%s"' % hashlib.sha256(b"weights").hexdigest()
    finally:
        stop(proc)


# -- the real client ------------------------------------------------------------------------------------------------

def hf_python():
    candidates = [os.environ.get("DSPARK_TEST_HF_PYTHON"), sys.executable]
    for python in filter(None, candidates):
        if subprocess.run([python, "-c", "import huggingface_hub"], capture_output=True, check=False).returncode == 0:
            return python
    return None


DOWNLOAD = r"""
import os, sys
from huggingface_hub import snapshot_download, __version__
token = sys.stdin.readline().strip()
path = snapshot_download(repo_id=sys.argv[1], revision=sys.argv[2], cache_dir=os.path.join(sys.argv[3], "hub"),
                         max_workers=4, token=token)
print(__version__, path)
"""


@pytest.mark.skipif(hf_python() is None, reason="huggingface_hub is not installed (set DSPARK_TEST_HF_PYTHON)")
def test_snapshot_download_of_the_real_client_resumes_a_dropped_transfer(tmp_path):
    dummy, dummy, meta = make_hub(tmp_path)
    proc, base, log = start(tmp_path, "--interrupt-once", str(10 * 1024 * 1024 + 512 * 1024))
    cache = tmp_path / "downloaded"
    env = dict(os.environ, HF_ENDPOINT=base, HF_HOME=str(cache), HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1")
    env.pop("HF_TOKEN", None)

    def download():
        done = subprocess.run([hf_python(), "-c", DOWNLOAD, REPO_ID, REV, str(cache)], input=TOKEN + "\n", env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert TOKEN not in done.stdout + done.stderr
        return done

    try:
        # huggingface_hub 1.x resumes the cut transfer within the run; 0.x fails the run and resumes its .incomplete
        # file on the next one, which is why the role retries the download.
        for dummy in range(3):
            done = download()
            if done.returncode == 0:
                break
        assert done.returncode == 0, done.stderr[-3000:]
        snapshot = pathlib.Path(done.stdout.split()[-1])
        assert snapshot == cache / "hub" / "models--lab-org--tiny" / "snapshots" / REV
        for name, item in meta.items():
            assert (snapshot / name).read_bytes() == item["data"], name
        first = log.read_text()
        again = download()
        assert again.returncode == 0, again.stderr[-3000:]
    finally:
        stop(proc)
    text = log.read_text()
    assert TOKEN not in text
    lfs = "/_lfs/" + meta["model-00001-of-00001.safetensors"]["etag"]
    assert "GET %s 200-cut %d " % (lfs, 10 * 1024 * 1024 + 512 * 1024) in first
    # Resumed with a Range request from what it kept (huggingface_hub 1.x: the 10 MiB of its first read chunk).
    assert any(line.split()[2:5] == ["GET", lfs, "206"] for line in first.splitlines()), first
    # The second run finds everything in the cache: no file is fetched again.
    second = text[len(first):]
    assert "GET /_lfs/" not in second and " GET /%s/resolve/" % REPO_ID not in second, second
