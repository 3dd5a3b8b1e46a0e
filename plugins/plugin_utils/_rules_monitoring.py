# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitoring role's input rules (private; issue #28): its monitoring_* values, each problem one line.

The monitoring role runs on a host outside the serving groups (dspark_monitor, else dspark_router), and its inputs
are one mapping of settings (the role's monitoring_* variables by name), so these rules are no ``@rule`` of a
serving group's member: plugin_utils._role_rules.check_settings("monitoring", settings) is their entry point, and
plugin_utils._monitoring_plan runs them first in its plan (the filter dspark.cluster.monitoring_plan). The numeric
thresholds' ranges are plugin_utils._spec_ranges'. Pure Python, no Ansible imports.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _spec_ranges

DURATION_RE = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+\Z")
FILE_RE = re.compile(r"^/[A-Za-z0-9_./-]+\Z")
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+\Z")
PORTS = ("monitoring_prometheus_port", "monitoring_alertmanager_port", "monitoring_node_exporter_port",
         "monitoring_router_exporter_port")
DURATIONS = ("monitoring_scrape_interval", "monitoring_evaluation_interval", "monitoring_retention",
             "monitoring_alert_not_serving_for", "monitoring_alert_rank_missing_for", "monitoring_alert_backend_for",
             "monitoring_alert_kv_cache_for", "monitoring_alert_waiting_for", "monitoring_alert_ttft_for",
             "monitoring_alert_memory_for", "monitoring_alert_fabric_for")
FILES = ("monitoring_config_dir", "monitoring_textfile_dir", "monitoring_supervisor_journal", "monitoring_rules_file")
LISTENERS = (("monitoring_prometheus_listen_address", "monitoring_prometheus_port", "Prometheus"),
             ("monitoring_alertmanager_listen_address", "monitoring_alertmanager_port", "Alertmanager"))
# The top-level keys of the web config file (Prometheus' exporter-toolkit), which both servers read.
WEB_KEYS = ("tls_server_config", "basic_auth_users", "http_server_config")
# Client certificate modes that would shut out Prometheus' own requests (its self-scrape, its alerts): they carry none.
WEB_CLIENT_CERT_REQUIRED = ("RequireAnyClientCert", "RequireAndVerifyClientCert")
BCRYPT_RE = re.compile(r"^\$2[aby]?\$[0-9]{2}\$[./A-Za-z0-9]{53}\Z")
WEB_FIX = ("set monitoring_web_config with tls_server_config (cert_file, key_file) and/or basic_auth_users (user: bcrypt "
           "hash, with monitoring_web_username and monitoring_web_password), or listen on 127.0.0.1")


def _problem(var, value, why, fix):
    return "%s=%r %s. Fix: %s" % (var, value, why, fix)


def _number(value):
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def as_port(value):
    """The TCP port (1-65535) a value stands for, else None."""
    if isinstance(value, bool) or not str(value).strip().isdigit():
        return None
    number = int(value)
    return number if 1 <= number <= 65535 else None


def check_settings(settings):
    """Problems of the monitoring_* values, each naming the variable, its value and the fix."""
    s = settings
    problems = []
    for name in PORTS:
        if as_port(s.get(name)) is None:
            problems.append(_problem(name, s.get(name), "is not a TCP port", "use 1-65535"))
    used = [s.get(name) for name in PORTS if as_port(s.get(name)) is not None]
    for name in PORTS:
        if as_port(s.get(name)) is not None and used.count(s.get(name)) > 1:
            problems.append(_problem(name, s.get(name), "is used by another monitoring port too", "give each its own port"))
    for name in DURATIONS:
        if not (isinstance(s.get(name), str) and DURATION_RE.match(s.get(name))):
            problems.append(_problem(name, s.get(name), "is not a Prometheus duration", "write e.g. 30s, 5m or 15d"))
    for name in FILES:
        if not (isinstance(s.get(name), str) and FILE_RE.match(s.get(name))):
            problems.append(_problem(name, s.get(name), "is not an absolute path of letters, digits and _ . / -",
                                     "use a plain absolute path"))
    for name in ("monitoring_prometheus_listen_address", "monitoring_alertmanager_listen_address"):
        try:
            ipaddress.ip_address(str(s.get(name)))
        except ValueError:
            problems.append(_problem(name, s.get(name), "is not an IP address", "use 127.0.0.1 (the default)"))
    usage = _number(s.get("monitoring_alert_kv_cache_usage"))
    if usage is None or not _spec_ranges.within(usage, "monitoring_alert_kv_cache_usage"):
        problems.append(_problem("monitoring_alert_kv_cache_usage", s.get("monitoring_alert_kv_cache_usage"),
                                 "is not a fraction in (0, 1] (vllm:kv_cache_usage_perc is 1 at 100 %)", "write e.g. 0.95"))
    for name in ("monitoring_alert_waiting_requests", "monitoring_alert_ttft_p95_seconds",
                 "monitoring_alert_memory_available_bytes", "monitoring_alert_fabric_mtu"):
        value = _number(s.get(name))
        if value is None or not _spec_ranges.within(value, name):
            problems.append(_problem(name, s.get(name), "is not a number above %g" % _spec_ranges.RANGES[name].low,
                                     "write a positive number"))
    interval = s.get("monitoring_collector_interval")
    if isinstance(interval, bool) or not isinstance(interval, int) or not _spec_ranges.within(interval, "monitoring_collector_interval"):
        problems.append(_problem("monitoring_collector_interval", interval, "is not a whole number of seconds >= %d"
                                 % _spec_ranges.RANGES["monitoring_collector_interval"].low, "write e.g. 30"))
    receivers = s.get("monitoring_alertmanager_receivers")
    names = [r.get("name") for r in receivers if isinstance(r, dict)] if isinstance(receivers, list) else []
    if not isinstance(receivers, list) or not receivers or len(names) != len(receivers) or not all(
            isinstance(n, str) and NAME_RE.match(n) for n in names):
        problems.append(_problem("monitoring_alertmanager_receivers", "(not shown: receivers may hold secrets)",
                                 "is not a non-empty list of Alertmanager receivers, each with a name of letters, digits and _ . -",
                                 "e.g. [{name: default}] or [{name: ops, webhook_configs: [{url: https://...}]}]"))
    route = s.get("monitoring_alertmanager_route")
    if not isinstance(route, dict) or route.get("receiver") not in names:
        problems.append(_problem("monitoring_alertmanager_route", route, "does not name one of the receivers as its receiver",
                                 "set receiver: to the name of one of monitoring_alertmanager_receivers"))
    token = s.get("monitoring_head_bearer_token")
    if not isinstance(token, str) or re.search(r"\s", token):
        problems.append(_problem("monitoring_head_bearer_token", "(not shown)", "is not one word", "remove white space"))
    return problems + check_web(s)


def check_web(settings):
    """Problems of monitoring_web_config, monitoring_web_username and monitoring_web_password, and of a listener
    beyond loopback without TLS or basic auth. The hashes and the password are never shown."""
    s = settings
    problems = []
    web = s.get("monitoring_web_config")
    if web is None or web == "":
        web = {}
    if not isinstance(web, dict):
        return [_problem("monitoring_web_config", "(not shown)", "is not a mapping", "write a mapping such as "
                         "{tls_server_config: {cert_file: /etc/ssl/mon.crt, key_file: /etc/ssl/private/mon.key}}")]
    unknown = sorted(str(key) for key in web if key not in WEB_KEYS)
    if unknown:
        problems.append(_problem("monitoring_web_config", "(keys %s)" % ", ".join(unknown), "holds keys the web config "
                                 "does not know", "use only %s" % ", ".join(WEB_KEYS)))
    tls = web.get("tls_server_config")
    if tls is not None:
        if not isinstance(tls, dict) or not all(isinstance(tls.get(k), str) and FILE_RE.match(tls.get(k))
                                                for k in ("cert_file", "key_file")):
            problems.append(_problem("monitoring_web_config.tls_server_config", tls if isinstance(tls, dict) else "(not shown)",
                                     "does not name cert_file and key_file as plain absolute paths",
                                     "give both, as files on the monitor host readable by user prometheus"))
        elif tls.get("client_auth_type") in WEB_CLIENT_CERT_REQUIRED:
            problems.append(_problem("monitoring_web_config.tls_server_config.client_auth_type", tls["client_auth_type"],
                                     "would refuse Prometheus' own requests (its self-scrape and its alerts to "
                                     "Alertmanager carry no client certificate)", "use VerifyClientCertIfGiven, or basic auth"))
    users = web.get("basic_auth_users")
    if users is not None:
        if not isinstance(users, dict) or not users or not all(
                isinstance(name, str) and name and ":" not in name and isinstance(hashed, str) and BCRYPT_RE.match(hashed)
                for name, hashed in users.items()):
            problems.append(_problem("monitoring_web_config.basic_auth_users", "(not shown)", "is not a mapping of user "
                                     "names (no colon) to bcrypt hashes", "write e.g. {grafana: '$2y$12$...'}, each hash "
                                     "from `htpasswd -nBC 12 \"\" | tr -d ':\\n'`"))
    names = sorted(users) if isinstance(users, dict) else []
    username, password = s.get("monitoring_web_username"), s.get("monitoring_web_password")
    if names:
        # Prometheus reaches its own listener and Alertmanager's with this user (password_file, trimmed when read).
        if username not in names:
            problems.append(_problem("monitoring_web_username", username, "is not one of basic_auth_users (%s), and "
                                     "Prometheus' self-scrape and alerts need a user" % ", ".join(names),
                                     "name the user Prometheus itself authenticates as"))
        if not isinstance(password, str) or not password or password != password.strip():
            problems.append(_problem("monitoring_web_password", "(not shown)", "is empty or begins or ends with white "
                                     "space", "set the password of monitoring_web_username (the plain text of its hash)"))
    elif username or password:
        problems.append(_problem("monitoring_web_username" if username else "monitoring_web_password",
                                 username if username else "(not shown)", "is set but monitoring_web_config has no "
                                 "basic_auth_users", "add the user to basic_auth_users, or leave it empty"))
    has_tls, has_users = isinstance(tls, dict) and bool(tls), bool(names)
    for name, port, server in LISTENERS:
        addr = as_ip(str(s.get(name)))
        if addr is not None and not addr.is_loopback and not (has_tls or has_users):
            problems.append(_problem(name, s.get(name), "is not a loopback address, and monitoring_web_config sets neither "
                                     "TLS nor basic auth: anyone who reaches port %s would use %s without a password"
                                     % (s.get(port), server), WEB_FIX))
    return problems


def as_ip(text):
    """The IP address ``text`` is, else None."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
