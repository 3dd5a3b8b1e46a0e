"""The head's API edge (issue #41) against a real HAProxy: the configuration plugin_utils/_serve_edge.py renders from
the serve role's defaults, in front of a stand-in engine on 127.0.0.1 (test_router_haproxy's Backend).

What it proves: only the API paths pass, and only with a valid key (the scheme in any case and one space, as vLLM
splits it); a wrong key, no key, another scheme, two spaces, a bare key, two headers are refused before the engine
sees anything; /health and /metrics pass without a key from trusted sources only; tricky paths get 404; requests
without a valid key are capped per source; while the engine does not listen the edge's 503 carries the header the
readiness probe reads, while the engine's own 503 passes unmarked; the edge's files hold no key. A sidecar engine
(issue #46) on its own API port of the same edge meets every one of those rules, and reaches its own engine alone.

For the test process only (unprivileged): `chroot`, `user` and `group` are dropped, and the trusted sources become
127.0.0.1 alone so that 127.0.0.2 plays an untrusted client (the role trusts all of 127/8).
"""

import contextlib
import os
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from ansible_collections.dspark.cluster.plugins.module_utils import tp_api_probe
from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_edge
from test_router_haproxy import HAPROXY, Backend, free_port, send

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
pytestmark = pytest.mark.skipif(
    HAPROXY is None, reason="no haproxy binary (apt-get install haproxy; tests/ci/prereqs.sh test installs it)")

KEY = "edge-sentinel-key-0123456789abcdef"
OTHER_KEY = "edge-second-key-fedcba9876543210"
RATE = 6


def defaults():
    with open(os.path.join(ROOT, "roles", "serve", "defaults", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def settings(work, engine_port, api_port, keys=(KEY, OTHER_KEY), rate=RATE):
    d = defaults()
    return {"group": "pair_a", "serve_host": "127.0.0.1", "api_port": api_port, "serve_engine_port": engine_port,
            "serve_edge_allowed_paths": d["serve_edge_allowed_paths"], "keys": list(keys),
            "trusted": [("routers", "10.1.2.3")], "serve_edge_unauthenticated_rate": rate,
            "serve_edge_maxconn": d["serve_edge_maxconn"], "serve_edge_timeout_client": d["serve_edge_timeout_client"],
            "serve_edge_timeout_server": d["serve_edge_timeout_server"],
            "keys_path": str(work / "edge-keys.sha256"), "config_path": str(work / "edge.cfg")}


def for_the_test_process(config):
    out = []
    for line in config.splitlines():
        word = line.split()[0] if line.strip() else ""
        if word in ("chroot", "user", "group"):
            continue
        if word == "acl" and line.split()[1] == "dspark_trusted":
            line = "    acl dspark_trusted src 127.0.0.1"
        out.append(line)
    return "\n".join(out) + "\n"


def start(work, plan):
    assert plan["problems"] == [], plan["problems"]
    (work / "edge-keys.sha256").write_text(plan["key_hashes"])
    (work / "edge.cfg").write_text(for_the_test_process(plan["config"]))
    check = subprocess.run([HAPROXY, "-c", "-f", str(work / "edge.cfg")], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    return subprocess.Popen([HAPROXY, "-db", "-f", str(work / "edge.cfg")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def wait_listening(port):
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("the edge did not listen on %d" % port)


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    work = tmp_path_factory.mktemp("edge")
    backend = Backend()
    port = free_port()
    plan = _serve_edge.plan(settings(work, backend.port, port))
    proc = start(work, plan)
    try:
        wait_listening(port)
        yield port, backend, plan, work
    finally:
        proc.kill()
        proc.wait()


def ask(port, path, method="GET", authorization=None, source="127.0.0.1", extra=()):
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: head", "Connection: close", "X-Test-Client: 1"]
    if authorization is not None:
        lines.append("Authorization: %s" % authorization)
    lines += list(extra)
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}' if method == "POST" else b""
    if body:
        lines.append("Content-Length: %d" % len(body))
    return send(port, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body, source=source)


_SOURCES = iter(range(1, 250))


def fresh_source():
    """A client address of its own (127.0.1.N): the per-source cap of requests without a valid key counts per test."""
    return "127.0.1.%d" % next(_SOURCES)


def reached(backend, count_before):
    return len(backend.client_requests()) - count_before


@pytest.mark.parametrize("authorization", ["Bearer " + KEY, "BEARER " + KEY, "bearer " + KEY, "BeArEr " + KEY,
                                           "Bearer " + OTHER_KEY])
def test_a_valid_key_in_any_case_of_the_scheme_passes_to_the_engine(edge, authorization):
    port, backend, dummy, dummy2 = edge
    before = len(backend.client_requests())
    status, dummy, dummy2 = ask(port, "/v1/chat/completions", "POST", authorization)
    assert status == 200 and reached(backend, before) == 1
    assert backend.client_requests()[-1]["headers"]["authorization"] == authorization


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-key-0123456789abcdef", "Bearer  " + KEY, KEY,
                                           "Basic " + KEY, "Bearer " + KEY + "x", "Bearer " + KEY[:-1], "Bearer",
                                           "Bearer\t" + KEY, "Token " + KEY])
@pytest.mark.parametrize("path,method", [("/v1/chat/completions", "POST"), ("/v1/models", "GET")])
def test_no_valid_key_gets_401_from_the_edge_and_never_reaches_the_engine(edge, authorization, path, method):
    port, backend, dummy, dummy2 = edge
    before = len(backend.client_requests())
    status, headers, body = ask(port, path, method, authorization, source=fresh_source())
    assert status == 401 and headers.get("www-authenticate") == "Bearer", (status, body)
    assert reached(backend, before) == 0


@pytest.mark.parametrize("path,method", [
    ("/invocations", "POST"), ("/tokenize", "POST"), ("/detokenize", "POST"), ("/load", "GET"), ("/version", "GET"),
    ("/ping", "POST"), ("/docs", "GET"), ("/openapi.json", "GET"), ("/v1/chat/completions/render", "POST"),
    ("/inference/v1/generate", "POST"), ("/scale_elastic_ep", "POST"), ("/v1/models/../metrics", "GET"),
    ("//v1/models", "GET"), ("/v1/%6Dodels", "GET"), ("/v1/models/", "GET"), ("/V1/models", "GET"),
    ("http://head/metrics", "GET")])
def test_every_other_route_gets_404_even_with_a_valid_key(edge, path, method):
    """From a client that is not trusted (a trusted one may GET /health and /metrics, whatever the form)."""
    port, backend, dummy, dummy2 = edge
    before = len(backend.client_requests())
    status, dummy, body = ask(port, path, method, "Bearer " + KEY, source="127.0.0.9")
    assert status == 404, (path, status, body)
    assert reached(backend, before) == 0


@pytest.mark.parametrize("path", ["/health", "/metrics"])
def test_health_and_metrics_pass_without_a_key_from_a_trusted_source_only(edge, path):
    port, backend, dummy, dummy2 = edge
    before = len(backend.client_requests())
    assert ask(port, path)[0] == 200 and reached(backend, before) == 1
    assert ask(port, path, source="127.0.0.4")[0] == 404
    assert ask(port, path, authorization="Bearer " + KEY, source="127.0.0.4")[0] == 404
    assert ask(port, path, "POST")[0] == 404
    assert reached(backend, before) == 1


def test_two_authorization_headers_get_400(edge):
    port, backend, dummy, dummy2 = edge
    before = len(backend.client_requests())
    status = ask(port, "/v1/models", authorization="Bearer " + KEY, extra=["Authorization: Bearer other"])[0]
    assert status == 400 and reached(backend, before) == 0


def test_requests_without_a_valid_key_are_capped_per_source(edge):
    port, backend, dummy, dummy2 = edge
    statuses = [ask(port, "/v1/models", authorization="Bearer guess-%d" % i, source="127.0.0.5")[0]
                for i in range(RATE + 3)]
    assert statuses[:RATE] == [401] * RATE and statuses[-1] == 429, statuses
    # Another source, and the same source with the valid key, are not held back.
    assert ask(port, "/v1/models", authorization="Bearer nope", source="127.0.0.6")[0] == 401
    assert ask(port, "/v1/models", authorization="Bearer " + KEY, source="127.0.0.5")[0] == 200


def test_the_edges_files_hold_no_key(edge):
    dummy, dummy2, plan, work = edge
    for text in (plan["config"], plan["key_hashes"], plan["unit"], (work / "edge.cfg").read_text()):
        assert KEY not in text and OTHER_KEY not in text
    assert _serve_edge.key_hash(KEY) in plan["key_hashes"]


def test_an_engine_that_does_not_listen_gets_the_marked_503_and_its_own_503_passes_unmarked(tmp_path):
    port, engine_port = free_port(), free_port()
    proc = start(tmp_path, _serve_edge.plan(settings(tmp_path, engine_port, port)))
    try:
        wait_listening(port)
        status, headers, dummy = ask(port, "/health")
        assert status == 503 and headers.get("x-dspark-edge") == "engine-unreachable", (status, headers)
    finally:
        proc.kill()
        proc.wait()


class DeadEngine(BaseHTTPRequestHandler):
    """vLLM once its engine core died: /health answers 503 (no edge header)."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()


@contextlib.contextmanager
def dead_engine(port):
    """A DeadEngine listening on the engine's port for the block."""
    dead = ThreadingHTTPServer(("127.0.0.1", port), DeadEngine)
    threading.Thread(target=dead.serve_forever, daemon=True).start()
    try:
        yield
    finally:
        dead.shutdown()
        dead.server_close()


def test_the_readiness_probe_reads_the_edges_503_as_not_listening_and_the_engines_as_a_dead_engine(tmp_path):
    port, engine_port = free_port(), free_port()
    proc = start(tmp_path, _serve_edge.plan(settings(tmp_path, engine_port, port)))
    try:
        wait_listening(port)
        base = "http://127.0.0.1:%d" % port
        nothing = tp_api_probe.call(tp_api_probe.build_opener(), base, "GET", "/health", None, 5)
        assert nothing["status"] is None and "does not listen" in nothing["error"], nothing
        with dead_engine(engine_port):
            answer = tp_api_probe.call(tp_api_probe.build_opener(), base, "GET", "/health", None, 5)
            assert answer["status"] == 503 and answer["error"] is None, answer
    finally:
        proc.kill()
        proc.wait()


def test_a_router_gets_425_for_the_unreachable_engine_and_everyone_else_503(tmp_path):
    """The router retries 425 on another group (test_router_edge_retry.py); the proof on loopback and any other client
    keep the marked 503."""
    port, engine_port = free_port(), free_port()
    values = settings(tmp_path, engine_port, port)
    values["trusted"] = [("dspark_router host r", "127.0.0.3")]
    proc = start(tmp_path, _serve_edge.plan(values))
    try:
        wait_listening(port)
        for source, want in (("127.0.0.3", 425), ("127.0.0.1", 503), (fresh_source(), 503)):
            status, headers, dummy = ask(port, "/v1/chat/completions", "POST", "Bearer " + KEY, source=source)
            assert status == want and headers.get("x-dspark-edge") == "engine-unreachable", (source, status, headers)
        with dead_engine(engine_port):
            # The engine's own 503 (it answered: it may have generated) reaches the router as it is.
            status, headers, dummy = ask(port, "/v1/models", "GET", "Bearer " + KEY, source="127.0.0.3")
            assert status == 503 and "x-dspark-edge" not in headers, headers
    finally:
        proc.kill()
        proc.wait()


def test_without_keys_the_edge_still_allows_only_the_api_paths(tmp_path):
    backend = Backend()
    port = free_port()
    proc = start(tmp_path, _serve_edge.plan(settings(tmp_path, backend.port, port, keys=())))
    try:
        wait_listening(port)
        assert ask(port, "/v1/models")[0] == 200
        assert ask(port, "/invocations", "POST")[0] == 404
    finally:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- a sidecar engine (issue #46)

SIDECAR = "vl"


@pytest.fixture(scope="module")
def sidecar_edge(tmp_path_factory):
    """The edge of a group with one sidecar: the main engine and the sidecar's each a stand-in of its own."""
    work = tmp_path_factory.mktemp("edge-sidecar")
    main, side = Backend(), Backend()
    port, side_port = free_port(), free_port()
    values = settings(work, main.port, port)
    values["engines"] = [{"name": SIDECAR, "api_port": side_port, "engine_port": side.port, "master_port": 25100}]
    plan = _serve_edge.plan(values)
    proc = start(work, plan)
    try:
        wait_listening(port)
        wait_listening(side_port)
        yield side_port, side, port, main
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("authorization", ["Bearer " + KEY, "bEaReR " + OTHER_KEY])
@pytest.mark.parametrize("path,method", [("/v1/chat/completions", "POST"), ("/v1/models", "GET")])
def test_a_valid_key_on_the_sidecars_port_reaches_the_sidecar_alone(sidecar_edge, authorization, path, method):
    side_port, side, port, main = sidecar_edge
    before_side, before_main = len(side.client_requests()), len(main.client_requests())
    status, dummy, body = ask(side_port, path, method, authorization)
    assert status == 200, body
    assert reached(side, before_side) == 1 and reached(main, before_main) == 0
    assert side.client_requests()[-1]["path"] == path
    # And the main engine's port still reaches the main engine alone.
    assert ask(port, path, method, authorization)[0] == 200
    assert reached(side, before_side) == 1 and reached(main, before_main) == 1


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-key-0123456789abcdef", "Basic " + KEY, KEY,
                                           "Bearer  " + KEY, "Bearer " + KEY[:-1]])
def test_no_valid_key_on_the_sidecars_port_gets_401_and_reaches_no_engine(sidecar_edge, authorization):
    side_port, side, dummy, main = sidecar_edge
    before_side, before_main = len(side.client_requests()), len(main.client_requests())
    status, headers, body = ask(side_port, "/v1/chat/completions", "POST", authorization, source=fresh_source())
    assert status == 401 and headers.get("www-authenticate") == "Bearer", (status, body)
    assert reached(side, before_side) == 0 and reached(main, before_main) == 0


@pytest.mark.parametrize("path,method", [("/invocations", "POST"), ("/tokenize", "POST"), ("/load", "GET"),
                                         ("/metrics", "GET"), ("/v1/models/../metrics", "GET"), ("/docs", "GET")])
def test_every_other_route_on_the_sidecars_port_gets_404_even_with_a_valid_key(sidecar_edge, path, method):
    side_port, side, dummy, main = sidecar_edge
    before_side, before_main = len(side.client_requests()), len(main.client_requests())
    status, dummy, body = ask(side_port, path, method, "Bearer " + KEY, source="127.0.0.9")
    assert status == 404, (path, status, body)
    assert reached(side, before_side) == 0 and reached(main, before_main) == 0


def test_the_sidecars_health_passes_without_a_key_from_a_trusted_source_only(sidecar_edge):
    side_port, side, dummy, main = sidecar_edge
    before_side, before_main = len(side.client_requests()), len(main.client_requests())
    assert ask(side_port, "/health")[0] == 200 and reached(side, before_side) == 1
    assert side.client_requests()[-1]["path"] == "/health"
    assert ask(side_port, "/health", source="127.0.0.4")[0] == 404
    assert ask(side_port, "/health", "POST")[0] == 404
    assert ask(side_port, "/v1/models", authorization="Bearer " + KEY, extra=["Authorization: Bearer x"])[0] == 400
    assert reached(side, before_side) == 1 and reached(main, before_main) == 0


def test_requests_without_a_valid_key_are_capped_per_source_over_every_port_of_the_edge(sidecar_edge):
    """One count per source for the whole edge: a guessing client gets no fresh allowance on each engine's port."""
    side_port, dummy, port, dummy2 = sidecar_edge
    source = fresh_source()
    statuses = [ask(port if i % 2 else side_port, "/v1/models", authorization="Bearer guess-%d" % i, source=source)[0]
                for i in range(RATE)]
    assert statuses == [401] * RATE, statuses
    assert ask(side_port, "/v1/models", authorization="Bearer guess", source=source)[0] == 429
    assert ask(port, "/v1/models", authorization="Bearer guess", source=source)[0] == 429
    assert ask(side_port, "/v1/models", authorization="Bearer " + KEY, source=source)[0] == 200


def test_a_sidecar_that_does_not_listen_gets_the_marked_503_and_a_router_425(tmp_path):
    """The sidecar's engine down, the main one up: on the sidecar's port the edge's own 503 (425 to a router), on the
    main port the main engine's answer."""
    main = Backend()
    port, side_port, side_engine = free_port(), free_port(), free_port()
    values = settings(tmp_path, main.port, port)
    values["trusted"] = [("dspark_router host r", "127.0.0.3")]
    values["engines"] = [{"name": SIDECAR, "api_port": side_port, "engine_port": side_engine}]
    proc = start(tmp_path, _serve_edge.plan(values))
    try:
        wait_listening(side_port)
        for source, want in (("127.0.0.3", 425), ("127.0.0.1", 503), (fresh_source(), 503)):
            status, headers, dummy = ask(side_port, "/v1/chat/completions", "POST", "Bearer " + KEY, source=source)
            assert status == want and headers.get("x-dspark-edge") == "engine-unreachable", (source, status, headers)
        nothing = tp_api_probe.call(tp_api_probe.build_opener(), "http://127.0.0.1:%d" % side_port, "GET", "/health", None, 5)
        assert nothing["status"] is None and "does not listen" in nothing["error"], nothing
        assert ask(port, "/v1/models", authorization="Bearer " + KEY)[0] == 200
        with dead_engine(side_engine):
            status, headers, dummy = ask(side_port, "/v1/models", "GET", "Bearer " + KEY, source="127.0.0.3")
            assert status == 503 and "x-dspark-edge" not in headers, headers
    finally:
        proc.kill()
        proc.wait()


def test_without_sidecars_the_plan_is_the_one_before_them(tmp_path):
    """engines left out, None or []: the same files (the text before sidecars is pinned in test_serve_edge_filter)."""
    values = settings(tmp_path, 18888, 8888)
    plain = _serve_edge.plan(values)
    assert plain["problems"] == [] and "use_backend" not in plain["config"] and plain["config"].count("bind ") == 1
    assert _serve_edge.plan(dict(values, engines=None)) == plain
    assert _serve_edge.plan(dict(values, engines=[])) == plain


@pytest.mark.parametrize("change,message", [
    ({"serve_engine_port": 8888, "api_port": 8888}, "serve_engine_port=8888 equals dspark_api_port"),
    ({"engines": "vl"}, "dspark_sidecars='vl' is not a list of engines; fix: "),
    ({"engines": [["vl", 8889]]}, "dspark_sidecars[0]=['vl', 8889] is not a mapping; fix: "),
    ({"engines": [{"name": "main", "api_port": 8889}]}, "dspark_sidecars[0].name='main' is not a sidecar name; fix: "),
    ({"engines": [{"name": "vl ssl", "api_port": 8889}]}, "dspark_sidecars[0].name='vl ssl' is not a sidecar name; fix: "),
    ({"engines": [{"name": "vl", "api_port": 8889}, {"name": "vl", "api_port": 8890}]},
     "dspark_sidecars[1].name='vl' is also another sidecar's; fix: "),
    ({"engines": [{"name": "vl", "api_port": "88x9"}]}, "dspark_sidecars[0].api_port='88x9' is not a TCP port (1-65535); fix: "),
    ({"engines": [{"name": "vl", "api_port": 8889.5}]}, "dspark_sidecars[0].api_port=8889.5 is not a TCP port (1-65535); fix: "),
    ({"engines": [{"name": "vl"}]}, "dspark_sidecars[0].api_port=None is not a TCP port (1-65535); fix: "),
    ({"engines": [{"name": "vl", "api_port": 8889, "engine_port": 0}]},
     "dspark_sidecars[0].engine_port=0 is not a TCP port (1-65535); fix: "),
    ({"engines": [{"name": "vl", "api_port": 8888}]}, "dspark_sidecars[0].api_port=8888 is also dspark_api_port"),
    ({"engines": [{"name": "vl", "api_port": 18888}]}, "dspark_sidecars[0].api_port=18888 is also serve_engine_port"),
    ({"engines": [{"name": "vl", "api_port": 8889, "engine_port": 18888}]},
     "dspark_sidecars[0].engine_port=18888 is also serve_engine_port"),
    ({"serve_engine_port": 18889, "engines": [{"name": "vl", "api_port": 8889}]},   # its default engine port: 8889 + 10000
     "dspark_sidecars[0].engine_port=18889 is also serve_engine_port: the edge binds every API port once and sends each "
     "engine's requests to its own loopback port; fix: give dspark_sidecars[0].engine_port a free port that no other "
     "engine of the group uses (unset, it is api_port + 10000)"),
    ({"engines": [{"name": "vl", "api_port": 8889, "engine_port": 8889}]},
     "dspark_sidecars[0].engine_port=8889 is also dspark_sidecars[0].api_port"),
    ({"engines": [{"name": "vl", "api_port": 8889}, {"name": "ocr", "api_port": 18889}]},
     "dspark_sidecars[1].api_port=18889 is also dspark_sidecars[0].engine_port"),
    ({"serve_engine_port": 0}, "serve_engine_port=0 is not a TCP port"),
    ({"serve_edge_allowed_paths": ["/v1/models", "/v1/../metrics"]}, "serve_edge_allowed_paths holds '/v1/../metrics'"),
    ({"trusted": [("serve_edge_trusted_cidrs", "10.0.0.0/33")]}, "serve_edge_trusted_cidrs holds '10.0.0.0/33'"),
    ({"serve_edge_unauthenticated_rate": -1}, "serve_edge_unauthenticated_rate=-1"),
    ({"serve_host": "0.0.0.0 ssl crt /x"}, "serve_host='0.0.0.0 ssl crt /x'"),
])
def test_bad_settings_are_named_and_no_configuration_is_written(tmp_path, change, message):
    values = settings(tmp_path, 18888, 8888)
    values.update(change)
    plan = _serve_edge.plan(values)
    assert plan["config"] == "" and any(message in p for p in plan["problems"]), plan["problems"]
