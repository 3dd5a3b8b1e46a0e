"""dspark-fleet bundle on the SIMULATED fleet lab (issue #43): a serving group's bundle has every section, no file
of it holds any secret of the lab inventory, and with a worker's container killed the status section names that rank
first. The serving image is the lab SIMULATOR, not vLLM (its vLLM version is "unknown", with the reason).

Needs the fleet lab up and serving (`make lab-fleet`, then site.yml). The killed rank's group is served again at the
end (serve.yml --limit <group>, and back in the router's rotation), as the suites after it expect.
"""

import json
import pathlib
import tarfile
import time

import pytest
import yaml

from fleetlab import FLEET, GROUPS, INVENTORY, chat, fleet, kill_rank, rank_state, restore, wait_for

from ansible_collections.dspark.cluster.plugins.plugin_utils import _bundle
from ansible_collections.dspark.cluster.plugins.plugin_utils._role_rules import is_secret

GROUP = "pair_b"
WORKER = "spark-b1"
SECTIONS = ["versions", "fabric", "environment", "checkpoint", "logs", "status", "qualification", "router",
            "supervisor"]


def lab_secrets():
    """Every secret the lab inventory holds (API keys, an HF token, passwords; there is no vault in the lab)."""
    found = set()
    for path in sorted((FLEET / "group_vars").glob("*.yml")):
        doc = yaml.safe_load(path.read_text()) or {}
        found |= _bundle.secret_values(doc if isinstance(doc, dict) else {}, is_secret)
    # hosts.yml nests the host variables under groups: walk it as well.
    found |= _bundle.secret_values({"inventory": yaml.safe_load(INVENTORY.read_text())}, is_secret)
    return found


def bundle(state, out, *args):
    rc, text = fleet("bundle", "-i", INVENTORY, "--groups", GROUP, "--output", out, "--state-dir", state,
                     "--artifacts", state / ("bundle-%d" % time.time_ns()), "--plain", "--json", *args,
                     timeout=900)
    start = text.find("{\n")
    assert start >= 0, text[-4000:]
    doc = json.loads(text[start:text.rindex("}") + 1])
    return rc, doc, text


def files_of(path):
    with tarfile.open(path) as tar:
        return dict((m.name.split("/", 1)[1], tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile())


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """A state dir with a qualification report and a supervisor journal of the group (both sections then exist)."""
    path = tmp_path_factory.mktemp("bundle-state")
    if not chat(GROUP)[0]:
        restore(GROUP)
    fleet("qualify", "-i", INVENTORY, "--groups", GROUP, "--plain", "--state-dir", path, timeout=900)
    rc, out = fleet("watch", "-i", INVENTORY, "--groups", GROUP, "--once", "--plain", "--state-dir", path,
                    "--artifacts", path / "watch", timeout=900)
    assert rc == 0, out[-3000:]
    return path


def test_a_serving_groups_bundle_has_every_section_and_no_secret(state, tmp_path):
    secrets = lab_secrets()
    assert "lab-fleet-key-5d2e9b" in secrets, secrets    # the fleet's API key; no HF token or vault in the lab
    rc, doc, text = bundle(state, tmp_path / "out")
    assert rc == 0, text[-4000:]
    [entry] = doc["bundles"]
    assert entry["group"] == GROUP and pathlib.Path(entry["path"]).is_file()
    assert [s["name"] for s in entry["sections"]] == SECTIONS
    assert all(s["state"] == "ok" for s in entry["sections"]), entry["sections"]
    files = files_of(entry["path"])
    members = GROUPS[GROUP]
    for host in members:
        assert "fabric/%s.json" % host in files and "env/%s.json" % host in files
    assert {"logs/rank0-spark-b0.log", "logs/rank1-spark-b1.log", "versions.json", "checkpoint.json", "status.json",
            "qualify.json", "router.json", "supervisor.jsonl", "manifest.json"} <= set(files)
    versions = json.loads(files["versions.json"])
    for host in members:
        assert versions[host]["kernel"] and versions[host]["docker"] and versions[host]["image_id"]
        assert "dspark-lab/vllm-sim:latest" in versions[host]["repo_tags"], versions[host]
        assert versions[host]["driver"] == "absent"           # no GPU in the lab
        assert versions[host]["vllm"].startswith("unknown")   # the simulator is not vLLM
    fabric = json.loads(files["fabric/spark-b1.json"])
    assert fabric["fabric_links"]["enp1s0f1np1"]["mtu"] == "9000"
    assert "net.core.rmem_max" in fabric["sysctls"] and isinstance(fabric["roce_gids"], list)   # no RoCE device here
    assert fabric["links"] and fabric["addresses"] and fabric["routes"]
    env = json.loads(files["env/spark-b0.json"])
    assert any(e.startswith(("NCCL_", "GLOO_")) for e in env["env"]), env
    assert env["serve_command"], env
    checkpoint = json.loads(files["checkpoint.json"])
    assert all(checkpoint[h]["file_count"] and checkpoint[h]["sha256"] for h in members), checkpoint
    status = json.loads(files["status.json"])
    assert status["serving"] is True and status["first_failure"] is None
    assert json.loads(files["qualify.json"])["qualify"]["verdict"]
    assert any(json.loads(line).get("group") == GROUP for line in files["supervisor.jsonl"].decode().splitlines())
    manifest = json.loads(files["manifest.json"])
    assert manifest["redacted"]["counts"].get("known_secret"), manifest["redacted"]   # the key was there, and went
    # The sweep: no secret of the lab inventory in any file, in any spelling.
    for name, data in files.items():
        text_of = data.decode("utf-8", "replace")
        for secret in secrets:
            for spelling in _bundle.variants(secret):
                assert spelling not in text_of, "a secret of the lab inventory is in %s" % name
    assert _bundle.sweep(files, secrets) == []


def test_a_killed_ranks_bundle_names_it_first(state, tmp_path):
    try:
        rc, out = kill_rank(WORKER)
        assert rc == 0, out
        assert wait_for(lambda: rank_state(WORKER)[0] == "exited", 30), rank_state(WORKER)
        rc, doc, text = bundle(state, tmp_path / "out")
        assert rc in (0, 1), text[-4000:]
        [entry] = doc["bundles"]
        assert entry["path"], entry
        files = files_of(entry["path"])
        status = json.loads(files["status.json"])
        assert status["serving"] is False
        assert status["summary"].startswith("rank 1 on %s failed first" % WORKER), status["summary"]
        assert status["first_failure"]["host"] == WORKER and status["first_failure"]["rank"] == 1, status
        assert status["first_failure"]["exit_code"] == 137
        versions = json.loads(files["versions.json"])
        assert versions[WORKER]["container"] == "exited"
        assert "logs/rank1-%s.log" % WORKER in files                   # the dead rank's log is there
        assert _bundle.sweep(files, lab_secrets()) == []
    finally:
        restore(GROUP)
    ok, text = chat(GROUP)
    assert ok, text
