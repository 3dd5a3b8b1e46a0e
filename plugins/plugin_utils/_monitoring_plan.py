# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitoring role's plan (private; issue #28): who scrapes whom, prometheus.yml, the alert rules,
alertmanager.yml, each node's textfile collector configuration and its node_exporter firewall.

Pure Python, no Ansible imports: ``hostvars`` is any mapping of host -> mapping of variables, ``settings`` the
role's monitoring_* variables by name. The filter ``dspark.cluster.monitoring_plan`` hands it to the role.

Every metric name used by the rules and the dashboard is one of METRICS below, each with where it comes from:
vLLM 0.32.0's source (the version the real-engine lab runs; tests/unit/monitoring re-reads the installed source),
HAProxy 2.6's built-in exporter and prometheus-node-exporter 1.5 (both scraped on the development machine, Debian
bookworm packages), or the collection's own textfile collector (roles/monitoring/files/dspark-textfile-collector).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import (
    _checkpoint_paths, _group_model, _nft_boot_unit, _rules_monitoring, _serve_lmcache)

# -- metric names --------------------------------------------------------------------------------------------------

VLLM_VERSION = "0.32.0"
# Labels every per-engine vLLM metric carries (vllm/v1/metrics/loggers.py:498 labelnames = ["model_name", "engine"]).
VLLM_LABELS = ("model_name", "engine")
# Exposed name -> (source file in the vllm package, line of the registration, name as registered, kind). Counters are
# registered without `_total` and exposed with it by prometheus_client; histograms are exposed as _bucket/_sum/_count.
VLLM_METRICS = {
    "vllm:num_requests_running": ("v1/metrics/loggers.py", 528, "vllm:num_requests_running", "gauge"),
    "vllm:num_requests_waiting": ("v1/metrics/loggers.py", 538, "vllm:num_requests_waiting", "gauge"),
    "vllm:kv_cache_usage_perc": ("v1/metrics/loggers.py", 620, "vllm:kv_cache_usage_perc", "gauge"),
    "vllm:num_preemptions_total": ("v1/metrics/loggers.py", 739, "vllm:num_preemptions", "counter"),
    "vllm:prompt_tokens_total": ("v1/metrics/loggers.py", 748, "vllm:prompt_tokens", "counter"),
    "vllm:generation_tokens_total": ("v1/metrics/loggers.py", 799, "vllm:generation_tokens", "counter"),
    "vllm:request_success_total": ("v1/metrics/loggers.py", 809, "vllm:request_success", "counter"),
    "vllm:time_to_first_token_seconds": ("v1/metrics/loggers.py", 931, "vllm:time_to_first_token_seconds", "histogram"),
    "vllm:inter_token_latency_seconds": ("v1/metrics/loggers.py", 941, "vllm:inter_token_latency_seconds", "histogram"),
    "vllm:e2e_request_latency_seconds": ("v1/metrics/loggers.py", 961, "vllm:e2e_request_latency_seconds", "histogram"),
    "vllm:request_queue_time_seconds": ("v1/metrics/loggers.py", 971, "vllm:request_queue_time_seconds", "histogram"),
}
# vLLM 0.32.0's default buckets of the TTFT histogram (vllm/v1/metrics/buckets.py TIME_TO_FIRST_TOKEN_BUCKETS): the
# TTFT threshold should be one of them, else histogram_quantile interpolates between two buckets.
VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                     40.0, 80.0, 160.0, 640.0, 2560.0)
# HAProxy 2.6.12 (Debian bookworm) `http-request use-service prometheus-exporter`, read from its /metrics: the
# backend's and each server's state (label proxy, server, state).
HAPROXY_METRICS = {
    "haproxy_backend_active_servers": "gauge, label proxy",
    "haproxy_backend_status": "gauge, labels proxy, state (UP/DOWN)",
    "haproxy_server_status": "gauge, labels proxy, server, state (UP/DOWN/MAINT/DRAIN/NOLB)",
    "haproxy_backend_current_sessions": "gauge, label proxy",
    "haproxy_frontend_http_requests_total": "counter, label proxy",
}
# prometheus-node-exporter 1.5.0 (Debian bookworm), read from its /metrics.
NODE_METRICS = {
    "node_memory_MemAvailable_bytes": "meminfo: MemAvailable (unified memory: the GPU's too on a DGX Spark)",
    "node_memory_MemTotal_bytes": "meminfo: MemTotal",
    "node_network_receive_bytes_total": "netdev, label device",
    "node_network_transmit_bytes_total": "netdev, label device",
    "up": "Prometheus, per target",
}
# The collection's textfile collector (roles/monitoring/files/dspark-textfile-collector) -> what it reads on the node.
DSPARK_METRICS = {
    "dspark_collector_last_run_seconds": "time of the collector's last run",
    "dspark_node_info": "labels role, rank, group_size (from the inventory, the collector's configuration)",
    "dspark_serve_container_running": "docker inspect <serve_container_name> .State.Running: this rank's container",
    "dspark_serve_container_started_seconds": "docker inspect .State.StartedAt: the rank's last (re)start",
    "dspark_serve_definition_mtime_seconds": "mtime of <serve_config_dir>/compose.yaml: the last (re)provision that changed it",
    "dspark_serve_image_info": "labels image_id (compose.yaml image:) and image (the inventory's dspark_image)",
    "dspark_serve_api_healthy": "head only: GET 127.0.0.1:<dspark_api_port>/health answers 200",
    "dspark_fabric_link_up": "/sys/class/net/<dspark_fabric_interface>/operstate is up",
    "dspark_fabric_mtu_bytes": "/sys/class/net/<dspark_fabric_interface>/mtu",
    "dspark_fabric_gid_index": "NCCL_IB_GID_INDEX in compose.yaml's environment (the fabric role's resolved index)",
    "dspark_fabric_gid_matches": "the GID at that index (/sys/class/infiniband/<hca>/ports/1/gids) holds the fabric address",
    "dspark_checkpoint_verified": "the checkpoint role's stamp <checkpoint_manifest_dir>/<repo>-<revision>.verified.json",
    "dspark_checkpoint_verified_seconds": "mtime of that stamp",
    "dspark_lmcache_container_running": "serve_lmcache nodes: docker inspect <serve_lmcache_container_name> .State.Running",
    "dspark_lmcache_up": "serve_lmcache nodes: GET 127.0.0.1:<serve_lmcache_http_port>/metrics answers 200",
    "dspark_lmcache_lookup_requested_tokens_total": "LMCache's lmcache_mp_lookup_requested_tokens_total, summed (counter)",
    "dspark_lmcache_lookup_hit_tokens_total": "LMCache's lmcache_mp_lookup_hit_tokens_total, summed (counter)",
    "dspark_lmcache_lookup_hit_l1_tokens_total": "LMCache's lmcache_mp_lookup_hit_l1_tokens_total, summed (counter)",
    "dspark_lmcache_lookup_hit_l2_tokens_total": "LMCache's lmcache_mp_lookup_hit_l2_tokens_total, summed: disk-tier hits",
    "dspark_lmcache_l1_memory_usage_bytes": "LMCache's lmcache_mp_l1_memory_usage_bytes, summed (gauge)",
    "dspark_lmcache_l2_usage_bytes": "LMCache's lmcache_mp_l2_usage_bytes, summed over l2_name: the disk tier's stored "
                                     "bytes, what this server process wrote only",
    "dspark_lmcache_l2_store_completed_chunks_total": "LMCache's lmcache_mp_l2_store_completed_objects_chunks_total (counter)",
    "dspark_lmcache_l2_load_completed_chunks_total": "LMCache's lmcache_mp_l2_prefetch_load_completed_chunks_total (counter)",
    "dspark_lmcache_l2_evicted_chunks_total": "LMCache's lmcache_mp_l2_evicted_objects_chunks_total (counter)",
    "dspark_supervisor_restarts_in_window": "supervisor host: `restart` records per group in the journal's window",
    "dspark_supervisor_restart_cap": "supervisor host: supervisor_max_restarts",
    "dspark_supervisor_group_failed": "supervisor host: the group was given up (give_up, needs_reboot, failed)",
}
METRIC_NAMES = frozenset(VLLM_METRICS) | frozenset(HAPROXY_METRICS) | frozenset(NODE_METRICS) | frozenset(DSPARK_METRICS)
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

# -- inputs --------------------------------------------------------------------------------------------------------

DEFAULT_API_PORT = 8888
# The serve role's defaults of the LMCache values the collector reads (roles/serve/defaults/main.yml; tests compare).
DEFAULT_LMCACHE_CONTAINER = "dspark-lmcache"
DEFAULT_LMCACHE_HTTP_PORT = 8080
# The input rules (check_settings, check_web) are the monitoring role's rules (plugin_utils._rules_monitoring).
LISTENERS = _rules_monitoring.LISTENERS
check_settings = _rules_monitoring.check_settings
check_web = _rules_monitoring.check_web
_ip = _rules_monitoring.as_ip
_port = _rules_monitoring.as_port


def web_parts(settings):
    """(tls, users) of monitoring_web_config: whether it serves TLS, and its basic-auth user names."""
    web = settings.get("monitoring_web_config") or {}
    if not isinstance(web, dict):
        return False, []
    tls = isinstance(web.get("tls_server_config"), dict) and bool(web["tls_server_config"])
    users = web.get("basic_auth_users")
    return tls, sorted(str(name) for name in users) if isinstance(users, dict) else []


# -- the fleet -----------------------------------------------------------------------------------------------------

def _address(hostvars, host):
    hvars = _group_model.host_vars(hostvars, host)
    return str(_group_model.get(hvars, "dspark_mgmt_address", _group_model.get(hvars, "ansible_host", host)))


def _hosts(groups, name):
    return list((groups or {}).get(name) or [])


def monitors(groups):
    """The monitor hosts: group dspark_monitor, else the router hosts (dspark_router)."""
    return _hosts(groups, "dspark_monitor") or _hosts(groups, "dspark_router")


def fleet(groups, hostvars):
    """Serving groups with their members in rank order and head (the group model's integer reading of dspark_rank)."""
    out = {}
    for host in _hosts(groups, "dspark"):
        group = _group_model.read(hostvars, host, "dspark_group", "")
        if isinstance(group, str) and group:
            out.setdefault(group, []).append(host)
    result = {}
    for group in sorted(out):
        members = sorted(out[group], key=lambda h: (_group_model.as_int(_group_model.read(hostvars, h, "dspark_rank")) is None,
                                                    _group_model.as_int(_group_model.read(hostvars, h, "dspark_rank")) or 0, h))
        heads = [h for h in members if _group_model.as_int(_group_model.read(hostvars, h, "dspark_rank")) == 0]
        result[group] = {"members": members, "heads": heads}
    return result


def exporter_hosts(groups):
    """Every host that runs node_exporter and the textfile collector: serving nodes, routers, supervisors, monitors."""
    out = []
    for name in ("dspark", "dspark_router", "dspark_supervisor"):
        out += [h for h in _hosts(groups, name) if h not in out]
    out += [h for h in monitors(groups) if h not in out]
    return out


def _head_reachable(hostvars, head, monitor_hosts, routers, problems):
    """The serve firewall (serve_firewall, default on) drops the API port from anyone but serve_api_allowed_cidrs,
    loopback and the routers: a monitor elsewhere must be in serve_api_allowed_cidrs to scrape /metrics."""
    hvars = _group_model.host_vars(hostvars, head)
    if not _group_model.get(hvars, "serve_firewall", True) or str(_group_model.get(hvars, "serve_firewall", True)).lower() == "false":
        return
    cidrs = _group_model.get(hvars, "serve_api_allowed_cidrs", []) or []
    for monitor in monitor_hosts:
        if monitor in routers:
            continue
        addr = _ip(_address(hostvars, monitor))
        if addr is None:
            continue  # reported by plan() already
        allowed = False
        for cidr in cidrs if isinstance(cidrs, (list, tuple)) else []:
            try:
                allowed = allowed or addr in ipaddress.ip_network(str(cidr), strict=False)
            except ValueError:
                continue
        if not allowed:
            problems.append("%s: serve_api_allowed_cidrs=%r does not hold the monitor %s (%s), so the serve firewall drops its "
                            "scrapes of %s's /metrics. Fix: add %s/%d to serve_api_allowed_cidrs of group %s and run "
                            "playbooks/serve.yml, or run the monitor on a router host (dspark_router)"
                            % (head, list(cidrs) if isinstance(cidrs, (list, tuple)) else cidrs, monitor, addr, head, addr,
                               addr.max_prefixlen, _group_model.get(hvars, "dspark_group", "?")))


def plan(groups, hostvars, settings):
    """The whole plan: monitors, exporter hosts, heads to scrape, routers, problems (inputs and the fleet)."""
    problems = check_settings(settings)
    monitor_hosts = monitors(groups)
    routers = _hosts(groups, "dspark_router")
    if not monitor_hosts:
        problems.append("no monitor host: groups dspark_monitor and dspark_router are empty. Fix: add the host that runs "
                        "Prometheus to group dspark_monitor (not under dspark)")
    for monitor in monitor_hosts:
        if monitor in _hosts(groups, "dspark"):
            problems.append("%s is in dspark_monitor and in a serving group: the monitor must not compete with vLLM for "
                            "the node's memory. Fix: use another host (the router, or the controller)" % monitor)
        if _ip(_address(hostvars, monitor)) is None:
            problems.append("%s: its management address %r is not an IP address, which the nodes' firewall needs. Fix: set "
                            "dspark_mgmt_address (or ansible_host) of %s to its IP" % (monitor, _address(hostvars, monitor), monitor))
    groups_model = fleet(groups, hostvars)
    heads = []
    for group, model in groups_model.items():
        if len(model["heads"]) != 1:
            problems.append("group %s has %d hosts of dspark_rank 0 (%s). Fix: exactly one head per group"
                            % (group, len(model["heads"]), ", ".join(model["heads"]) or "none"))
            continue
        head = model["heads"][0]
        hvars = _group_model.host_vars(hostvars, head)
        port = _port(_group_model.get(hvars, "dspark_api_port", DEFAULT_API_PORT))
        if port is None:
            problems.append("%s: dspark_api_port=%r is not a TCP port. Fix: use 1-65535"
                            % (head, _group_model.get(hvars, "dspark_api_port")))
            continue
        heads.append({"group": group, "host": head, "address": _address(hostvars, head), "port": port,
                      "size": len(model["members"])})
        _head_reachable(hostvars, head, monitor_hosts, routers, problems)
    return {"monitors": monitor_hosts, "exporter_hosts": exporter_hosts(groups), "heads": heads, "routers": routers,
            "groups": groups_model, "problems": problems}


# -- prometheus.yml ------------------------------------------------------------------------------------------------

def _target(address, port):
    addr = _ip(address)
    return "[%s]:%d" % (address, port) if addr is not None and addr.version == 6 else "%s:%d" % (address, port)


def _own_address(address):
    """Where Prometheus reaches a listener of its own host: the listen address, loopback for a wildcard one."""
    addr = _ip(str(address))
    if addr is not None and addr.is_unspecified:
        return "::1" if addr.version == 6 else "127.0.0.1"
    return str(address)


def web_files(settings):
    """The web config file both servers read (--web.config.file) and the file of Prometheus' own password."""
    base = str(settings["monitoring_config_dir"]).rstrip("/")
    return {"config_file": base + "/web-config.yml", "password_file": base + "/web-password"}


def _own_access(settings):
    """How Prometheus itself reaches its own listener and Alertmanager's (its self-scrape, its alerts): https and the
    user monitoring_web_username when monitoring_web_config sets TLS or basic auth."""
    tls, users = web_parts(settings)
    out = {}
    if tls:
        # The target is an address of the monitor itself: the connection never leaves the host, and the certificate
        # is issued for the names the other clients use, which the role does not know.
        out.update(scheme="https", tls_config={"insecure_skip_verify": True})
    if users:
        out["basic_auth"] = {"username": settings["monitoring_web_username"],
                             "password_file": web_files(settings)["password_file"]}
    return out


def server_args(settings):
    """ARGS of /etc/default/prometheus and /etc/default/prometheus-alertmanager: the listen addresses, the retention,
    no Alertmanager cluster listener, and the web config when monitoring_web_config sets one."""
    s = settings
    web = " --web.config.file=%s" % web_files(s)["config_file"] if s.get("monitoring_web_config") else ""
    prometheus = _target(s["monitoring_prometheus_listen_address"], int(s["monitoring_prometheus_port"]))
    alertmanager = _target(s["monitoring_alertmanager_listen_address"], int(s["monitoring_alertmanager_port"]))
    return {"prometheus": "--web.listen-address=%s --storage.tsdb.retention.time=%s%s"
                          % (prometheus, s["monitoring_retention"], web),
            "alertmanager": "--web.listen-address=%s --cluster.listen-address=%s" % (alertmanager, web)}


def own_urls(settings):
    """The readiness URLs of Prometheus and Alertmanager as Prometheus itself reaches them."""
    scheme = "https" if web_parts(settings)[0] else "http"
    return ["%s://%s/-/ready" % (scheme, _target(_own_address(settings[address]), int(settings[port])))
            for address, port, dummy in LISTENERS]


def prometheus_config(the_plan, hostvars, settings, monitor_host, credentials_file=""):
    """prometheus.yml as a mapping: global, alerting, rule_files, and the scrape configs, one static config per target
    with the labels dspark_group, dspark_host and dspark_rank (serving nodes) written by the collection."""
    s = settings
    heads = []
    for head in the_plan["heads"]:
        job = {"targets": [_target(head["address"], head["port"])],
               "labels": {"dspark_group": head["group"], "dspark_host": head["host"], "dspark_rank": "0"}}
        heads.append(job)
    nodes = []
    for host in the_plan["exporter_hosts"]:
        hvars = _group_model.host_vars(hostvars, host)
        labels = {"dspark_host": host}
        group = _group_model.get(hvars, "dspark_group", "")
        if host in _serving_hosts(the_plan) and group:
            labels["dspark_group"] = str(group)
            labels["dspark_rank"] = str(_group_model.get(hvars, "dspark_rank", ""))
        # node_exporter listens on the management address (node_exporter_args), the monitor's own one included.
        address = _address(hostvars, host)
        nodes.append({"targets": [_target(address, int(s["monitoring_node_exporter_port"]))], "labels": labels})
    routers = []
    for host in the_plan["routers"]:
        # HAProxy's exporter listens on 127.0.0.1 when the monitor is the router host (the default), else on the
        # router's management address (the router change in docs/design-monitoring.md).
        address = "127.0.0.1" if host == monitor_host else _address(hostvars, host)
        routers.append({"targets": [_target(address, int(s["monitoring_router_exporter_port"]))],
                        "labels": {"dspark_host": host}})
    head_job = {"job_name": "dspark_vllm", "metrics_path": "/metrics", "static_configs": heads}
    if credentials_file:
        head_job["authorization"] = {"type": "Bearer", "credentials_file": credentials_file}
    own_target = _target(_own_address(s["monitoring_prometheus_listen_address"]), int(s["monitoring_prometheus_port"]))
    scrape = [
        dict({"job_name": "prometheus", "static_configs": [{"targets": [own_target]}]}, **_own_access(s)),
        head_job,
        {"job_name": "dspark_node", "static_configs": nodes},
    ]
    alertmanager = _target(_own_address(s["monitoring_alertmanager_listen_address"]), int(s["monitoring_alertmanager_port"]))
    if routers:
        scrape.append({"job_name": "dspark_router", "metrics_path": "/metrics", "static_configs": routers})
    return {
        "global": {"scrape_interval": s["monitoring_scrape_interval"], "evaluation_interval": s["monitoring_evaluation_interval"],
                   "external_labels": {"monitor": monitor_host}},
        "alerting": {"alertmanagers": [dict({"static_configs": [{"targets": [alertmanager]}]}, **_own_access(s))]},
        "rule_files": [s["monitoring_rules_file"]],
        "scrape_configs": scrape,
    }


def _serving_hosts(the_plan):
    return [h for model in the_plan["groups"].values() for h in model["members"]]


# -- alert rules ---------------------------------------------------------------------------------------------------

def _num(value):
    number = float(value)
    return ("%d" % number) if number == int(number) else repr(number)


def _hosts_of(query=None):
    """An annotation's template listing the dspark_host labels of a query's series (of `.` inside a `with query`)."""
    source = "query `%s` | sortByLabel \"dspark_host\"" % query if query else ". | sortByLabel \"dspark_host\""
    return "{{ range $i, $s := %s }}{{ if $i }}, {{ end }}{{ $s.Labels.dspark_host }}{{ end }}" % source


def rules(settings):
    """The alert rules as a mapping (one rule group). Thresholds and `for` durations from the monitoring_alert_* values.
    Every metric name is one of METRIC_NAMES (tests check it)."""
    s = settings
    serving = "dspark_group, dspark_host"
    backend = s["monitoring_router_backend"]
    router_backend = "haproxy_backend_active_servers{job=\"dspark_router\",proxy=\"%s\"}" % backend
    able = _hosts_of("%s > 0" % router_backend)  # the routers that can take the service address
    alerts = [
        ("DsparkGroupNotServing",
         "max by (dspark_group) (up{job=\"dspark_vllm\"}) == 0"
         " or max by (dspark_group) (dspark_serve_api_healthy{job=\"dspark_node\"}) == 0",
         s["monitoring_alert_not_serving_for"], "critical",
         "group {{ $labels.dspark_group }} is not serving",
         "The head's vLLM /metrics does not answer, or its /health does not answer 200, for %s."
         % s["monitoring_alert_not_serving_for"]),
        ("DsparkRouterBackendNoServer",
         "haproxy_backend_active_servers{job=\"dspark_router\",proxy=\"%s\"} == 0" % s["monitoring_router_backend"],
         s["monitoring_alert_backend_for"], "critical",
         "router {{ $labels.dspark_host }}: backend {{ $labels.proxy }} has no server up",
         "No serving group is in rotation at the router: every request fails."),
        ("DsparkRouterAlone",
         # A router can take the service address when keepalived's check there passes: its HAProxy answers and a
         # server of the backend is UP. Seen from Prometheus: its exporter (HAProxy itself) answered the last scrape
         # (a failed scrape marks its series stale) and haproxy_backend_active_servers > 0 (the router role's
         # backend has no backup servers). count(up) is the inventory's routers, one target each. `or on() vector(0)`
         # makes it fire with no router able too: it must not resolve when the last router fails as well, and with
         # every HAProxy stopped no series is left for DsparkRouterBackendNoServer, so nothing else would fire.
         # Warning, not critical: with one router able the endpoint still serves, only the spare is gone. With none,
         # the critical alert is DsparkRouterBackendNoServer where the routers answer and see no server. No label
         # names the router left, so the alert stays the same one from one able router to none; the annotations
         # query the routers.
         "(count(%s > 0) or on() vector(0)) < 2 and on() count(up{job=\"dspark_router\"}) > 1" % router_backend,
         s["monitoring_alert_backend_for"], "warning",
         "{{ if eq $value 0.0 }}no router can take the service address: the fleet's endpoint is down{{ else }}only "
         "router " + able + " can take the service address: its next failure takes the fleet's endpoint down{{ end }}",
         "{{ with query `count(up{job=\"dspark_router\"})` }}{{ . | first | value }}{{ end }} routers (dspark_router) "
         "share the service address; one takes it when its HAProxy answers and sees a server of backend %s up "
         "(keepalived's check). {{ if eq $value 0.0 }}None can: the fleet's endpoint is down.{{ else }}Only " % backend
         + able + " can: the endpoint serves through it, but nothing takes the address over when it fails.{{ end }}"
         "{{ with query `up{job=\"dspark_router\"} == 0` }} Not answering (HAProxy stopped, the host down, or its "
         "exporter out of the monitor's reach): " + _hosts_of() + ".{{ end }}"
         "{{ with query `%s == 0` }} Seeing no server up: " % router_backend + _hosts_of() + ".{{ end }}"
         " Fix: bring the others back: `systemctl start haproxy` on each (keepalived follows it), or run "
         "playbooks/router.yml; one that sees no server fires DsparkRouterBackendNoServer (its way to the heads)."),
        ("DsparkRouterDown",
         # The router's HAProxy exporter does not answer: HAProxy stopped, the host down, or the exporter out of the
         # monitor's reach. With one router nothing else fires then (its series are gone, the groups still serve).
         "up{job=\"dspark_router\"} == 0",
         s["monitoring_alert_backend_for"], "critical",
         "router {{ $labels.dspark_host }} does not answer",
         "Its HAProxy exporter has not answered for %s: HAProxy is stopped, the host is down, or the monitor cannot "
         "reach the exporter (router_metrics_address, router_metrics_allowed_cidrs). With one router the fleet's "
         "endpoint is down; with several, DsparkRouterAlone says whether one is left. Fix: systemctl start haproxy "
         "there, or playbooks/router.yml." % s["monitoring_alert_backend_for"]),
        ("DsparkRankMissing",
         "min by (%s, dspark_rank) (dspark_serve_container_running{job=\"dspark_node\"}) == 0"
         " or min by (%s, dspark_rank) (up{job=\"dspark_node\",dspark_group!=\"\"}) == 0" % (serving, serving),
         s["monitoring_alert_rank_missing_for"], "critical",
         "group {{ $labels.dspark_group }}: rank {{ $labels.dspark_rank }} on {{ $labels.dspark_host }} is missing",
         "The rank's container is not running, or its node does not answer; a group serves only with every rank."),
        ("DsparkLmcacheDown",
         "min by (%s, dspark_rank) (dspark_lmcache_container_running{job=\"dspark_node\"}) == 0"
         " or min by (%s, dspark_rank) (dspark_lmcache_up{job=\"dspark_node\"}) == 0" % (serving, serving),
         s["monitoring_alert_rank_missing_for"], "critical",
         "group {{ $labels.dspark_group }}: the LMCache server on {{ $labels.dspark_host }} is down",
         "The node's LMCache server (serve_lmcache) is not running, or its /metrics on 127.0.0.1 does not answer. vLLM "
         "hangs without it: a store or lookup on that server blocks, the head waits lmcache.mp.mq_timeout (300 s) and "
         "then exits, and the supervisor (dspark-fleet watch) restarts the whole group."),
        ("DsparkKvCacheFull",
         "max by (dspark_group, model_name) (vllm:kv_cache_usage_perc{job=\"dspark_vllm\"}) > %s"
         % _num(s["monitoring_alert_kv_cache_usage"]),
         s["monitoring_alert_kv_cache_for"], "warning",
         "group {{ $labels.dspark_group }}: KV cache {{ $value | humanizePercentage }} full",
         "Above %s of the KV cache for %s: new requests wait or preempt running ones."
         % (_num(s["monitoring_alert_kv_cache_usage"]), s["monitoring_alert_kv_cache_for"])),
        ("DsparkRequestsWaitingGrowing",
         "sum by (dspark_group) (vllm:num_requests_waiting{job=\"dspark_vllm\"}) > %s"
         " and sum by (dspark_group) (delta(vllm:num_requests_waiting{job=\"dspark_vllm\"}[%s])) > 0"
         % (_num(s["monitoring_alert_waiting_requests"]), s["monitoring_alert_waiting_for"]),
         s["monitoring_alert_waiting_for"], "warning",
         "group {{ $labels.dspark_group }}: {{ $value }} requests waiting, and growing",
         "More than %s requests wait and the queue grew over %s."
         % (_num(s["monitoring_alert_waiting_requests"]), s["monitoring_alert_waiting_for"])),
        ("DsparkTtftP95High",
         "histogram_quantile(0.95, sum by (dspark_group, le) (rate(vllm:time_to_first_token_seconds_bucket{job=\"dspark_vllm\"}[5m])))"
         " > %s" % _num(s["monitoring_alert_ttft_p95_seconds"]),
         s["monitoring_alert_ttft_for"], "warning",
         "group {{ $labels.dspark_group }}: time to first token p95 {{ $value | humanizeDuration }}",
         "The 95th percentile of the time to first token over 5 minutes is above %s s."
         % _num(s["monitoring_alert_ttft_p95_seconds"])),
        ("DsparkHostMemoryLow",
         "node_memory_MemAvailable_bytes{job=\"dspark_node\"} < %s" % _num(s["monitoring_alert_memory_available_bytes"]),
         s["monitoring_alert_memory_for"], "critical",
         "{{ $labels.dspark_host }}: {{ $value | humanize1024 }}B of memory available",
         "Unified memory: the GPU's allocations come out of the same RAM, so little available memory means the next "
         "allocation may fail or the OOM killer may end a rank."),
        ("DsparkFabricLinkDown",
         "dspark_fabric_link_up{job=\"dspark_node\"} == 0",
         s["monitoring_alert_fabric_for"], "critical",
         "{{ $labels.dspark_host }}: fabric link {{ $labels.interface }} is down",
         "The ConnectX fabric link of the node is not up: NCCL between the ranks fails."),
        ("DsparkFabricMtu",
         "dspark_fabric_mtu_bytes{job=\"dspark_node\"} != %s" % _num(s["monitoring_alert_fabric_mtu"]),
         s["monitoring_alert_fabric_for"], "warning",
         "{{ $labels.dspark_host }}: fabric {{ $labels.interface }} MTU {{ $value }}",
         "The fabric's MTU is not %s (playbooks/fabric.yml sets it)." % _num(s["monitoring_alert_fabric_mtu"])),
        ("DsparkSupervisorAtCap",
         "dspark_supervisor_restarts_in_window{job=\"dspark_node\"} >= dspark_supervisor_restart_cap{job=\"dspark_node\"}"
         " or dspark_supervisor_group_failed{job=\"dspark_node\"} == 1",
         "0s", "critical",
         "the supervisor gave up on group {{ $labels.dspark_group }} or reached its restart cap",
         "dspark-fleet watch restarts a group at most supervisor_max_restarts times in its window; then it marks it "
         "failed and leaves it (docs/fleet.md)."),
    ]
    out = []
    for name, expr, duration, severity, summary, description in alerts:
        rule = {"alert": name, "expr": expr}
        if duration not in ("0s", "0m"):
            rule["for"] = duration
        rule["labels"] = {"severity": severity}
        rule["annotations"] = {"summary": summary, "description": description}
        out.append(rule)
    return {"groups": [{"name": "dspark", "rules": out}]}


ALERTS = ("DsparkGroupNotServing", "DsparkRouterBackendNoServer", "DsparkRouterAlone", "DsparkRouterDown", "DsparkRankMissing",
          "DsparkLmcacheDown", "DsparkKvCacheFull", "DsparkRequestsWaitingGrowing", "DsparkTtftP95High",
          "DsparkHostMemoryLow", "DsparkFabricLinkDown", "DsparkFabricMtu", "DsparkSupervisorAtCap")

# -- alertmanager.yml ----------------------------------------------------------------------------------------------


def alertmanager_config(settings):
    """alertmanager.yml as a mapping: the route and the receivers as given (they may hold secrets: never shown)."""
    return {"route": dict(settings["monitoring_alertmanager_route"]),
            "receivers": [dict(r) for r in settings["monitoring_alertmanager_receivers"]]}


# -- a node: its textfile collector and its node_exporter firewall -------------------------------------------------

def collector_config(groups, hostvars, host, settings):
    """The collector's JSON configuration on ``host``: what to read and where (the other roles' defaults where the
    inventory does not set them)."""
    hvars = _group_model.host_vars(hostvars, host)
    g = _group_model.get
    out = {"textfile_dir": settings["monitoring_textfile_dir"], "roles": []}
    if host in _hosts(groups, "dspark"):
        model = fleet(groups, hostvars).get(str(g(hvars, "dspark_group", "")), {"members": [host]})
        model_id = str(g(hvars, "dspark_model", ""))
        revision = str(g(hvars, "dspark_model_revision", ""))
        stamp = _checkpoint_paths.paths(model_id, revision, g(hvars, "checkpoint_manifest_dir"))["stamp"]
        rank = _group_model.as_int(g(hvars, "dspark_rank"))
        out["roles"].append("node")
        out["node"] = {
            "rank": rank, "group_size": len(model["members"]),
            "container": str(g(hvars, "serve_container_name", "dspark-vllm")),
            "compose_file": str(g(hvars, "serve_config_dir", "/etc/dspark/serve")).rstrip("/") + "/compose.yaml",
            "image": str(g(hvars, "dspark_image", "")),
            "api_port": _group_model.as_int(g(hvars, "dspark_api_port", DEFAULT_API_PORT)) if rank == 0 else None,
            "fabric_interface": str(g(hvars, "dspark_fabric_interface", "")),
            "fabric_hca": str(g(hvars, "dspark_fabric_hca", "")).split(",", maxsplit=1)[0].split(":", maxsplit=1)[0],
            "fabric_address": str(g(hvars, "dspark_fabric_address", "")),
            "checkpoint_stamp": stamp,
            "model": model_id, "revision": revision,
        }
        if _serve_lmcache.enabled({"serve_lmcache": g(hvars, "serve_lmcache", False)}):
            # The LMCache server beside the rank (serve_lmcache, issue #45): its HTTP port is on 127.0.0.1 only.
            out["node"]["lmcache"] = {
                "container": str(g(hvars, "serve_lmcache_container_name", DEFAULT_LMCACHE_CONTAINER)),
                "http_port": _group_model.as_int(g(hvars, "serve_lmcache_http_port", DEFAULT_LMCACHE_HTTP_PORT)),
            }
    if host in _hosts(groups, "dspark_supervisor"):
        out["roles"].append("supervisor")
        out["supervisor"] = {
            "journal": settings["monitoring_supervisor_journal"],
            "max_restarts": _group_model.as_int(g(hvars, "supervisor_max_restarts", 3)),
            "window_hours": float(g(hvars, "supervisor_window_hours", 6)),
            "groups": sorted(fleet(groups, hostvars)),
        }
    if host in _hosts(groups, "dspark_router"):
        out["roles"].append("router")
    if host in monitors(groups):
        out["roles"].append("monitor")
    return out


TABLE = "dspark_monitor"
NODE_EXPORTER_UNIT = "prometheus-node-exporter.service"
FIREWALL_UNIT = "dspark-monitor-firewall.service"


def firewall_unit(settings):
    """The boot unit that loads the table. Ordered before node_exporter's unit and required by it: node_exporter
    never starts without its table, at boot, when the package's postinst starts it, or when the table fails to load."""
    return _nft_boot_unit.unit("monitoring", TABLE, "node_exporter starts", [NODE_EXPORTER_UNIT],
                               "%s/firewall.nft" % str(settings["monitoring_config_dir"]).rstrip("/"))


def firewall(groups, hostvars, host, settings):
    """table inet dspark_monitor for ``host``: node_exporter's port from loopback and the monitor hosts only. Policy
    accept (other services and tables untouched); replaced atomically. {'ruleset', 'digest', 'allowed', 'table',
    'unit', 'unit_name'}: the boot unit too, whose digest the role compares with the node's file."""
    port = int(settings["monitoring_node_exporter_port"])
    allowed_v4, allowed_v6 = ["127.0.0.0/8"], ["::1"]
    for monitor in monitors(groups):
        addr = _ip(_address(hostvars, monitor))
        if addr is not None:
            target = allowed_v4 if addr.version == 4 else allowed_v6
            if str(addr) not in target:
                target.append(str(addr))
    lines = [
        "# dspark.cluster monitoring firewall of %s, generated by the monitoring role: edits are replaced." % host,
        "# node_exporter (port %d) from loopback and the monitor hosts only; other tables are untouched." % port,
        "table inet %s" % TABLE,
        "delete table inet %s" % TABLE,
        "table inet %s {" % TABLE,
        "\tset monitor_v4 {", "\t\ttype ipv4_addr", "\t\tflags interval",
        "\t\telements = { %s }" % ", ".join(allowed_v4), "\t}",
        "\tset monitor_v6 {", "\t\ttype ipv6_addr", "\t\tflags interval",
        "\t\telements = { %s }" % ", ".join(allowed_v6), "\t}",
        "\tchain input {",
        "\t\ttype filter hook input priority filter; policy accept;",
        '\t\tiif "lo" accept',
        "\t\ttcp dport %d ip saddr @monitor_v4 accept comment \"node_exporter from the monitor\"" % port,
        "\t\ttcp dport %d ip6 saddr @monitor_v6 accept comment \"node_exporter from the monitor\"" % port,
        "\t\ttcp dport %d drop comment \"node_exporter from anyone else\"" % port,
        "\t}",
        "}",
    ]
    ruleset = "\n".join(lines) + "\n"
    return {"ruleset": ruleset, "digest": hashlib.sha256(ruleset.encode("utf-8")).hexdigest(),
            "allowed": allowed_v4[1:] + allowed_v6[1:], "table": TABLE, "unit": firewall_unit(settings),
            "unit_name": FIREWALL_UNIT}


def node_exporter_args(groups, hostvars, host, settings):
    """ARGS of /etc/default/prometheus-node-exporter: listen on the host's management address (loopback on a monitor
    that is its own only target) and read the textfile directory."""
    address = _address(hostvars, host)
    listen = _target(address, int(settings["monitoring_node_exporter_port"])) if _ip(address) else \
        ":%d" % int(settings["monitoring_node_exporter_port"])
    return "--web.listen-address=%s --collector.textfile.directory=%s" % (listen, settings["monitoring_textfile_dir"])


# -- the dashboard -------------------------------------------------------------------------------------------------

METRIC_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# PromQL words that are not metric names (functions, aggregations, keywords, label names used in by/without).
PROMQL_WORDS = frozenset("""sum max min avg count rate irate increase delta deriv histogram_quantile by without on
ignoring group_left group_right and or unless bool le offset time vector scalar clamp_min clamp_max abs topk
bottomk label_replace absent""".split())


def expression_metrics(expr):
    """The metric names an expression reads (label matchers, strings, durations and label lists removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", text)
    names = set()
    for match in METRIC_RE.finditer(text):
        word = match.group(0)
        start = match.start()
        if word in PROMQL_WORDS or (start > 0 and (text[start - 1].isdigit() or text[start - 1] == ".")):
            continue
        if word.startswith("$"):
            continue
        names.add(word)
    return names


def base_name(name):
    """A metric name without a histogram suffix when its base is a known histogram."""
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name[:-len(suffix)] in VLLM_METRICS:
            return name[:-len(suffix)]
    return name


def dashboard_expressions(dashboard):
    """Every panel's (title, expr) of a Grafana dashboard mapping, rows' nested panels included."""
    out = []
    panels = list(dashboard.get("panels") or [])
    while panels:
        panel = panels.pop(0)
        panels += list(panel.get("panels") or [])
        for target in panel.get("targets") or []:
            if target.get("expr"):
                out.append((panel.get("title", ""), target["expr"]))
    return out


# -- one host's view (the filter's answer) -------------------------------------------------------------------------

def host_plan(groups, hostvars, settings, host, credentials_file="/etc/prometheus/dspark-head-token"):
    """Everything the role needs on ``host``; the configurations only when there is no problem."""
    the_plan = plan(groups, hostvars, settings)
    out = {key: the_plan[key] for key in ("problems", "monitors", "exporter_hosts", "heads", "routers")}
    out.update(prometheus={}, rules={}, collector={}, firewall={}, node_exporter_args="", router_exporter_address="",
               server_args={}, web={})
    if the_plan["problems"]:
        return out
    tls, users = web_parts(settings)
    # The web config itself is not part of the plan: its hashes stay in the no_log variable.
    out["web"] = dict(web_files(settings), on=bool(settings.get("monitoring_web_config")), tls=tls, basic_auth=bool(users),
                      urls=own_urls(settings))
    out["server_args"] = server_args(settings)
    token = settings.get("monitoring_head_bearer_token") or ""
    out["prometheus"] = prometheus_config(the_plan, hostvars, settings, host, credentials_file if token else "")
    out["rules"] = rules(settings)
    out["collector"] = collector_config(groups, hostvars, host, settings)
    out["firewall"] = firewall(groups, hostvars, host, settings)
    out["node_exporter_args"] = node_exporter_args(groups, hostvars, host, settings)
    out["router_exporter_address"] = "127.0.0.1" if host in the_plan["monitors"] else _address(hostvars, host)
    return out
