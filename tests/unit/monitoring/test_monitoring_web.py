"""Prometheus and Alertmanager behind the role's web config (monitoring_web_config: TLS and basic auth), run for real.

The web config is rendered from the role's own task (roles/monitoring/tasks/monitor.yml) and checked with
`promtool check web-config`; the two servers are started on loopback ports with the command lines the role writes to
/etc/default (the plan's server_args), prometheus.yml and alertmanager.yml from the plan, and a rule that always fires.
Proven: both refuse a request without the password or with a wrong one, and plain http; Prometheus' own requests get
through with the plan's client settings (its self-scrape is up, its alert reaches Alertmanager over https with basic
auth). Skipped (with the reason) where the Debian packages prometheus and prometheus-alertmanager, or openssl, are
absent (tests/ci/prereqs.sh test installs prometheus). About 10 s.
"""

import base64
import json
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from monitoring_fixtures import ROLE, defaults, fleet  # noqa: E402

from ansible_collections.dspark.cluster.plugins.plugin_utils import _monitoring_plan as mp  # noqa: E402

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
PROMTOOL = shutil.which("promtool")
OPENSSL = shutil.which("openssl")
# bcrypt (cost 10) of PASSWORD, made with crypt(3): the servers check it, nothing here computes bcrypt.
PASSWORD = "s3cret-pw"
HASH = "$2b$10$abcdefghijklmnopqrstuuWRO.aPjfZIPa7LiT/idLvqe8ILJHybK"

needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
needs_servers = pytest.mark.skipif(not (PROMETHEUS and ALERTMANAGER and PROMTOOL and OPENSSL),
                                   reason="needs prometheus, prometheus-alertmanager, promtool and openssl")


def render_web_config(web):
    """The web config file as the role's task writes it (its copy content, templated by Ansible)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    try:
        from ansible.template import trust_as_template
    except ImportError:  # ansible-core before 2.19 templates any string
        def trust_as_template(value):
            return value
    tasks = yaml.safe_load((ROLE / "tasks" / "monitor.yml").read_text(encoding="utf-8"))
    task = next(t for t in tasks if t["name"].startswith("Write the web config"))
    templar = Templar(loader=DataLoader(), variables={"monitoring_web_config": web})
    return templar.template(trust_as_template(task["ansible.builtin.copy"]["content"]))


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url, user=None, password=None, timeout=5):
    """(status, body) of a GET; the certificate is not checked (a throw-away self-signed one)."""
    request = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
        request.add_header("Authorization", "Basic " + token)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return None, str(exc)


def wait_for(check, timeout=40, interval=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(interval)
    return None


@needs_promtool
def test_the_rendered_web_config_passes_promtool(tmp_path):
    cert, key = tmp_path / "mon.crt", tmp_path / "mon.key"
    web = {"basic_auth_users": {"dspark": HASH}}
    (tmp_path / "basic.yml").write_text(render_web_config(web))
    assert yaml.safe_load((tmp_path / "basic.yml").read_text()) == web
    subprocess.run([PROMTOOL, "check", "web-config", str(tmp_path / "basic.yml")], check=True, capture_output=True)
    # promtool loads the certificate and key: a path that is not there is refused before any service uses it.
    (tmp_path / "tls.yml").write_text(render_web_config({"tls_server_config": {"cert_file": str(cert), "key_file": str(key)}}))
    missing = subprocess.run([PROMTOOL, "check", "web-config", str(tmp_path / "tls.yml")], capture_output=True, text=True,
                             check=False)
    assert missing.returncode != 0 and "mon.crt" in missing.stdout + missing.stderr


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    if not (PROMETHEUS and ALERTMANAGER and PROMTOOL and OPENSSL):
        pytest.skip("needs prometheus, prometheus-alertmanager, promtool and openssl")
    work = tmp_path_factory.mktemp("web")
    conf = work / "conf"
    conf.mkdir()
    cert, key = work / "mon.crt", work / "mon.key"
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=monitor",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    settings = dict(defaults(), monitoring_config_dir=str(conf), monitoring_rules_file=str(work / "rules.yml"),
                    monitoring_prometheus_port=free_port(), monitoring_alertmanager_port=free_port(),
                    monitoring_scrape_interval="1s", monitoring_evaluation_interval="1s",
                    monitoring_web_config={"tls_server_config": {"cert_file": str(cert), "key_file": str(key)},
                                           "basic_auth_users": {"dspark": HASH}},
                    monitoring_web_username="dspark", monitoring_web_password=PASSWORD)
    groups, hostvars = fleet()
    out = mp.host_plan(groups, hostvars, settings, "router")
    assert out["problems"] == []
    web = out["web"]
    (conf / "web-config.yml").write_text(render_web_config(settings["monitoring_web_config"]))
    assert web["config_file"] == str(conf / "web-config.yml")
    subprocess.run([PROMTOOL, "check", "web-config", web["config_file"]], check=True, capture_output=True)
    (conf / "web-password").write_text(PASSWORD + "\n")  # as the role writes it
    assert web["password_file"] == str(conf / "web-password")
    (work / "prometheus.yml").write_text(yaml.safe_dump(out["prometheus"], sort_keys=False))
    (work / "alertmanager.yml").write_text(yaml.safe_dump(mp.alertmanager_config(settings), sort_keys=False))
    (work / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "web", "rules": [
        {"alert": "DsparkWebTest", "expr": "vector(1)", "labels": {"severity": "none"}}]}]}))
    subprocess.run([PROMTOOL, "check", "config", str(work / "prometheus.yml")], check=True, capture_output=True)
    logs = {name: open(work / ("%s.log" % name), "w", encoding="utf-8") for name in ("prometheus", "alertmanager")}
    procs = [
        subprocess.Popen([ALERTMANAGER] + shlex.split(out["server_args"]["alertmanager"])
                         + ["--config.file=%s" % (work / "alertmanager.yml"), "--storage.path=%s" % (work / "am")],
                         stdout=logs["alertmanager"], stderr=subprocess.STDOUT),
        subprocess.Popen([PROMETHEUS] + shlex.split(out["server_args"]["prometheus"])
                         + ["--config.file=%s" % (work / "prometheus.yml"), "--storage.tsdb.path=%s" % (work / "tsdb"),
                            # The first alert may go out before Alertmanager is discovered (dropped): resend it soon.
                            "--rules.alert.resend-delay=1s"],
                         stdout=logs["prometheus"], stderr=subprocess.STDOUT),
    ]
    try:
        ready = wait_for(lambda: all(get(url, "dspark", PASSWORD)[0] == 200 for url in web["urls"]))
        assert ready, [(work / ("%s.log" % name)).read_text()[-2000:] for name in logs]
        yield {"settings": settings, "plan": out, "work": work}
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        for handle in logs.values():
            handle.close()


@needs_servers
def test_the_command_lines_name_the_web_config(servers):
    args = servers["plan"]["server_args"]
    config = servers["plan"]["web"]["config_file"]
    assert args["prometheus"].endswith(" --web.config.file=%s" % config)
    assert args["alertmanager"].endswith("--cluster.listen-address= --web.config.file=%s" % config)
    assert [u.split("://")[0] for u in servers["plan"]["web"]["urls"]] == ["https", "https"]


@needs_servers
def test_both_refuse_without_the_password_and_over_plain_http(servers):
    for url in servers["plan"]["web"]["urls"]:
        assert get(url)[0] == 401, url
        assert get(url, "dspark", "wrong")[0] == 401, url
        assert get(url, "nobody", PASSWORD)[0] == 401, url
        plain = url.replace("https://", "http://")
        assert get(plain, "dspark", PASSWORD)[0] in (None, 400), plain


@needs_servers
def test_prometheus_scrapes_itself_and_its_alert_reaches_alertmanager(servers):
    prometheus, alertmanager = [u[:-len("/-/ready")] for u in servers["plan"]["web"]["urls"]]

    def self_up():
        status, body = get(prometheus + "/api/v1/query?" + urllib.parse.urlencode({"query": 'up{job="prometheus"}'}),
                           "dspark", PASSWORD)
        found = json.loads(body)["data"]["result"] if status == 200 else []
        return found and found[0]["value"][1] == "1"

    def delivered():
        status, body = get(alertmanager + "/api/v2/alerts", "dspark", PASSWORD)
        return status == 200 and any(a["labels"].get("alertname") == "DsparkWebTest" for a in json.loads(body))

    assert wait_for(self_up), get(prometheus + "/api/v1/targets", "dspark", PASSWORD)[1][-2000:]
    assert wait_for(delivered), (get(prometheus + "/api/v1/alertmanagers", "dspark", PASSWORD)[1],
                                 get(prometheus + "/api/v1/alerts", "dspark", PASSWORD)[1],
                                 get(alertmanager + "/api/v2/alerts", "dspark", PASSWORD),
                                 (servers["work"] / "prometheus.log").read_text()[-2000:])
