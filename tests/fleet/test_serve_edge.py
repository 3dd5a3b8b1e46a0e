"""The heads' API edge in the fleet lab (issue #41, docs/design-serve-edge.md), seen from the router (also the
monitor here) and from a worker of the group: every route the head's engine lists at start-up (the SIMULATOR prints
the real engine's subset), without a key, with a wrong key and with the key under several spellings of the scheme.

- From the router: only the API paths with a valid key reach the engine; everything else gets the edge's own 401 or
  404; GET /health and /metrics pass without a key (the router's health checks, the monitor's scrapes).
- From a worker of the same group, over the fabric (its address is a peer the firewall lets in on every port): the
  same refusals, and /health and /metrics refused too (a worker is not a trusted source).

Each request is sent from inside the node by its own python3; the key comes on stdin, never on a command line.
Runs after test_router.py (the fleet converged, the router set up).
"""

import json
import subprocess

import pytest

import engine_routes
import fleetlab as lab
import routerlab

GROUP = "pair_b"
HEAD, WORKER = lab.GROUPS[GROUP]
HEAD_FABRIC = "192.168.102.1"   # inventories/lab-fleet/hosts.yml: spark-b0's dspark_fabric_address
API_PORT = 8888
API_PATHS = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/embeddings", "/v1/responses"}
# The edge's refusals; 429: its cap of requests without a valid key per source (serve_edge_unauthenticated_rate).
EDGE_TYPES = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}

# Runs on a node: reads {"address", "port", "key", "requests": [[method, path, scheme or null]]} on stdin and prints
# [[status, error type or null], ...]. A scheme of null sends no Authorization; "wrong" sends a wrong key.
PROBE = r"""
import http.client, json, sys
spec = json.loads(sys.stdin.read())
out = []
for method, path, scheme in spec["requests"]:
    headers = {"Content-Type": "application/json"}
    if scheme == "wrong":
        headers["Authorization"] = "Bearer not-the-key-0123456789abcdef"
    elif scheme:
        headers["Authorization"] = scheme + " " + spec["key"]
    body = json.dumps({"model": "deepseek-v4-flash", "max_tokens": 1,
                       "messages": [{"role": "user", "content": "hi"}]}) if method == "POST" else None
    conn = http.client.HTTPConnection(spec["address"], spec["port"], timeout=30)
    conn.request(method, path, body=body, headers=headers)
    answer = conn.getresponse()
    raw = answer.read()
    conn.close()
    try:
        kind = (json.loads(raw or b"null") or {}).get("error", {}).get("type")
    except (ValueError, AttributeError):
        kind = None
    out.append([answer.status, kind])
print(json.dumps(out))
"""


def routes():
    """(method, path) of every GET or POST route the head's engine printed at start-up."""
    rc, out, err = lab.node(HEAD, "docker logs %s 2>&1 | grep 'Route: '" % lab.CONTAINER)
    assert rc == 0, out + err
    found = engine_routes.parse(out)
    assert ("POST", "/invocations") in found and ("GET", "/v1/models") in found, found
    return found


def ask(node, address, requests):
    spec = {"address": address, "port": API_PORT, "key": routerlab.api_key(), "requests": requests}
    proc = subprocess.run(["docker", "exec", "-i", node, "python3", "-c", PROBE], input=json.dumps(spec),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def from_edge(answer):
    status, kind = answer
    return status in EDGE_TYPES and EDGE_TYPES[status] == kind


@pytest.fixture(scope="module")
def head_routes():
    return routes()


@pytest.mark.parametrize("node,address", [(routerlab.ROUTER, None), (WORKER, HEAD_FABRIC)])
def test_without_a_valid_key_every_route_gets_the_edges_refusal(head_routes, node, address):
    address = address or {n["name"]: n["mgmt_ip"] for n in routerlab.labspec.spec_for(lab.INVENTORY)["nodes"]}[HEAD]
    # /health and /metrics pass from the router whatever it sends (test_health_and_metrics_... below).
    requests = [[m, p, s] for m, p in head_routes for s in (None, "wrong", "Basic")
                if not (p in ("/health", "/metrics") and m == "GET" and node == routerlab.ROUTER)]
    answers = ask(node, address, requests)
    wrong = [(r, a) for r, a in zip(requests, answers) if not from_edge(a)]
    assert not wrong, wrong


@pytest.mark.parametrize("node,address", [(routerlab.ROUTER, None), (WORKER, HEAD_FABRIC)])
def test_with_the_key_only_the_api_paths_reach_the_engine(head_routes, node, address):
    address = address or {n["name"]: n["mgmt_ip"] for n in routerlab.labspec.spec_for(lab.INVENTORY)["nodes"]}[HEAD]
    requests = [[m, p, s] for m, p in head_routes for s in ("Bearer", "BEARER", "bEaReR")]
    answers = ask(node, address, requests)
    for request, answer in zip(requests, answers):
        method, path, scheme = request
        if path in API_PATHS:
            assert not from_edge(answer), (request, answer)
        elif path in ("/health", "/metrics") and method == "GET" and node == routerlab.ROUTER:
            assert answer[0] == 200, (request, answer)
        else:
            assert answer[0] == 404 and from_edge(answer), (request, answer)


def test_health_and_metrics_without_a_key_from_the_router_and_monitor_only():
    mgmt = {n["name"]: n["mgmt_ip"] for n in routerlab.labspec.spec_for(lab.INVENTORY)["nodes"]}[HEAD]
    probes = [["GET", "/health", None], ["GET", "/metrics", None]]
    assert [a[0] for a in ask(routerlab.ROUTER, mgmt, probes)] == [200, 200]
    assert [a[0] for a in ask(WORKER, HEAD_FABRIC, probes)] == [404, 404]
