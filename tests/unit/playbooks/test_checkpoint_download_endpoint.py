"""The checkpoint role's download from another Hugging Face endpoint (issue #24 item 2): checkpoint_download_endpoint,
checkpoint_download_pip_index and checkpoint_download_probe_url.

- The URL rule (plugin_utils._role_rules URL_RE, run by preflight and by the role), without Ansible.
- validate.yml with the venv's ansible-playbook on local "nodes" (one pair per case, connection local): each refused
  value stops its group with one message naming the host, the variable, the value (credentials shown as ***) and the
  fix; accepted values give the download its HF_ENDPOINT, pip arguments and probe URL. A token with a plain http://
  endpoint is refused unless checkpoint_allow_insecure_endpoint is true (issue #41).
- download.yml itself against lab/hf_endpoint/hf_endpoint.py on 127.0.0.1 (a venv that already has huggingface_hub,
  so pip installs nothing: DSPARK_TEST_HF_PYTHON, skipped without one): the snapshot lands with refs/main, a second
  run changes nothing, and the sentinel token is nowhere in the -vvv output.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from ansible_collections.dspark.cluster.plugins.plugin_utils import _role_rules

ROOT = pathlib.Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "checkpoint"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
URL = _role_rules.URL_RE
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
REV = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"


@pytest.mark.parametrize("url", [
    "https://huggingface.co", "https://hf-mirror.example.org/", "http://10.231.0.1:5990", "http://10.231.0.1:5990/simple/",
    "https://pypi.example.org/simple/", "http://[fd00::1]:8080/hub", "https://hub.internal.:443/a/b~c/%20d/",
    "http://localhost", "https://mirror.example.org/api;v=1/@x",
])
def test_accepted(url):
    assert URL.match(url), url


@pytest.mark.parametrize("url", [
    "huggingface.co", "ftp://mirror.example.org", "file:///srv/hub", "https://", "http://:5990",
    "https://user:secret@hf.example.org", "https://token@hf.example.org/", "https://hf.example.org@evil.example/",
    "http://10.0.0.1:5990 /x", " http://10.0.0.1", "http://10.0.0.1\n", "http://10.0.0.1/\x1b[31m", "http://10.0.0.1/a\tb",
    "https://hf.example.org/?token=x", "https://hf.example.org/#x", "https://hf.example.org:99999999/",
    "https://hf.example.org/'quoted'", 'https://hf.example.org/"x"', "https://hf.exa mple.org", "https://hf_example.org",
    "https://hf.example.org/\u00e9",
])
def test_refused(url):
    assert not URL.match(url), url


def test_defaults_follow_the_public_hub():
    assert DEFAULTS["checkpoint_download_endpoint"] == "" and DEFAULTS["checkpoint_download_pip_index"] == ""
    assert DEFAULTS["checkpoint_download_probe_url"] == ""
    assert "'https://huggingface.co'" in VARS["_checkpoint_probe_url"]


PLAYBOOK = """
- name: Validate and record what the download would use
  hosts: all
  gather_facts: false
  tasks:
    - name: The role's validation
      ansible.builtin.include_role:
        name: dspark.cluster.checkpoint
        tasks_from: validate.yml
        public: true
    - name: Record the download's settings
      ansible.builtin.copy:
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        mode: "0644"
        content: >-
          {{ {'pip_args': _checkpoint_pip_args, 'env': _checkpoint_download_env, 'probe': _checkpoint_probe_url,
              'endpoint': _checkpoint_hf_endpoint} | to_json }}
"""

# case -> (group variables, expected message parts or None when it passes)
CASES = {
    "endpoint_credentials": ({"checkpoint_download_endpoint": "https://lab:s3cretPW@hf.example.org/"},
                             ["checkpoint_download_endpoint='https://***@hf.example.org/'", "carries credentials",
                              "Fix: remove them", "checkpoint_hf_token"]),
    "endpoint_space": ({"checkpoint_download_endpoint": "http://10.231.0.1:5990 /x"},
                       ["checkpoint_download_endpoint='http://10.231.0.1:5990 /x'", "whitespace or a control character",
                        'Fix: set the Hub\'s address', 'or "" for the public Hub']),
    "endpoint_control": ({"checkpoint_download_endpoint": "http://10.231.0.1:5990/\x1b[0m"},
                         ["checkpoint_download_endpoint='http://10.231.0.1:5990/\\x1b[0m'", "control character"]),
    "endpoint_scheme": ({"checkpoint_download_endpoint": "ftp://mirror.example.org"},
                        ["checkpoint_download_endpoint='ftp://mirror.example.org'", "is not an http:// or https:// URL"]),
    "endpoint_query": ({"checkpoint_download_endpoint": "https://hf.example.org/?x=1"},
                       ["checkpoint_download_endpoint='https://hf.example.org/?x=1'", "no query"]),
    "index_credentials": ({"checkpoint_download_pip_index": "http://me:pw@10.0.0.1/simple/"},
                          ["checkpoint_download_pip_index='http://***@10.0.0.1/simple/'", "carries credentials",
                           "Fix: remove them", "~/.netrc"]),
    "index_scheme": ({"checkpoint_download_pip_index": "pypi.example.org/simple"},
                     ["checkpoint_download_pip_index='pypi.example.org/simple'", "https://pypi.example.org/simple/",
                      "pip's own configuration"]),
    "probe_scheme": ({"checkpoint_download_probe_url": "huggingface.co"},
                     ["checkpoint_download_probe_url='huggingface.co'", "or \"\" to probe the endpoint"]),
    # Issue #41: a token over plain http is refused unless checkpoint_allow_insecure_endpoint says so (as the labs do).
    "http_token": ({"checkpoint_download_endpoint": "http://hf.example.org/", "checkpoint_hf_token": "hf_tokenSENTINEL_41"},
                   ["checkpoint_download_endpoint='http://hf.example.org/' is plain http:// and checkpoint_hf_token is set",
                    "Fix: use the endpoint's https:// URL", "checkpoint_allow_insecure_endpoint: true"]),
    "lab": ({"checkpoint_download_endpoint": "http://10.231.0.1:5990/", "checkpoint_download_pip_index": "http://10.231.0.1:5990/simple/"},
            None),
    "lab_token": ({"checkpoint_download_endpoint": "http://10.231.0.1:5990/", "checkpoint_hf_token": "hf_tokenSENTINEL_41",
                   "checkpoint_allow_insecure_endpoint": True}, None),
    "https_token": ({"checkpoint_download_endpoint": "https://hf.example.org/", "checkpoint_hf_token": "hf_tokenSENTINEL_41"},
                    None),
    "https_index": ({"checkpoint_download_pip_index": "https://pypi.example.org/simple/"}, None),
    "defaults": ({}, None),
    "not_downloading": ({"checkpoint_download": False, "checkpoint_download_endpoint": "not a url"}, None),
}


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    out = tmp_path_factory.mktemp("endpoint")
    groups = {}
    for case, (variables, dummy) in CASES.items():
        group_vars = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                      "dspark_group": case, "dspark_checkpoint_mode": "scp", "dspark_model": "lab-org/tiny",
                      "dspark_model_revision": REV, "dspark_hf_cache": str(out / "hf"), "checkpoint_download": True}
        group_vars.update(variables)
        groups[case] = {"vars": group_vars, "hosts": {
            "%s-0" % case: {"dspark_rank": 0, "dspark_fabric_address": "10.77.77.1"},
            "%s-1" % case: {"dspark_rank": 1, "dspark_fabric_address": "10.77.77.2"}}}
    (out / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"dspark": {"children": groups}}}}))
    (out / "play.yml").write_text(PLAYBOOK)
    environ = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
                   ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    done = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(out / "hosts.yml"), "-e", "out=%s" % out, str(out / "play.yml")],
                          cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300, check=False)
    report = json.loads(done.stdout)
    failed = {}
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                if result.get("failed"):
                    failed[host] = result.get("msg", "")
    return out, failed, done.stdout + done.stderr


@pytest.mark.parametrize("case", [c for c, (dummy, expected) in CASES.items() if expected])
def test_a_refused_url_stops_its_group_naming_variable_value_and_fix(validated, case):
    out, failed, text = validated
    for host in ("%s-0" % case, "%s-1" % case):
        message = failed.get(host)
        assert message, (host, sorted(failed))
        assert message.startswith("%s: " % host), message  # one line per problem follows
        for part in CASES[case][1]:
            assert part in message, (part, message)
        assert "Fix: " in message
        assert not (out / ("%s.json" % host)).exists()
    assert "s3cretPW" not in text and "me:pw" not in text  # the refused credentials are never shown
    assert "hf_tokenSENTINEL_41" not in text                  # nor the token


def test_accepted_urls_set_hf_endpoint_pip_arguments_and_probe(validated):
    out, failed, dummy = validated
    assert not [h for h in failed if h.split("-")[0] in ("lab", "lab_token", "https_token", "https_index", "defaults",
                                                         "not_downloading")], failed
    assert json.loads((out / "lab_token-1.json").read_text())["env"]["HF_ENDPOINT"] == "http://10.231.0.1:5990"
    lab = json.loads((out / "lab-1.json").read_text())
    assert lab["endpoint"] == "http://10.231.0.1:5990"
    assert lab["env"]["HF_ENDPOINT"] == "http://10.231.0.1:5990" and lab["env"]["HF_HOME"] == str(out / "hf")
    assert lab["probe"] == "http://10.231.0.1:5990"
    assert lab["pip_args"] == ["--index-url", "http://10.231.0.1:5990/simple/", "--trusted-host", "10.231.0.1:5990"]
    https = json.loads((out / "https_index-1.json").read_text())
    assert https["pip_args"] == ["--index-url", "https://pypi.example.org/simple/"]
    default = json.loads((out / "defaults-1.json").read_text())
    assert default["pip_args"] == [] and "HF_ENDPOINT" not in default["env"] and default["probe"] == "https://huggingface.co"
    assert set(default["env"]) == {"HF_HOME", "HF_HUB_DISABLE_XET", "HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT"}


# -- download.yml against the lab endpoint ---------------------------------------------------------------------------

sys.path.insert(0, str(ROOT / "tests" / "unit" / "lab"))
from test_hf_endpoint import REPO_ID, REV as LAB_REV, hf_python, make_hub, start, stop  # noqa: E402

DOWNLOAD_PLAYBOOK = """
- name: The checkpoint role's download on a local "source"
  hosts: all
  gather_facts: false
  tasks:
    - name: Download
      ansible.builtin.include_role:
        name: dspark.cluster.checkpoint
        tasks_from: download.yml
"""


@pytest.mark.skipif(hf_python() is None, reason="huggingface_hub is not installed (set DSPARK_TEST_HF_PYTHON)")
def test_the_download_tasks_fetch_the_snapshot_from_the_endpoint_without_showing_the_token(tmp_path):
    dummy, dummy, meta = make_hub(tmp_path / "served", big=300000)
    (tmp_path / "wheels").mkdir()
    proc, base, log = start(tmp_path / "served", "--wheels", str(tmp_path / "wheels"))
    token = (tmp_path / "served" / "token").read_text().strip()
    venv = pathlib.Path(hf_python()).parent.parent
    if not (venv / "pyvenv.cfg").exists():
        stop(proc)
        pytest.skip("%s is not in a venv (the role installs into checkpoint_download_venv)" % hf_python())
    cache = tmp_path / "node" / "hf"
    inventory = {"all": {"hosts": {"src": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "dspark_model": REPO_ID, "dspark_model_revision": LAB_REV, "dspark_hf_cache": str(cache),
        "checkpoint_download": True, "checkpoint_download_endpoint": base, "checkpoint_download_pip_index": base + "/simple/",
        "checkpoint_download_venv": str(venv), "checkpoint_download_package": "huggingface_hub",
        "checkpoint_install_packages": False, "checkpoint_download_retries": 1, "checkpoint_download_retry_delay": 1}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "vars.yml").write_text(yaml.safe_dump({"checkpoint_hf_token": token}))
    (tmp_path / "play.yml").write_text(DOWNLOAD_PLAYBOOK)
    environ = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    environ.pop("HF_TOKEN", None)
    command = [ANSIBLE_PLAYBOOK, "-vvv", "-i", str(tmp_path / "hosts.yml"), "-e", "@%s" % (tmp_path / "vars.yml"),
               str(tmp_path / "play.yml")]
    wrong = "hf_wrongSENTINEL_5d0c"
    (tmp_path / "wrong.yml").write_text(yaml.safe_dump({"checkpoint_hf_token": wrong, "dspark_hf_cache": str(tmp_path / "other")}))
    try:
        runs = [subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300, check=False)
                for dummy in range(2)]
        # A wrong token: the run stops with huggingface_hub's reason (401), the token in no output.
        refused = subprocess.run(command[:-1] + ["-e", "@%s" % (tmp_path / "wrong.yml"), command[-1]], cwd=ROOT, env=environ,
                                 capture_output=True, text=True, timeout=300, check=False)
    finally:
        stop(proc)
    assert refused.returncode != 0
    assert "src (checkpoint source): downloading %s@%s from %s" % (REPO_ID, LAB_REV, base) in refused.stdout
    assert re.search(r"\(\d attempt\(s\)\): GatedRepoError: 401", refused.stdout) and "Invalid credentials" in refused.stdout, refused.stdout[-3000:]
    assert wrong not in refused.stdout + refused.stderr and token not in refused.stdout + refused.stderr
    for run in runs:
        assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
        assert token not in run.stdout + run.stderr
        assert "HF_ENDPOINT=%s" % base in run.stdout  # -vvv shows the environment: the endpoint, never the token
    assert "changed=1" in runs[0].stdout.split("PLAY RECAP", 1)[1]
    assert "changed=0" in runs[1].stdout.split("PLAY RECAP", 1)[1]
    model = cache / "hub" / ("models--" + REPO_ID.replace("/", "--"))
    assert (model / "refs" / "main").read_text() == LAB_REV
    for name, item in meta.items():
        assert (model / "snapshots" / LAB_REV / name).read_bytes() == item["data"], name
    text = log.read_text()
    assert token not in text and wrong not in text
    assert " auth=ok " in text and " auth=missing " in text and " auth=wrong " in text  # the probe: no token, 401
