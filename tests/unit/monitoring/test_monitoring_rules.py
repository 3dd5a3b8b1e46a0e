"""The monitoring role's alert rules, prometheus.yml, alertmanager.yml and dashboard, checked by Prometheus' own
tools: `promtool test rules` proves every alert firing and not firing, `promtool check config` / `check rules` and
`amtool check-config` accept the generated files. Skipped (with the reason) only where promtool/amtool are absent
(tests/ci/prereqs.sh test installs the prometheus package)."""

import json
import shutil
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from monitoring_fixtures import ROLE, defaults, fleet  # noqa: E402

from ansible_collections.dspark.cluster.plugins.plugin_utils import _monitoring_plan as mp  # noqa: E402

PROMTOOL = shutil.which("promtool")
AMTOOL = shutil.which("amtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus; "
                                                             "tests/ci/prereqs.sh test installs it)")


def run(argv, cwd):
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _series(name, labels, values):
    text = ",".join('%s="%s"' % item for item in sorted(labels.items()))
    return {"series": "%s{%s}" % (name, text), "values": values}


def A(group, host=None, **extra):  # labels of a scraped series
    out = {"dspark_group": group} if group else {}
    if host:
        out["dspark_host"] = host
    out.update(extra)
    return out


# Each alert: input series, then (eval_time, expected alerts' labels) pairs: an empty list means "does not fire".
CASES = {
    "DsparkGroupNotServing": (
        [_series("up", A("pair_a", "a0", job="dspark_vllm"), "1 1 1 0x10"),
         _series("up", A("pair_b", "b0", job="dspark_vllm"), "1x14"),
         _series("dspark_serve_api_healthy", A("pair_b", "b0", job="dspark_node"), "1 1 1 1 1 0x10"),
         _series("dspark_serve_api_healthy", A("pair_a", "a0", job="dspark_node"), "1x14")],
        [("4m", []), ("6m", [{"dspark_group": "pair_a"}]),
         ("9m", [{"dspark_group": "pair_a"}, {"dspark_group": "pair_b"}])]),
    "DsparkRouterBackendNoServer": (
        [_series("haproxy_backend_active_servers", {"job": "dspark_router", "proxy": "dspark", "dspark_host": "router"}, "2 2 2 0x10"),
         _series("haproxy_backend_active_servers", {"job": "dspark_router", "proxy": "stats", "dspark_host": "router"}, "0x14")],
        [("3m", []), ("5m", [{"job": "dspark_router", "proxy": "dspark", "dspark_host": "router"}])]),
    "DsparkRankMissing": (
        [_series("dspark_serve_container_running", A("pair_a", "a1", job="dspark_node", dspark_rank="1"), "1 1 0x10"),
         _series("dspark_serve_container_running", A("pair_a", "a0", job="dspark_node", dspark_rank="0"), "1x12"),
         _series("up", A("pair_b", "b1", job="dspark_node", dspark_rank="1"), "1 1 1 1 0x10"),
         _series("up", A(None, "router", job="dspark_node"), "0x12")],
        [("2m", []), ("5m", [{"dspark_group": "pair_a", "dspark_host": "a1", "dspark_rank": "1"}]),
         ("8m", [{"dspark_group": "pair_a", "dspark_host": "a1", "dspark_rank": "1"},
                 {"dspark_group": "pair_b", "dspark_host": "b1", "dspark_rank": "1"}])]),
    "DsparkLmcacheDown": (
        # a0's server container stops; a1's runs but its /metrics stops answering; b0's stays healthy.
        [_series("dspark_lmcache_container_running", A("pair_a", "a0", job="dspark_node", dspark_rank="0"), "1 1 0x10"),
         _series("dspark_lmcache_up", A("pair_a", "a0", job="dspark_node", dspark_rank="0"), "1 1 0x10"),
         _series("dspark_lmcache_container_running", A("pair_a", "a1", job="dspark_node", dspark_rank="1"), "1x14"),
         _series("dspark_lmcache_up", A("pair_a", "a1", job="dspark_node", dspark_rank="1"), "1 1 1 1 0x10"),
         _series("dspark_lmcache_container_running", A("pair_b", "b0", job="dspark_node", dspark_rank="0"), "1x14"),
         _series("dspark_lmcache_up", A("pair_b", "b0", job="dspark_node", dspark_rank="0"), "1x14")],
        [("3m", []), ("5m", [{"dspark_group": "pair_a", "dspark_host": "a0", "dspark_rank": "0"}]),
         ("8m", [{"dspark_group": "pair_a", "dspark_host": "a0", "dspark_rank": "0"},
                 {"dspark_group": "pair_a", "dspark_host": "a1", "dspark_rank": "1"}])]),
    "DsparkKvCacheFull": (
        [_series("vllm:kv_cache_usage_perc", A("pair_a", "a0", job="dspark_vllm", model_name="m", engine="0"), "0.5 0.96x12"),
         _series("vllm:kv_cache_usage_perc", A("pair_b", "b0", job="dspark_vllm", model_name="m", engine="0"), "0.96 0.96 0.96 0.5x10"),
         _series("vllm:kv_cache_usage_perc", A("pair_c", "c0", job="dspark_vllm", model_name="m", engine="0"), "0.95x13")],
        [("4m", []), ("8m", [{"dspark_group": "pair_a", "model_name": "m"}])]),
    "DsparkRequestsWaitingGrowing": (
        [_series("vllm:num_requests_waiting", A("pair_a", "a0", job="dspark_vllm", model_name="m", engine="0"), "0+1x30"),
         _series("vllm:num_requests_waiting", A("pair_b", "b0", job="dspark_vllm", model_name="m", engine="0"), "5x30"),
         _series("vllm:num_requests_waiting", A("pair_c", "c0", job="dspark_vllm", model_name="m", engine="0"), "0x30")],
        [("5m", []), ("25m", [{"dspark_group": "pair_a"}])]),
    "DsparkTtftP95High": (
        # pair_a: every first token between 10 and 20 s (p95 about 19.5 s); pair_b: all under 1 s.
        [_series("vllm:time_to_first_token_seconds_bucket", A("pair_a", "a0", job="dspark_vllm", le=le), vals)
         for le, vals in (("1.0", "0x40"), ("10.0", "0x40"), ("20.0", "0+10x40"), ("+Inf", "0+10x40"))]
        + [_series("vllm:time_to_first_token_seconds_bucket", A("pair_b", "b0", job="dspark_vllm", le=le), "0+10x40")
           for le in ("1.0", "10.0", "20.0", "+Inf")],
        [("8m", []), ("25m", [{"dspark_group": "pair_a"}])]),
    "DsparkHostMemoryLow": (
        [_series("node_memory_MemAvailable_bytes", A("pair_a", "a0", job="dspark_node"), "16e9 16e9 4e9x20"),
         _series("node_memory_MemAvailable_bytes", A("pair_a", "a1", job="dspark_node"), "16e9x22")],
        [("5m", []), ("10m", [{"dspark_group": "pair_a", "dspark_host": "a0", "job": "dspark_node"}])]),
    "DsparkFabricLinkDown": (
        [_series("dspark_fabric_link_up", A("pair_a", "a0", job="dspark_node", interface="enp1"), "1 1 0x10"),
         _series("dspark_fabric_link_up", A("pair_a", "a1", job="dspark_node", interface="enp1"), "1x12")],
        [("3m", []), ("6m", [{"dspark_group": "pair_a", "dspark_host": "a0", "job": "dspark_node", "interface": "enp1"}])]),
    "DsparkFabricMtu": (
        [_series("dspark_fabric_mtu_bytes", A("pair_a", "a0", job="dspark_node", interface="enp1"), "9000 9000 1500x10"),
         _series("dspark_fabric_mtu_bytes", A("pair_a", "a1", job="dspark_node", interface="enp1"), "9000x12")],
        [("3m", []), ("6m", [{"dspark_group": "pair_a", "dspark_host": "a0", "job": "dspark_node", "interface": "enp1"}])]),
    "DsparkSupervisorAtCap": (
        [_series("dspark_supervisor_restarts_in_window", A("pair_a", "ctl", job="dspark_node"), "0 1 2 3x5"),
         _series("dspark_supervisor_restart_cap", A("pair_a", "ctl", job="dspark_node"), "3x8"),
         _series("dspark_supervisor_restarts_in_window", A("pair_b", "ctl", job="dspark_node"), "0 1 1 1x5"),
         _series("dspark_supervisor_restart_cap", A("pair_b", "ctl", job="dspark_node"), "3x8"),
         _series("dspark_supervisor_group_failed", A("pair_b", "ctl", job="dspark_node"), "0 0 0 0 0 1x3")],
        [("2m", []), ("3m", [{"dspark_group": "pair_a", "dspark_host": "ctl", "job": "dspark_node"}]),
         ("6m", [{"dspark_group": "pair_a", "dspark_host": "ctl", "job": "dspark_node"},
                 {"dspark_group": "pair_b", "dspark_host": "ctl", "job": "dspark_node"}])]),
}


def _rules_without_annotations(settings):
    """The rules as generated, annotations dropped: promtool compares annotations exactly, and their text is not what
    these tests prove (the full file, annotations included, passes `promtool check rules` below)."""
    rules = mp.rules(settings)
    for rule in rules["groups"][0]["rules"]:
        rule.pop("annotations", None)
    return rules


def test_every_alert_of_the_issue_has_a_case():
    names = [rule["alert"] for rule in mp.rules(defaults())["groups"][0]["rules"]]
    assert names == list(mp.ALERTS) and sorted(CASES) == sorted(mp.ALERTS)


def test_every_name_in_the_rules_is_a_known_metric():
    for rule in mp.rules(defaults())["groups"][0]["rules"]:
        names = {mp.base_name(n) for n in mp.expression_metrics(rule["expr"])}
        assert names and names <= mp.METRIC_NAMES, (rule["alert"], names - mp.METRIC_NAMES)


@needs_promtool
def test_promtool_accepts_the_full_rules_file(tmp_path):
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(mp.rules(defaults()), sort_keys=False))
    run([PROMTOOL, "check", "rules", "rules.yml"], tmp_path)


@needs_promtool
@pytest.mark.parametrize("alert", sorted(CASES))
def test_alert_fires_and_does_not_fire(tmp_path, alert):
    settings = defaults()
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(_rules_without_annotations(settings), sort_keys=False))
    series, evals = CASES[alert]
    severity = next(r["labels"]["severity"] for r in mp.rules(settings)["groups"][0]["rules"] if r["alert"] == alert)
    assert any(not pair[1] for pair in evals) and any(pair[1] for pair in evals)
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [{"eval_time": when, "alertname": alert,
                             "exp_alerts": [{"exp_labels": dict(labels, severity=severity)} for labels in expected]}
                            for when, expected in evals]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    run([PROMTOOL, "test", "rules", "test.yml"], tmp_path)


@needs_promtool
def test_thresholds_come_from_the_variables(tmp_path):
    settings = dict(defaults(), monitoring_alert_fabric_mtu=1500, monitoring_alert_fabric_for="1m")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(_rules_without_annotations(settings), sort_keys=False))
    series = [_series("dspark_fabric_mtu_bytes", A("pair_a", "a0", job="dspark_node", interface="enp1"), "9000x5")]
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series, "alert_rule_test": [{
            "eval_time": "4m", "alertname": "DsparkFabricMtu", "exp_alerts": [{"exp_labels": {
                "dspark_group": "pair_a", "dspark_host": "a0", "job": "dspark_node", "interface": "enp1",
                "severity": "warning"}}]}]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    run([PROMTOOL, "test", "rules", "test.yml"], tmp_path)


@needs_promtool
@pytest.mark.parametrize("token", ["", "scrape-token"])
def test_promtool_accepts_the_generated_prometheus_yml(tmp_path, token):
    groups, hostvars = fleet()
    settings = dict(defaults(), monitoring_rules_file=str(tmp_path / "rules.yml"), monitoring_head_bearer_token=token)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(mp.rules(settings), sort_keys=False))
    (tmp_path / "token").write_text("scrape-token\n")
    out = mp.host_plan(groups, hostvars, settings, "router", credentials_file=str(tmp_path / "token"))
    assert out["problems"] == []
    text = yaml.safe_dump(out["prometheus"], sort_keys=False)
    assert "scrape-token" not in text
    (tmp_path / "prometheus.yml").write_text(text)
    run([PROMTOOL, "check", "config", "prometheus.yml"], tmp_path)


@pytest.mark.skipif(AMTOOL is None, reason="amtool not installed (Debian package prometheus-alertmanager)")
def test_amtool_accepts_the_generated_alertmanager_yml(tmp_path):
    settings = dict(defaults(), monitoring_alertmanager_receivers=[
        {"name": "default"}, {"name": "ops", "webhook_configs": [{"url": "https://hooks.example.net/x"}]}])
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(mp.alertmanager_config(settings), sort_keys=False))
    run([AMTOOL, "check-config", "alertmanager.yml"], tmp_path)


def _dashboard():
    return json.loads((ROLE / "files" / "dspark-fleet-dashboard.json").read_text(encoding="utf-8"))


def test_the_dashboard_reads_only_known_metrics_and_covers_the_issue():
    exprs = mp.dashboard_expressions(_dashboard())
    assert len(exprs) >= 20
    used = set()
    for title, expr in exprs:
        names = {mp.base_name(n) for n in mp.expression_metrics(expr)}
        assert names and names <= mp.METRIC_NAMES, (title, names - mp.METRIC_NAMES)
        used |= names
    for wanted in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                   "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds", "vllm:generation_tokens_total",
                   "node_memory_MemAvailable_bytes", "node_network_receive_bytes_total", "dspark_fabric_link_up",
                   "dspark_lmcache_lookup_hit_tokens_total", "dspark_lmcache_lookup_requested_tokens_total",
                   "dspark_lmcache_l2_usage_bytes"):
        assert wanted in used, wanted


@needs_promtool
def test_every_dashboard_query_parses(tmp_path):
    """Each panel query as a recording rule (Grafana's $group replaced by a regex) through `promtool check rules`."""
    rules = [{"record": "dspark:panel_%d" % i, "expr": expr.replace("$group", ".*")}
             for i, (_title, expr) in enumerate(mp.dashboard_expressions(_dashboard()))]
    (tmp_path / "panels.yml").write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    run([PROMTOOL, "check", "rules", "panels.yml"], tmp_path)
