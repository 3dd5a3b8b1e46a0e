# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A bounded OpenAI-style load client for the lab (stdlib only).

Sends at most COUNT chat completions (POST /v1/chat/completions) at a fixed RATE per second, every second one
with `stream: true`, to one base URL, and records each request: ok or failed, HTTP status, latency, the
serving group that answered (the router's X-Dspark-Group header) and whether the answer was complete (a
plain answer: a choice with a finish_reason; a stream: a chunk with a finish_reason, then `data: [DONE]`).
The schedule is open-loop (request i starts at i / RATE seconds, whatever the others do), so a slow or
failing backend does not slow the load down. Only loopback (and addresses the caller allows explicitly,
e.g. the lab's management network) can be targeted.

    python3 tests/fleet/loadclient.py --url http://127.0.0.1:18080 --count 60 --rate 4 [--json out.json]

As a library: `Load(url, count, rate).start()`, then `.stop()` (ends the schedule early: no new requests)
and `.wait()`, or `run_load(...)`; `summarize(records)` gives the counts and latency percentiles.
"""

import argparse
import http.client
import ipaddress
import json
import math
import sys
import threading
import time
import urllib.parse

LOOPBACK_HOSTS = ('127.0.0.1', 'localhost', '::1')
GROUP_HEADER = 'X-Dspark-Group'


def check_target(url, allowed_networks=()):
    """Refuse any target but loopback and the networks in `allowed_networks` (CIDR strings)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ('http', 'https') or not parts.hostname:
        raise ValueError('not an http(s) URL: %r' % url)
    host = parts.hostname
    if host in LOOPBACK_HOSTS:
        return parts
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError('%s: only loopback or an allowed lab address may be targeted, not a host name' % host)
    if not any(address in ipaddress.ip_network(net) for net in allowed_networks):
        raise ValueError('%s is not loopback nor in the allowed lab networks %s' % (host, list(allowed_networks)))
    return parts


def percentile(values, fraction):
    """Nearest-rank percentile of `values` (0 < fraction <= 1); None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, min(len(ordered) - 1, int(math.ceil(fraction * len(ordered))) - 1))]


def reply_ok(text, expect):
    """The simulator answers 'OK...'; a real engine with random weights answers anything: then (expect None) any
    non-empty text is a reply."""
    return text.startswith(expect) if expect else bool(text)


def one_request(parts, index, stream, model, api_key, timeout, max_tokens, expect='OK'):
    """Send one chat completion; return its record (never raises)."""
    body = {'model': model, 'messages': [{'role': 'user', 'content': 'load request %d: reply with OK.' % index}],
            'stream': stream}
    if max_tokens:
        body['max_tokens'] = max_tokens
    headers = {'Content-Type': 'application/json', 'Accept': 'text/event-stream' if stream else 'application/json'}
    if api_key:
        headers['Authorization'] = 'Bearer ' + api_key
    record = {'index': index, 'stream': stream, 'started': time.time(), 'ok': False, 'complete': False,
              'status': None, 'group': None, 'latency': None, 'first_byte': None, 'finish_reason': None,
              'error': None}
    conn_class = http.client.HTTPSConnection if parts.scheme == 'https' else http.client.HTTPConnection
    t0 = time.monotonic()
    conn = conn_class(parts.hostname, parts.port or (443 if parts.scheme == 'https' else 80), timeout=timeout)
    try:
        conn.request('POST', (parts.path.rstrip('/') or '') + '/v1/chat/completions', json.dumps(body), headers)
        resp = conn.getresponse()
        record['status'] = resp.status
        record['group'] = resp.getheader(GROUP_HEADER)
        if stream and resp.status == 200:
            done, content = False, []
            while True:
                line = resp.readline()
                if not line:
                    break
                if record['first_byte'] is None:
                    record['first_byte'] = round(time.monotonic() - t0, 4)
                line = line.strip()
                if not line.startswith(b'data: '):
                    continue
                data = line[6:]
                if data == b'[DONE]':
                    done = True
                    continue
                chunk = json.loads(data)
                choice = (chunk.get('choices') or [{}])[0]
                content.append((choice.get('delta') or {}).get('content') or '')
                if choice.get('finish_reason'):
                    record['finish_reason'] = choice['finish_reason']
            record['complete'] = done and record['finish_reason'] is not None and reply_ok(''.join(content), expect)
            if not record['complete']:
                record['error'] = 'stream ended without %s' % (
                    'a finish_reason and [DONE]' if not done and not record['finish_reason']
                    else '[DONE]' if not done else 'a finish_reason' if not record['finish_reason'] else 'the reply')
        else:
            raw = resp.read()
            if resp.status == 200:
                answer = json.loads(raw)
                choice = (answer.get('choices') or [{}])[0]
                record['finish_reason'] = choice.get('finish_reason')
                text = (choice.get('message') or {}).get('content') or ''
                record['complete'] = record['finish_reason'] is not None and reply_ok(text, expect)
                if not record['complete']:
                    record['error'] = 'answer without a finish_reason or the reply'
            else:
                record['error'] = 'HTTP %d: %s' % (resp.status, raw[:200].decode('utf-8', 'replace'))
        record['ok'] = resp.status == 200 and record['complete']
    except (OSError, http.client.HTTPException, ValueError) as err:
        record['error'] = '%s: %s' % (type(err).__name__, err)
    finally:
        conn.close()
        record['latency'] = round(time.monotonic() - t0, 4)
        record['finished'] = time.time()
    return record


class Load:
    """COUNT requests at RATE per second in background threads; every `stream_every`-th one streams."""

    def __init__(self, url, count, rate, model='deepseek-v4-flash', api_key=None, timeout=120.0, max_tokens=None,
                 stream_every=2, allowed_networks=(), max_in_flight=256, expect='OK'):
        if count < 1 or rate <= 0:
            raise ValueError('count must be >= 1 and rate > 0')
        self.parts = check_target(url, allowed_networks)
        self.url, self.count, self.rate = url, count, rate
        self.model, self.api_key, self.timeout, self.max_tokens = model, api_key, timeout, max_tokens
        self.stream_every = stream_every
        self.expect = expect
        self.records = []
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(max_in_flight)
        self.stopped = threading.Event()
        self.scheduler = threading.Thread(target=self._schedule, daemon=True)
        self.workers = []
        self.started_at = None
        self.schedule_lag = 0.0

    def _work(self, index):
        try:
            record = one_request(self.parts, index, self.stream_every > 0 and index % self.stream_every == 1,
                                 self.model, self.api_key, self.timeout, self.max_tokens, self.expect)
            with self.lock:
                self.records.append(record)
        finally:
            self.slots.release()

    def _schedule(self):
        t0 = time.monotonic()
        for index in range(self.count):
            due = t0 + index / self.rate
            while not self.stopped.is_set() and time.monotonic() < due:
                self.stopped.wait(min(0.05, max(0.0, due - time.monotonic())))
            if self.stopped.is_set():
                return
            self.slots.acquire()
            self.schedule_lag = max(self.schedule_lag, time.monotonic() - due)
            worker = threading.Thread(target=self._work, args=(index,), daemon=True)
            worker.start()
            self.workers.append(worker)

    def start(self):
        self.started_at = time.time()
        self.scheduler.start()
        return self

    def stop(self):
        """No new requests; those in flight finish."""
        self.stopped.set()

    def wait(self, timeout=None):
        """Wait for the schedule and every request; returns the records in index order."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.scheduler.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for worker in list(self.workers):
            worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        with self.lock:
            return sorted(self.records, key=lambda r: r['index'])

    def sent(self):
        return len(self.workers)


def summarize(records):
    """Counts, failures and latency percentiles (seconds) of a list of records."""
    latencies = [r['latency'] for r in records if r['ok']]
    failed = [r for r in records if not r['ok']]
    groups = {}
    for r in records:
        groups[r['group'] or '-'] = groups.get(r['group'] or '-', 0) + 1
    return {
        'sent': len(records),
        'ok': len(records) - len(failed),
        'failed': len(failed),
        'streams': sum(1 for r in records if r['stream']),
        'streams_complete': sum(1 for r in records if r['stream'] and r['complete']),
        'incomplete': sum(1 for r in records if r['status'] == 200 and not r['complete']),
        'latency_p50': percentile(latencies, 0.50),
        'latency_p99': percentile(latencies, 0.99),
        'latency_max': max(latencies) if latencies else None,
        'by_group': dict(sorted(groups.items())),
        'failures': [{k: r[k] for k in ('index', 'stream', 'started', 'status', 'group', 'error')} for r in failed][:20],
    }


def run_load(url, count, rate, **kwargs):
    """Run a whole load and return (records, summary)."""
    load = Load(url, count, rate, **kwargs).start()
    records = load.wait()
    return records, summarize(records)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--url', default='http://127.0.0.1:18080', help='base URL of the endpoint (loopback or --allow)')
    parser.add_argument('--count', type=int, default=40, help='requests to send (the bound)')
    parser.add_argument('--rate', type=float, default=4.0, help='requests per second')
    parser.add_argument('--model', default='deepseek-v4-flash')
    parser.add_argument('--api-key', default=None)
    parser.add_argument('--max-tokens', type=int, default=None)
    parser.add_argument('--timeout', type=float, default=120.0, help='seconds per request')
    parser.add_argument('--allow', action='append', default=[], help='another network to allow (CIDR), e.g. 10.232.0.0/24')
    parser.add_argument('--json', help='write every record and the summary to this file')
    args = parser.parse_args(argv)
    try:
        records, summary = run_load(args.url, args.count, args.rate, model=args.model, api_key=args.api_key,
                                    timeout=args.timeout, max_tokens=args.max_tokens, allowed_networks=args.allow)
    except ValueError as err:
        print('loadclient: %s' % err, file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as handle:
            json.dump({'summary': summary, 'records': records}, handle, indent=1)
    print(json.dumps(summary, indent=2))
    return 0 if summary['failed'] == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
