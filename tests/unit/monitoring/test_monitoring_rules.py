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


def R(host, metric, values, proxy="dspark"):  # a router's series: its target's up, or its backend's active servers
    if metric == "up":
        return _series("up", {"job": "dspark_router", "dspark_host": host}, values)
    return _series("haproxy_backend_active_servers", {"job": "dspark_router", "proxy": proxy, "dspark_host": host}, values)


# Each alert: input series, then (eval_time, expected alerts' labels) pairs: an empty list means "does not fire"; or a
# list of such scenarios (each its own promtool test: its own fleet). A target that stops answering: up 0 and its
# series `stale` (what Prometheus writes after a failed scrape), then absent.
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
    "DsparkRouterAlone": [
        # Two routers, both seeing a server (their stats proxy's 0 does not count): no alert.
        ([R("r1", "up", "1x10"), R("r2", "up", "1x10"), R("r1", "active", "2x10"), R("r2", "active", "1x10"),
          R("r2", "active", "0x10", proxy="stats")],
         [("3m", []), ("8m", [])]),
        # r2's HAProxy stops at 3m (its target down, its series stale then absent) and is back at 9m.
        ([R("r1", "up", "1x14"), R("r2", "up", "1 1 1 0x5 1x5"), R("r1", "active", "2x14"),
          R("r2", "active", "2 2 2 stale _x5 2x5")],
         [("2m", []), ("3m", []), ("5m", [{}]), ("8m", [{}]), ("10m", [])]),
        # r2 answers but sees no server of the backend from 3m: it cannot take the address.
        ([R("r1", "up", "1x12"), R("r2", "up", "1x12"), R("r1", "active", "2x12"), R("r2", "active", "2 2 2 0x9")],
         [("3m", []), ("5m", [{}])]),
        # Three routers: r3 stops answering at 2m, r2 loses its servers at 4m: one left from then.
        ([R("r1", "up", "1x10"), R("r2", "up", "1x10"), R("r3", "up", "1 1 0x8"), R("r1", "active", "2x10"),
          R("r2", "active", "2 2 2 2 0x6"), R("r3", "active", "2 2 stale")],
         [("4m", []), ("7m", [{}])]),
        # None left: r2 down from 2m, r1's backend empty from 6m. It keeps firing through (it does not resolve when
        # the last router fails too).
        ([R("r1", "up", "1x12"), R("r2", "up", "1 1 0x10"), R("r1", "active", "2 2 2 2 2 2 0x6"),
          R("r2", "active", "2 2 stale")],
         [("2m", []), ("4m", [{}]), ("6m", [{}]), ("10m", [{}])]),
        # A fleet of one router (one target): never this alert, whether it sees a server or not (an empty backend
        # is DsparkRouterBackendNoServer's).
        ([R("r1", "up", "1x10"), R("r1", "active", "2x10")], [("5m", [])]),
        ([R("r1", "up", "1x10"), R("r1", "active", "2 0x9")], [("5m", [])]),
    ],
    "DsparkRouterDown": [
        # One router (the lone endpoint) whose HAProxy stops at 3m: its target down; r2 of another fleet keeps up.
        ([R("r1", "up", "1 1 1 0x8"), R("r2", "up", "1x11")],
         [("2m", []), ("3m", []), ("5m", [{"job": "dspark_router", "dspark_host": "r1"}])]),
        # Back after a blip shorter than the `for` duration: no alert.
        ([R("r1", "up", "1 1 1 0 1x8")], [("4m", []), ("8m", [])]),
    ],
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
    scenarios = CASES[alert] if isinstance(CASES[alert], list) else [CASES[alert]]
    severity = next(r["labels"]["severity"] for r in mp.rules(settings)["groups"][0]["rules"] if r["alert"] == alert)
    evals = [pair for dummy, scenario_evals in scenarios for pair in scenario_evals]
    assert any(not pair[1] for pair in evals) and any(pair[1] for pair in evals)
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [{"eval_time": when, "alertname": alert,
                             "exp_alerts": [{"exp_labels": dict(labels, severity=severity)} for labels in expected]}
                            for when, expected in scenario_evals]} for series, scenario_evals in scenarios]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    run([PROMTOOL, "test", "rules", "test.yml"], tmp_path)


@needs_promtool
def test_router_alone_names_the_routers(tmp_path):
    """DsparkRouterAlone's summary and description as Alertmanager gets them: the router left, the others and why."""
    rule = next(r for r in mp.rules(defaults())["groups"][0]["rules"] if r["alert"] == "DsparkRouterAlone")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "dspark", "rules": [rule]}]}, sort_keys=False))
    fix = (" Fix: bring the others back: `systemctl start haproxy` on each (keepalived follows it), or run "
           "playbooks/router.yml; one that sees no server fires DsparkRouterBackendNoServer (its way to the heads).")
    check = ("share the service address; one takes it when its HAProxy answers and sees a server of backend dspark up "
             "(keepalived's check).")
    one_left = {
        "summary": "only router r1 can take the service address: its next failure takes the fleet's endpoint down",
        "description": "3 routers (dspark_router) " + check + " Only r1 can: the endpoint serves through it, but nothing "
                       "takes the address over when it fails. Not answering (HAProxy stopped, the host down, or its "
                       "exporter out of the monitor's reach): r3. Seeing no server up: r2." + fix}
    none_left = {
        "summary": "no router can take the service address: the fleet's endpoint is down",
        "description": "2 routers (dspark_router) " + check + " None can: the fleet's endpoint is down. Seeing no server "
                       "up: r1, r2." + fix}
    tests = [
        ([R("r1", "up", "1x10"), R("r2", "up", "1x10"), R("r3", "up", "1 1 0x8"), R("r1", "active", "2x10"),
          R("r2", "active", "2 2 0x8"), R("r3", "active", "2 2 stale")], one_left),
        ([R("r1", "up", "1x10"), R("r2", "up", "1x10"), R("r1", "active", "2 2 0x8"), R("r2", "active", "2 2 0x8")],
         none_left),
    ]
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series, "alert_rule_test": [{
            "eval_time": "5m", "alertname": "DsparkRouterAlone",
            "exp_alerts": [{"exp_labels": {"severity": "warning"}, "exp_annotations": annotations}]}]}
        for series, annotations in tests]}
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
