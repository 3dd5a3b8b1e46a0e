# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""LMCache beside every rank (private; issue #45): the multiprocess server's command, its compose service, the vLLM
connector flag and the memory budget. Facts it follows: docs/lmcache-findings.md (measured with LMCache 0.5.6).

- The server runs from the serving image itself (vLLM's LMCacheMPConnector imports ``lmcache`` in the engine, so the
  image carries it anyway; its digest pins both), in a container of its own (``serve_lmcache_container_name``) of the
  rank's compose project, on the host's network and IPC like vLLM: the KV blocks move through a shared-memory segment
  (``--shm-name``), so both must see the same /dev/shm.
- Every port is bound to 127.0.0.1 but LMCache's Prometheus exporter (0.0.0.0, no flag to change it): the serve role's
  firewall drops all three from anyone but loopback (_serve_firewall, ``local_ports``).
- ``--supported-transfer-mode auto``: the server's default (``lmcache_driven``, CUDA IPC) cannot serve a worker that
  resolves to the shared-memory mode (the CPU build), which then hangs at registration without an error.
- vLLM starts only once the server answers its health check (compose ``depends_on: service_healthy``): a missing server
  makes vLLM hang, not fail.

Pure Python, no Ansible imports.
"""

from __future__ import annotations

import json

# The role's variables this module reads (the lookup dspark.cluster.role_vars, reads='serve_lmcache').
VARIABLES = (
    "serve_lmcache", "serve_lmcache_container_name", "serve_lmcache_l1_size_gb", "serve_lmcache_eviction_policy",
    "serve_lmcache_chunk_size", "serve_lmcache_port", "serve_lmcache_http_port", "serve_lmcache_metrics_port",
    "serve_lmcache_disk_dir", "serve_lmcache_disk_size_gb", "serve_lmcache_extra_args", "serve_lmcache_start_period",
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


def server_argv(values, group, rank):
    """``lmcache server`` of one rank: every listener on loopback, the L1 in the rank's shared-memory segment."""
    v = values
    argv = ["lmcache", "server",
            "--host", "127.0.0.1", "--port", str(v["serve_lmcache_port"]),
            "--http-host", "127.0.0.1", "--http-port", str(v["serve_lmcache_http_port"]),
            "--prometheus-port", str(v["serve_lmcache_metrics_port"]),
            "--l1-size-gb", str(v["serve_lmcache_l1_size_gb"]),
            "--eviction-policy", str(v["serve_lmcache_eviction_policy"]),
            "--chunk-size", str(v["serve_lmcache_chunk_size"]),
            "--supported-transfer-mode", "auto",
            "--shm-name", shm_name(group, rank)]
    adapter = disk_adapter(v)
    if adapter:
        argv += ["--l2-adapter", adapter]
    return argv + [str(arg) for arg in v["serve_lmcache_extra_args"]]


def kv_transfer_config(values):
    """vLLM's ``--kv-transfer-config``: the LMCache connector, this node's server on loopback."""
    return json.dumps({"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                       "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1",
                                                     "lmcache.mp.port": int(values["serve_lmcache_port"])}})


def healthcheck(values):
    """The server's compose health check: LMCache's own CLI asks its HTTP /healthcheck (exit 1 when it fails)."""
    return ["CMD", "lmcache", "ping", "kvcache", "--url", "http://127.0.0.1:%s" % values["serve_lmcache_http_port"]]


def ports(values):
    """The server's listeners, which no one but loopback may reach (the firewall's local_ports)."""
    if not enabled(values):
        return []
    return [int(values[name]) for name in ("serve_lmcache_port", "serve_lmcache_http_port", "serve_lmcache_metrics_port")]


def shm_need_mib(values):
    """What /dev/shm must hold on a node: the L1 pool plus vLLM's own segment."""
    return int(float(values["serve_lmcache_l1_size_gb"]) * 1024) + ENGINE_SHM_MIB if enabled(values) else 0

