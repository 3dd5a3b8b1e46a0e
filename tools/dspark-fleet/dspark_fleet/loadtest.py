"""`acceptance`'s short load test: N streamed chat completions at concurrency C against one OpenAI endpoint (stdlib).

Closed loop: C workers, each sends its next request when its last one ended, until N were sent. Per request:
ok (HTTP 200, a stream that ends with a finish_reason and ``data: [DONE]``), HTTP status, time to first token (the
first chunk with content), the whole latency, output tokens (the stream's usage, asked with
``stream_options.include_usage``; else the content chunks counted) and the decode rate: (output tokens - 1) / (latency
- time to first token), the tokens after the first over the time they took. `summarize()` gives p50 and p99 of each
(nearest rank, `percentile()`), the failed requests and the aggregate output tokens per second over the wall time.

The API key goes into the Authorization header only: no record, error or summary holds it (an error body is cut to
200 characters and the key removed from it should a server echo it).
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
import urllib.parse

PROMPT = ("Acceptance request %d. Write a long, plain story about a lighthouse keeper; do not stop early.")


def percentile(values, fraction):
    """Nearest-rank percentile of the numbers in `values` (None ignored; 0 < fraction <= 1); None when empty."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    if not 0 < fraction <= 1:
        raise ValueError("fraction must be in (0, 1], not %r" % fraction)
    return ordered[max(0, min(len(ordered) - 1, int(math.ceil(fraction * len(ordered))) - 1))]


def check_url(url):
    """The parts of an http(s) base URL (ValueError otherwise)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an http(s) URL: %r" % url)
    if parts.username or parts.password:
        raise ValueError("a URL with credentials would be written to the report: pass the key another way")
    try:
        parts.port  # pylint: disable=pointless-statement  # raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ValueError("%r: %s" % (url, exc)) from None
    return parts


def _scrub(text, secret):
    return text.replace(secret, "<redacted>") if secret else text


# Below this the tokens after the first arrived together (one read of a buffered stream): their rate is the network's,
# not the engine's decode rate (the real CPU engine's lab run once showed 106,449 tok/s at p99 that way).
MIN_DECODE_S = 0.005


def decode_rate(tokens, ttft, last):
    """Output tokens per second after the first token, until the last content chunk arrived; None when it cannot be
    told (one token, or the rest of the stream arriving at once)."""
    if tokens is None or ttft is None or last is None or tokens < 2 or last - ttft < MIN_DECODE_S:
        return None
    return round((tokens - 1) / (last - ttft), 3)


def parse_stream(lines):
    """(content pieces, finish_reason, done, usage tokens) of the `data:` lines of a chat completion stream."""
    pieces, finish, done, usage = [], None, False, None
    for raw in lines:
        line = raw.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage = chunk["usage"].get("completion_tokens", usage)
        for choice in chunk.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                pieces.append(piece)
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    return pieces, finish, done, usage


def one_request(parts, index, model, api_key, max_tokens, timeout, context=None):
    """One streamed chat completion; its record (never raises)."""
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT % index}], "stream": True,
            "stream_options": {"include_usage": True}, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    record = {"index": index, "ok": False, "status": None, "ttft_s": None, "latency_s": None, "output_tokens": None,
              "decode_tokens_per_s": None, "finish_reason": None, "error": None, "started": time.time()}
    https = parts.scheme == "https"
    t0 = time.monotonic()
    conn = None
    try:
        port = parts.port or (443 if https else 80)
        conn = (http.client.HTTPSConnection(parts.hostname, port, timeout=timeout, context=context) if https
                else http.client.HTTPConnection(parts.hostname, port, timeout=timeout))
        conn.request("POST", parts.path.rstrip("/") + "/v1/chat/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        record["status"] = resp.status
        if resp.status != 200:
            raw = resp.read(2000).decode("utf-8", "replace")
            record["error"] = "HTTP %d: %s" % (resp.status, _scrub(raw, api_key)[:200])
        else:
            lines, last = [], None
            while True:
                line = resp.readline()
                if not line:
                    break
                lines.append(line)
                if line.startswith(b"data: ") and b'"content"' in line:
                    # Every chunk that carries content is a token for the decode time, an empty piece too (a token
                    # that decodes to no text: the real engine's special tokens under ignore_eos); the first one
                    # with text is the time to first token (vLLM's first chunk is the role, with content "").
                    last = round(time.monotonic() - t0, 4)
                    if record["ttft_s"] is None:
                        try:
                            pieces = parse_stream([line])[0]
                        except ValueError:
                            pieces = []
                        if pieces:
                            record["ttft_s"] = last
            latency = time.monotonic() - t0
            pieces, finish, done, usage = parse_stream(lines)
            record["finish_reason"] = finish
            record["output_tokens"] = usage if usage is not None else len(pieces)
            record["ok"] = bool(done and finish and pieces)
            if not record["ok"]:
                record["error"] = "the stream ended without %s" % (
                    "[DONE]" if not done else "a finish_reason" if not finish else "any content")
            record["latency_s"] = round(latency, 4)
            record["decode_tokens_per_s"] = decode_rate(record["output_tokens"], record["ttft_s"], last)
    except (OSError, http.client.HTTPException, ValueError) as err:
        record["error"] = _scrub("%s: %s" % (type(err).__name__, err), api_key)[:300]
    finally:
        if conn is not None:
            conn.close()
        if record["latency_s"] is None:
            record["latency_s"] = round(time.monotonic() - t0, 4)
    return record


def run(url, requests, concurrency, model, api_key=None, max_tokens=64, timeout=300.0, context=None,
        send=one_request):
    """Send `requests` streamed completions with `concurrency` at once; returns (records in index order, wall_s)."""
    if requests < 1 or concurrency < 1:
        raise ValueError("requests and concurrency must be at least 1")
    parts = check_url(url)
    records, lock = [], threading.Lock()
    counter = iter(range(requests))

    def worker():
        while True:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            record = send(parts, index, model, api_key, max_tokens, timeout, context)
            with lock:
                records.append(record)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for dummy in range(min(concurrency, requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(records, key=lambda r: r["index"]), round(time.monotonic() - started, 3)


def summarize(records, wall_s=None):
    """The numbers of one load: counts, failures (the first 10), p50/p99 of TTFT, latency and decode rate."""
    good = [r for r in records if r["ok"]]
    failed = [r for r in records if not r["ok"]]
    tokens = sum(r["output_tokens"] or 0 for r in good)

    def pair(key):
        values = [r[key] for r in good]
        return {"p50": percentile(values, 0.50), "p99": percentile(values, 0.99)}
    return {
        "requests": len(records), "ok": len(good), "failed": len(failed),
        "ttft_s": pair("ttft_s"), "latency_s": pair("latency_s"),
        "decode_tokens_per_s": pair("decode_tokens_per_s"),
        "output_tokens": tokens, "wall_s": wall_s,
        "aggregate_tokens_per_s": round(tokens / wall_s, 3) if wall_s and tokens else None,
        "failures": [{k: r[k] for k in ("index", "status", "error")} for r in failed][:10],
    }
