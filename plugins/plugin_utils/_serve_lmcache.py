# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""LMCache beside every rank (private; issue #45): the multiprocess server's command, its compose service and the vLLM
connector flag. Facts it follows: docs/lmcache-findings.md (measured with LMCache 0.5.6, TP=2 across two nodes).

- The server runs from the serving image itself (vLLM's LMCacheMPConnector imports ``lmcache`` in the engine, so the
  image carries it anyway; its digest pins both), in a container of its own (``serve_lmcache_container_name``) of the
  rank's compose project, on the host's network and IPC like vLLM: the KV blocks move through a shared-memory segment
  (``--shm-name``), so both must see the same /dev/shm.
- One server per node, listening on the node's FABRIC address: each worker talks to its own node's server, but the
  head's scheduler looks every prompt up on every server (``lmcache.mp.server_urls``, in node-rank order, the same on
  every rank). Servers on 127.0.0.1 start and store but never hit across nodes (measured). The serve firewall admits
  the group's fabric peers only to that address; the HTTP port (health, metrics, an admin API without
  authentication) stays on 127.0.0.1 and is dropped from anyone but loopback as well.
- ``--supported-transfer-mode auto``: the server's default (``lmcache_driven``, CUDA IPC) cannot serve a worker that
  resolves to the shared-memory mode (the CPU build), which then hangs at registration without an error.
- vLLM starts only once the server answers its health check (compose ``depends_on: service_healthy``): a missing server
  makes vLLM wait lmcache.mp.mq_timeout (300 s) before its head fails, and the headless ranks stay up.
- ``LMCACHE_TRACK_USAGE=false``: no usage reports to stats.lmcache.ai, and the server stops in seconds instead of
  outliving the stop's grace period (three telemetry threads at 10 s each).

Pure Python, no Ansible imports.
"""

from __future__ import annotations

import json

# The role's variables this module reads (the lookup dspark.cluster.role_vars, reads='serve_lmcache').
VARIABLES = (
    "serve_lmcache", "serve_lmcache_container_name", "serve_lmcache_l1_size_gb", "serve_lmcache_eviction_policy",
    "serve_lmcache_chunk_size", "serve_lmcache_port", "serve_lmcache_http_port", "serve_lmcache_disk_dir",
    "serve_lmcache_disk_size_gb", "serve_lmcache_extra_args", "serve_lmcache_start_period",
)
# Where the disk tier is mounted inside the server's container.
DISK_MOUNT = "/cache/lmcache"
# What vLLM's CPU build asks of /dev/shm beside the L1 segment ("Insufficient space in /dev/shm ...: 160 MiB required").
ENGINE_SHM_MIB = 160
EVICTION_POLICIES = ("LRU",)


def enabled(values):
    """serve_lmcache is on (a boolean or its YAML text)."""
    value = values.get("serve_lmcache")
    return value is True or str(value).strip().lower() in ("true", "yes", "on", "1")


def shm_name(group, rank):
    """The L1 pool's shared-memory segment: one per rank, named after its group (LMCache prefixes lmcache_l1_pool_)."""
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in str(group))
    return "dspark_%s_r%s" % (safe, int(rank))


def disk_adapter(values):
    """The ``--l2-adapter`` JSON of the disk tier, or None without one: the native file system adapter, bounded by
    serve_lmcache_disk_size_gb with LRU eviction (LMCache's plain ``fs`` adapter has no bound)."""
    if not values.get("serve_lmcache_disk_dir"):
        return None
    return json.dumps({"type": "fs_native", "base_path": DISK_MOUNT,
                       "max_capacity_gb": int(values["serve_lmcache_disk_size_gb"]),
                       "eviction": {"eviction_policy": values["serve_lmcache_eviction_policy"]}})


def server_argv(values, group, rank, address):
    """``lmcache server`` of one rank: requests on the node's fabric ``address`` (every server is looked up by the
    head's scheduler), HTTP on loopback, the L1 in the rank's shared-memory segment."""
    v = values
    argv = ["lmcache", "server",
            "--host", str(address), "--port", str(v["serve_lmcache_port"]),
            "--http-host", "127.0.0.1", "--http-port", str(v["serve_lmcache_http_port"]),
            "--l1-size-gb", str(v["serve_lmcache_l1_size_gb"]),
            "--eviction-policy", str(v["serve_lmcache_eviction_policy"]),
            "--chunk-size", str(v["serve_lmcache_chunk_size"]),
            "--supported-transfer-mode", "auto",
            "--shm-name", shm_name(group, rank)]
    adapter = disk_adapter(v)
    if adapter:
        argv += ["--l2-adapter", adapter]
    return argv + [str(arg) for arg in v["serve_lmcache_extra_args"]]


# The server's environment: no usage telemetry (and a stop within the grace period), no banner in the logs.
ENVIRONMENT = {"LMCACHE_TRACK_USAGE": "false", "DO_NOT_TRACK": "1", "LMCACHE_DISABLE_BANNER": "1"}


def kv_transfer_config(values, group):
    """vLLM's ``--kv-transfer-config``: the LMCache connector, every server of the group (``group``: the filter
    group_model's answer) on its node's fabric address, in node-rank order; the same string on every rank."""
    port = int(values["serve_lmcache_port"])
    urls = ",".join("tcp://%s:%d" % ((group.get("addresses") or {}).get(member, ""), port)
                    for member in group.get("members") or [])
    return json.dumps({"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                       "kv_connector_extra_config": {"lmcache.mp.server_urls": urls}})


# vLLM refuses any KV connector while PYTORCH_CUDA_ALLOC_CONF holds this (vLLM 0.32.0, vllm/config/vllm.py: CUDA's VMM
# allocator may remap pinned KV memory); the recipe's serve_env sets it.
EXPANDABLE = "expandable_segments:True"


def engine_environment(environment, values):
    """The engine's environment with LMCache on: PYTORCH_CUDA_ALLOC_CONF without expandable_segments:True (the key
    dropped when nothing else is left in it); unchanged with LMCache off."""
    env = dict(environment or {})
    if not enabled(values) or EXPANDABLE not in str(env.get("PYTORCH_CUDA_ALLOC_CONF", "")):
        return env
    kept = [item for item in str(env["PYTORCH_CUDA_ALLOC_CONF"]).split(",") if item.strip() and item.strip() != EXPANDABLE]
    if kept:
        env["PYTORCH_CUDA_ALLOC_CONF"] = ",".join(kept)
    else:
        del env["PYTORCH_CUDA_ALLOC_CONF"]
    return env


# The server's compose health check: its HTTP /healthcheck with the image's Python (no curl there; `lmcache ping`
# imports torch and takes about 2 s a probe).
HEALTH_PROBE = ("import sys, http.client; c = http.client.HTTPConnection('127.0.0.1', %d, timeout=5); "
                "c.request('GET', '/healthcheck'); sys.exit(c.getresponse().status != 200)")


def healthcheck(values):
    return ["CMD", "python3", "-c", HEALTH_PROBE % int(values["serve_lmcache_http_port"])]


def local_ports(values):
    """The server's HTTP port, which no one but loopback may reach (the firewall's local_ports); the request port is
    on the fabric address, which the firewall opens to the group's peers only."""
    return [int(values["serve_lmcache_http_port"])] if enabled(values) else []
