"""dspark-fleet bundle: the CLI contract (argparse, --json, exit codes) and the tarball's content, over a fake runner
that plays playbooks/bundle.yml (each node's raw state and secrets in the private dir), status.yml (events, set_stats)
and router_status.yml (its report file). No Ansible run, no lab."""

import json
import os
import shutil
import tarfile

import pytest
import yaml

from conftest import run_cli
from dspark_fleet import bundle, cli, runner_exec
from dspark_fleet.runner_exec import RunResult

KEY = "unit-bundle-key-0a1b2c"
HF = "hf_" + "Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2"
NODE_ONLY = "node-templated-pw-77aa"      # only the node side knows it (templated, or decrypted from a vault)


def write_inventory(path):
    children = {"grp_a": {"vars": {"dspark_group": "grp_a"},
                          "hosts": {"a-head": {"dspark_rank": 0}, "a-worker": {"dspark_rank": 1}}}}
    tops = {"dspark": {"vars": {"dspark_model": "org/model", "dspark_model_revision": "f" * 40,
                                "serve_api_key": KEY, "serve_extra_env": {"HF_TOKEN": HF}},
                       "children": children},
            "dspark_router": {"hosts": {"router": {}}}}
    path.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local"}, "children": tops}}))
    return str(path)


def node_state(host, rank, dead=False):
    log = "".join("2026-12-05T00:00:%02dZ line %d\n" % (i % 60, i) for i in range(50))
    log += "INFO non-default args: {'api_key': ['%s'], 'port': 8888}\nAuthorization: Bearer %s\n" % (KEY, KEY)
    return {
        "versions": {"os": "Ubuntu 24.04", "kernel": "6.11.0-1016-nvidia", "driver": "absent", "docker": "27.5.1"},
        "fabric": {"links": [{"ifname": "enp1s0f1np1", "mtu": 9000}], "addresses": [], "routes": [],
                   "roce_gids": [{"hca": "rxe0", "index": 3, "gid": "::ffff:192.168.102.%d" % (rank + 1)}],
                   "rdma_link": "absent", "sysctls": {"net.core.rmem_max": "268435456"}},
        "container": {"present": True, "name": "dspark-vllm", "image": "dspark-lab/vllm-sim:latest",
                      "image_id": "sha256:" + "a" * 64, "repo_digests": [], "vllm": "unknown (No module named vllm)",
                      "env": ["NCCL_IB_HCA==rxe0", "GLOO_SOCKET_IFNAME=enp1s0f1np1", "VLLM_API_KEY=" + KEY,
                              "HF_TOKEN=" + HF, "DSPARK_PW=" + NODE_ONLY],
                      "entrypoint": ["vllm"], "command": ["serve", "m", "--api-key", KEY, "--port", "8888"],
                      "state": {"Status": "exited" if dead else "running", "ExitCode": 137 if dead else 0},
                      "compose_file": "services:\n  vllm:\n    environment:\n      HF_TOKEN: %s\n" % HF},
        "checkpoint": {"manifest": "/m.json", "present": True, "file_count": 3, "total_bytes": 1000,
                       "sha256": "b" * 64},
        "log": {"ok": True, "text": log, "error": None},
    }


def status_events(dead_host):
    worker = {"state": "exited" if dead_host else "running", "exit_code": "137" if dead_host else "0",
              "restarts": "0", "image": "sha256:x"}
    facts = {
        "a-head": {"rank": "0", "api_models": ["m"],
                   "container": {"state": "running", "exit_code": "0", "restarts": "0", "image": "sha256:x"}},
        "a-worker": {"rank": "1", "api_models": None, "container": worker},
    }
    events = [{"event": "runner_on_ok",
               "event_data": {"host": h, "task": "Note this rank's status",
                              "res": {"ansible_facts": {"serve_status": f}}}}
              for h, f in facts.items()]
    text = ""
    if dead_host:
        first = {"host": dead_host, "rank": 1, "state": "exited", "label": "exited (137, killed)", "exit_code": "137",
                 "killed": True, "finished": "2026-12-05T00:00:00.000000000"}
        events.append({"event": "runner_on_ok",
                       "event_data": {"host": "a-head", "task": "Note the rank that failed first",
                                      "res": {"ansible_facts": {"serve_status_first_failure": first}}}})
        text = "rank 1 on %s failed first: its container exited (137, killed); rank 0 on a-head: lost its peer " \
               "rank 1 (consequence); " % dead_host
        events.append({"event": "runner_on_failed", "event_data": {
            "host": "a-head", "task": "Check that the group serves",
            "res": {"msg": "group grp_a is not serving: %s Authorization: Bearer %s" % (text, KEY)}}})
    events.append({"event": "playbook_on_stats", "event_data": {"artifact_data": {"dspark_status": {
        "grp_a": {"serving": not dead_host, "first_failure": None, "text": text, "metrics": None}}}}})
    return events


class FakeRunner:
    def __init__(self, dead=None, node_rc=0, skip_host=None):
        self.dead, self.node_rc, self.skip_host = dead, node_rc, skip_host
        self.calls = []

    def __call__(self, spec, event_handler=None, cancel_callback=None):
        self.calls.append(spec)
        extra = {}
        for i, arg in enumerate(spec.args):
            if arg == "-e" and spec.args[i + 1].startswith("{"):
                extra.update(json.loads(spec.args[i + 1]))
        name = os.path.basename(spec.playbook)
        if name == "bundle.yml":
            for rank, host in enumerate(("a-head", "a-worker")):
                if host == self.skip_host:
                    continue
                state = node_state(host, rank, self.dead == host)
                doc = {"host": host, "rc": self.node_rc, "stdout": json.dumps(state),
                       "stderr": "boom" if self.node_rc else "", "msg": "",
                       "secrets": {"serve_api_key": KEY, "serve_extra_env": {"HF_TOKEN": HF}, "db_password": NODE_ONLY}}
                with open(os.path.join(extra["bundle_private_dir"], host + ".json"), "w", encoding="utf-8") as fh:
                    json.dump(doc, fh)
            if self.skip_host:
                event_handler({"event": "runner_on_unreachable", "event_data": {
                    "host": self.skip_host, "task": "Read the node's versions", "res": {"msg": "ssh: no route"}}})
                return RunResult(status="failed", rc=4)
            return RunResult(status="successful", rc=0)
        if name == "status.yml":
            for event in status_events(self.dead):
                event_handler(event)
            return RunResult(status="failed" if self.dead else "successful", rc=2 if self.dead else 0)
        if name == "router_status.yml":
            with open(extra["router_report_file"], "w", encoding="utf-8") as fh:
                json.dump({"router": {"servers": [{"name": "grp_a", "status": "UP", "in_rotation": True}]}}, fh)
            return RunResult(status="successful", rc=0)
        raise AssertionError("unexpected playbook %s" % spec.playbook)


@pytest.fixture
def project(tmp_path, fake_project):
    """The fake project with a playbooks/bundle.yml beside its others (the fake runner never runs it)."""
    root = tmp_path / "project"
    root.mkdir()
    for name in ("ansible.cfg", "site.yml", "collections"):
        os.symlink(fake_project / name, root / name)
    (root / "playbooks").mkdir()
    for name in os.listdir(fake_project / "playbooks"):
        os.symlink(fake_project / "playbooks" / name, root / "playbooks" / name)
    (root / "playbooks" / "bundle.yml").write_text("---\n- hosts: dspark\n  tasks: []\n")
    (root / "playbooks" / "router_status.yml").write_text("---\n- hosts: dspark_router\n  tasks: []\n")
    return root


def bundle_cli(tmp_path, project, runner, monkeypatch, *extra):
    monkeypatch.setattr(runner_exec, "run_playbook", runner)
    inv = write_inventory(tmp_path / "hosts.yml")
    argv = ["bundle", "-i", inv, "--groups", "grp_a", "--output", str(tmp_path / "out"),
            "--artifacts", str(tmp_path / "art"), "--state-dir", str(tmp_path / "state")] + list(extra)
    return run_cli(argv, project)


def members(path):
    with tarfile.open(path) as tar:
        return dict((m.name.split("/", 1)[1], tar.extractfile(m).read()) for m in tar.getmembers())


def test_bundle_json_contract_and_content(tmp_path, project, monkeypatch, venv_path, capsys):
    runner = FakeRunner()
    code = bundle_cli(tmp_path, project, runner, monkeypatch, "--json")
    out, err = capsys.readouterr()
    assert code == 0, out + err
    doc = json.loads(out)
    assert list(doc) == ["bundles"] and len(doc["bundles"]) == 1
    entry = doc["bundles"][0]
    assert set(entry) >= {"group", "path", "bytes", "sections", "redacted"}
    assert entry["group"] == "grp_a" and entry["bytes"] == os.path.getsize(entry["path"])
    assert os.path.basename(entry["path"]).startswith("grp_a-bundle-") and entry["path"].endswith(".tar.gz")
    assert os.stat(entry["path"]).st_mode & 0o077 == 0
    names = [s["name"] for s in entry["sections"]]
    assert names == ["versions", "fabric", "environment", "checkpoint", "logs", "status", "qualification", "router",
                     "supervisor"]
    assert all(s["ok"] for s in entry["sections"])
    assert entry["redacted"]["known_secret"] >= 6
    # router_status.yml ran once on the routers; bundle.yml and status.yml with --limit grp_a; the secrets never
    # reached an ansible-playbook argument (extra vars through files).
    assert [(os.path.basename(c.playbook), c.limit) for c in runner.calls] == [
        ("router_status.yml", "router"), ("bundle.yml", "grp_a"), ("status.yml", "grp_a")]
    files = members(entry["path"])
    assert set(files) >= {"manifest.json", "versions.json", "fabric/a-head.json", "fabric/a-worker.json",
                          "env/a-head.json", "env/a-worker.json", "checkpoint.json", "status.json",
                          "logs/rank0-a-head.log", "logs/rank1-a-worker.log", "qualify.json", "router.json",
                          "supervisor.jsonl"}
    for name, data in files.items():
        for secret in (KEY, HF, NODE_ONLY):
            assert secret.encode() not in data, name
    env = json.loads(files["env/a-worker.json"])
    assert "NCCL_IB_HCA==rxe0" in env["env"] and "VLLM_API_KEY=[REDACTED]" in env["env"]
    assert env["serve_command"] == "vllm serve m --api-key [REDACTED] --port 8888"
    versions = json.loads(files["versions.json"])
    assert versions["a-head"]["kernel"] == "6.11.0-1016-nvidia" and versions["a-head"]["vllm"].startswith("unknown")
    manifest = json.loads(files["manifest.json"])
    assert manifest["schema"] == "dspark-fleet-bundle/1" and manifest["group"] == "grp_a"
    assert manifest["redacted"]["counts"] == entry["redacted"]
    assert manifest["members"] == [{"host": "a-head", "rank": 0}, {"host": "a-worker", "rank": 1}]
    assert manifest["tool"]["name"] == "dspark-fleet" and "commit" in manifest["collection"]
    assert manifest["bounds"]["truncated"] == []
    # The private dir with the raw states is gone.
    assert not (tmp_path / "art" / bundle.PRIVATE).exists()


def test_the_dead_rank_leads_the_status(tmp_path, project, monkeypatch, venv_path, capsys):
    code = bundle_cli(tmp_path, project, FakeRunner(dead="a-worker"), monkeypatch, "--json")
    out, err = capsys.readouterr()
    assert code == 0, out + err                 # a group that does not serve is still bundled with every section
    entry = json.loads(out)["bundles"][0]
    status = json.loads(members(entry["path"])["status.json"])
    assert status["summary"].startswith("rank 1 on a-worker failed first")
    assert status["first_failure"]["host"] == "a-worker" and status["serving"] is False
    assert KEY not in json.dumps(status)


def test_a_failed_section_exits_1_with_the_bundle_written(tmp_path, project, monkeypatch, venv_path, capsys):
    code = bundle_cli(tmp_path, project, FakeRunner(skip_host="a-worker"), monkeypatch)
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert "grp_a-bundle-" in out and "failed: versions (a-worker: Read the node's versions: ssh: no route)" in out
    path = [w for w in out.split() if w.endswith(".tar.gz")][0]
    manifest = json.loads(members(path)["manifest.json"])
    failed = dict((s["name"], s["error"]) for s in manifest["sections"] if not s["ok"])
    assert set(failed) == {"versions", "fabric", "environment", "checkpoint", "logs"}
    assert manifest["ok"] is False


def test_bounds_are_applied_and_recorded(tmp_path, project, monkeypatch, venv_path, capsys):
    code = bundle_cli(tmp_path, project, FakeRunner(), monkeypatch, "--json", "--file-max-bytes", "4096",
                      "--max-bytes", "20KiB")
    out, err = capsys.readouterr()
    assert code == 0, out + err
    files = members(json.loads(out)["bundles"][0]["path"])
    manifest = json.loads(files["manifest.json"])
    assert manifest["bounds"]["max_bytes"] == 20480 and manifest["bounds"]["per_file_bytes"] == 4096
    assert sum(len(v) for k, v in files.items() if k != "manifest.json") <= 20480
    assert all(len(v) <= 4096 for k, v in files.items() if k != "manifest.json")


def test_the_final_sweep_refuses(tmp_path, project, monkeypatch, venv_path, capsys):
    """A secret that redaction missed (here: redaction turned off) is found by the sweep: no bundle, exit 1, the file
    named, never the secret."""
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _bundle
    monkeypatch.setattr(_bundle.Redactor, "redact", lambda self, text: text)
    code = bundle_cli(tmp_path, project, FakeRunner(), monkeypatch, "--json")
    out, err = capsys.readouterr()
    assert code == 1
    entry = json.loads(out)["bundles"][0]
    assert entry["path"] is None and entry["error"].startswith("refused: a known secret is still in ")
    assert "env/a-head.json" in entry["error"]
    for secret in (KEY, HF, NODE_ONLY):
        assert secret not in out + err
    assert not os.listdir(tmp_path / "out")


@pytest.mark.parametrize("argv", [
    ["bundle"],                                                     # -i is required
    ["bundle", "-i", "x", "--max-bytes", "lots"],
    ["bundle", "-i", "x", "--max-bytes", "10"],
    ["bundle", "-i", "x", "--canary", "1"],
])
def test_usage_errors_exit_2(argv, capsys):
    assert cli.main(argv) == 2
    assert "usage: dspark-fleet" in capsys.readouterr().err


def test_unknown_group_exits_2(tmp_path, project, monkeypatch, venv_path, capsys):
    monkeypatch.setattr(runner_exec, "run_playbook", FakeRunner())
    inv = write_inventory(tmp_path / "hosts.yml")
    code = run_cli(["bundle", "-i", inv, "--groups", "nope", "--output", str(tmp_path / "out"), "--json"], project)
    assert code == 2 and "no serving group matches 'nope'" in capsys.readouterr().err


def test_size_option():
    assert bundle._size("20MiB") == 20 * 1024 * 1024 and bundle._size("500000") == 500000
    assert bundle._size("5k") == 5000 and bundle._size("1GiB") == 1024 ** 3


def qualify_report(path, group="grp_a"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": {"subcommand": "qualify"}, "finished": "2026-12-05T00:00:00Z",
                                "groups": {group: {"result": "qualified", "qualify": {"verdict": "qualified"}}}}))
    return str(path)


def test_the_qualification_comes_from_the_named_report_or_the_newest_in_the_state_dir(tmp_path, project, monkeypatch,
                                                                                      venv_path, capsys):
    # The newest report in the state dir is found without the option.
    own = qualify_report(tmp_path / "state" / "20261205T000000Z" / "report.json")
    assert bundle_cli(tmp_path, project, FakeRunner(), monkeypatch, "--json") == 0
    entry = json.loads(capsys.readouterr()[0])["bundles"][0]
    assert json.loads(members(entry["path"])["qualify.json"])["report"] == own
    shutil.rmtree(tmp_path / "art")   # each run wants a fresh artifacts directory
    # acceptance's own report, outside the state dir, by --qualification.
    named = qualify_report(tmp_path / "acceptance" / "qualify" / "report.json")
    assert bundle_cli(tmp_path, project, FakeRunner(), monkeypatch, "--json", "--qualification", named) == 0
    entry = json.loads(capsys.readouterr()[0])["bundles"][0]
    found = json.loads(members(entry["path"])["qualify.json"])
    assert found["report"] == named and found["qualify"] == {"verdict": "qualified"}
    shutil.rmtree(tmp_path / "art")
    # A report without this group: absent, and the manifest says why.
    other = qualify_report(tmp_path / "other" / "report.json", group="grp_z")
    assert bundle_cli(tmp_path, project, FakeRunner(), monkeypatch, "--json", "--qualification", other) == 0
    entry = json.loads(capsys.readouterr()[0])["bundles"][0]
    manifest = json.loads(members(entry["path"])["manifest.json"])
    section = [s for s in manifest["sections"] if s["name"] == "qualification"][0]
    assert section["state"] == "absent" and section["error"] == "%s holds no qualification of group grp_a" % other, section


def test_a_vault_password_file_reaches_every_run_as_a_path(tmp_path, project, monkeypatch, venv_path, capsys):
    # Every subcommand takes it (bundle's node-side reads decrypt the inventory's vaulted secrets to redact them).
    vault = tmp_path / "vault-pass"
    vault.write_text("not-the-secret\n")
    vault.chmod(0o600)
    runner = FakeRunner()
    assert bundle_cli(tmp_path, project, runner, monkeypatch, "--json", "--vault-password-file", str(vault)) == 0
    capsys.readouterr()
    assert runner.calls and all(c.envvars.get("ANSIBLE_VAULT_PASSWORD_FILE") == str(vault) for c in runner.calls)
    assert not any("not-the-secret" in json.dumps(c.envvars) for c in runner.calls)
