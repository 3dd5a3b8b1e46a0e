"""Table-driven tests of the serve role's compose file lines (plugins/plugin_utils/_serve_command.py compose_lines, the
filter dspark.cluster.serve_compose; was Jinja in roles/serve/templates/compose.yaml.j2).

The lines are what the template's Jinja rendered for the same values before the move (compared for every combination of
the optional parts, and under real Ansible on tests/templates/render.yml's cases); tests/unit/playbooks/test_templates.py
parses the rendered files with hostile values.
"""

import json

import pytest
import yaml

from ansible_collections.dspark.cluster.plugins.filter.serve_compose import serve_compose
from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_command as sc

BASE = {"serve_project": "dspark", "serve_container_name": "dspark-vllm", "image_id": "sha256:" + "0" * 64,
        "entrypoint": ["/bin/sh", "-c", 'exec "$@"', "dspark-serve"], "argv": ["vllm", "serve", "m", "--port", 8888],
        "serve_shm_size": "64g", "serve_stop_grace_period": "30s", "group": "pair_a", "rank": 0, "hash": "f" * 64,
        "environment": {"NCCL_SOCKET_IFNAME": "eth1", "TP": 2}, "hf_cache": "/var/lib/dspark/hf", "cache_read_only": False,
        "serve_jit_cache_dir": "/var/lib/dspark/jit-cache", "hotfix_dir": "", "keys_file": "", "serve_ulimits": {}, "infiniband": False, "gpu": False,
        "serve_lmcache": False, "serve_lmcache_container_name": "dspark-lmcache", "serve_lmcache_l1_size_gb": 8,
        "serve_lmcache_eviction_policy": "LRU", "serve_lmcache_chunk_size": 256, "serve_lmcache_port": 5555,
        "serve_lmcache_http_port": 8080, "serve_lmcache_disk_dir": "", "fabric_address": "10.77.77.1",
        "serve_lmcache_disk_size_gb": 100, "serve_lmcache_extra_args": [], "serve_lmcache_start_period": 120}
HEAD = [
    'name: "dspark"', "services:", "  vllm:", '    container_name: "dspark-vllm"', '    image: "sha256:%s"' % ("0" * 64),
    "    pull_policy: never", '    # "$@" is the command below, quoted: nothing is word-split, and no secret is on it.',
    '    entrypoint: ["/bin/sh", "-c", "exec \\"$$@\\"", "dspark-serve"]', '    command: ["vllm", "serve", "m", "--port", "8888"]',
    "    network_mode: host", "    ipc: host", '    shm_size: "64g"',
    "    # Never restart a rank alone (after a crash or a reboot): the group restarts as one unit (playbooks/serve.yml,",
    "    # dspark-fleet watch). A lone rank cannot rejoin the rendezvous and loops (upstream issue #38).",
    '    restart: "no"', '    stop_grace_period: "30s"', "    labels:", '      dspark.cluster/group: "pair_a"',
    '      dspark.cluster/rank: "0"', '      dspark.cluster/config: "%s"' % ("f" * 64),
    "    # The API keys (rank 0 only): VLLM_API_KEY from the 0600 file next to this one.", "    env_file: [secrets.env]",
    '    environment: {"NCCL_SOCKET_IFNAME": "eth1", "TP": "2"}', "    volumes:",
    "      # Read-only where the cache is a read-only mount (the NFS mode's clients); JIT caches stay local.",
    '      - "/var/lib/dspark/hf:/cache/huggingface"', '      - "/var/lib/dspark/jit-cache:/cache/jit"']
HOTFIX = ["      # The recipe's hotfixes and the script that runs them before vLLM (upstream order, fail-closed), read-only.",
          '      - "/var/lib/dspark/hotfixes/0123/patches:/opt/dspark-patches:ro"',
          '      - "/var/lib/dspark/hotfixes/0123:/opt/dspark-serve:ro"']
KEYS = ["      # Several API keys: the 0600 YAML file vLLM reads with --config (rank 0 only), read-only.",
        '      - "/etc/dspark/serve/api-keys.yaml:/opt/dspark-keys/api-keys.yaml:ro"']
ULIMITS = ['    ulimits: {"memlock": -1, "stack": 67108864}']
IB = ['    devices: ["/dev/infiniband:/dev/infiniband"]', "    cap_add: [IPC_LOCK]"]
GPU = ["    deploy:", "      resources:", "        reservations:", "          devices: [{driver: nvidia, count: all, capabilities: [gpu]}]"]


@pytest.mark.parametrize("overrides, expected", [
    ({}, HEAD),
    ({"cache_read_only": True}, [line.replace("huggingface", "huggingface:ro") for line in HEAD]),
    ({"hotfix_dir": "/var/lib/dspark/hotfixes/0123"}, HEAD + HOTFIX),
    ({"keys_file": "/etc/dspark/serve/api-keys.yaml:/opt/dspark-keys/api-keys.yaml"}, HEAD + KEYS),
    ({"serve_ulimits": {"memlock": -1, "stack": 67108864}}, HEAD + ULIMITS),
    ({"infiniband": True}, HEAD + IB),
    ({"gpu": True}, HEAD + GPU),
    ({"hotfix_dir": "/var/lib/dspark/hotfixes/0123", "keys_file": "/etc/dspark/serve/api-keys.yaml:/opt/dspark-keys/api-keys.yaml",
      "serve_ulimits": {"memlock": -1, "stack": 67108864}, "infiniband": True, "gpu": True}, HEAD + HOTFIX + KEYS + ULIMITS + IB + GPU),
])
def test_compose_lines(overrides, expected):
    values = dict(BASE, **overrides)
    assert sc.compose_lines(values) == expected
    assert serve_compose(values) == expected


@pytest.mark.parametrize("value, expected", [
    ("plain", '"plain"'),
    ("$HOME ${PATH}", '"$$HOME $${PATH}"'),
    ("x\n    privileged: true", '"x\\n    privileged: true"'),
    ('a"b', '"a\\"b"'),
    ("é", '"\\u00e9"'),
    (0, '"0"'),
    (None, '"None"'),
])
def test_compose_scalar_is_one_json_string_with_dollars_doubled(value, expected):
    assert sc.compose_scalar(value) == expected


def test_hostile_values_stay_values():
    evil = "x\n    privileged: true\n    volumes: ['/:/host']"
    values = dict(BASE, serve_container_name=evil, environment={"EVIL": evil}, argv=["vllm", evil], entrypoint=["/bin/sh", evil], hf_cache=evil)
    doc = yaml.safe_load("\n".join(sc.compose_lines(values)))
    service = doc["services"]["vllm"]
    assert "privileged" not in service and len(service["volumes"]) == 2
    assert service["container_name"] == evil and service["environment"] == {"EVIL": evil}
    assert service["command"] == ["vllm", evil] and service["entrypoint"] == ["/bin/sh", evil]
    assert json.loads(sc.compose_scalar("$")) == "$$"


def test_the_role_variables_are_read_by_their_names():
    """The lookup role_vars (reads='serve_compose') hands over exactly these: serve_* names, each an input."""
    assert all(name.startswith("serve_") for name in sc.COMPOSE_VARIABLES)
    assert set(sc.COMPOSE_VARIABLES) <= set(sc.COMPOSE_VALUES) and set(BASE) == set(sc.COMPOSE_VALUES)
    assert not [name for name in sc.COMPOSE_VALUES if name not in sc.COMPOSE_VARIABLES and name.startswith("serve_")]


def test_a_missing_value_is_named():
    values = dict(BASE)
    del values["hash"], values["gpu"]
    with pytest.raises(sc.CommandError, match="hash, gpu not given"):
        sc.compose_lines(values)
    with pytest.raises(Exception, match="hash, gpu not given"):
        serve_compose(values)


def test_lmcache_off_changes_nothing_on_does_not_touch_the_engine_service():
    """#45: off, every value of LMCache is ignored (running groups keep their file and hash); on, vLLM waits for the
    server's health check and the server runs from the same image on the host's network and IPC, every port local."""
    assert sc.compose_lines(dict(BASE, serve_lmcache_port=1, serve_lmcache_disk_dir="/x")) == HEAD
    on = dict(BASE, serve_lmcache=True, serve_lmcache_disk_dir="/nvme/lmcache", serve_lmcache_extra_args=["--max-workers", 2])
    doc = yaml.safe_load("\n".join(sc.compose_lines(on)))
    engine, server = doc["services"]["vllm"], doc["services"]["lmcache"]
    assert engine["depends_on"] == {"lmcache": {"condition": "service_healthy"}}
    assert {k: v for k, v in engine.items() if k != "depends_on"} == yaml.safe_load("\n".join(HEAD))["services"]["vllm"]
    assert server["image"] == BASE["image_id"] and server["network_mode"] == "host" and server["ipc"] == "host"
    assert server["container_name"] == "dspark-lmcache" and server["restart"] == "no"
    assert server["labels"] == engine["labels"]
    argv = server["entrypoint"] + server["command"]
    assert argv[:2] == ["lmcache", "server"] and argv[-2:] == ["--max-workers", "2"]
    flags = dict(zip(argv[2:-2:2], argv[3:-2:2]))
    assert flags["--shm-name"] == "dspark_pair_a_r0" and flags["--supported-transfer-mode"] == "auto"
    assert (flags["--host"], flags["--port"]) == ("10.77.77.1", "5555")          # the head's scheduler dials every server
    assert (flags["--http-host"], flags["--http-port"], flags["--l1-size-gb"]) == ("127.0.0.1", "8080", "8")
    assert json.loads(flags["--l2-adapter"]) == {"type": "fs_native", "base_path": "/cache/lmcache", "max_capacity_gb": 100,
                                                 "eviction": {"eviction_policy": "LRU"}}
    assert server["environment"] == {"LMCACHE_TRACK_USAGE": "false", "DO_NOT_TRACK": "1", "LMCACHE_DISABLE_BANNER": "1"}
    assert server["volumes"] == ["/nvme/lmcache:/cache/lmcache"]
    assert server["healthcheck"]["test"][:3] == ["CMD", "python3", "-c"]
    assert "HTTPConnection('127.0.0.1', 8080, timeout=5)" in server["healthcheck"]["test"][3]
    assert "c.request('GET', '/healthcheck')" in server["healthcheck"]["test"][3]
    assert server["healthcheck"]["start_period"] == "120s"
    # Without a disk tier: no adapter, no volume; a GPU node gives the server the GPU too (CUDA IPC).
    doc = yaml.safe_load("\n".join(sc.compose_lines(dict(BASE, serve_lmcache=True, gpu=True))))
    assert "--l2-adapter" not in doc["services"]["lmcache"]["command"] and "volumes" not in doc["services"]["lmcache"]
    assert doc["services"]["lmcache"]["deploy"] == doc["services"]["vllm"]["deploy"]
