"""`dspark-fleet status` shows the engine's numbers per group (issue #28 point 4): requests running and waiting, KV
cache usage, TTFT p95 - from Prometheus' HTTP API when one is given (a local http.server here, answering as
Prometheus' /api/v1/query does), otherwise from the heads' /metrics (roles/serve/tasks/status.yml, run here under
real Ansible against a local /metrics serving the fixture of tests/unit/plugins/plugin_utils)."""

import http.server
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import urllib.parse

import pytest
import yaml

from conftest import load_report, run_cli
from dspark_fleet import metrics

from ansible_collections.dspark.cluster.plugins.plugin_utils import _vllm_metrics as vm

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIXTURE = (ROOT / "tests" / "unit" / "plugins" / "plugin_utils" / "fixtures" / "vllm_metrics"
           / "vllm-0.32.0-metrics.txt").read_text(encoding="utf-8")
PLAY = ROOT / "tests" / "unit" / "playbooks" / "serve_status"
IMAGE = "sha256:" + "a" * 64


class _Server:
    """A local HTTP server in a thread; `answer(path, query)` -> (status, content type, body)."""

    def __init__(self, answer):
        self.seen = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                return

            def do_GET(self):
                parts = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parts.query))
                outer.seen.append((parts.path, query))
                status, ctype, body = answer(parts.path, query)
                body = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _vector(results):
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"dspark_group": group}, "value": [1764633600.5, value]} for group, value in results.items()]}})


def fake_prometheus(per_group):
    """per_group: {group: {running, waiting, kv_cache_usage, ttft_p95_s, ttft_requests, up}} as Prometheus' strings."""
    keys = dict((promql, key) for key, promql in metrics.queries(vm, "5m").items())

    def answer(path, query):
        if path != "/api/v1/query" or query.get("query") not in keys:
            return 400, "application/json", json.dumps({"status": "error", "errorType": "bad_data",
                                                        "error": "unexpected %s %s" % (path, query)})
        key = keys[query["query"]]
        return 200, "application/json", _vector(dict((g, v[key]) for g, v in per_group.items() if key in v))
    return answer


# --------------------------------------------------------------------------- the Prometheus client


def test_the_queries_use_the_monitoring_roles_job_and_group_label():
    q = metrics.queries(vm, "5m")
    assert q["running"] == 'sum by (dspark_group) (vllm:num_requests_running{job="dspark_vllm"})'
    assert q["waiting"] == 'sum by (dspark_group) (vllm:num_requests_waiting{job="dspark_vllm"})'
    assert q["kv_cache_usage"] == 'max by (dspark_group) (vllm:kv_cache_usage_perc{job="dspark_vllm"})'
    assert q["ttft_p95_s"] == ('histogram_quantile(0.95, sum by (dspark_group, le) '
                               '(rate(vllm:time_to_first_token_seconds_bucket{job="dspark_vllm"}[5m])))')
    # The monitoring role's scrape config gives each head's target that job and the label dspark_group.
    source = (ROOT / "plugins" / "plugin_utils" / "_monitoring_plan.py").read_text(encoding="utf-8")
    assert '"job_name": "%s"' % metrics.JOB in source
    assert '"labels": {"%s": head["group"]' % metrics.GROUP_LABEL in source


def test_prometheus_numbers_per_group():
    data = {"grp_a": {"running": "3", "waiting": "1", "kv_cache_usage": "0.5", "ttft_p95_s": "0.2375",
                      "ttft_requests": "12.000000001", "up": "1"},
            "grp_idle": {"running": "0", "waiting": "0", "kv_cache_usage": "0", "ttft_p95_s": "NaN",
                         "ttft_requests": "0", "up": "1"},
            "other": {"running": "9"}}
    with _Server(fake_prometheus(data)) as prom:
        out = metrics.from_prometheus(prom.url, ["grp_a", "grp_idle", "grp_gone"], vm, "5m")
    assert out["grp_a"] == {"source": "prometheus", "window": "last 5m", "running": 3, "waiting": 1,
                            "kv_cache_usage": 0.5, "kv_cache_metric": "vllm:kv_cache_usage_perc",
                            "ttft_p95_s": 0.2375, "ttft_requests": 12.0, "scrape_up": True, "prometheus": prom.url}
    assert out["grp_idle"]["ttft_p95_s"] is None and out["grp_idle"]["running"] == 0   # NaN: no request in 5m
    assert out["grp_gone"] is None
    assert all(path == "/api/v1/query" for path, dummy in prom.seen) and len(prom.seen) == 6


def test_prometheus_errors_are_named():
    with _Server(lambda p, q: (400, "application/json", json.dumps({"status": "error", "error": "parse error"}))) as s:
        with pytest.raises(metrics.PrometheusError, match="answered HTTP 400 .*parse error"):
            metrics.query(s.url, "up")
    with _Server(lambda p, q: (200, "text/html", "<html/>")) as s:
        with pytest.raises(metrics.PrometheusError, match="did not answer JSON"):
            metrics.query(s.url, "up")
    with _Server(lambda p, q: (200, "application/json", '{"status": "success", "data": {"resultType": "matrix"}}')) as s:
        with pytest.raises(metrics.PrometheusError, match="not a vector"):
            metrics.query(s.url, "up")
    with _Server(lambda p, q: (200, "text/plain", "")) as s:
        closed = s.url
    with pytest.raises(metrics.PrometheusError, match="cannot reach"):
        metrics.query(closed, "up", timeout=2)


@pytest.mark.parametrize("url, error", [
    ("http://user:secret@127.0.0.1:9090", "must not carry credentials"),
    ("ftp://127.0.0.1", "not an http"),
    ("127.0.0.1:9090", "not an http"),
    ("http://127.0.0.1:9090/?x=1", "without \\?query"),
])
def test_bad_prometheus_urls_are_refused(url, error):
    with pytest.raises(ValueError, match=error):
        metrics.check_url(url)


def test_good_prometheus_urls_and_windows():
    assert metrics.check_url(" http://127.0.0.1:9090/ ") == "http://127.0.0.1:9090"
    assert metrics.check_url("https://mon.example/prometheus/") == "https://mon.example/prometheus"
    assert metrics.check_window("1h30m") == "1h30m"
    with pytest.raises(ValueError):
        metrics.check_window("5 minutes")


# --------------------------------------------------------------------------- per group, and the table


class _Run:
    def __init__(self, facts):
        self.events = type("E", (), {"status": facts})()


HEAD_NUMBERS = vm.summary(FIXTURE)


def _entries():
    return {"grp_a": {"head": "a-head"}, "grp_b": {"head": "b-head"}, "grp_c": {"head": "c-head"}}


RUNS = {"grp_a": _Run({"a-head": {"rank": 0, "metrics": HEAD_NUMBERS, "metrics_reason": None}}),
        "grp_b": _Run({"b-head": {"rank": 0, "metrics": None,
                                  "metrics_reason": "GET /metrics on the head answered nothing: refused"}}),
        "grp_c": _Run({"c-head": {"rank": 0}})}


def test_from_the_heads_metrics_without_prometheus(capsys):
    entries = _entries()
    assert metrics.attach(entries, RUNS) is None
    assert entries["grp_a"]["metrics"] == HEAD_NUMBERS and entries["grp_a"]["metrics_reason"] is None
    assert entries["grp_b"]["metrics"] is None
    assert entries["grp_b"]["metrics_reason"] == "GET /metrics on the head answered nothing: refused"
    assert "carries no metrics" in entries["grp_c"]["metrics_reason"]
    metrics.print_table(entries)
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["group", "running", "waiting", "KV", "cache", "TTFT", "p95", "source"] in lines
    assert ["grp_a", "3", "1", "42.8", "%", "0.679", "s", "head", "/metrics,", "since", "the", "engine", "started",
            "(200", "request(s))"] in lines
    assert ["grp_b", "-", "-", "-", "-", "none:", "GET", "/metrics", "on", "the", "head", "answered", "nothing:",
            "refused"] in lines


def test_prometheus_first_the_heads_metrics_for_a_group_it_lacks(capsys):
    data = {"grp_a": {"running": "5", "waiting": "2", "kv_cache_usage": "0.25", "ttft_p95_s": "1.5",
                      "ttft_requests": "40", "up": "1"}}
    entries = _entries()
    with _Server(fake_prometheus(data)) as prom:
        assert metrics.attach(entries, RUNS, prometheus=prom.url, window="5m") is None
    assert entries["grp_a"]["metrics"]["source"] == "prometheus" and entries["grp_a"]["metrics"]["running"] == 5
    assert entries["grp_b"]["metrics"] is None
    assert entries["grp_b"]["metrics_reason"].startswith("Prometheus has no series of group grp_b (job dspark_vllm); GET")
    metrics.print_table(entries)
    out = capsys.readouterr().out
    assert "grp_a  5        2        25.0 %    1.500 s   Prometheus, last 5m (40 request(s))" in out


def test_prometheus_down_falls_back_to_the_heads(capsys):
    with _Server(lambda p, q: (200, "text/plain", "")) as s:
        closed = s.url
    entries = _entries()
    error = metrics.attach(entries, RUNS, prometheus=closed, timeout=2)
    assert error.startswith("cannot reach %s" % closed)
    assert entries["grp_a"]["metrics"] == HEAD_NUMBERS
    assert entries["grp_a"]["metrics_reason"].endswith(": the head's /metrics instead")
    metrics.print_table(entries)
    assert "grp_a: cannot reach" in capsys.readouterr().out


# --------------------------------------------------------------------------- status.yml on the head


def _metrics_head(path, query):
    if path == "/metrics":
        return 200, "text/plain; version=0.0.4; charset=utf-8", FIXTURE
    if path == "/v1/models":
        return 200, "application/json", json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]})
    return 404, "application/json", '{"detail": "Not Found"}'


STATUS_PLAY = """---
# tests/unit/playbooks/serve_status/play.yml's fake pair, each rank's serve_status kept as JSON (even when it fails).
- name: Status of a fake pair
  hosts: all
  gather_facts: false
  environment:
    PATH: "{{ fake_docker_bin }}:{{ lookup('ansible.builtin.env', 'PATH') }}"
    FAKE_DOCKER_DIR: "{{ fake_docker_dir }}"
  vars:
    dspark_group: pair
    _serve_members: [spark-head, spark-r1]
    _serve_api_keys: []
    serve_container_name: "{{ inventory_hostname }}"
    serve_served_model_name: tiny
  tasks:
    - name: The serve role's status tasks
      block:
        - name: The tasks
          ansible.builtin.include_tasks: "{{ status_tasks }}"
      always:
        - name: Keep serve_status
          ansible.builtin.copy:
            content: "{{ serve_status | default({}) | to_json }}"
            dest: "{{ fake_docker_dir }}/{{ inventory_hostname }}.status.json"
            mode: "0600"
          check_mode: false
"""


def _status_play(tmp_path, port):
    """ansible-playbook --check of roles/serve/tasks/status.yml on a fake pair whose head's API is 127.0.0.1:port
    -> (rc, output, {host: serve_status})."""
    for name in ("spark-head", "spark-r1"):
        (tmp_path / name).write_text("running 0 0 %s false 0001-01-01T00:00:00Z\n" % IMAGE)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    spark-head: {dspark_rank: 0}\n    spark-r1: {dspark_rank: 1}\n")
    (tmp_path / "play.yml").write_text(STATUS_PLAY)
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), str(tmp_path / "play.yml"), "--check",
               "-i", str(inventory), "-e", "ansible_connection=local", "-e", "ansible_python_interpreter=" + sys.executable,
               "-e", "fake_docker_bin=" + str(PLAY), "-e", "fake_docker_dir=" + str(tmp_path),
               "-e", "status_tasks=" + str(ROOT / "roles" / "serve" / "tasks" / "status.yml"),
               "-e", "dspark_api_port=%d" % port]
    environ = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run(command, cwd=str(ROOT), env=environ, capture_output=True, text=True, timeout=300, check=False)
    facts = dict((name, json.loads((tmp_path / (name + ".status.json")).read_text()))
                 for name in ("spark-head", "spark-r1") if (tmp_path / (name + ".status.json")).is_file())
    return run.returncode, " ".join((run.stdout + run.stderr).split()), facts


def test_status_yml_reads_the_heads_metrics_in_check_mode(tmp_path):
    with _Server(_metrics_head) as head:
        rc, out, facts = _status_play(tmp_path, head.port)
    assert rc == 0, out[-3000:]
    assert facts["spark-head"]["metrics"] == HEAD_NUMBERS, out[-3000:]
    assert facts["spark-head"]["metrics_reason"] is None
    assert "metrics" not in facts["spark-r1"]
    assert [p for p, dummy in head.seen].count("/metrics") == 1       # the head only, once
    read = out.split("TASK [Read the head's engine metrics]", 1)[1].split("TASK [", 1)[0]
    assert "ok: [spark-head]" in read and "changed" not in read, read     # a read: never changed, runs in --check


def test_status_yml_names_why_there_are_no_numbers(tmp_path):
    with _Server(_metrics_head) as head:
        closed = head.port
    rc, out, facts = _status_play(tmp_path, closed)
    assert rc != 0        # no API either: the group does not serve
    assert facts["spark-head"]["metrics"] is None, out[-3000:]
    assert facts["spark-head"]["metrics_reason"].startswith(
        "GET /metrics on the head answered nothing: Status code was -1"), facts


# --------------------------------------------------------------------------- the CLI


FAKE_STATUS = """---
- name: Status - every rank's container, image ID and the API
  hosts: dspark
  gather_facts: false
  tasks:
    - name: Note this rank's status
      ansible.builtin.set_fact:
        serve_status:
          rank: "{{ dspark_rank | int }}"
          container: {state: running, exit_code: '0', restarts: '0', image: "sha256:%s"}
          api_models: "{{ ['fake-model'] if dspark_rank | int == 0 else none }}"
    - name: Note the engine's numbers on the head's status
      ansible.builtin.set_fact:
        serve_status: "{{ serve_status | combine({'metrics': fake_metrics | default(none),
                                                  'metrics_reason': fake_reason | default(none)}) }}"
      when: dspark_rank | int == 0
""" % ("ab12" * 16)


@pytest.fixture
def metrics_project(tmp_path, fake_project):
    project = tmp_path / "project"
    shutil.copytree(str(fake_project), str(project), symlinks=True)
    (project / "playbooks" / "status.yml").write_text(FAKE_STATUS)
    return project


def _inventory(path, groups):
    children = dict((name, {"vars": dict({"dspark_group": name}, **extra),
                            "hosts": {name + "-head": {"dspark_rank": 0}, name + "-worker": {"dspark_rank": 1}}})
                    for name, extra in groups.items())
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    path.write_text(yaml.safe_dump({"all": {"vars": local, "children": {"dspark": {
        "vars": {"dspark_model": "org/model", "dspark_model_revision": "f" * 40}, "children": children}}}},
        sort_keys=False))
    return str(path)


def test_status_shows_the_engines_numbers(tmp_path, metrics_project, venv_path, capsys, monkeypatch):
    monkeypatch.delenv(metrics.PROMETHEUS_ENV, raising=False)
    inv = _inventory(tmp_path / "hosts.yml", {"grp_up": {"fake_metrics": HEAD_NUMBERS},
                                              "grp_dark": {"fake_reason": "GET /metrics on the head answered HTTP 404"}})
    code = run_cli(["status", "-i", inv, "--parallel", "2", "--artifacts", str(tmp_path / "st")], metrics_project)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Engine (vLLM) per group:" in out
    lines = [line.split() for line in out.splitlines()]
    assert ["grp_up", "3", "1", "42.8", "%", "0.679", "s", "head", "/metrics,", "since", "the", "engine", "started",
            "(200", "request(s))"] in lines, out
    assert ["grp_dark", "-", "-", "-", "-", "none:", "GET", "/metrics", "on", "the", "head", "answered", "HTTP",
            "404"] in lines, out
    doc = load_report(tmp_path / "st" / "report.json")
    assert doc["groups"]["grp_up"]["metrics"] == HEAD_NUMBERS
    assert doc["groups"]["grp_dark"]["metrics"] is None
    assert doc["groups"]["grp_dark"]["metrics_reason"] == "GET /metrics on the head answered HTTP 404"
    markdown = (tmp_path / "st" / "report.md").read_text()
    assert "## Engine (vLLM) per group" in markdown and "| grp_up | 3 | 1 | 42.8 % | 0.679 s |" in markdown, markdown


def test_status_with_prometheus_from_the_environment(tmp_path, metrics_project, venv_path, capsys, monkeypatch):
    data = {"grp_up": {"running": "7", "waiting": "0", "kv_cache_usage": "0.125", "ttft_p95_s": "0.05",
                       "ttft_requests": "300", "up": "1"}}
    inv = _inventory(tmp_path / "hosts.yml", {"grp_up": {"fake_metrics": HEAD_NUMBERS}})
    with _Server(fake_prometheus(data)) as prom:
        monkeypatch.setenv(metrics.PROMETHEUS_ENV, prom.url)
        code = run_cli(["status", "-i", inv, "--prometheus-window", "5m", "--artifacts", str(tmp_path / "st")],
                       metrics_project)
    out = capsys.readouterr().out
    assert code == 0, out
    assert [line.split() for line in out.splitlines() if line.startswith("grp_up  7")] == [
        ["grp_up", "7", "0", "12.5", "%", "0.050", "s", "Prometheus,", "last", "5m", "(300", "request(s))"]], out
    doc = load_report(tmp_path / "st" / "report.json")
    assert doc["groups"]["grp_up"]["metrics"]["source"] == "prometheus"
    assert doc["groups"]["grp_up"]["metrics"]["prometheus"] == prom.url


def test_status_refuses_a_prometheus_url_with_credentials(tmp_path, metrics_project, venv_path, capsys):
    inv = _inventory(tmp_path / "hosts.yml", {"grp_up": {}})
    code = run_cli(["status", "-i", inv, "--prometheus", "http://u:p@127.0.0.1:9090", "--artifacts",
                    str(tmp_path / "st")], metrics_project)
    assert code == 2
    assert "must not carry credentials" in capsys.readouterr().err
