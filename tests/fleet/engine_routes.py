"""The routes a vLLM API server (real or the lab's SIMULATOR) prints at start-up, `Route: /path, Methods: GET, HEAD`:
read by the edge tests of the fleet lab (tests/fleet/test_serve_edge.py) and of the real-engine lab
(tests/real/test_real_edge.py, which has tests/fleet on its path through reallab)."""

import re

ROUTE_RE = re.compile(r"Route: (\S+), Methods: (.+)$")


def parse(log):
    """[(method, path)] of every GET or POST route in the log text, in order, once each; a path parameter
    (`{response_id}`) becomes `x`."""
    found = []
    for line in log.splitlines():
        match = ROUTE_RE.search(line)
        if match:
            path = re.sub(r"\{[^}]+\}", "x", match.group(1))
            for method in (m.strip() for m in match.group(2).split(",")):
                if method in ("GET", "POST") and (method, path) not in found:
                    found.append((method, path))
    return found
