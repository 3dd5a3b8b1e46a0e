"""A serving group's sidecar engines on one member (plugins/plugin_utils/_serve_sidecars.py, the filter
dspark.cluster.serve_sidecars): the compose file each member writes, its fingerprint, and a refused list."""

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.dspark.cluster.plugins.filter.serve_sidecars import serve_sidecars
from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_sidecars as ss

from test_serve_compose import BASE  # pylint: disable=import-error

REV = "a" * 40
VL = {"name": "vl", "model": "org/tiny-vl", "revision": REV, "served_model_name": "tiny-vl", "api_port": 8889,
      "master_port": 25100, "gpu_memory_utilization": 0.12}
HEAD = {"size": 2, "master_address": "10.77.77.1", "master_port": 25000, "is_head": True}
WORKER = dict(HEAD, is_head=False)


def values(**over):
    base = dict(BASE, sidecars=[VL], serve_image="dspark-lab/vllm-cpu:0.32.0", tensor_parallel_size=2, serve_edge=True,
                serve_host="0.0.0.0", serve_config_dir="/etc/dspark/serve", secrets_digest="s" * 64,
                keys_mount="/opt/dspark-keys/api-keys.yaml", found={}, serve_force_restart=False)
    base.update(over)
    return base


def test_no_sidecar_means_nothing():
    assert ss.plan(values(sidecars=[]), HEAD) == {"problems": [], "engines": [], "leftovers": []}
    assert ss.plan(values(sidecars=None), HEAD) == {"problems": [], "engines": [], "leftovers": []}


def test_head_rank_listens_behind_the_edge_with_its_own_rendezvous():
    engine = ss.plan(values(), HEAD)["engines"][0]
    assert engine["container"] == "dspark-vllm-vl" and engine["project"] == "dspark-vl"
    assert engine["file"] == "/etc/dspark/serve/compose-vl.yaml"
    doc = yaml.safe_load("\n".join(engine["lines"]))
    service = doc["services"]["vllm"]
    assert doc["name"] == "dspark-vl" and service["container_name"] == "dspark-vllm-vl"
    command = service["command"]
    assert command[:3] == ["vllm", "serve", "org/tiny-vl"]
    assert command[command.index("--host") + 1] == "127.0.0.1" and command[command.index("--port") + 1] == "18889"
    assert command[command.index("--master-port") + 1] == "25100" and "--headless" not in command
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.12"
    # The main engine's image ID (it is the group's image), no hotfixes, no LMCache, the cache read-only, the keys' file.
    assert service["image"] == BASE["image_id"] and service["entrypoint"] == [a.replace("$", "$$") for a in ss.ENTRYPOINT]
    assert "lmcache" not in doc["services"] and "depends_on" not in service
    assert service["volumes"][0].endswith(":/cache/huggingface:ro")
    assert service["env_file"] == ["secrets.env"]
    assert service["labels"]["dspark.cluster/engine"] == "vl" and service["labels"]["dspark.cluster/config"] == engine["hash"]


def test_worker_rank_is_headless_and_without_the_edge_listens_on_the_api_port():
    engine = ss.plan(values(rank=1, serve_edge="false"), WORKER)["engines"][0]
    command = yaml.safe_load("\n".join(engine["lines"]))["services"]["vllm"]["command"]
    assert command[-1] == "--headless" and command[command.index("--node-rank") + 1] == "1"
    assert command[command.index("--host") + 1] == "0.0.0.0" and command[command.index("--port") + 1] == "8889"


def test_several_keys_reach_the_sidecar_through_the_same_file():
    engine = ss.plan(values(keys_file="/etc/dspark/serve/api-keys.yaml:/opt/dspark-keys/api-keys.yaml"), HEAD)["engines"][0]
    service = yaml.safe_load("\n".join(engine["lines"]))["services"]["vllm"]
    assert service["command"][-2:] == ["--config", "/opt/dspark-keys/api-keys.yaml"]
    assert "/etc/dspark/serve/api-keys.yaml:/opt/dspark-keys/api-keys.yaml:ro" in service["volumes"]


def test_another_image_is_named_by_its_reference():
    engine = ss.plan(values(sidecars=[dict(VL, image="ghcr.io/o/vl:1")]), HEAD)["engines"][0]
    assert yaml.safe_load("\n".join(engine["lines"]))["services"]["vllm"]["image"] == "ghcr.io/o/vl:1"


@pytest.mark.parametrize("change", [
    {"secrets_digest": "t" * 64}, {"image_id": "sha256:" + "1" * 64}, {"environment": {"NCCL_SOCKET_IFNAME": "eth2"}},
    {"sidecars": [dict(VL, gpu_memory_utilization=0.1)]}, {"sidecars": [dict(VL, master_port=25101)]},
])
def test_the_fingerprint_follows_what_makes_the_container(change):
    assert ss.plan(values(**change), HEAD)["engines"][0]["hash"] != ss.plan(values(), HEAD)["engines"][0]["hash"]


def test_the_fingerprint_is_stable_and_per_engine():
    two = ss.plan(values(sidecars=[VL, dict(VL, name="vl2", served_model_name="b", api_port=8890, master_port=25101)]), HEAD)
    assert two["engines"][0]["hash"] == ss.plan(values(), HEAD)["engines"][0]["hash"]
    assert len({engine["hash"] for engine in two["engines"]}) == 2


def test_a_refused_list_names_the_entry_and_starts_nothing():
    result = ss.plan(values(sidecars=[dict(VL, api_prot=8889)]), HEAD)
    assert result["engines"] == []
    assert result["problems"] == ["dspark_sidecars[0]=['api_prot'] names keys a sidecar does not have. Fix: remove or correct "
                                  "them; a sidecar has name, model, revision, api_port, master_port, gpu_memory_utilization, "
                                  "served_model_name, engine_port, image, max_model_len, max_num_seqs, trust_remote_code, extra_args"]


def test_the_filter_names_a_missing_value():
    with pytest.raises(AnsibleFilterError, match="secrets_digest"):
        serve_sidecars({k: v for k, v in values().items() if k != "secrets_digest"}, HEAD)


def test_each_sidecar_checkpoint_is_looked_for_where_the_hub_keeps_it():
    assert ss.snapshots([VL], "img", "/var/lib/dspark/hf/") == [
        {"name": "vl", "model": "org/tiny-vl", "revision": REV,
         "snapshot_dir": "/var/lib/dspark/hf/hub/models--org--tiny-vl/snapshots/" + REV}]
    assert ss.snapshots([dict(VL, revision="main")], "img", "/c") == []


def test_a_sidecar_runs_as_wanted_only_with_its_fingerprint_running_and_others_are_left_over():
    digest = ss.plan(values(), HEAD)["engines"][0]["hash"]
    running = {"dspark-vllm-vl": {"engine": "vl", "status": "running", "config": digest},
               "dspark-vllm-old": {"engine": "old", "status": "exited", "config": "x"}}
    result = ss.plan(values(found=running), HEAD)
    assert result["engines"][0]["current"] is True and result["leftovers"] == ["dspark-vllm-old"]
    assert ss.plan(values(found=running, serve_force_restart=True), HEAD)["engines"][0]["current"] is False
    stale = {"dspark-vllm-vl": dict(running["dspark-vllm-vl"], config="other")}
    assert ss.plan(values(found=stale), HEAD)["engines"][0]["current"] is False
    exited = {"dspark-vllm-vl": dict(running["dspark-vllm-vl"], status="exited")}
    assert ss.plan(values(found=exited), HEAD)["engines"][0]["current"] is False
    # Every engine's container is left over once the list is empty.
    assert ss.plan(values(sidecars=[], found=running), HEAD)["leftovers"] == ["dspark-vllm-old", "dspark-vllm-vl"]
