# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The numeric ranges of the roles' variables: an extension of their argument specs (private; issue #44).

A role variable is written in its role's defaults and meta/argument_specs.yml, which give its type, choices and
default; the range a number must lie in is the one rule Ansible's spec format cannot state. It lives here rather
than as a key of the spec because ansible-lint's production profile refuses unknown keys in meta/argument_specs.yml.
Each entry names an int or float option of a role's spec (tests/unit/plugins/plugin_utils/test_spec_ranges.py holds
the table to that, and every default to its range). Float bounds mean a float option (read with _inputs.as_float),
int bounds an int option. The rules read the table through _rules_base.ranges (the serving roles and the router,
wording by _inputs.range_problem) and _rules_monitoring (its own wording). Pure Python, no Ansible imports.
"""

from __future__ import annotations

from collections import namedtuple

# [low, high], or (low, high] with low_open; None: no bound on that side.
Range = namedtuple("Range", "low high low_open")


def at_least(low):
    return Range(low, None, False)


def above(low):
    return Range(low, None, True)


def between(low, high):
    return Range(low, high, False)


RANGES = {
    # checkpoint, SCP mode: streams up to sshd's MaxStartups (10), timeouts > 0, keep-alive, retries, delay >= 0
    "checkpoint_scp_streams": between(1, 10),
    "checkpoint_rsync_timeout": above(0),
    "checkpoint_scp_connect_timeout": above(0),
    "checkpoint_scp_alive_interval": at_least(0),
    "checkpoint_scp_retries": at_least(0),
    "checkpoint_scp_retry_delay": at_least(0),
    # checkpoint, NFS mode: nconnect up to the kernel's limit (16), rsize/wsize at least a page of 4096
    "checkpoint_nfs_nconnect": between(1, 16),
    "checkpoint_nfs_rsize": at_least(4096),
    "checkpoint_nfs_wsize": at_least(4096),
    "checkpoint_nfs_timeo": above(0),
    "checkpoint_nfs_probe_timeout": above(0),
    # checkpoint, download
    "checkpoint_download_timeout": above(0),
    "checkpoint_download_probe_timeout": above(0),
    "checkpoint_download_retries": at_least(0),
    "checkpoint_download_retry_delay": at_least(0),
    # serve: a fraction of GPU memory, counts and lengths, at least 5 MTP tokens (the checkpoint's block size)
    "serve_gpu_memory_utilization": Range(0.0, 1.0, True),
    "serve_max_num_seqs": above(0),
    "serve_max_num_batched_tokens": above(0),
    "serve_max_model_len": above(0),
    "serve_start_timeout": above(0),
    "serve_mtp_num_tokens": at_least(5),
    "serve_memory_guard_mib": at_least(0),
    "serve_memory_guard_wait": at_least(0),
    # serve, LMCache: an L1 above 0 GB, chunks, ports, the disk bound, the start period
    "serve_lmcache_l1_size_gb": above(0.0),
    "serve_lmcache_chunk_size": above(0),
    "serve_lmcache_port": between(1, 65535),
    "serve_lmcache_http_port": between(1, 65535),
    "serve_lmcache_disk_size_gb": at_least(1),
    "serve_lmcache_start_period": above(0),
    "serve_lmcache_memory_reserve_mib": at_least(0),
    # router: listener ports (0: off), health check, per-key limits (0: no limit)
    "router_port": between(0, 65535),
    "router_tls_port": between(0, 65535),
    "router_stats_port": between(0, 65535),
    "router_metrics_port": between(0, 65535),
    "router_health_interval": at_least(1),
    "router_health_fast_interval": at_least(1),
    "router_health_timeout": at_least(1),
    "router_health_fall": at_least(1),
    "router_health_rise": at_least(1),
    "router_retries": at_least(1),
    "router_key_rate_limit": at_least(0),
    "router_key_concurrency_limit": at_least(0),
    "router_max_body_bytes": at_least(0),
    "router_unauthenticated_rate": at_least(0),
    # monitoring: alert thresholds (vllm:kv_cache_usage_perc is 1 at 100 %; IPv4's smallest MTU is 68), the collector
    "monitoring_alert_kv_cache_usage": Range(0.0, 1.0, True),
    "monitoring_alert_waiting_requests": at_least(0.0),
    "monitoring_alert_ttft_p95_seconds": above(0.0),
    "monitoring_alert_memory_available_bytes": at_least(0),
    "monitoring_alert_fabric_mtu": at_least(68),
    "monitoring_collector_interval": at_least(5),
}


def is_float(var):
    """Whether ``var``'s range is of a float option (its bounds are floats)."""
    low, high, dummy = RANGES[var]
    return isinstance(low, float) or isinstance(high, float)


def within(number, var):
    """Whether the parsed ``number`` lies in ``var``'s range."""
    low, high, low_open = RANGES[var]
    too_low = low is not None and (number <= low if low_open else number < low)
    return not too_low and not (high is not None and number > high)
