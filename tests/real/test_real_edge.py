"""The head's API edge in front of REAL vLLM (issue #41, docs/design-serve-edge.md): every route the engine's start-up
log lists, asked from an address the firewall lets in (this machine, 10.233.0.1 in serve_api_allowed_cidrs) without a
key, with a wrong key and with the valid key under several spellings of the scheme. Only the API paths with a valid
key reach the engine; everything else gets the edge's own 401 or 404 (its JSON error type says it was the edge). A
burst of junk keys from one source meets the per-source cap. Runs before test_real_engine.py (whose last test stops
the group): `make realtest`.
"""

import http.client
import json
import urllib.error
import urllib.request

import pytest

from reallab import CONTAINER, GROUP_VARS, HEAD, KEYS, MODEL_NAME, node

import engine_routes as route_log  # tests/fleet, on the path through reallab

EDGE = "http://10.233.0.11:%d" % GROUP_VARS["dspark_api_port"]
ALLOWED = set(GROUP_VARS.get("serve_edge_allowed_paths") or
              ["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/embeddings", "/v1/responses"])
EDGE_TYPES = {401: "authentication_error", 404: "not_found_error"}


def routes():
    """(path, method) of every route real vLLM printed at start-up (`Route: /path, Methods: GET, HEAD`)."""
    rc, out = node(HEAD, "docker logs %s 2>&1 | grep 'Route: '" % CONTAINER)
    assert rc == 0, out
    return [(path, method) for method, path in route_log.parse(out)]


def ask(path, method, authorization=None):
    """(status, parsed JSON body or None) of one request to the head's API port."""
    body = None
    headers = {}
    if method == "POST":
        body = json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                           "prompt": "hi", "text": "hi", "tokens": [1]}).encode()
        headers["Content-Type"] = "application/json"
    if authorization is not None:
        headers["Authorization"] = authorization
    request = urllib.request.Request(EDGE + path, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:  # noqa: S310  (the lab's own http URL)
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        status, raw = refused.code, refused.read()
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, None


def from_edge(status, body):
    return status in EDGE_TYPES and isinstance(body, dict) and \
        (body.get("error") or {}).get("type") == EDGE_TYPES[status]


@pytest.fixture(scope="module")
def engine_routes():
    found = routes()
    # vLLM 0.32.0 lists about forty routes; the unguarded ones of the issue among them.
    assert len(found) > 20 and ("/invocations", "POST") in found and ("/tokenize", "POST") in found, found
    return found


def test_without_a_valid_key_every_route_gets_the_edges_401_or_404(engine_routes):
    for path, method in engine_routes:
        for authorization in (None, "Bearer not-the-key-0123456789", "Basic " + KEYS[0], KEYS[0], "Bearer  " + KEYS[0]):
            status, body = ask(path, method, authorization)
            assert from_edge(status, body), (path, method, authorization, status, body)


@pytest.mark.parametrize("scheme", ["Bearer", "BEARER", "bearer", "BeArEr"])
def test_with_the_key_only_the_api_paths_reach_the_engine(engine_routes, scheme):
    for path, method in engine_routes:
        status, body = ask(path, method, "%s %s" % (scheme, KEYS[-1]))
        if path in ALLOWED:
            assert not from_edge(status, body), (path, method, status, body)
        else:
            assert status == 404 and from_edge(status, body), (path, method, status, body)
    status, body = ask("/v1/models", "GET", "%s %s" % (scheme, KEYS[0]))
    assert status == 200 and [m["id"] for m in body["data"]] == [MODEL_NAME], body


def test_health_and_metrics_pass_from_the_head_itself_only():
    for path in ("/health", "/metrics"):
        status, body = ask(path, "GET")
        assert status == 404 and from_edge(status, body), (path, status, body)
        rc, out = node(HEAD, "curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d%s"
                       % (GROUP_VARS["dspark_api_port"], path))
        assert out.strip() == "200", (path, rc, out)


def test_the_engine_listens_on_loopback_only():
    rc, out = node(HEAD, "ss -Hltnp")
    engine = [line for line in out.splitlines() if ":%d " % GROUP_VARS.get("serve_engine_port", 18888) in line]
    assert engine and all("127.0.0.1:" in line for line in engine), out
    api = [line for line in out.splitlines() if ":%d " % GROUP_VARS["dspark_api_port"] in line]
    assert api and all("haproxy" in line for line in api), out


def test_a_burst_of_junk_keys_from_one_source_is_capped():
    """serve_edge_unauthenticated_rate (inventories/lab-real: 400 per 10 s, above the sweeps' refused requests)."""
    rate = GROUP_VARS["serve_edge_unauthenticated_rate"]
    connection = http.client.HTTPConnection(EDGE.split("//")[1], timeout=30)
    statuses = []
    for i in range(rate + 50):
        connection.request("GET", "/v1/models", headers={"Authorization": "Bearer guess-%04d-0123456789abcdef" % i})
        answer = connection.getresponse()
        answer.read()
        statuses.append(answer.status)
        if answer.will_close:
            connection.close()
            connection = http.client.HTTPConnection(EDGE.split("//")[1], timeout=30)
    connection.close()
    assert set(statuses) == {401, 429} and statuses[-1] == 429, sorted(set(statuses))
    assert ask("/v1/models", "GET", "Bearer " + KEYS[0])[0] == 200
