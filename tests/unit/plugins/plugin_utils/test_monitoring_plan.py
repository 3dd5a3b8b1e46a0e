"""plugin_utils._monitoring_plan and the filter dspark.cluster.monitoring_plan: the fleet seen by the monitor, the
input problems (each naming variable, value and fix), the node firewall, the collector's configuration."""

import copy
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "monitoring"))
from monitoring_fixtures import defaults, fleet  # noqa: E402

from ansible_collections.dspark.cluster.plugins.filter.monitoring_plan import monitoring_plan  # noqa: E402
from ansible_collections.dspark.cluster.plugins.plugin_utils import _monitoring_plan as mp  # noqa: E402


def test_defaults_have_no_problem_and_the_router_is_the_monitor():
    groups, hostvars = fleet()
    out = monitoring_plan(hostvars, groups, defaults(), "router")
    assert out["problems"] == []
    assert out["monitors"] == ["router"]
    assert out["exporter_hosts"] == ["a0", "a1", "b0", "b1", "router", "ctl"]
    assert [(h["group"], h["host"], h["address"], h["port"]) for h in out["heads"]] == [
        ("pair_a", "a0", "192.0.2.1", 8888), ("pair_b", "b0", "192.0.2.3", 8000)]


def test_prometheus_scrapes_heads_nodes_and_the_router_exporter_on_loopback():
    groups, hostvars = fleet()
    config = monitoring_plan(hostvars, groups, defaults(), "router")["prometheus"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert [c["targets"] for c in jobs["dspark_vllm"]["static_configs"]] == [["192.0.2.1:8888"], ["192.0.2.3:8000"]]
    assert jobs["dspark_vllm"]["static_configs"][0]["labels"] == {"dspark_group": "pair_a", "dspark_host": "a0", "dspark_rank": "0"}
    assert "authorization" not in jobs["dspark_vllm"]
    assert jobs["dspark_router"]["static_configs"] == [{"targets": ["127.0.0.1:8405"], "labels": {"dspark_host": "router"}}]
    nodes = {c["labels"]["dspark_host"]: c for c in jobs["dspark_node"]["static_configs"]}
    assert nodes["a1"] == {"targets": ["192.0.2.2:9100"], "labels": {"dspark_host": "a1", "dspark_group": "pair_a", "dspark_rank": "1"}}
    assert nodes["ctl"]["labels"] == {"dspark_host": "ctl"}
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]


def test_a_token_goes_to_a_file_never_into_the_plan():
    groups, hostvars = fleet()
    out = monitoring_plan(hostvars, groups, dict(defaults(), monitoring_head_bearer_token="s3cret-token"), "router")
    assert out["prometheus"]["scrape_configs"][1]["authorization"] == {
        "type": "Bearer", "credentials_file": "/etc/prometheus/dspark-head-token"}
    assert "s3cret-token" not in repr(out)


def test_a_dedicated_monitor_outside_the_api_allowlist_is_refused_with_the_fix():
    groups, hostvars = fleet()
    groups["dspark_monitor"] = ["mon"]
    hostvars["mon"] = {"ansible_host": "192.0.2.50"}
    problems = mp.plan(groups, hostvars, defaults())["problems"]
    assert len(problems) == 2 and all("serve_api_allowed_cidrs" in p and "192.0.2.50/32" in p for p in problems)
    for head in ("a0", "b0"):
        hostvars[head]["serve_api_allowed_cidrs"] = ["192.0.2.0/24"]
    assert mp.plan(groups, hostvars, defaults())["problems"] == []
    hostvars["a0"]["serve_api_allowed_cidrs"] = []
    hostvars["a0"]["serve_firewall"] = False
    assert mp.plan(groups, hostvars, defaults())["problems"] == []


def test_no_monitor_host_and_bad_fleet_shapes():
    groups, hostvars = fleet()
    groups["dspark_router"] = []
    hostvars["b1"]["dspark_rank"] = 0
    problems = mp.plan(groups, hostvars, defaults())["problems"]
    assert any(p.startswith("no monitor host") and "dspark_monitor" in p for p in problems)
    assert any("group pair_b has 2 hosts of dspark_rank 0" in p for p in problems)
    groups, hostvars = fleet()
    groups["dspark_monitor"] = ["a0"]
    hostvars["a0"]["serve_api_allowed_cidrs"] = ["192.0.2.0/24"]
    hostvars["b0"]["serve_api_allowed_cidrs"] = ["192.0.2.0/24"]
    assert any("a0 is in dspark_monitor and in a serving group" in p for p in mp.plan(groups, hostvars, defaults())["problems"])
    groups, hostvars = fleet()
    hostvars["router"]["ansible_host"] = "router.example.net"
    assert any("not an IP address" in p for p in mp.plan(groups, hostvars, defaults())["problems"])


@pytest.mark.parametrize("name, value, words", [
    ("monitoring_prometheus_port", 0, "is not a TCP port"),
    ("monitoring_node_exporter_port", 9090, "used by another monitoring port"),
    ("monitoring_retention", "15 days", "is not a Prometheus duration"),
    ("monitoring_textfile_dir", "relative/dir", "is not an absolute path"),
    ("monitoring_prometheus_listen_address", "localhost", "is not an IP address"),
    ("monitoring_alert_kv_cache_usage", 95, "is not a fraction"),
    ("monitoring_alert_ttft_p95_seconds", 0, "is not a number above"),
    ("monitoring_collector_interval", 1, "whole number of seconds"),
    ("monitoring_alertmanager_route", {"receiver": "nobody"}, "does not name one of the receivers"),
    ("monitoring_head_bearer_token", "two words", "is not one word"),
])
def test_each_bad_value_names_variable_value_and_fix(name, value, words):
    problems = mp.check_settings(dict(defaults(), **{name: value}))
    assert len(problems) >= 1 and all("Fix:" in p for p in problems)
    assert any(p.startswith(name + "=") and words in p for p in problems), problems
    if name == "monitoring_head_bearer_token":
        assert "two words" not in " ".join(problems)


def test_receivers_are_checked_without_being_shown():
    problems = mp.check_settings(dict(defaults(), monitoring_alertmanager_receivers=[{"webhook_configs": [{"url": "https://x/SECRET"}]}]))
    assert any(p.startswith("monitoring_alertmanager_receivers=") for p in problems)
    assert "SECRET" not in " ".join(problems)


def test_the_node_firewall_lets_only_the_monitor_and_loopback_reach_node_exporter():
    groups, hostvars = fleet()
    fw = monitoring_plan(hostvars, groups, defaults(), "a1")["firewall"]
    assert fw["allowed"] == ["192.0.2.9"]
    assert "elements = { 127.0.0.0/8, 192.0.2.9 }" in fw["ruleset"]
    assert 'tcp dport 9100 drop comment "node_exporter from anyone else"' in fw["ruleset"]
    assert fw["ruleset"].splitlines()[2:4] == ["table inet dspark_monitor", "delete table inet dspark_monitor"]
    assert "policy accept" in fw["ruleset"] and "8888" not in fw["ruleset"]


def test_collector_configuration_reads_the_other_roles_paths():
    groups, hostvars = fleet()
    head = monitoring_plan(hostvars, groups, defaults(), "a0")["collector"]
    assert head["roles"] == ["node"]
    assert head["node"]["compose_file"] == "/etc/dspark/serve/compose.yaml"
    assert head["node"]["container"] == "dspark-vllm"
    assert head["node"]["checkpoint_stamp"] == "/var/lib/dspark/checkpoint/models--org--model-%s.verified.json" % ("a" * 40)
    assert head["node"]["api_port"] == 8888 and head["node"]["group_size"] == 2 and head["node"]["rank"] == 0
    assert head["node"]["fabric_interface"] == "enp1" and head["node"]["fabric_hca"] == "rocep1"
    worker = monitoring_plan(hostvars, groups, defaults(), "a1")["collector"]["node"]
    assert worker["api_port"] is None
    ctl = monitoring_plan(hostvars, groups, defaults(), "ctl")["collector"]
    assert ctl["roles"] == ["supervisor"]
    assert ctl["supervisor"] == {"journal": "/var/lib/dspark-fleet/journal.jsonl", "max_restarts": 4, "window_hours": 6.0,
                                 "groups": ["pair_a", "pair_b"]}
    assert monitoring_plan(hostvars, groups, defaults(), "router")["collector"]["roles"] == ["router", "monitor"]


def test_node_exporter_listens_on_the_management_address():
    groups, hostvars = fleet()
    assert monitoring_plan(hostvars, groups, defaults(), "a1")["node_exporter_args"] == (
        "--web.listen-address=192.0.2.2:9100 --collector.textfile.directory=/var/lib/prometheus/node-exporter")


def test_problems_leave_the_configurations_empty():
    groups, hostvars = fleet()
    out = monitoring_plan(hostvars, groups, dict(defaults(), monitoring_prometheus_port="x"), "router")
    assert out["problems"] and out["prometheus"] == {} and out["firewall"] == {} and out["rules"] == {}


def test_expression_metrics_ignores_labels_functions_and_durations():
    expr = 'histogram_quantile(0.95, sum by (dspark_group, le) (rate(vllm:time_to_first_token_seconds_bucket{job="x",le!="1"}[5m]))) > 10'
    assert mp.expression_metrics(expr) == {"vllm:time_to_first_token_seconds_bucket"}
    assert mp.base_name("vllm:time_to_first_token_seconds_bucket") == "vllm:time_to_first_token_seconds"
    assert mp.expression_metrics("a >= on() group_left b or c == 1") == {"a", "b", "c"}


def test_the_plan_does_not_change_its_inputs():
    groups, hostvars = fleet()
    before = copy.deepcopy((groups, hostvars))
    monitoring_plan(hostvars, groups, defaults(), "router")
    assert (groups, hostvars) == before


# -- node_exporter's boot unit ---------------------------------------------------------------------------------------

def test_the_boot_unit_loads_the_table_before_node_exporter_and_node_exporter_requires_it():
    groups, hostvars = fleet()
    fw = monitoring_plan(hostvars, groups, dict(defaults(), monitoring_config_dir="/etc/x/mon"), "a1")["firewall"]
    unit = fw["unit"].splitlines()
    assert fw["unit_name"] == "dspark-monitor-firewall.service"
    assert "Before=network-pre.target prometheus-node-exporter.service" in unit
    # RequiredBy=: node_exporter's unit gets Requires= on it, so node_exporter does not start when the table fails.
    assert "RequiredBy=prometheus-node-exporter.service" in unit and "WantedBy=multi-user.target" in unit
    assert "ExecStart=/usr/sbin/nft -f /etc/x/mon/firewall.nft" in unit and "Type=oneshot" in unit


# -- Prometheus and Alertmanager beyond loopback ---------------------------------------------------------------------

HASH = "$2b$10$abcdefghijklmnopqrstuuWRO.aPjfZIPa7LiT/idLvqe8ILJHybK"
TLS = {"tls_server_config": {"cert_file": "/etc/ssl/mon.crt", "key_file": "/etc/ssl/private/mon.key"}}
USERS = {"basic_auth_users": {"grafana": HASH, "dspark": HASH}}


def web(**extra):
    return dict(defaults(), **extra)


@pytest.mark.parametrize("name", ["monitoring_prometheus_listen_address", "monitoring_alertmanager_listen_address"])
@pytest.mark.parametrize("address", ["10.0.0.5", "0.0.0.0", "::", "2001:db8::5"])
def test_a_listener_beyond_loopback_without_a_web_config_is_refused_with_the_fix(name, address):
    problems = mp.check_settings(web(**{name: address}))
    assert len(problems) == 1, problems
    assert problems[0].startswith("%s=%r is not a loopback address" % (name, address))
    assert "monitoring_web_config" in problems[0] and "Fix:" in problems[0] and "127.0.0.1" in problems[0].split("Fix:")[1]
    # ...and the plan holds no configuration, so the role changes nothing.
    groups, hostvars = fleet()
    assert monitoring_plan(hostvars, groups, web(**{name: address}), "router")["server_args"] == {}


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.53", "::1"])
def test_loopback_needs_no_web_config(address):
    assert mp.check_settings(web(monitoring_prometheus_listen_address=address,
                                 monitoring_alertmanager_listen_address=address)) == []


@pytest.mark.parametrize("extra", [
    {"monitoring_web_config": TLS},
    {"monitoring_web_config": USERS, "monitoring_web_username": "dspark", "monitoring_web_password": "pw-1"},
    {"monitoring_web_config": dict(TLS, **USERS), "monitoring_web_username": "grafana", "monitoring_web_password": "x y"},
])
def test_tls_or_basic_auth_opens_other_addresses(extra):
    assert mp.check_settings(web(monitoring_prometheus_listen_address="10.0.0.5",
                                 monitoring_alertmanager_listen_address="0.0.0.0", **extra)) == []


@pytest.mark.parametrize("extra, name, words", [
    ({"monitoring_web_config": ["tls"]}, "monitoring_web_config", "is not a mapping"),
    ({"monitoring_web_config": dict(TLS, tls_config={})}, "monitoring_web_config", "tls_config"),
    ({"monitoring_web_config": {"tls_server_config": {"cert_file": "/etc/ssl/mon.crt"}}},
     "monitoring_web_config.tls_server_config", "cert_file and key_file"),
    ({"monitoring_web_config": {"tls_server_config": {"cert_file": "mon.crt", "key_file": "/k"}}},
     "monitoring_web_config.tls_server_config", "plain absolute paths"),
    ({"monitoring_web_config": {"tls_server_config": dict(TLS["tls_server_config"], client_auth_type="RequireAndVerifyClientCert")}},
     "monitoring_web_config.tls_server_config.client_auth_type", "Prometheus' own requests"),
    ({"monitoring_web_config": {"basic_auth_users": {"dspark": "plain-SECRET"}}, "monitoring_web_username": "dspark",
      "monitoring_web_password": "pw"}, "monitoring_web_config.basic_auth_users", "bcrypt"),
    ({"monitoring_web_config": {"basic_auth_users": {"a:b": HASH}}, "monitoring_web_username": "a:b",
      "monitoring_web_password": "pw"}, "monitoring_web_config.basic_auth_users", "no colon"),
    ({"monitoring_web_config": {"basic_auth_users": {}}}, "monitoring_web_config.basic_auth_users", "bcrypt"),
    ({"monitoring_web_config": USERS, "monitoring_web_password": "pw"}, "monitoring_web_username", "grafana"),
    ({"monitoring_web_config": USERS, "monitoring_web_username": "dspark"}, "monitoring_web_password", "is empty"),
    ({"monitoring_web_config": USERS, "monitoring_web_username": "dspark", "monitoring_web_password": "SECRET-pw "},
     "monitoring_web_password", "white space"),
    ({"monitoring_web_config": TLS, "monitoring_web_password": "SECRET-pw"}, "monitoring_web_password",
     "no basic_auth_users"),
])
def test_each_bad_web_value_names_variable_and_fix_and_shows_no_secret(extra, name, words):
    problems = mp.check_settings(web(**extra))
    assert any(p.startswith(name + "=") and words in p for p in problems), problems
    assert all("Fix:" in p for p in problems)
    text = " ".join(problems)
    assert HASH not in text and "SECRET" not in text


def test_prometheus_reaches_its_own_listeners_with_https_and_its_user():
    groups, hostvars = fleet()
    settings = web(monitoring_web_config=dict(TLS, **USERS), monitoring_web_username="dspark",
                   monitoring_web_password="SECRET-pw", monitoring_prometheus_listen_address="0.0.0.0",
                   monitoring_alertmanager_listen_address="10.0.0.5", monitoring_config_dir="/etc/dspark/monitoring")
    out = monitoring_plan(hostvars, groups, settings, "router")
    assert out["problems"] == []
    own = {"scheme": "https", "tls_config": {"insecure_skip_verify": True},
           "basic_auth": {"username": "dspark", "password_file": "/etc/dspark/monitoring/web-password"}}
    job = out["prometheus"]["scrape_configs"][0]
    assert job == dict({"job_name": "prometheus", "static_configs": [{"targets": ["127.0.0.1:9090"]}]}, **own)
    assert out["prometheus"]["alerting"]["alertmanagers"] == [
        dict({"static_configs": [{"targets": ["10.0.0.5:9093"]}]}, **own)]
    # Separate mappings: a shared one would be dumped as a YAML anchor and alias.
    assert job["basic_auth"] is not out["prometheus"]["alerting"]["alertmanagers"][0]["basic_auth"]
    assert out["web"] == {"on": True, "tls": True, "basic_auth": True,
                          "config_file": "/etc/dspark/monitoring/web-config.yml",
                          "password_file": "/etc/dspark/monitoring/web-password",
                          "urls": ["https://127.0.0.1:9090/-/ready", "https://10.0.0.5:9093/-/ready"]}
    assert out["server_args"] == {
        "prometheus": "--web.listen-address=0.0.0.0:9090 --storage.tsdb.retention.time=15d "
                      "--web.config.file=/etc/dspark/monitoring/web-config.yml",
        "alertmanager": "--web.listen-address=10.0.0.5:9093 --cluster.listen-address= "
                        "--web.config.file=/etc/dspark/monitoring/web-config.yml"}
    assert "SECRET" not in repr(out) and HASH not in repr(out)


def test_without_a_web_config_nothing_changes_for_prometheus():
    groups, hostvars = fleet()
    out = monitoring_plan(hostvars, groups, defaults(), "router")
    assert out["server_args"] == {
        "prometheus": "--web.listen-address=127.0.0.1:9090 --storage.tsdb.retention.time=15d",
        "alertmanager": "--web.listen-address=127.0.0.1:9093 --cluster.listen-address="}
    assert out["prometheus"]["scrape_configs"][0] == {"job_name": "prometheus",
                                                      "static_configs": [{"targets": ["127.0.0.1:9090"]}]}
    assert out["prometheus"]["alerting"]["alertmanagers"] == [{"static_configs": [{"targets": ["127.0.0.1:9093"]}]}]
    assert out["web"]["on"] is False
    assert out["web"]["urls"] == ["http://127.0.0.1:9090/-/ready", "http://127.0.0.1:9093/-/ready"]
