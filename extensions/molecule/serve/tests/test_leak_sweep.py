"""Leak sweep (issue #13 point 6): the lab-only sentinel secrets (vars/sentinels.yml and the lab's serve_api_key) that
converge (site.yml at -vvv --diff) handled appear in their 0600 files and nowhere else: not in
the Ansible log, not in what an unprivileged user saw in `ps` and `systemctl show docker` while the playbooks ran
(prepare.yml's sampler), not in the nodes' journal, not in saved failure logs.

It runs before the other verify tests (conftest.py): they put the API key on curl's command line."""

import os
import pathlib
import time

import pytest
import yaml
from labhosts import lab_node

ROOT = pathlib.Path(__file__).resolve().parents[4]
SCENARIO = pathlib.Path(__file__).resolve().parents[1]
NODES = ("spark-head", "spark-worker")
SWEEP = "/var/tmp/dspark-leak-sweep"

_extra = yaml.safe_load((SCENARIO / "vars" / "sentinels.yml").read_text())
_lab = yaml.safe_load((ROOT / "inventories" / "lab" / "group_vars" / "dspark.yml").read_text())
SENTINELS = {
    "serve_api_key": _lab["serve_api_key"],
    "docker_runtime_proxy password": _extra["lab_sentinel_proxy_password"],
    "checkpoint_hf_token": _extra["checkpoint_hf_token"],
}


def hits(text):
    return sorted(name for name, value in SENTINELS.items() if value in text)


@pytest.fixture(scope="module")
def samples():
    """Stop both samplers, then what each saw: {node: (samples taken, ps lines, systemctl lines, last systemctl)}."""
    for name in NODES:
        lab_node(name).run("touch %s/stop" % SWEEP)
    time.sleep(1.5)
    out = {}
    for name in NODES:
        node = lab_node(name)
        # the bracket keeps this check's own `sh -c` command line from matching
        assert node.run("pgrep -f '[d]spark-leak-sampler'").rc != 0, "%s: the sampler did not stop" % name
        names = ("samples", "ps.hits", "systemctl.hits", "systemctl.last")
        files = {f: node.run("cat %s/%s" % (SWEEP, f)).stdout for f in names}
        out[name] = (int(files["samples"] or 0), files["ps.hits"].splitlines(), files["systemctl.hits"].splitlines(),
                     files["systemctl.last"])
    return out


def test_sentinels_reached_their_private_files():
    """The sweep means something only if the sentinels were really in play."""
    for name in NODES:
        env = lab_node(name).file("/etc/docker/http-proxy.env")
        assert env.mode == 0o600 and SENTINELS["docker_runtime_proxy password"] in env.content_string
    secrets = lab_node("spark-head").file("/etc/dspark/serve/secrets.env")
    assert secrets.mode == 0o600 and SENTINELS["serve_api_key"] in secrets.content_string


@pytest.mark.parametrize("name", NODES)
def test_an_unprivileged_user_saw_no_secret_in_ps_or_systemctl(samples, name):
    taken, ps_lines, systemctl_lines, last = samples[name]
    assert taken > 100, "%s: only %d samples: the sampler did not run through converge" % (name, taken)
    canary = "dspark-sweep-canary-%s" % name
    # The canary (prepare's own `sh -c ... canary`, run as root) proves nobody sees other users' command lines.
    assert any(canary in line for line in ps_lines), "%s: the sampler never saw the canary: %s" % (name, ps_lines)
    leaked = [line for line in ps_lines if canary not in line]
    assert leaked == [], "%s: a secret on a command line: %s" % (name, leaked)
    assert systemctl_lines == [], "%s: a secret in systemctl show docker: %s" % (name, systemctl_lines)
    # It really read the unit as nobody: the proxy drop-in's file is named, its values are not.
    assert "EnvironmentFiles=/etc/docker/http-proxy.env" in last, last[-2000:]


@pytest.mark.parametrize("name", NODES)
def test_no_secret_in_the_journal(name):
    journal = lab_node(name).check_output("journalctl --no-pager -o cat")
    assert "sudo" in journal or "Started" in journal, "%s: the journal is empty" % name
    assert hits(journal) == [], "%s: the journal holds %s" % (name, hits(journal))


def test_no_secret_in_the_verbose_log():
    log = pathlib.Path(os.environ["DSPARK_LEAK_SWEEP_LOG"]).read_text(errors="replace")
    # It is the whole -vvv --diff record of prepare and converge (site.yml).
    assert "ESTABLISH SSH CONNECTION" in log and log.count("PLAY RECAP") >= 2
    assert "TASK [dspark.cluster.serve :" in log and "TASK [dspark.cluster.docker_runtime :" in log
    assert "--- before" in log, "no diff in the log: --diff did not reach it"
    found = {name: [line[:200] for line in log.splitlines() if value in line][:5] for name, value in SENTINELS.items()}
    assert {k: v for k, v in found.items() if v} == {}


def test_no_secret_in_saved_logs():
    saved = ROOT / ".dspark-logs"
    texts = [p.read_text(errors="replace") for p in saved.rglob("*") if p.is_file()] if saved.is_dir() else []
    assert [hits(t) for t in texts if hits(t)] == []
