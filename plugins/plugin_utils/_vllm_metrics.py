# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM's /metrics (the Prometheus text exposition format, as prometheus_client writes it) -> the numbers
`dspark-fleet status` shows per group (issue #28): requests running and waiting, KV cache usage and the TTFT p95.

Pure: no Ansible imports but the collection's own, no I/O. The metric names are _monitoring_plan.VLLM_METRICS' (read
from vLLM 0.32.0's source, re-checked by tests/unit/monitoring/test_monitoring_vllm_names.py); a name missing there
fails the import. The filter serve_status_view (metrics=) hands the head's /metrics response to from_response on the
controller; dspark-fleet's metrics.py uses the names and window texts for its Prometheus queries.
"""

from __future__ import annotations

import math
import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _monitoring_plan as _plan


def _known(name):
    """`name`, once _monitoring_plan lists it (KeyError otherwise: one list of vLLM names in the collection)."""
    if name not in _plan.VLLM_METRICS:
        raise KeyError("%s is not in _monitoring_plan.VLLM_METRICS" % name)
    return name


RUNNING = _known("vllm:num_requests_running")
WAITING = _known("vllm:num_requests_waiting")
KV_USAGE = _known("vllm:kv_cache_usage_perc")
# vLLM before 0.11 exposed the same gauge as vllm:gpu_cache_usage_perc (deprecated, then hidden; not in 0.32.0): read
# only when KV_USAGE is absent, so an older engine still shows its usage.
KV_USAGE_OLD = "vllm:gpu_cache_usage_perc"
TTFT = _known("vllm:time_to_first_token_seconds")
LABELS = _plan.VLLM_LABELS
QUANTILE = 0.95
SINCE_START = "since the engine started"

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(r"^(%s)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+(-?[0-9]+))?[ \t]*$" % _NAME)
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(,|$)')
_META = re.compile(r"^#[ \t]+(HELP|TYPE)[ \t]+(%s)(?:[ \t]+(.*))?$" % _NAME)
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


class MetricsError(ValueError):
    """The text is not a Prometheus exposition, or holds none of vLLM's metrics."""


def _labels(text, lineno):
    labels = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        found = _LABEL.match(text, pos)
        if not found:
            raise MetricsError("line %d: bad labels {%s}" % (lineno, text))
        labels[found.group(1)] = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], found.group(2))
        pos = found.end()
    return labels


def _value(text, lineno):
    try:
        return float(text)      # 3.0, 1.7e+09, NaN, +Inf, -Inf as prometheus_client writes them
    except ValueError:
        raise MetricsError("line %d: %r is not a number" % (lineno, text)) from None


def parse(text):
    """The exposition -> {"types": {family: type}, "help": {family: text}, "samples": [(name, labels, value)]}.

    Comments other than HELP/TYPE and blank lines are skipped; a sample's timestamp is dropped. MetricsError names the
    first line that is neither."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str):
        raise MetricsError("no text (got %s)" % type(text).__name__)
    out = {"types": {}, "help": {}, "samples": []}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            meta = _META.match(line)
            if meta:
                out["types" if meta.group(1) == "TYPE" else "help"][meta.group(2)] = (meta.group(3) or "").strip()
            continue
        sample = _SAMPLE.match(line)
        if not sample:
            raise MetricsError("line %d is not a sample: %r" % (lineno, line[:120]))
        out["samples"].append((sample.group(1), _labels(sample.group(2) or "", lineno), _value(sample.group(3), lineno)))
    return out


def histogram_quantile(q, buckets):
    """Prometheus' histogram_quantile over cumulative buckets [(le, count)] (le may be +Inf): linear interpolation
    inside the bucket that holds the rank, the first bucket starting at 0; the highest finite bound when the rank falls
    in +Inf. None where Prometheus gives NaN: no +Inf bucket, fewer than two buckets, or no observation."""
    merged = {}
    for le, count in buckets:
        merged[float(le)] = merged.get(float(le), 0.0) + float(count)
    ordered = sorted(merged.items())
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]) or ordered[-1][0] < 0:
        return None
    fixed, top = [], 0.0
    for le, count in ordered:       # Prometheus' ensureMonotonic: a scrape taken mid-update may dip
        top = max(top, count)
        fixed.append((le, top))
    total = fixed[-1][1]
    if total <= 0 or math.isnan(total):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    rank = q * total
    index = next(i for i, (dummy, count) in enumerate(fixed) if count >= rank)
    if index == len(fixed) - 1:
        return fixed[-2][0]
    if index == 0 and fixed[0][0] <= 0:
        return fixed[0][0]
    start, below = (fixed[index - 1][0], fixed[index - 1][1]) if index > 0 else (0.0, 0.0)
    end, count = fixed[index][0], fixed[index][1] - below
    return start + (end - start) * ((rank - below) / count)


def _number(value):
    """Gauges as ints when whole (3.0 -> 3), None for NaN."""
    if value is None or math.isnan(value):
        return None
    return int(value) if float(value).is_integer() else round(value, 6)


def summary(text):
    """vLLM's /metrics text -> {running, waiting, kv_cache_usage (0..1), kv_cache_metric, ttft_p95_s, ttft_requests,
    models, engines, source: "metrics", window}. Sums over the engines (data parallel) for the requests and the
    histogram, the highest engine's KV usage. The TTFT p95 and its request count are since the engine started: vLLM's
    histogram is cumulative. MetricsError when the text holds none of the four metrics."""
    parsed = parse(text)
    values = {}
    buckets = {}
    count = None
    models, engines = set(), set()
    for name, labels, value in parsed["samples"]:
        if name in (RUNNING, WAITING, KV_USAGE, KV_USAGE_OLD):
            values.setdefault(name, []).append(value)
        elif name == TTFT + "_bucket" and "le" in labels:
            le = _value(labels["le"], 0)
            buckets[le] = buckets.get(le, 0.0) + value
        elif name == TTFT + "_count":
            count = (count or 0.0) + value
        else:
            continue
        if labels.get(LABELS[0]):
            models.add(labels[LABELS[0]])
        if labels.get(LABELS[1]) is not None:
            engines.add(labels[LABELS[1]])
    if not values and not buckets:
        raise MetricsError("none of %s in it: not vLLM's /metrics?" % ", ".join((RUNNING, WAITING, KV_USAGE, TTFT)))
    kv_name = KV_USAGE if KV_USAGE in values else KV_USAGE_OLD if KV_USAGE_OLD in values else None
    if count is None and buckets:
        count = max(buckets.values())
    return {
        "source": "metrics",
        "window": SINCE_START,
        "running": _number(sum(values[RUNNING])) if RUNNING in values else None,
        "waiting": _number(sum(values[WAITING])) if WAITING in values else None,
        "kv_cache_usage": _number(max(values[kv_name])) if kv_name else None,
        "kv_cache_metric": kv_name,
        "ttft_p95_s": _number(histogram_quantile(QUANTILE, buckets.items())) if buckets else None,
        "ttft_requests": _number(count) if count is not None else None,
        "models": sorted(models),
        "engines": sorted(engines),
    }


def from_response(response):
    """An ansible.builtin.uri result of GET /metrics (return_content) -> (summary or None, the reason when None)."""
    if not isinstance(response, dict) or not response:
        return None, "the head's /metrics was not read"
    if response.get("skipped"):
        return None, "the head's /metrics was not read (%s)" % (response.get("skip_reason") or "skipped")
    status = response.get("status")
    if status != 200:
        msg = str(response.get("msg") or "").strip()
        return None, "GET /metrics on the head answered %s%s" % (
            "HTTP %s" % status if isinstance(status, int) and status > 0 else "nothing",
            ": %s" % msg[:200] if msg else "")
    try:
        return summary(response.get("content")), None
    except MetricsError as exc:
        return None, "the head's /metrics could not be read: %s" % exc
