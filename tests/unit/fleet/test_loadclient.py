"""tests/fleet/loadclient.py against a local stand-in server: what counts as a complete answer, for the simulator
('OK...') and for a real engine with random weights (any text), plain and streamed."""

import http.server
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fleet"))

import loadclient  # noqa: E402  pylint: disable=wrong-import-position
from conftest import serving  # noqa: E402  pylint: disable=wrong-import-position


class Handler(http.server.BaseHTTPRequestHandler):
    reply = "OK"
    finish = "stop"

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header(loadclient.GROUP_HEADER, "g1")
        if body["stream"]:
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for piece in (self.reply[:2], self.reply[2:]):
                chunk = {"choices": [{"delta": {"content": piece}, "finish_reason": None}]}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            last = {"choices": [{"delta": {}, "finish_reason": self.finish}]}
            self.wfile.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
            return
        answer = {"choices": [{"message": {"content": self.reply}, "finish_reason": self.finish}]}
        data = json.dumps(answer).encode()
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def server():
    with serving(Handler) as url:
        yield url
    Handler.reply, Handler.finish = "OK", "stop"


def load(url, expect):
    return loadclient.run_load(url, 4, 50.0, expect=expect)


@pytest.mark.parametrize("reply, expect, ok", [
    ("OK, done.", "OK", True),
    ("arningarning four", "OK", False),       # the simulator's check refuses a real engine's random text
    ("arningarning four", None, True),        # a real engine: any text is a reply
    ("", None, False),                        # but not an empty one
])
def test_what_counts_as_a_reply(server, reply, expect, ok):
    Handler.reply = reply
    records, summary = load(server, expect)
    assert len(records) == 4 and summary["streams"] == 2
    assert all(r["ok"] is ok for r in records), records
    assert all(r["group"] == "g1" for r in records)
    if not ok:
        assert all("reply" in r["error"] for r in records), records


def test_an_answer_without_finish_reason_is_incomplete(server):
    Handler.reply, Handler.finish = "anything", None
    records, dummy = load(server, None)
    assert not any(r["ok"] for r in records), records


def test_under_load_runs_the_action_between_a_settled_and_a_stopped_load(server):
    import rollcheck  # noqa: E402  pylint: disable=import-outside-toplevel
    marks = []
    load = loadclient.Load(server, count=1000, rate=20.0)
    result, records = rollcheck.under_load(load, lambda: marks.append(len(load.records)) or "done", settle=0.5,
                                           tail=0.3, wait=30)
    assert result == "done" and marks and marks[0] > 0              # requests flowed before the action
    assert 0 < len(records) < 1000 and all(r["ok"] for r in records)  # stopped after the action, all answered


def test_under_load_stops_the_load_when_the_action_fails(server):
    import rollcheck  # noqa: E402  pylint: disable=import-outside-toplevel
    load = loadclient.Load(server, count=1000, rate=20.0)

    def boom():
        raise RuntimeError("reprovision crashed")
    with pytest.raises(RuntimeError):
        rollcheck.under_load(load, boom, settle=0.2, tail=0.1, wait=30)
    assert load.stopped.is_set() and load.sent() < 1000
