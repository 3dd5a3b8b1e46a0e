"""The roles' templates rendered with hostile values: nothing a value holds can add keys, lines or options.

tests/templates/render.yml runs the venv's ansible-playbook on the controller only (connection local, two local
"nodes" of one serving group), renders serve's compose file, secrets.env and api-keys.yaml per rank, docker_runtime's
proxy drop-in, environment file and daemon.json and nfs_export's exports line into a temporary directory, and the test parses them
back. About 10 s per run on the loaded 2-core machine.
"""

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TEMPLATES = os.path.join(ROOT, "tests", "templates")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
KEYS = ["key-one-1234-5678", "key-two-5678-9012"]
HOSTILE = "x\n    privileged: true\n    volumes: ['/:/host']"


def render(tmp_path, extra):
    out = tmp_path / "out"
    out.mkdir()
    command = [ANSIBLE_PLAYBOOK, "-i", os.path.join(TEMPLATES, "inventory.yml"), "-e", "out=%s" % out,
               "-e", json.dumps(extra), os.path.join(TEMPLATES, "render.yml")]
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=180, check=False)
    return run, out


def compose(out, host):
    return yaml.safe_load((out / ("%s-compose.yaml" % host)).read_text())


def unescape(value):
    """What compose makes of a value: `$$` is a literal `$`."""
    if isinstance(value, list):
        return [unescape(v) for v in value]
    return value.replace("$$", "$") if isinstance(value, str) else value


def env_file(text):
    """KEY='value' lines (single quotes: literal for compose and systemd alike) -> dict; comments skipped."""
    out = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)='([^'\n]*)'$", line)
        assert match, "not a KEY='value' line: %r" % line
        out[match.group(1)] = match.group(2)
    return out


HEAD_LOG = ("(APIServer pid=1) INFO 11-30 19:00:00 [api_utils.py:273] non-default args: {'model_tag': 'm', "
            "'api_key': ['%s', '%s'], 'port': 8888}\nclient sent %s\nHF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz" % (KEYS[0], KEYS[1], KEYS[1]))


@pytest.fixture(scope="module")
def benign(tmp_path_factory):
    run, out = render(tmp_path_factory.mktemp("benign"), {"serve_api_keys": KEYS, "fake_head_log": HEAD_LOG})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return out


def test_keys_reach_rank_0_only_and_never_argv(benign):
    head, worker = compose(benign, "tpl-head"), compose(benign, "tpl-worker")
    text = (benign / "tpl-head-compose.yaml").read_text() + (benign / "tpl-worker-compose.yaml").read_text()
    assert not any(key in text for key in KEYS)
    assert "--api-key" not in text
    command = head["services"]["vllm"]["command"]
    assert command[-2:] == ["--config", "/opt/dspark-keys/api-keys.yaml"]
    assert "/etc/dspark/serve/api-keys.yaml:/opt/dspark-keys/api-keys.yaml:ro" in head["services"]["vllm"]["volumes"]
    assert "--config" not in worker["services"]["vllm"]["command"]
    assert env_file((benign / "tpl-head-secrets.env").read_text()) == {"VLLM_API_KEY": KEYS[0]}
    assert env_file((benign / "tpl-worker-secrets.env").read_text()) == {}
    assert yaml.safe_load((benign / "tpl-head-api-keys.yaml").read_text()) == {"api-key": KEYS}
    assert (benign / "tpl-worker-api-keys.yaml").read_text().strip() == ""
    for doc in (head, worker):
        assert doc["services"]["vllm"]["env_file"] == ["secrets.env"]
        assert "VLLM_API_KEY" not in doc["services"]["vllm"]["environment"]
        # The shell only execs its arguments, quoted: no word-splitting, no globbing, no keys.
        assert doc["services"]["vllm"]["entrypoint"] == ["/bin/sh", "-c", 'exec "$$@"', "dspark-serve"]


def test_the_model_cache_is_read_only_in_every_container(benign):
    """Issue #41: the node's cache is read-write here (render.yml: cache_read_only false, not an NFS client), and
    still every container mounts it read-only."""
    for host in ("tpl-head", "tpl-worker"):
        mounts = [v for v in compose(benign, host)["services"]["vllm"]["volumes"] if v.split(":")[1] == "/cache/huggingface"]
        assert len(mounts) == 1 and mounts[0].endswith(":ro"), mounts


def test_no_rank_restarts_alone(benign):
    """Issue #13 point 5: after a reboot or a crash Docker brings no rank back by itself; the group restarts as one unit
    (playbooks/serve.yml, dspark-fleet watch)."""
    for host in ("tpl-head", "tpl-worker"):
        assert compose(benign, host)["services"]["vllm"]["restart"] == "no"


PROXY_URL = "http://user:p%41ss$HOME\\x@proxy.invalid:3128"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """One run with hostile serve scalars and a proxy password holding %, $ and a backslash (both must render)."""
    extra = {"serve_api_key": KEYS[0], "serve_container_name": HOSTILE, "serve_shm_size": HOSTILE,
             "serve_stop_grace_period": "10s\nprivileged: true", "serve_project": "p$HOME\"'",
             "serve_extra_env": {"EVIL": HOSTILE, "DOLLAR": "$HOME ${PATH}"},
             "serve_extra_args": ["--x", "a\"b\n  c: d", "*", "$(id)"],
             "serve_served_model_name": "m\nprivileged: true",
             "docker_runtime_proxy": {"http_proxy": PROXY_URL, "https_proxy": PROXY_URL, "no_proxy": "localhost,10.0.0.0/8"}}
    run, out = render(tmp_path_factory.mktemp("hostile"), extra)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "p%41ss" not in run.stdout + run.stderr
    return out


def test_hostile_scalars_stay_values(benign, hostile):
    out = hostile
    good, bad = compose(benign, "tpl-head"), compose(out, "tpl-head")
    assert bad.keys() == good.keys() and bad["services"].keys() == good["services"].keys()
    service = bad["services"]["vllm"]
    assert service.keys() == good["services"]["vllm"].keys() - {"volumes"} | {"volumes"}
    assert "privileged" not in service and len(service["volumes"]) == 2
    assert unescape(service["container_name"]) == HOSTILE
    assert unescape(service["shm_size"]) == HOSTILE
    assert unescape(bad["name"]) == "p$HOME\"'"
    assert unescape(service["environment"]["EVIL"]) == HOSTILE
    assert unescape(service["environment"]["DOLLAR"]) == "$HOME ${PATH}"
    assert unescape(service["command"])[-4:] == ["--x", "a\"b\n  c: d", "*", "$(id)"]
    # One key: VLLM_API_KEY only, no --config file.
    assert "--config" not in service["command"]
    assert env_file((out / "tpl-head-secrets.env").read_text()) == {"VLLM_API_KEY": KEYS[0]}
    # The comment lines hold the group and members as JSON: still comments.
    head_lines = (out / "tpl-head-compose.yaml").read_text().splitlines()
    assert all(line.startswith(("#", " ", "name:", "services:")) for line in head_lines if line)


def test_bad_keys_paths_and_argv_keys_are_refused(tmp_path):
    extra = {"serve_api_keys": ["ok-key-1234-5678", "bad key'$ long enough"], "dspark_hf_cache": "/var/lib/hf\n    privileged: true",
             "serve_jit_cache_dir": "/var/lib/jit:/etc", "serve_extra_args": ["--api_key=abc", "--config", "x.yaml"],
             "serve_extra_env": {"VLLM_API_KEY": "in-compose"}}
    run, out = render(tmp_path, extra)
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert not list(out.iterdir())
    assert "serve_api_keys=<not shown: secret> has 1 key(s) with white space" in output and "bad key" not in output
    assert "serve_extra_args='<holds --api-key, --config>' puts --api-key and --config on vLLM's command line" in output
    assert "serve_extra_env='<sets VLLM_API_KEY>' sets VLLM_API_KEY" in output and "in-compose" not in output
    assert "dspark_hf_cache='/var/lib/hf\\n    privileged: true' is not an absolute path" in output
    assert "serve_jit_cache_dir='/var/lib/jit:/etc' is not an absolute path" in output


def test_saved_rank_logs_are_redacted(benign):
    head = (benign / "logs" / "tpl_pair" / "rank0-tpl-head.log").read_text()
    assert head.splitlines() == [
        "(APIServer pid=1) INFO 11-30 19:00:00 [api_utils.py:273] non-default args: {'model_tag': 'm', "
        "'api_key': ['[REDACTED]'], 'port': 8888}", "client sent [REDACTED]", "HF_TOKEN=[REDACTED]", "stderr line"]
    assert (benign / "logs" / "tpl_pair" / "rank1-tpl-worker.log").read_text().strip() == "worker line"


# --------------------------------------------------------------------------- exports and the proxy

def exports_lines(out):
    text = (out / "tpl-worker-dspark.exports").read_text()
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_exports_line_and_proxy_files(benign):
    assert exports_lines(benign) == ["/var/lib/dspark/hf 10.77.77.1(ro,sync,no_subtree_check,root_squash)"]
    assert not (benign / "tpl-head-dspark.exports").exists()
    drop_in = (benign / "http-proxy.conf").read_text()
    directives = [line for line in drop_in.splitlines() if line and not line.startswith("#")]
    assert directives == ["[Service]", "EnvironmentFile=/etc/docker/http-proxy.env"]
    assert env_file((benign / "http-proxy.env").read_text()) == {}


def test_proxy_password_with_percent_dollar_backslash_is_literal(hostile):
    url = PROXY_URL
    assert env_file((hostile / "http-proxy.env").read_text()) == {"HTTP_PROXY": url, "HTTPS_PROXY": url, "NO_PROXY": "localhost,10.0.0.0/8"}
    drop_in = (hostile / "http-proxy.conf").read_text()
    assert "p%41ss" not in drop_in and "[Service]\nEnvironmentFile=/etc/docker/http-proxy.env\n" in drop_in


def test_unsafe_exports_and_proxy_values_are_refused(tmp_path):
    extra = {"dspark_hf_cache": "/var/lib/hf(rw)", "nfs_export_clients": ["10.77.77.1\n"],
             "nfs_export_options": ["ro", "root_squash", "sec=sys,rw"],
             "docker_runtime_proxy": {"http_proxy": "http://u:it's-secret@p:1", "https_proxy": "http://p:1\nX=1",
                                      "no_proxy": ""}}
    run, out = render(tmp_path, extra)
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert not list(out.glob("*.exports")) and not list(out.glob("http-proxy*"))
    assert "dspark_hf_cache='/var/lib/hf(rw)' cannot be exported safely" in output
    assert "nfs_export_clients=['10.77.77.1\\n'] holds '10.77.77.1\\n', not one address or network" in output
    assert "nfs_export_options=['ro', 'root_squash', 'sec=sys,rw'] contains sec=sys,rw" in output
    # The rules module's wording (plugin_utils._role_rules, docker_runtime.proxy): the keys named, the value not shown.
    assert "docker_runtime_proxy=<not shown: secret> has http_proxy, https_proxy with a single quote, a line break" \
        in " ".join(output.split()), output[-3000:]
    assert "it's-secret" not in output


def test_daemon_json_has_no_insecure_registries_by_default(benign):
    config = json.loads((benign / "daemon.json").read_text())
    assert "insecure-registries" not in config
    assert config["runtimes"] == {"nvidia": {"path": "nvidia-container-runtime", "args": []}}
    assert config["live-restore"] is False and config["log-driver"] == "json-file"


def test_insecure_registries_are_added_to_daemon_options(tmp_path):
    """Issue #15 point 2: the lab registry (plain HTTP) is listed in daemon.json, beside any the options hold."""
    options = {"log-driver": "json-file", "insecure-registries": ["registry.lab:5000"]}
    run, out = render(tmp_path, {"docker_runtime_insecure_registries": ["10.231.0.250:5000", "registry.lab:5000",
                                                                        "reg-1.example.org", "10.0.0.0/8", "[fd00::5]:5000"],
                                 "docker_runtime_daemon_options": options})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    config = json.loads((out / "daemon.json").read_text())
    assert config["insecure-registries"] == ["registry.lab:5000", "10.231.0.250:5000", "reg-1.example.org", "10.0.0.0/8",
                                             "[fd00::5]:5000"]
    assert config["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"


def test_malformed_insecure_registries_are_refused(tmp_path):
    bad = ["http://10.231.0.250:5000", "10.231.0.250:5000/v2", "reg:70000", "reg:0", "a b:5000", "-reg:5000", ""]
    run, out = render(tmp_path, {"docker_runtime_insecure_registries": ["10.231.0.250:5000"] + bad})
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert not (out / "daemon.json").exists()
    # The rules module's wording (plugin_utils._role_rules, docker_runtime.insecure_registries): every bad entry named.
    assert "holds %s: each entry must be HOST:PORT" % ", ".join(repr(b) for b in bad) in " ".join(output.split()), \
        output[-3000:]
    assert "invalid docker_runtime input, nothing was changed" in output


RECIPE_ONLY = ("--kv-cache-dtype", "--block-size", "--speculative-config", "--tokenizer-mode",
               "--moe-backend", "--reasoning-parser", "--enable-flashinfer-autotune", "--gpu-memory-utilization")


def test_recipe_flags_on_by_default_and_only_the_portable_launch_without_them(benign, tmp_path):
    """serve_recipe_args: false (another model, the lab's CPU build of vLLM) keeps the multi-node launch, drops the
    recipe's DeepSeek-V4/GB10 flags, and keeps serve_extra_args last."""
    recipe = unescape(compose(benign, "tpl-worker")["services"]["vllm"]["command"])
    assert all(flag in recipe for flag in RECIPE_ONLY)
    assert "--trust-remote-code" not in recipe  # only with serve_trust_remote_code (#26)
    run, out = render(tmp_path, {"serve_recipe_args": False, "serve_extra_args": ["--dtype", "float32"]})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    portable = unescape(compose(out, "tpl-worker")["services"]["vllm"]["command"])
    assert not [flag for flag in RECIPE_ONLY if flag in portable]
    assert portable[-2:] == ["--dtype", "float32"]
    flags = [arg for arg in portable[:-2] if arg.startswith("--")]
    assert flags == [arg for arg in recipe if arg in flags]
    for flag in ("--tensor-parallel-size", "--distributed-executor-backend", "--nnodes", "--node-rank", "--master-addr",
                 "--master-port", "--headless", "--revision", "--max-model-len"):
        assert flag in portable
