"""Fixtures of the dspark-fleet tests: recorded ansible-runner event streams and the fake project."""

import contextlib
import http.server
import json
import os
import sys
import threading
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
# The package is installed (editable) by requirements.txt; without it, import it from the checkout.
sys.path.insert(0, str(ROOT / "tools" / "dspark-fleet"))

FIXTURES = HERE / "fixtures"
FAKE_PROJECT = HERE / "fakeproject"


@contextlib.contextmanager
def serving(handler):
    """A stand-in HTTP server on a free loopback port with `handler` (a BaseHTTPRequestHandler): its base URL."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d" % httpd.server_address[1]
    finally:
        httpd.shutdown()


def load_stream(name):
    with open(FIXTURES / (name + ".json"), encoding="utf-8") as handle:
        return json.load(handle)


def fold(name_or_events):
    from dspark_fleet.events import GroupEvents
    events = load_stream(name_or_events)["events"] if isinstance(name_or_events, str) else name_or_events
    state = GroupEvents()
    for event in events:
        state.feed(event)
    return state


@pytest.fixture(autouse=True)
def own_state_dir(tmp_path_factory, monkeypatch):
    """Each test's locks and default artifacts in a directory of its own, not the cwd's .dspark-fleet: make test runs
    these tests on two ansible-cores at once (unit and unit-newest in different lanes), and a group name such as g1
    would otherwise share one lock file between them."""
    monkeypatch.setenv("DSPARK_FLEET_STATE_DIR", str(tmp_path_factory.mktemp("fleet-state")))
    # A supervisor installed on this machine (/etc/dspark-fleet/supervisor.json) must not refuse the tests' runs.
    monkeypatch.setenv("DSPARK_FLEET_SUPERVISOR_MARKER", str(tmp_path_factory.mktemp("no-supervisor") / "none.json"))


@pytest.fixture
def stream():
    return load_stream


@pytest.fixture
def fake_project():
    return FAKE_PROJECT


@pytest.fixture
def venv_path(monkeypatch):
    """ansible-playbook and ansible-inventory of this Python first on PATH (as the console script does)."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))


def run_cli(argv, fake_project):
    """dspark-fleet's main() on the fake project, plain progress."""
    from dspark_fleet import cli  # pylint: disable=import-outside-toplevel  # after the sys.path line above
    return cli.main(argv + ["--project-dir", str(fake_project), "--plain"])


def load_report(path):
    """A report, validated against the shipped schema (jsonschema is in requirements.txt)."""
    import jsonschema  # pylint: disable=import-outside-toplevel
    from dspark_fleet import report  # pylint: disable=import-outside-toplevel
    with open(path, encoding="utf-8") as handle:
        doc = json.load(handle)
    jsonschema.validate(doc, report.load_schema())
    return doc
