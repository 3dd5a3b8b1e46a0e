"""The monitoring role on the SIMULATED fleet lab (issue #28): `playbooks/monitoring.yml` installs node_exporter and
the collection's textfile collector on every host and Prometheus + Alertmanager on the router (the default monitor),
from the distribution's packages. Then: every scrape target is up (the heads' /metrics through the serve firewall, the
nodes' exporters through theirs, the router's HAProxy exporter on its loopback), a second run changes nothing, the
dashboard's queries return series, and a killed worker rank fires DsparkRankMissing, then (once a request meets the
dead peer and the head's engine dies) DsparkGroupNotServing, seen by Alertmanager; both resolve once the group is
started again. spark-router2's HAProxy stopped fires DsparkRouterAlone (issue #42), which resolves when it is started
again. The heads run the lab SIMULATOR, whose /metrics
imitates vLLM 0.32.0's names; the real engine's names are checked by tests/unit/monitoring.

Issue #41: node_exporter's unit requires the table's boot unit and starts after it (a deleted table comes back with
node_exporter's restart), a flushed table is put back by the next run, a Prometheus beyond loopback without a web
config stops the run before any change, and with a web config (TLS and basic auth) both servers ask for the password
while Prometheus' own scrape and alerts get through; the last test puts the defaults back.

The lab's inventory shortens the scrape and evaluation intervals and the alerts' `for` (group_vars/all.yml).
Needs the fleet lab up and serving (`make lab-fleet`, then site.yml); every test leaves the groups serving.
"""

import json
import re
import socket
import subprocess
import tempfile
import time
import urllib.parse

import pytest
import yaml

from ansible_collections.dspark.cluster.plugins.plugin_utils import _monitoring_plan

from fleetlab import GROUPS, HEADS, INVENTORY, ROOT, chat, docker, fleet, kill_rank, node, playbook, report, wait_for

MONITOR = "spark-router"
# The fleet lab's routers (both export node metrics; spark-router is the monitor: group dspark_monitor).
ROUTERS = ["spark-router", "spark-router2"]
PROMETHEUS = "http://127.0.0.1:9090"
ALERTMANAGER = "http://127.0.0.1:9093"
HOSTS = [h for members in GROUPS.values() for h in members] + ROUTERS
# Panels without series in this lab, and why: no supervisor host in the lab's inventory (its journal feeds them), no
# RDMA device in the lab's containers (the GID index is read from one).
EMPTY_HERE = {
    "dspark_supervisor_restarts_in_window": "no supervisor host in the lab inventory",
    "dspark_supervisor_restart_cap": "no supervisor host in the lab inventory",
    "dspark_fabric_gid_index": "no RDMA device in the lab's containers",
    "dspark_fabric_gid_matches": "no RDMA device in the lab's containers",
    # LMCache (serve_lmcache) runs in the real-engine lab only (inventories/lab-real, tests/real/test_real_lmcache.py);
    # its collector is tested against recordings of a real server (tests/unit/monitoring).
    "dspark_lmcache_lookup_hit_tokens_total": "no LMCache in the fleet lab",
    "dspark_lmcache_lookup_hit_l2_tokens_total": "no LMCache in the fleet lab",
    "dspark_lmcache_lookup_requested_tokens_total": "no LMCache in the fleet lab",
    "dspark_lmcache_l1_memory_usage_bytes": "no LMCache in the fleet lab",
    "dspark_lmcache_l2_usage_bytes": "no LMCache in the fleet lab",
}


def api(base, path, **params):
    """GET a Prometheus or Alertmanager API path on the monitor (both listen on its loopback only)."""
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    rc, out, err = node(MONITOR, "curl -sS --max-time 20 %s" % _quote(url), timeout=60)
    assert rc == 0, (url, err)
    return json.loads(out)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def targets():
    return api(PROMETHEUS, "/api/v1/targets", state="active")["data"]["activeTargets"]


def query(expr):
    return api(PROMETHEUS, "/api/v1/query", query=expr)["data"]["result"]


def firing(name, group=None):
    """The firing alerts `name` (of serving group `group` when given)."""
    return [a for a in api(PROMETHEUS, "/api/v1/alerts")["data"]["alerts"]
            if a["labels"].get("alertname") == name and (group is None or a["labels"].get("dspark_group") == group)
            and a["state"] == "firing"]


def in_alertmanager(name, group):
    return [a for a in api(ALERTMANAGER, "/api/v2/alerts", active="true")
            if a["labels"].get("alertname") == name and a["labels"].get("dspark_group") == group]


def recap_changed(out):
    return {host: int(n) for host, n in re.findall(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)", out, re.M)}


def restore(group):
    rc, out = playbook("playbooks/serve.yml", "--limit", group)
    assert rc == 0, out[-3000:]


# What the stack runs on each host; stopped after this module (monitoring() says why).
NODE_UNITS = ["dspark-textfile-collector.timer", "dspark-textfile-collector.service", "prometheus-node-exporter.service"]
MONITOR_UNITS = ["prometheus.service", "prometheus-alertmanager.service"]


@pytest.fixture(scope="module")
def monitoring(pytestconfig):
    began = time.monotonic()
    rc, out = playbook("playbooks/monitoring.yml")
    print("\nmonitoring.yml, first run: %.0f s" % (time.monotonic() - began))
    assert rc == 0, out[-5000:]
    yield out
    # CI time: with the lab's short intervals (a scrape every 5 s, the collector every 10 s on every host) the stack
    # keeps using CPU, and the suites after this one never read it. The CPU its daemons used so far is printed (the
    # lab's systemd keeps no per-unit accounting; the collector's short runs are not counted), then it is stopped, not
    # removed: the next monitoring.yml run starts it again.
    used = {}
    for host in HOSTS:
        units = NODE_UNITS + (MONITOR_UNITS if host == MONITOR else [])
        rc, out, err = node(host, "pids=$(pgrep -d, -f '^/usr/bin/prometheus') && ps -o times= -p \"$pids\"")
        used[host] = sum(int(v) for v in out.split() if v.isdigit()) if rc == 0 else (err or out).strip()
        node(host, "systemctl stop %s" % " ".join(units))
    # Shown in the stage's log: the capture of fd 1 is lifted for the line (pytest's own plugins do the same).
    with pytestconfig.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
        pytestconfig.pluginmanager.get_plugin("terminalreporter").write_line(
            "monitoring stack CPU-s per host before it was stopped, %.0f s after the first run: %s" % (
                time.monotonic() - began, used))


def test_every_target_is_up(monitoring):
    del monitoring
    for group in GROUPS:
        chat(group)
    # The monitor's own router on loopback, the other router's exporter on its management address.
    want = {("prometheus", "127.0.0.1:9090"), ("dspark_router", "127.0.0.1:8405"), ("dspark_router", "10.232.0.202:8405")}
    want |= {("dspark_vllm", "%s:8888" % address) for address in ("10.232.0.11", "10.232.0.13")}

    def all_up():
        found = targets()
        up = {(t["labels"]["job"], t["labels"]["instance"]) for t in found if t["health"] == "up"}
        nodes = {t["labels"].get("dspark_host") for t in found if t["labels"]["job"] == "dspark_node"
                 and t["health"] == "up"}
        return found if want <= up and nodes == set(HOSTS) else None

    found = wait_for(all_up, timeout=180, interval=5)
    assert found, [(t["labels"]["job"], t["labels"].get("instance"), t["health"], t["lastError"]) for t in targets()]
    heads = {t["labels"]["dspark_group"]: t["labels"]["dspark_host"] for t in found if t["labels"]["job"] == "dspark_vllm"}
    assert heads == HEADS
    # The collector's own facts arrive through node_exporter: every rank's container running, each group serving.
    assert {r["metric"]["dspark_host"] for r in query("dspark_serve_container_running == 1")} == set(HOSTS) - set(ROUTERS)
    assert {r["metric"]["dspark_group"] for r in query("dspark_serve_api_healthy == 1")} == set(GROUPS)
    # Nothing of the monitor is reachable from the lab host: Prometheus and Alertmanager listen on its loopback.
    rc, out, err = node(MONITOR, "ss -Hltn")
    listening = {line.split()[3] for line in out.splitlines()}
    assert {"127.0.0.1:9090", "127.0.0.1:9093", "127.0.0.1:8405"} <= listening, listening
    assert not [a for a in listening if a.endswith((":9090", ":9093", ":8405")) and not a.startswith("127.0.0.1:")]


def test_a_second_run_changes_nothing(monitoring):
    del monitoring
    rc, out = playbook("playbooks/monitoring.yml")
    assert rc == 0, out[-3000:]
    changed = recap_changed(out)
    assert set(changed) == set(HOSTS) and not any(changed.values()), changed
    # Converged hosts stop at the one read (issue #40): neither apply file is included anywhere.
    assert "node_apply.yml" not in out and "firewall_apply.yml" not in out, out[-3000:]


def test_every_dashboard_query_returns_series(monitoring):
    del monitoring
    for group in GROUPS:
        for dummy in range(3):
            assert chat(group)[0]
    dashboard = json.loads((ROOT / "roles" / "monitoring" / "files" / "dspark-fleet-dashboard.json").read_text())

    def empty():
        """The panels' queries without a series (rates need two scrapes after the chats: retried until then)."""
        out = []
        for title, expr in _monitoring_plan.dashboard_expressions(dashboard):
            names = _monitoring_plan.expression_metrics(expr)
            if not names & set(EMPTY_HERE) and not query(expr.replace("$group", ".*")):
                out.append((title, expr))
        return out

    assert wait_for(lambda: not empty(), timeout=90, interval=5), empty()


def test_status_reads_the_engines_numbers_from_prometheus(monitoring, tmp_path):
    """`dspark-fleet status --prometheus` as an operator runs it: through an SSH tunnel to the monitor's loopback
    Prometheus. Every group's numbers come from Prometheus (not the heads' /metrics), with the TTFT p95 of the chats
    just sent, and the table shows them."""
    del monitoring
    port = free_port()
    ssh_port = yaml.safe_load(INVENTORY.read_text())["all"]["children"]["dspark_router"]["hosts"][MONITOR]["ansible_port"]
    tunnel = subprocess.Popen(  # pylint: disable=consider-using-with
        ["ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-o", "StrictHostKeyChecking=no", "-o",
         "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-i", str(ROOT / ".lab" / "id_ed25519"),
         "-p", str(ssh_port), "-L", "127.0.0.1:%d:127.0.0.1:9090" % port, "spark@127.0.0.1"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = "http://127.0.0.1:%d" % port

        def ttft_known():
            for group in GROUPS:               # a request in the window of every try (a loaded CI machine is slow)
                assert chat(group)[0]
            rc, out = fleet("status", "-i", INVENTORY, "--plain", "--prometheus", url, "--prometheus-window", "10m",
                            "--artifacts", tmp_path / "status", timeout=600)
            entries = report(tmp_path / "status" / "report.json")["groups"]
            done = rc == 0 and all((entries[g].get("metrics") or {}).get("ttft_p95_s") is not None for g in GROUPS)
            return (out, entries) if done else None

        result = wait_for(ttft_known, timeout=120, interval=10, abort=lambda: tunnel.poll() is not None and (
            "the SSH tunnel to the monitor ended: %s" % tunnel.stderr.read().decode(errors="replace")))
        assert result, report(tmp_path / "status" / "report.json")["groups"]
        out, entries = result
        for group in GROUPS:
            numbers = entries[group]["metrics"]
            assert numbers["source"] == "prometheus" and numbers["window"] == "last 10m", numbers
            assert numbers["running"] == 0 and numbers["waiting"] == 0 and numbers["kv_cache_usage"] == 0, numbers
            assert 0 < numbers["ttft_p95_s"] < 5, numbers
        assert "Prometheus, last 10m" in out, out[-3000:]
    finally:
        tunnel.terminate()
        tunnel.wait(10)


def test_a_killed_worker_fires_the_alerts_and_they_resolve(monitoring):
    """A worker rank killed while its group is idle: the head, like vLLM's, notices only at its next collective, so its
    /health stays 200 and DsparkRankMissing (the collector sees the container gone) is what fires first. The next
    request fails, the head's engine dies with it, and DsparkGroupNotServing fires (and reaches Alertmanager). Both
    resolve once the group is started again; the other group is never named."""
    del monitoring
    group, worker = "pair_b", GROUPS["pair_b"][1]
    rc, out = kill_rank(worker)
    assert rc == 0, out
    killed = time.monotonic()
    try:
        missing = wait_for(lambda: firing("DsparkRankMissing", group), timeout=180, interval=5)
        print("\nkilled worker -> DsparkRankMissing firing: %.0f s" % (time.monotonic() - killed))
        assert missing and {a["labels"]["dspark_host"] for a in missing} >= {worker}, \
            api(PROMETHEUS, "/api/v1/alerts")["data"]["alerts"]
        ok, text = chat(group)
        assert not ok, text                     # the request that meets the dead peer fails; the head dies with it
        asked = time.monotonic()
        fired = wait_for(lambda: firing("DsparkGroupNotServing", group), timeout=180, interval=5)
        print("failed request -> DsparkGroupNotServing firing: %.0f s" % (time.monotonic() - asked))
        assert fired, api(PROMETHEUS, "/api/v1/alerts")["data"]["alerts"]
        assert wait_for(lambda: in_alertmanager("DsparkGroupNotServing", group), timeout=120, interval=5), \
            api(ALERTMANAGER, "/api/v2/alerts")
        assert not firing("DsparkGroupNotServing", "trio_c") and not firing("DsparkRankMissing", "trio_c")
    finally:
        restore(group)
    resolved = wait_for(lambda: not firing("DsparkRankMissing", group) and not firing("DsparkGroupNotServing", group),
                        timeout=240, interval=5)
    print("group restarted -> alerts resolved: %.0f s after the kill" % (time.monotonic() - killed))
    assert resolved, api(PROMETHEUS, "/api/v1/alerts")["data"]["alerts"]
    assert chat(group)[0]


def test_a_router_left_alone_fires_and_resolves(monitoring):
    """spark-router2's HAProxy stopped (keepalived stops with it): spark-router is the only router that could take the
    service address, and DsparkRouterAlone fires, naming it, beside DsparkRouterDown for spark-router2; started
    again, it resolves. No request fails: spark-router
    holds the address throughout."""
    del monitoring

    def alone():
        return firing("DsparkRouterAlone")

    assert not alone()
    rc, out, err = node("spark-router2", "systemctl stop haproxy")
    assert rc == 0, out + err
    stopped = time.monotonic()
    try:
        fired = wait_for(alone, timeout=120, interval=5)
        print("\nspark-router2's HAProxy stopped -> DsparkRouterAlone firing: %.0f s" % (time.monotonic() - stopped))
        assert fired, api(PROMETHEUS, "/api/v1/alerts")["data"]["alerts"]
        assert "only router spark-router can take the service address" in fired[0]["annotations"]["summary"], fired
        down = wait_for(lambda: firing("DsparkRouterDown"), timeout=60, interval=5)
        assert down and [a["labels"]["dspark_host"] for a in down] == ["spark-router2"], down
        assert chat("pair_b")[0]
    finally:
        node("spark-router2", "systemctl start haproxy")
    assert wait_for(lambda: not alone(), timeout=120, interval=5), api(PROMETHEUS, "/api/v1/alerts")["data"]["alerts"]


def test_the_rules_pass_promtool_on_the_monitor(monitoring):
    del monitoring
    rc, out, err = node(MONITOR, "promtool check rules /etc/prometheus/dspark-rules.yml && "
                                 "promtool check config /etc/prometheus/prometheus.yml")
    assert rc == 0, out + err
    names = {r["name"] for g in api(PROMETHEUS, "/api/v1/rules")["data"]["groups"] for r in g["rules"]}
    assert names == set(_monitoring_plan.ALERTS), names


# -- issue #41: node_exporter's table first, compared with the live one; the servers beyond loopback -----------------

FW_UNIT = "dspark-monitor-firewall.service"
NE_UNIT = "prometheus-node-exporter.service"
# bcrypt (cost 10) of WEB_PASSWORD, as in tests/unit/monitoring/test_monitoring_web.py.
WEB_PASSWORD = "s3cret-pw"
WEB_HASH = "$2b$10$abcdefghijklmnopqrstuuWRO.aPjfZIPa7LiT/idLvqe8ILJHybK"


def unit_show(host, unit, *props):
    rc, out, err = node(host, "systemctl show %s %s" % (" ".join("-p " + p for p in props), unit))
    assert rc == 0, err
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_node_exporter_requires_its_table_and_starts_after_it(monitoring):
    del monitoring
    for host in HOSTS:
        shown = unit_show(host, NE_UNIT, "Requires", "After")
        assert FW_UNIT in shown["Requires"].split() and FW_UNIT in shown["After"].split(), (host, shown)
    worker = GROUPS["pair_b"][1]
    # The table gone and its unit stopped (which stops node_exporter too): starting node_exporter loads it first.
    rc, out, err = node(worker, "nft delete table inet dspark_monitor; systemctl stop %s; systemctl start %s; "
                                "nft list table inet dspark_monitor" % (FW_UNIT, NE_UNIT))
    assert rc == 0 and "tcp dport 9100 drop" in out, out + err
    started = {unit: int(unit_show(worker, unit, "ActiveEnterTimestampMonotonic")["ActiveEnterTimestampMonotonic"])
               for unit in (FW_UNIT, NE_UNIT)}
    assert 0 < started[FW_UNIT] <= started[NE_UNIT], started


def test_a_flushed_table_is_put_back_by_the_next_run(monitoring):
    """With the table: the collector's configuration edited and its timer stopped, all put back by one run (a
    converged host is decided on one read: what it reads must cover these)."""
    del monitoring
    worker = GROUPS["pair_b"][1]
    config = "/etc/dspark/monitoring/collector.json"
    rc, before, err = node(worker, "cat %s" % config)
    assert rc == 0, err
    rc, out, err = node(worker, "nft flush chain inet dspark_monitor input && nft list table inet dspark_monitor && "
                                "echo '{}' > %s && systemctl stop dspark-textfile-collector.timer" % config)
    assert rc == 0 and "dport 9100" not in out, out + err
    rc, out = playbook("playbooks/monitoring.yml", "--limit", worker)
    assert rc == 0, out[-3000:]
    assert recap_changed(out)[worker] >= 2, out[-3000:]
    rc, table, err = node(worker, "nft list table inet dspark_monitor")
    assert 'tcp dport 9100 drop comment "node_exporter from anyone else"' in table, table + err
    rc, after, err = node(worker, "cat %s; systemctl is-active dspark-textfile-collector.timer" % config)
    assert rc == 0 and after == before + "active\n", after + err
    rc, out = playbook("playbooks/monitoring.yml", "--limit", worker)
    assert rc == 0 and recap_changed(out) == {worker: 0}, out[-3000:]


def test_prometheus_beyond_loopback_without_a_web_config_changes_nothing(monitoring):
    del monitoring
    rc, out = playbook("playbooks/monitoring.yml", "-e", "monitoring_prometheus_listen_address=0.0.0.0")
    assert rc != 0
    assert "monitoring_prometheus_listen_address='0.0.0.0' is not a loopback address" in out, out[-3000:]
    assert not any(recap_changed(out).values()), out[-3000:]


def _status(url, credentials=True):
    auth = "-u dspark:%s " % WEB_PASSWORD if credentials else ""
    rc, out, dummy = node(MONITOR, "curl -sk -o /dev/null -w '%%{http_code}' %s%s" % (auth, _quote(url)))
    return out.strip()


def test_with_a_web_config_both_servers_ask_for_the_password(monitoring, tmp_path):
    """TLS and basic auth on both (Prometheus on every address), then the defaults put back."""
    del monitoring
    tls = "/etc/dspark/monitoring-tls"
    with tempfile.TemporaryDirectory() as work:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=monitor",
                        "-keyout", work + "/mon.key", "-out", work + "/mon.crt"], check=True, capture_output=True)
        assert node(MONITOR, "mkdir -p %s" % tls)[0] == 0
        for name in ("mon.key", "mon.crt"):
            rc, out = docker("cp", "%s/%s" % (work, name), "%s:%s/%s" % (MONITOR, tls, name))
            assert rc == 0, out
    assert node(MONITOR, "chown root:prometheus %s/mon.key %s/mon.crt && chmod 0640 %s/mon.key" % (tls, tls, tls))[0] == 0
    extra = tmp_path / "web.json"
    extra.write_text(json.dumps({
        "monitoring_prometheus_listen_address": "0.0.0.0",
        "monitoring_web_config": {"tls_server_config": {"cert_file": tls + "/mon.crt", "key_file": tls + "/mon.key"},
                                  "basic_auth_users": {"dspark": WEB_HASH}},
        "monitoring_web_username": "dspark", "monitoring_web_password": WEB_PASSWORD}))
    try:
        rc, out = playbook("playbooks/monitoring.yml", "--limit", MONITOR, "-e", "@%s" % extra)
        assert rc == 0, out[-5000:]
        assert WEB_PASSWORD not in out and WEB_HASH not in out
        for port in (9090, 9093):
            assert _status("https://127.0.0.1:%d/-/ready" % port, credentials=False) == "401"
            assert _status("https://127.0.0.1:%d/-/ready" % port) == "200"
        rc, out, err = node(MONITOR, "stat -c '%a %U %G' /etc/dspark/monitoring/web-config.yml "
                                     "/etc/dspark/monitoring/web-password")
        assert out.split("\n")[:2] == ["640 root prometheus", "600 prometheus prometheus"], out + err

        def self_scraped():
            rc, out, dummy = node(MONITOR, "curl -sk -u dspark:%s %s" % (WEB_PASSWORD, _quote(
                "https://127.0.0.1:9090/api/v1/query?" + urllib.parse.urlencode({"query": 'up{job="prometheus"}'}))))
            found = json.loads(out)["data"]["result"] if rc == 0 and out.startswith("{") else []
            return found and found[0]["value"][1] == "1"

        assert wait_for(self_scraped, timeout=60, interval=5)
        rc, out = playbook("playbooks/monitoring.yml", "--limit", MONITOR, "-e", "@%s" % extra)
        assert rc == 0 and recap_changed(out) == {MONITOR: 0}, out[-3000:]
    finally:
        rc, out = playbook("playbooks/monitoring.yml", "--limit", MONITOR)
        assert rc == 0, out[-3000:]
    assert wait_for(lambda: _status(PROMETHEUS + "/-/ready", credentials=False) == "200", timeout=60, interval=2)
    rc, out, dummy = node(MONITOR, "ls /etc/dspark/monitoring/web-config.yml /etc/dspark/monitoring/web-password")
    assert rc != 0, out
