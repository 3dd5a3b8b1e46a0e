"""The engine's numbers per group for `dspark-fleet status` (issue #28): requests running and waiting, KV cache usage
and the time to first token p95.

Two sources:

- Prometheus, when one is given (``--prometheus URL`` or $DSPARK_FLEET_PROMETHEUS): its HTTP API (``/api/v1/query``)
  from the controller, stdlib only, summed per ``dspark_group`` (the label the monitoring role's scrape config gives
  every head's target, job ``dspark_vllm``: plugins/plugin_utils/_monitoring_plan.py prometheus_config); the TTFT p95
  is histogram_quantile over the rate of the last WINDOW (5m by default).
- Otherwise, or for a group Prometheus has no series of, the head's own ``/metrics``, read by playbooks/status.yml
  on the head and parsed on the controller (plugins/plugin_utils/_vllm_metrics.py, through the serve_status_view
  filter): the head's ``serve_status`` fact carries ``metrics`` (or null and ``metrics_reason``). Its TTFT p95 is
  since the engine started (vLLM's histogram is cumulative).

Each group's report entry gets ``metrics`` ({source, window, running, waiting, kv_cache_usage, kv_cache_metric,
ttft_p95_s, ttft_requests, ...}, or null) and ``metrics_reason`` (why it is null, or a note on the source).
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request

from . import collection

PROMETHEUS_ENV = "DSPARK_FLEET_PROMETHEUS"
# The monitoring role's scrape config (_monitoring_plan.prometheus_config): the heads' job and the group's label.
JOB = "dspark_vllm"
GROUP_LABEL = "dspark_group"
DEFAULT_WINDOW = "5m"
WINDOW_RE = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+\Z")     # a Prometheus duration (_monitoring_plan.DURATION_RE)
TIMEOUT_S = 10.0
VLLM_METRICS_MODULE = "_vllm_metrics"
HEAD_SOURCE = "metrics"
PROMETHEUS_SOURCE = "prometheus"


class PrometheusError(Exception):
    """Prometheus could not be asked, or refused the query."""


# --------------------------------------------------------------------------- the collection's names


def vllm_names(project_dir=None):
    """The collection's _vllm_metrics module (its metric names come from _monitoring_plan, read from vLLM 0.32.0's
    source). ImportError when the collection cannot be found."""
    return collection.plugin_utils(VLLM_METRICS_MODULE, project_dir)


# --------------------------------------------------------------------------- Prometheus


def check_url(url):
    """The Prometheus base URL (http or https, no credentials: they would land in the report's argv), else ValueError."""
    parts = urllib.parse.urlsplit(str(url or "").strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("--prometheus %r is not an http(s) URL such as http://127.0.0.1:9090" % url)
    if parts.username or parts.password:
        raise ValueError("--prometheus must not carry credentials (they would be written to the report)")
    if parts.query or parts.fragment:
        raise ValueError("--prometheus %r: give the base URL without ?query or #fragment" % url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def check_window(window):
    if not (isinstance(window, str) and WINDOW_RE.match(window)):
        raise ValueError("--prometheus-window %r is not a Prometheus duration (e.g. 5m)" % window)
    return window


def queries(names, window=DEFAULT_WINDOW):
    """PromQL per number, each by dspark_group, over the heads' job only (the alert rules' selectors)."""
    sel = '{job="%s"}' % JOB
    by = "by (%s)" % GROUP_LABEL
    return {
        "running": "sum %s (%s%s)" % (by, names.RUNNING, sel),
        "waiting": "sum %s (%s%s)" % (by, names.WAITING, sel),
        "kv_cache_usage": "max %s (%s%s)" % (by, names.KV_USAGE, sel),
        "ttft_p95_s": "histogram_quantile(%s, sum by (%s, le) (rate(%s_bucket%s[%s])))" % (
            names.QUANTILE, GROUP_LABEL, names.TTFT, sel, window),
        "ttft_requests": "sum %s (increase(%s_count%s[%s]))" % (by, names.TTFT, sel, window),
        "up": "max %s (up%s)" % (by, sel),
    }


def query(base_url, promql, timeout=TIMEOUT_S):
    """One instant query -> {group: value (float, NaN kept)}. PrometheusError on any failure, with its reason."""
    url = "%s/api/v1/query?%s" % (base_url, urllib.parse.urlencode({"query": promql}))
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # nosec B310: check_url allows http(s) only
            body = resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            detail = json.loads(body.decode("utf-8", "replace")).get("error") or ""
        except ValueError:
            detail = body[:200].decode("utf-8", "replace")
        raise PrometheusError("%s answered HTTP %s to %s: %s" % (base_url, exc.code, promql, detail)) from None
    except (urllib.error.URLError, OSError) as exc:
        raise PrometheusError("cannot reach %s: %s" % (base_url, getattr(exc, "reason", exc))) from None
    try:
        doc = json.loads(body.decode("utf-8"))
    except ValueError:
        raise PrometheusError("%s did not answer JSON (is it Prometheus?)" % base_url) from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        why = doc.get("error") if isinstance(doc, dict) else doc
        raise PrometheusError("%s refused %s: %s" % (base_url, promql, why))
    data = doc.get("data") or {}
    if data.get("resultType") != "vector":
        raise PrometheusError("%s answered a %s to %s, not a vector" % (base_url, data.get("resultType"), promql))
    out = {}
    for item in data.get("result") or []:
        group = (item.get("metric") or {}).get(GROUP_LABEL)
        try:
            out[group] = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return out


def _num(value):
    if value is None or math.isnan(value) or math.isinf(value):
        return None
    return int(value) if float(value).is_integer() else round(value, 6)


def from_prometheus(base_url, groups, names, window=DEFAULT_WINDOW, timeout=TIMEOUT_S):
    """{group: metrics dict or None (no series of it)} for the groups; PrometheusError when Prometheus fails."""
    answers = dict((key, query(base_url, promql, timeout)) for key, promql in queries(names, window).items())
    out = {}
    for group in groups:
        if not any(group in answers[key] for key in ("running", "waiting", "kv_cache_usage", "ttft_requests")):
            out[group] = None
            continue
        numbers = dict((key, _num(answers[key].get(group))) for key in ("running", "waiting", "kv_cache_usage",
                                                                        "ttft_p95_s", "ttft_requests"))
        numbers["ttft_requests"] = (None if numbers["ttft_requests"] is None
                                    else round(float(numbers["ttft_requests"]), 1))
        numbers.update({"source": PROMETHEUS_SOURCE, "window": "last %s" % window, "kv_cache_metric": names.KV_USAGE,
                        "scrape_up": (None if group not in answers["up"] else answers["up"][group] >= 1),
                        "prometheus": base_url})
        out[group] = numbers
    return out


# --------------------------------------------------------------------------- per group


def head_metrics(run, head):
    """(metrics, reason) from the head's serve_status fact of the group's status run."""
    if run is None or head is None:
        return None, "the group's status run did not start"
    fact = (getattr(run.events, "status", None) or {}).get(head)
    if not isinstance(fact, dict):
        return None, "the head %s noted no status (unreachable or failed before it)" % head
    if "metrics" not in fact:
        return None, "the head's status carries no metrics (playbooks/status.yml without the /metrics read)"
    numbers = fact.get("metrics")
    if not isinstance(numbers, dict):
        return None, str(fact.get("metrics_reason") or "the head's /metrics was not read")
    return dict(numbers), None


def attach(entries, runs, prometheus=None, window=DEFAULT_WINDOW, project_dir=None, timeout=TIMEOUT_S):
    """Sets each entry's `metrics` and `metrics_reason`: Prometheus' numbers when it has the group's series, else the
    head's /metrics (the reason names why Prometheus was not used). Returns Prometheus' error, or None."""
    from_prom, prom_error = {}, None
    if prometheus:
        try:
            from_prom = from_prometheus(prometheus, list(entries), vllm_names(project_dir), window, timeout)
        except (PrometheusError, ImportError) as exc:
            prom_error = str(exc)
    for group, entry in entries.items():
        numbers, reason = head_metrics(runs.get(group), entry.get("head"))
        if from_prom.get(group) is not None:
            entry["metrics"], entry["metrics_reason"] = from_prom[group], None
            continue
        if prometheus:
            why = prom_error or "Prometheus has no series of group %s (job %s)" % (group, JOB)
            reason = "%s; %s" % (why, reason) if reason else "%s: the head's /metrics instead" % why
        entry["metrics"], entry["metrics_reason"] = numbers, reason
    return prom_error


# --------------------------------------------------------------------------- the table


def _cell(value, fmt):
    return "-" if value is None else fmt % value


def source_text(numbers):
    if numbers.get("source") == PROMETHEUS_SOURCE:
        text = "Prometheus, %s" % numbers.get("window")
        if numbers.get("scrape_up") is False:
            text += ", scrape DOWN"
    else:
        text = "head /metrics, %s" % (numbers.get("window") or "since the engine started")
    if numbers.get("ttft_requests") is not None:
        text += " (%s request(s))" % _cell(numbers["ttft_requests"], "%g")
    return text


def rows(entries):
    """[group, running, waiting, KV cache, TTFT p95, source] per group."""
    out = []
    for group, entry in entries.items():
        numbers = entry.get("metrics")
        if not isinstance(numbers, dict):
            out.append([group, "-", "-", "-", "-", "none: %s" % (entry.get("metrics_reason") or "not read")])
            continue
        kv = numbers.get("kv_cache_usage")
        out.append([group, _cell(numbers.get("running"), "%g"), _cell(numbers.get("waiting"), "%g"),
                    "-" if kv is None else "%.1f %%" % (100.0 * kv),
                    _cell(numbers.get("ttft_p95_s"), "%.3f s"), source_text(numbers)])
    return out


def print_table(entries, out=print):
    """The engine's numbers, one row per group (after the status table)."""
    header = ["group", "running", "waiting", "KV cache", "TTFT p95", "source"]
    table = rows(entries)
    widths = [max(len(str(r[i])) for r in table + [header]) for i in range(len(header))]
    out("")
    out("Engine (vLLM) per group:")
    for row in [header] + table:
        out("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    for group, entry in entries.items():
        numbers = entry.get("metrics")
        if isinstance(numbers, dict) and entry.get("metrics_reason"):
            out("  %s: %s" % (group, entry["metrics_reason"]))
