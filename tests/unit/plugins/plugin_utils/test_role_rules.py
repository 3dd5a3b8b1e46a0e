"""The roles' input rules (plugin_utils._role_rules) and the promise they keep (issue #25 item 2).

For every rule of the module an input that breaks it makes preflight (the action dspark.cluster.preflight_validate, on
an inventory built here) fail with exactly one line naming the host or group, the variable, the value and the fix.
The table is checked against the module's registry: a new rule without a failing input fails
test_every_rule_has_a_breaking_input.
"""

import io
import json
import tarfile
from unittest.mock import MagicMock

import pytest

from ansible.playbook.task import Task
from ansible.template import Templar

from ansible_collections.dspark.cluster.plugins.action.preflight_validate import ActionModule
from ansible_collections.dspark.cluster.plugins.plugin_utils import _inputs, _plan_vars, _role_rules
from ansible_collections.dspark.cluster.plugins.plugin_utils import inventory_rules

SPECS = _plan_vars.collection_specs()[0]
BASE = {
    "dspark_group": "pair_a", "dspark_fabric_cidr": "10.77.77.0/30", "dspark_fabric_interface": "enp1s0f1np1",
    "dspark_fabric_hca": "rocep1s0f1", "dspark_fabric_mtu": 9000, "dspark_gpus_per_node": 1, "dspark_tensor_parallel_size": 2,
    "dspark_api_port": 8888, "dspark_master_port": 25000,
    "dspark_image": "ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:" + "b" * 64,
    "dspark_model": "deepseek-ai/DeepSeek-V4-Flash-0731", "dspark_model_revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
    "dspark_checkpoint_mode": "scp", "dspark_hf_cache": "/var/lib/dspark/hf",
    "serve_api_key": "unit-test-key-4711",
}
NFS = {"dspark_checkpoint_mode": "nfs"}
ROUTER = "r"
# A router in front of the pair (its valid defaults): "r__var" overrides set its variables.
WITH_ROUTER = {"r__router_port": 8080}
DOWNLOAD = {"checkpoint_download": True}
# A sidecar engine (issue #46) on the main engine's API port (its engine port given: that one clashes on its own).
SIDECAR_ON_API = {"dspark_sidecars": [{"name": "vl", "model": "cyankiwi/Qwen3-VL-4B-Instruct-AWQ-4bit",
                                       "revision": "0123456789abcdef0123456789abcdef01234567", "api_port": 8888,
                                       "engine_port": 18889, "master_port": 25100, "gpu_memory_utilization": 0.12}]}


def make_action():
    task = MagicMock(Task)
    task.args = {}
    task.async_val = 0
    task.check_mode = False
    connection = MagicMock()
    connection._shell = MagicMock()
    return ActionModule(task, connection, MagicMock(), loader=None, templar=Templar(loader=None), shared_loader_obj=None), connection


def pair(overrides):
    """hostvars of a valid pair; an override 'a-worker__var' sets one host's variable, 'var' both (None removes it)."""
    hostvars = {"a-head": dict(BASE, dspark_rank=0, dspark_fabric_address="10.77.77.1", group_names=["dspark", "pair_a"]),
                "a-worker": dict(BASE, dspark_rank=1, dspark_fabric_address="10.77.77.2", group_names=["dspark", "pair_a"])}
    for key, value in overrides.items():
        host, dummy, var = key.rpartition("__")
        if host == ROUTER:  # the router (group dspark_router, outside dspark): only its own overrides
            hostvars.setdefault(ROUTER, {"group_names": ["dspark_router"]})
        for name in [host] if host else [h for h in hostvars if h != ROUTER]:
            if value is None:
                hostvars[name].pop(var, None)
            else:
                hostvars[name][var] = value
    return hostvars


def preflight(overrides, groups=None):
    hostvars = pair(overrides)
    members = [h for h in hostvars if h != ROUTER]
    groups = groups or {"all": list(hostvars), "dspark": members, "pair_a": members}
    if ROUTER in hostvars:
        groups = dict(groups, dspark_router=[ROUTER])
    action, connection = make_action()
    # The play's hosts are group dspark's (playbooks/preflight.yml): the router is read from the inventory's groups.
    result = action.run(task_vars={"hostvars": hostvars, "groups": groups, "ansible_play_hosts_all": members})
    assert not connection.exec_command.called
    return result


# rule -> (inputs that break it, where, variable, text of the value and problem). A rule that another preflight rule
# covers (covered_by) is broken the same way; the line then comes from the covering rule.
BREAKS = {
    "checkpoint.mode": ({"dspark_checkpoint_mode": "rsync"}, "group pair_a", "dspark_checkpoint_mode", "'rsync' is not a known"),
    "checkpoint.revision": ({"dspark_model_revision": "main"}, "group pair_a", "dspark_model_revision", "'main' is a branch"),
    "checkpoint.source_rank": ({"checkpoint_source_rank": 2}, "group pair_a", "checkpoint_source_rank", "2 is not a rank of group"),
    "checkpoint.hf_cache": ({"dspark_hf_cache": "var/lib/hf"}, "group pair_a", "dspark_hf_cache", "'var/lib/hf' is not an absolute"),
    "checkpoint.manifest_dir": ({"checkpoint_manifest_dir": "/var/lib/dspark/hf/state"}, "group pair_a", "checkpoint_manifest_dir",
                                "'/var/lib/dspark/hf/state' is inside dspark_hf_cache"),
    "checkpoint.trust_dir": ({"checkpoint_trust_dir": ".dspark/trust"}, "group pair_a", "checkpoint_trust_dir",
                             "'.dspark/trust' is not an absolute path"),
    "checkpoint.ssh_key_path": ({"checkpoint_ssh_key_path": "/var/lib/dspark/hf/id"}, "group pair_a", "checkpoint_ssh_key_path",
                                "'/var/lib/dspark/hf/id' is inside dspark_hf_cache"),
    "checkpoint.rsync_options": ({"checkpoint_rsync_options": ["--delete"]}, "group pair_a", "checkpoint_rsync_options",
                                 "['--delete'] contains --delete"),
    "checkpoint.scp_address": ({"a-worker__dspark_fabric_address": None}, "a-worker", "dspark_fabric_address", "is not set"),
    "checkpoint.scp_user": ({"checkpoint_scp_user": "root"}, "group pair_a", "checkpoint_scp_user", "'root' is not an unprivileged"),
    "checkpoint.scp_numbers": ({"checkpoint_scp_streams": 11}, "group pair_a", "checkpoint_scp_streams",
                               "11 is outside its range (1 to 10)"),
    "checkpoint.scp_cipher": ({"checkpoint_scp_cipher": "aes128 ctr"}, "group pair_a", "checkpoint_scp_cipher", "'aes128 ctr' is not"),
    "checkpoint.nfs_source": (dict(NFS, **{"a-worker__dspark_fabric_address": None}), "a-worker", "dspark_fabric_address",
                              "is not set"),
    "checkpoint.nfs_vers": (dict(NFS, checkpoint_nfs_vers="3"), "group pair_a", "checkpoint_nfs_vers", "'3' is not an NFSv4"),
    "checkpoint.nfs_numbers": (dict(NFS, checkpoint_nfs_nconnect=32), "group pair_a", "checkpoint_nfs_nconnect",
                               "32 is outside its range (1 to 16)"),
    "checkpoint.nfs_options": (dict(NFS, checkpoint_nfs_extra_options=["rw"]), "group pair_a", "checkpoint_nfs_extra_options",
                               "['rw'] contains rw"),
    "checkpoint.download_numbers": (dict(DOWNLOAD, checkpoint_download_timeout=0), "group pair_a", "checkpoint_download_timeout",
                                    "0 is outside its range (greater than 0)"),
    "checkpoint.download_urls": (dict(DOWNLOAD, checkpoint_download_endpoint="https://me:pw@hf.example.org"), "group pair_a",
                                 "checkpoint_download_endpoint", "'https://***@hf.example.org' carries credentials"),
    "checkpoint.insecure_endpoint": (dict(DOWNLOAD, checkpoint_download_endpoint="http://hf.example.org",
                                          checkpoint_hf_token="hf_sentinel_token"), "group pair_a",
                                     "checkpoint_download_endpoint", "'http://hf.example.org' is plain http://"),
    "checkpoint.download_venv": (dict(DOWNLOAD, checkpoint_download_venv="opt/venv"), "group pair_a", "checkpoint_download_venv",
                                 "'opt/venv' is not an absolute path"),
    "checkpoint.hf_token": ({"checkpoint_hf_token": "hf_sentinel_token\n"}, "group pair_a", "checkpoint_hf_token",
                            "<not shown: secret> contains a control character"),
    "nfs_export.rank": (dict(NFS, nfs_export_rank=5), "group pair_a", "nfs_export_rank", "5 is not a rank of group pair_a"),
    "nfs_export.path": (dict(NFS, dspark_hf_cache="/var/lib/hf(rw)"), "a-worker", "dspark_hf_cache",
                        "'/var/lib/hf(rw)' cannot be exported safely"),
    "nfs_export.clients": (dict(NFS, nfs_export_clients=["0.0.0.0/0"]), "a-worker", "nfs_export_clients",
                           "['0.0.0.0/0'] holds '0.0.0.0/0', which opens the export to every address"),
    "nfs_export.bind_address": (dict(NFS, **{"a-worker__dspark_fabric_address": "10.77.78.2"}), "a-worker",
                                "dspark_fabric_address", "'10.77.78.2'"),
    "nfs_export.options": (dict(NFS, nfs_export_options=["ro", "root_squash", "no_root_squash"]), "a-worker", "nfs_export_options",
                           "contains no_root_squash"),
    "nfs_export.files": (dict(NFS, nfs_export_file="/etc/exports"), "a-worker", "nfs_export_file", "'/etc/exports' is outside"),
    "serve.open_api": ({"serve_api_key": ""}, "group pair_a", "serve_host", "'0.0.0.0' makes the API of group pair_a listen"),
    "serve.engine_port": ({"serve_engine_port": 8888}, "group pair_a", "serve_engine_port",
                          "8888 equals dspark_api_port"),
    "serve.numbers": ({"serve_gpu_memory_utilization": 1.5}, "group pair_a", "serve_gpu_memory_utilization",
                      "1.5 is outside its range (0 < x <= 1)"),
    "serve.api_keys": ({"serve_api_key": "unit-test-key\n"}, "group pair_a", "serve_api_key",
                       "<not shown: secret> contains a control character"),
    "serve.one_key_setting": ({"serve_api_keys": ["k-one-1234-5678-90ab", "k-two-5678-90ab-cdef"]}, "group pair_a",
                              "serve_api_keys",
                              "<not shown: secret> is set together with serve_api_key"),
    "serve.image": ({"dspark_image": ""}, "group pair_a", "dspark_image", "is empty"),
    "serve.key_characters": ({"serve_api_key": "unit-test-key-4711-$entinel"}, "group pair_a", "serve_api_key",
                             "<not shown: secret> has 1 key(s) with white space, a quote"),
    "serve.keys_off_argv": ({"serve_extra_args": ["--api-key=unit-test-sentinel-4711"]}, "group pair_a", "serve_extra_args",
                            "'<holds --api-key>' puts --api-key on vLLM's command line"),
    "serve.lmcache_numbers": ({"serve_lmcache_l1_size_gb": 0}, "group pair_a", "serve_lmcache_l1_size_gb",
                              "0 is outside its range (greater than 0)"),
    "serve.lmcache_ports": ({"serve_lmcache": True, "serve_lmcache_http_port": 8888}, "group pair_a", "serve_lmcache_http_port",
                            "8888 equals dspark_api_port: LMCache's server and the engine share the host's network"),
    "serve.lmcache_disk_dir": ({"serve_lmcache": True, "serve_lmcache_disk_dir": "lmcache"}, "group pair_a",
                               "serve_lmcache_disk_dir", "'lmcache' is not an absolute path"),
    "serve.lmcache_chunk": ({"serve_lmcache": True, "serve_lmcache_chunk_size": 8192, "serve_max_model_len": 4096},
                            "group pair_a", "serve_lmcache_chunk_size", "8192 is longer than serve_max_model_len=4096"),
    "serve.lmcache_group_agrees": ({"serve_lmcache": True, "a-worker__serve_lmcache_port": 5600}, "group pair_a",
                                   "serve_lmcache_port", "5555 is 5555 on the head a-head but 5600 on a-worker"),
    "serve.lmcache_one_connector": ({"serve_lmcache": True, "serve_extra_args": ["--kv_transfer_config={}"]}, "group pair_a",
                                    "serve_extra_args", "'<holds --kv-transfer-config>' sets a KV connector"),
    "serve.sidecars": (SIDECAR_ON_API, "group pair_a", "dspark_sidecars[0].api_port", "8888 is also dspark_api_port"),
    "serve.mount_paths": ({"serve_config_dir": "/etc/dspark:/etc"}, "group pair_a", "serve_config_dir",
                          "'/etc/dspark:/etc' is not an absolute path without colons"),
    "serve.hf_cache_path": ({"dspark_hf_cache": "/var/lib/hf cache"}, "group pair_a", "dspark_hf_cache",
                            "'/var/lib/hf cache' contains a colon or white space"),
    "serve.jit_cache_outside_model_cache": ({"serve_jit_cache_dir": "/var/lib/dspark/hf/jit"}, "group pair_a",
                                            "serve_jit_cache_dir", "'/var/lib/dspark/hf/jit' is inside dspark_hf_cache"),
    "docker_runtime.platform": ({"ansible_facts": {"os_family": "RedHat", "distribution": "Fedora", "architecture": "x86_64"}},
                                "group pair_a", "ansible_facts.os_family", "'RedHat' is not Debian"),
    "docker_runtime.image": ({"dspark_image": ""}, "group pair_a", "dspark_image", "is empty"),
    "docker_runtime.proxy": ({"docker_runtime_proxy": {"http_proxy": "http://me:pw'sentinel@proxy.example:3128", "no_proxy": ""}},
                             "group pair_a", "docker_runtime_proxy", "<not shown: secret> has http_proxy with a single quote"),
    "docker_runtime.insecure_registries": ({"docker_runtime_insecure_registries": ["http://registry.lab:5000"]}, "group pair_a",
                                           "docker_runtime_insecure_registries",
                                           "['http://registry.lab:5000'] holds 'http://registry.lab:5000': each entry must be"),
    "docker_runtime.image_tarball": ({"docker_runtime_image_source": "tarball", "docker_runtime_image_tarball": "/nonexistent/x.tar"},
                                     "group pair_a", "docker_runtime_image_tarball",
                                     "'/nonexistent/x.tar' is not a readable `docker save` archive of one image"),
    "fabric.group": ({"dspark_fabric_mtu": 65000}, "group pair_a", "dspark_fabric_mtu", "65000 is outside 1500-9216"),
    "fabric.node": ({"a-worker__dspark_fabric_interface": "eth1:0"}, "a-worker", "dspark_fabric_interface",
                    "'eth1:0' is not a Linux interface name"),
    "fabric.management": ({"a-worker__ansible_host": "10.77.77.2"}, "a-worker", "dspark_fabric_address",
                          "'10.77.77.2' equals the management address (ansible_host=10.77.77.2)"),
    "router.groups": ({"r__router_groups": ["pair_a", "pair_z"]}, "r", "router_groups", "names pair_z, which is not a group"),
    "router.heads": (dict(WITH_ROUTER, **{"a-head__dspark_mgmt_address": "127.0.0.1"}), "r", "dspark_mgmt_address",
                     "'127.0.0.1' of a-head (head of pair_a) is not reachable from a router"),
    "router.model": ({"r__router_served_model_name": "deepseek v4"}, "r", "router_served_model_name",
                     "'deepseek v4' is not a plain served model name"),
    "router.tls": ({"r__router_tls_certificate": "PEM"}, "r", "router_tls_key", "is not set"),
    "router.listeners": ({"r__router_port": 0}, "r", "router_port", "0 turns plain HTTP off"),
    "router.metrics_sources": ({"r__router_metrics_allowed_cidrs": ["10.0.0.300/32"]}, "r", "router_metrics_allowed_cidrs",
                               "is not an IP address or network"),
    "router.health": ({"r__router_health_fall": 0}, "r", "router_health_fall", "0 is outside its range (at least 1)"),
    "router.group_header": ({"r__router_group_header": "X Group"}, "r", "router_group_header", "'X Group' is not a header name"),
    "router.health_path": ({"r__router_health_path": "/v1/models"}, "r", "router_health_path",
                           "'/v1/models' is under /v1: the health check sends no API key"),
    "router.api_key": ({"r__router_api_key": "sentinel-retired-key"}, "r", "router_api_key",
                       "<not shown: secret> is set, but the router no longer uses it"),
    "router.allowed_paths": ({"r__router_allowed_paths": ["/v1/models", "/v1/models/../metrics"]}, "r", "router_allowed_paths",
                             "holds '/v1/models/../metrics', which is not a plain absolute path"),
    "router.vrrp": ({"r__router_vip": "10.9.9.200"}, "r", "router_vip",
                    "'10.9.9.200' is not an IPv4 address with its prefix length"),
    "router.limits": ({"r__router_key_rate_limit": -1}, "r", "router_key_rate_limit", "-1 is outside its range (at least 0)"),
    "router.config_words": ({"r__router_admin_socket": "/run/a.sock level admin\n  stats socket ipv4@0.0.0.0:1"}, "r",
                            "router_admin_socket", "is not an absolute path that can be written into haproxy.cfg safely"),
}


def test_every_rule_has_a_breaking_input():
    names = [item.name for item in _role_rules.RULES]
    assert len(names) == len(set(names)), "a rule name is registered twice"
    assert sorted(set(names) - set(BREAKS)) == [], "rules without a breaking input in BREAKS"
    assert sorted(set(BREAKS) - set(names)) == [], "BREAKS names rules the module does not have"
    for item in _role_rules.RULES:
        assert item.doc, "%s has no docstring saying what it checks" % item.name
        assert set(item.variables) <= set(SPECS) | set(inventory_rules.CONTRACT_VARS) | set(_role_rules.NODE_FACTS), item


def test_the_valid_pair_passes():
    result = preflight({})
    assert not result.get("failed"), result["errors"]


def test_the_valid_pair_with_a_router_passes():
    result = preflight(WITH_ROUTER)
    assert not result.get("failed"), result["errors"]


@pytest.mark.parametrize("overrides, lines", [
    ({"r__router_port": "8080", "r__router_tls_certificate": "C", "r__router_tls_key": "K", "r__router_tls_port": 8080},
     ["r: router_tls_port=8080 is router_port too"]),
    ({"r__router_stats_port": 8080}, ["r: router_stats_port=8080 is also a listener port"]),
    ({"r__router_metrics_port": 8080}, ["r: router_metrics_port=8080 is also another listener's port"]),
    ({"r__router_metrics_allowed_cidrs": ["10.0.0.5/32"]},
     ["r: router_metrics_allowed_cidrs=['10.0.0.5/32'] lets hosts read the exporter, but router_metrics_address=127.0.0.1"
      " is loopback"]),
    ({"r__router_metrics_allowed_cidrs": ["10.0.0.5/32"], "r__router_metrics_address": "10.0.0.2"}, []),
    ({"r__router_metrics_address": "0.0.0.0 ssl"}, ["r: router_metrics_address='0.0.0.0 ssl' is not an IP address"]),
    ({"r__router_metrics_allowed_cidrs": "10.0.0.5/32"}, ["r: router_metrics_allowed_cidrs='10.0.0.5/32' is a string, not a list"]),
    ({"r__router_tls_port": 70000}, ["r: router_tls_port=70000 is not a TCP port"]),
    ({"r__router_retries": 0}, ["r: router_retries=0 is outside its range"]),
    (dict(WITH_ROUTER, **{"a-worker__dspark_rank": 0}),
     ["r: router_groups=['pair_a'] names group pair_a, which has 2 hosts with dspark_rank 0 (a-head, a-worker)"]),
    (dict(WITH_ROUTER, **{"a-head__dspark_mgmt_address": "a b"}), ["r: dspark_mgmt_address='a b' of a-head (head of pair_a) is not a"]),
    (dict(WITH_ROUTER, serve_api_key="k'ey-sentinel-long-enough"), []),          # the router reads no key
    (dict(WITH_ROUTER, **{"r__router_api_key": "unit-test-key-4711-sentinel"}),
     ["r: router_api_key=<not shown: secret> is set, but the router no longer uses it"]),
    ({"r__router_allowed_paths": []}, ["r: router_allowed_paths=[] is empty"]),
    ({"r__router_allowed_paths": ["/v1/models", "//v1/x", "/v1/%2e"]},
     ["r: router_allowed_paths=['/v1/models', '//v1/x', '/v1/%2e'] holds '//v1/x', '/v1/%2e', which are not"]),
    ({"r__router_allowed_paths": ["/tokenize", "/v1/models/deepseek-v4-flash"]}, []),
    ({"r__router_health_path": "/health x"}, ["r: router_health_path='/health x' is not a plain absolute path"]),
    ({"r__router_health_path": "/ping"}, []),
    ({"r__router_key_rate_limit": 0, "r__router_key_concurrency_limit": 0, "r__router_max_body_bytes": 0}, []),
    ({"r__router_max_body_bytes": -5}, ["r: router_max_body_bytes=-5 is outside its range (at least 0)"]),
    ({"r__router_frontend_name": "api x", "r__router_bind_address": "0.0.0.0:80 ssl"},
     ["r: router_frontend_name='api x' is not a name that can be written",
      "r: router_bind_address='0.0.0.0:80 ssl' is not an address to bind to"]),
    ({"r__router_bind_address": "::", "r__router_state_file": "/var/lib/haproxy/state-2"}, []),
    # One service address (issue #42): the secret is checked and never shown.
    ({"r__dspark_mgmt_address": "10.9.9.201", "r__router_vip": "10.9.9.200/24", "r__router_vrrp_auth_pass": "s-1"}, []),
    ({"r__dspark_mgmt_address": "10.9.9.201", "r__router_vip": "10.9.9.200/24",
      "r__router_vrrp_auth_pass": "sentinel-too-long"},
     ["r: router_vrrp_auth_pass=<not shown: secret> is not 1-8 characters"]),
    ({"r__dspark_mgmt_address": "10.9.9.201", "r__router_vip": "10.9.8.200/24", "r__router_vrrp_auth_pass": "s-1",
      "r__router_vrrp_router_id": 0},
     ["r: router_vip='10.9.8.200/24' is not in the network of router r's management address 10.9.9.201",
      "r: router_vrrp_router_id=0 is not a VRRP router id"]),
])
def test_router_rules_in_preflight(overrides, lines):
    result = preflight(overrides)
    errors = [line for line in result["errors"] if line.startswith("r: ")]
    assert len(errors) == len(lines), result["errors"]
    for line, start in zip(errors, lines):
        assert line.startswith(start) and ". Fix: " in line and "sentinel" not in line, line


def test_router_models_differ():
    hostvars = {"a0": {"dspark_rank": 0, "serve_served_model_name": "one"}, "b0": {"dspark_rank": 0}, ROUTER: {}}
    groups = {"dspark": ["a0", "b0"], "pair_a": ["a0"], "pair_b": ["b0"]}
    hostvars["a0"]["dspark_group"], hostvars["b0"]["dspark_group"] = "pair_a", "pair_b"
    found = _role_rules.check_router(ROUTER, {}, SPECS, groups, hostvars)
    assert [p[1:3] for p in found] == [("serve_served_model_name", "pair_a=one, pair_b=deepseek-v4-flash")], found


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_a_broken_rule_stops_preflight_with_one_line(name):
    overrides, where, var, text = BREAKS[name]
    result = preflight(overrides)
    assert result.get("failed"), name
    lines = result["errors"]
    assert len(lines) == 1, "%s: expected one line, got:\n%s" % (name, "\n".join(lines))
    line = lines[0]
    head = "%s: %s is not set" % (where, var) if text == "is not set" else "%s: %s=" % (where, var)
    assert line.startswith(head), (name, line)
    assert text in line and ". Fix: " in line, (name, line)
    assert "sentinel" not in line and "me:pw" not in line and "\n" not in line


def _role_alone_cases():
    """Every broken input but dspark_image under a checkpoint rule (not a checkpoint input: nothing to find alone)."""
    return [name for name in sorted(BREAKS)
            if not (next(r for r in _role_rules.RULES if r.name == name).role == "checkpoint" and BREAKS[name][2] == "dspark_image")]


@pytest.mark.parametrize("name", _role_alone_cases())
def test_the_role_alone_runs_the_same_rule(name):
    """The role's own check (check_group for its role only, as the action role_inputs asks) finds the same input."""
    item = next(r for r in _role_rules.RULES if r.name == name)
    overrides, dummy, var, dummy = BREAKS[name]
    hostvars = pair(overrides)
    if item.role in _role_rules.ROUTER_ROLES:
        groups = {"dspark": ["a-head", "a-worker"], "pair_a": ["a-head", "a-worker"], "dspark_router": [ROUTER]}
        found = _role_rules.check_router(ROUTER, hostvars[ROUTER], SPECS, groups, hostvars)
        assert any(problem[1] == var for problem in found), (name, found)
        return
    found = _role_rules.check_group("pair_a", list(hostvars), hostvars.get, SPECS, roles=[item.role], running=item.role)
    if item.name == "serve.image":  # preflight says it as dspark_image, the role as serve_image
        var = "serve_image"
    assert any(problem[1] == var for problem in found), (name, found)


def test_a_template_failure_skips_the_rules_of_its_variable():
    hostvars = pair({"checkpoint_scp_streams": _role_rules.TemplateFailure("{{ x }}", "x is undefined")})
    assert _role_rules.check_group("pair_a", list(hostvars), hostvars.get, SPECS) == []


HTTP_TOKEN = dict(DOWNLOAD, checkpoint_download_endpoint="http://10.231.0.1:5990/", checkpoint_hf_token="hf_sentinel_token")


@pytest.mark.parametrize("overrides, refused", [
    (HTTP_TOKEN, True),
    (dict(HTTP_TOKEN, checkpoint_download_endpoint="HTTP://hf.example.org"), True),     # the scheme in any case
    (dict(HTTP_TOKEN, checkpoint_allow_insecure_endpoint=True), False),                  # the lab says so
    (dict(HTTP_TOKEN, checkpoint_allow_insecure_endpoint="yes"), False),
    (dict(HTTP_TOKEN, checkpoint_allow_insecure_endpoint=False), True),
    (dict(HTTP_TOKEN, checkpoint_hf_token=""), False),                                   # no token, nothing to carry
    (dict(HTTP_TOKEN, checkpoint_download_endpoint="https://hf.example.org"), False),
    (dict(HTTP_TOKEN, checkpoint_download_endpoint=""), False),                          # the public Hub, https
    (dict(HTTP_TOKEN, checkpoint_download=False), False),                                # nothing downloaded
])
def test_a_token_over_plain_http_is_refused_unless_allowed(overrides, refused):
    """Issue #41: the rule alone (the role's own check) and in preflight, one line naming variable, value and fix."""
    hostvars = pair(overrides)
    found = _role_rules.check_group("pair_a", list(hostvars), hostvars.get, SPECS, roles=["checkpoint"], running="checkpoint")
    insecure = [p for p in found if "is plain http://" in p[3]]
    assert bool(insecure) == refused, found
    lines = [line for line in preflight(overrides)["errors"] if "is plain http://" in line]
    assert len(lines) == (1 if refused else 0), lines
    if refused:
        assert lines[0].startswith("group pair_a: checkpoint_download_endpoint=%r is plain http:// and checkpoint_hf_token "
                                   "is set" % overrides["checkpoint_download_endpoint"]), lines[0]
        assert "Fix: use the endpoint's https:// URL" in lines[0] and "checkpoint_allow_insecure_endpoint: true" in lines[0]
        assert "sentinel" not in lines[0]


def docker_runtime_found(overrides):
    hostvars = pair(overrides)
    return _role_rules.check_group("pair_a", list(hostvars), hostvars.get, SPECS, roles=["docker_runtime"], only=["a-head"])


@pytest.mark.parametrize("facts, source, variables", [
    ({"os_family": "Debian", "distribution": "Ubuntu", "architecture": "aarch64"}, "distribution", []),
    ({"os_family": "Debian", "distribution": "Debian", "architecture": "amd64"}, "distribution", []),
    ({}, "distribution", []),                                   # no facts (preflight without a fact cache): not judged
    ({"os_family": "Debian", "distribution": "Raspbian", "architecture": "armv7l"}, "distribution",
     ["ansible_facts.architecture", "docker_runtime_package_source"]),
    ({"os_family": "Debian", "distribution": "Raspbian", "architecture": "x86_64"}, "docker", []),
])
def test_docker_runtime_platform_rule(facts, source, variables):
    found = docker_runtime_found({"ansible_facts": facts, "docker_runtime_package_source": source})
    assert [p[1] for p in found] == variables, found


@pytest.mark.parametrize("registries, bad", [
    (["10.231.0.250:5000", "registry.lab", "10.0.0.0/8", "[fd00::1]:5000", "a-b.example.org:443"], []),
    (["registry.lab:70000", "registry.lab/path", "a b", "registry.lab:0"],
     ["'registry.lab:70000'", "'registry.lab/path'", "'a b'", "'registry.lab:0'"]),
])
def test_insecure_registries_rule(registries, bad):
    found = docker_runtime_found({"docker_runtime_insecure_registries": registries})
    assert len(found) == (1 if bad else 0), found
    for text in bad:
        assert text in found[0][3], found


def test_proxy_rule_names_the_keys_never_the_values():
    found = docker_runtime_found({"docker_runtime_proxy": {"http_proxy": "http://u:p%27w@proxy:3128", "https_proxy": "x\ny",
                                                           "no_proxy": "localhost,10.0.0.0/8"}})
    assert [(p[1], p[2]) for p in found] == [("docker_runtime_proxy", _role_rules.HIDDEN)], found
    assert "has https_proxy with" in found[0][3] and "x\ny" not in repr(found)


def write_archive(path, images):
    data = json.dumps([{"Config": "%064x.json" % index, "RepoTags": None, "Layers": []} for index in range(images)]).encode()
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return str(path)


@pytest.mark.parametrize("images, problem", [(1, None), (2, "holds 2 images"), ("text", "ReadError")])
def test_image_archive_rule(tmp_path, images, problem):
    if images == "text":
        path = tmp_path / "image.tar"
        path.write_text("not an archive")
    else:
        path = write_archive(tmp_path / "image.tar", images)
    found = docker_runtime_found({"docker_runtime_image_source": "tarball", "docker_runtime_image_tarball": str(path)})
    assert [p[3] for p in found if problem and problem in p[3]] == [p[3] for p in found] and bool(found) == bool(problem), found
    assert docker_runtime_found({"docker_runtime_image_source": "registry", "docker_runtime_image_tarball": "/nonexistent"}) == []
    assert [p[1:3] for p in docker_runtime_found({"docker_runtime_image_source": "tarball"})] == [
        ("docker_runtime_image_tarball", None)]


def test_the_fabric_role_alone_says_every_member_its_own():
    """The fabric role's own check (role_inputs role fabric) on each member: the group's values and its own address,
    never a peer's (the peer reports that itself)."""
    hostvars = pair({"a-worker__dspark_fabric_address": "10.77.78.2", "dspark_fabric_mtu": 1400})
    found = {}
    for host in hostvars:
        problems = _role_rules.check_group("pair_a", list(hostvars), hostvars.get, SPECS, roles=["fabric"], only=[host],
                                           running="fabric")
        found[host] = [problem[1] for problem in problems]
    assert found == {"a-head": ["dspark_fabric_mtu"], "a-worker": ["dspark_fabric_mtu", "dspark_fabric_address"]}, found
    hostvars = pair({"dspark_fabric_mtu": 1400, "preflight_mtu_min": 1280})   # preflight's limits, also for the role alone
    assert _role_rules.check_group("pair_a", list(hostvars), hostvars.get, SPECS, roles=["fabric"]) == []


@pytest.mark.parametrize("values, refused", [
    ({}, False),                                                    # the base has a key
    ({"serve_api_key": ""}, True),
    ({"serve_api_key": "", "serve_host": "10.0.0.5"}, True),
    ({"serve_api_key": "", "serve_host": "::"}, True),
    ({"serve_api_key": "", "serve_allow_unauthenticated": "false"}, True),
    ({"serve_api_key": "", "serve_api_keys": ["sk-secret-1", "sk-secret-2"]}, False),
    ({"serve_api_key": "", "serve_allow_unauthenticated": True}, False),
    ({"serve_api_key": "", "serve_allow_unauthenticated": "yes"}, False),
    ({"serve_api_key": "", "serve_host": "127.0.1.1"}, False),
    ({"serve_api_key": "", "serve_host": "[::1]"}, False),
    ({"serve_api_key": "", "serve_host": "LocalHost "}, False),
    ({"serve_api_key": "", "a-head__serve_host": "127.0.0.1"}, False),   # the head decides: it serves the API
    ({"serve_api_key": "", "a-worker__serve_host": "127.0.0.1"}, True),
])
def test_open_api_rule(values, refused):
    hostvars = pair(values)
    found = _role_rules.check_group("pair_a", list(hostvars), hostvars.get, SPECS, roles=["serve"])
    assert bool([p for p in found if p[1] == "serve_host"]) == refused, found


@pytest.mark.parametrize("overrides, where, var", [
    ({"serve_api_key": "sentinel-short"}, "group pair_a", "serve_api_key"),
    ({"serve_api_key": "", "serve_api_keys": ["sentinel-long-enough-1", "sentinel-2"]}, "group pair_a", "serve_api_keys"),
])
def test_a_short_api_key_is_refused_without_showing_it(overrides, where, var):
    lines = [line for line in preflight(overrides)["errors"] if "shorter than 16 characters" in line
             and line.startswith(where + ": " + var + "=")]
    assert len(lines) == 1 and lines[0].startswith("%s: %s=<not shown: secret>" % (where, var)), lines
    assert "sentinel" not in lines[0] and "openssl rand -hex 24" in lines[0]


@pytest.mark.parametrize("overrides, var", [
    ({"checkpoint_source_rank": -1}, "checkpoint_source_rank"),
    ({"checkpoint_source_rank": "one"}, None),                      # the type rule reports it
    (dict(NFS, nfs_export_rank="3"), "nfs_export_rank"),
    (dict(NFS, checkpoint_source_rank=0, nfs_export_rank=1), None),
])
def test_rank_rules(overrides, var):
    hostvars = pair(overrides)
    found = _role_rules.check_group("pair_a", list(hostvars), hostvars.get, SPECS)
    assert [p[1] for p in found][:1] == ([var] if var else []), found


@pytest.mark.parametrize("overrides, hosts", [
    (NFS, []),                                                       # the default clients: the peers' addresses
    (dict(NFS, **{"a-worker__nfs_export_clients": ["0.0.0.0/0"]}), ["a-worker"]),
    (dict(NFS, nfs_export_clients=["a-head"]), ["a-worker"]),         # host names: the Python rule, everywhere
    (dict(NFS, nfs_export_clients=["spark-worker"], checkpoint_source_rank=0), ["a-head"]),
    ({"nfs_export_clients": ["*"]}, []),                              # SCP mode: nfs_export does not run
])
def test_nfs_clients_rule_on_the_exporting_node(overrides, hosts):
    hostvars = pair(overrides)
    found = _role_rules.check_group("pair_a", list(hostvars), hostvars.get, SPECS, roles=["nfs_export"])
    assert [p[0] for p in found] == hosts, found


@pytest.mark.parametrize("value, expected", [
    (8, 8), ("8", 8), (" -3 ", -3), ("+4", 4), (True, None), ("8.5", None), (8.0, None), ("eight", None), (None, None)])
def test_one_integer_reading(value, expected):
    assert _inputs.as_int(value) == expected


@pytest.mark.parametrize("value, expected", [
    (True, True), ("yes", True), ("On", True), (1, True), ("t", True), (False, False), ("no", False), (0, False),
    ("off", False), ("maybe", None), (2, None), ([], None), (None, None)])
def test_one_boolean_reading(value, expected):
    assert _inputs.as_bool(value) is expected


def test_one_port_reading():
    assert _inputs.as_port("8888") == 8888 and _inputs.as_port(0) is None and _inputs.as_port(70000) is None
    assert _inputs.as_port(True) is None and _inputs.as_port(0, low=0) == 0


@pytest.mark.parametrize("value, low, high, low_open, found", [
    (0.5, 0, 1, True, False), (1, 0, 1, True, False), (0, 0, 1, True, True), (1.01, 0, 1, True, True),
    (-1, 0, None, False, True), (0, 0, None, False, False), ("nope", 0, None, False, False),
])
def test_ranges(value, low, high, low_open, found):
    assert bool(_inputs.range_problem(value, low, high, low_open, number=_inputs.as_float)) == found


def test_dspark_group_on_the_parent_group_is_one_message():
    """dspark_group written once for the parent group dspark: one line naming that, not one per rank and address."""
    hostvars = pair({"dspark_group": "dspark"})
    hostvars.update({"b-head": dict(BASE, dspark_group="dspark", dspark_rank=0, dspark_fabric_address="10.77.77.1"),
                     "b-worker": dict(BASE, dspark_group="dspark", dspark_rank=1, dspark_fabric_address="10.77.77.2")})
    groups = {"all": list(hostvars), "dspark": list(hostvars), "pair_a": ["a-head", "a-worker"], "pair_b": ["b-head", "b-worker"]}
    action, dummy = make_action()
    result = action.run(task_vars={"hostvars": hostvars, "groups": groups, "ansible_play_hosts_all": list(hostvars)})
    assert result["errors"] == [result["errors"][0]] and result["errors"][0].startswith(
        "group dspark: dspark_group='dspark' names the parent group itself: it is set in the vars of the parent group dspark"), result
    for values in hostvars.values():
        values["dspark_group"] = "pair_a"
    result = action.run(task_vars={"hostvars": hostvars, "groups": groups, "ansible_play_hosts_all": list(hostvars)})
    assert len(result["errors"]) == 1 and "also on b-head, b-worker outside group pair_a" in result["errors"][0], result


def two_pairs(parent):
    """Two valid pairs under dspark, with ``parent`` (var -> value) the same on all four hosts, as the parent's vars."""
    hostvars = pair({})
    hostvars.update({"b-head": dict(BASE, dspark_group="pair_b", dspark_rank=0, dspark_fabric_address="10.77.77.1"),
                     "b-worker": dict(BASE, dspark_group="pair_b", dspark_rank=1, dspark_fabric_address="10.77.77.2")})
    for values in hostvars.values():
        values.update(parent)
    groups = {"all": list(hostvars), "dspark": list(hostvars), "pair_a": ["a-head", "a-worker"], "pair_b": ["b-head", "b-worker"]}
    action, dummy = make_action()
    return action.run(task_vars={"hostvars": hostvars, "groups": groups, "ansible_play_hosts_all": list(hostvars)})


@pytest.mark.parametrize("parent, lines", [
    ({}, []),
    ({"dspark_rank": 0}, ["group dspark: dspark_rank=0 is the same on all 4 hosts of dspark, but each member of a serving "
                          "group has its own: it is set in the vars of the parent group dspark"]),
    ({"dspark_fabric_address": "10.77.77.1"}, ["group dspark: dspark_fabric_address='10.77.77.1' is the same on all 4 hosts"]),
    ({"dspark_mgmt_address": "10.0.0.5"}, ["group dspark: dspark_mgmt_address='10.0.0.5' is the same on all 4 hosts"]),
    ({"dspark_rank": 1, "dspark_fabric_address": "10.77.77.2"},
     ["group dspark: dspark_rank=1 is the same", "group dspark: dspark_fabric_address='10.77.77.2' is the same"]),
    ({"dspark_group": "pair_b", "dspark_rank": 0},
     ["group dspark: dspark_group='pair_b' is the same on every host of dspark, also on a-head, a-worker outside group pair_b",
      "group dspark: dspark_rank=0 is the same"]),
])
def test_member_facts_on_the_parent_group_are_one_message_each(parent, lines):
    """Every fact that belongs to a group or a member (inventory_rules.NOT_FLEET_WIDE) written once for the parent group
    dspark: one line each, naming the variable and the fix, and none about the ranks and addresses it breaks."""
    errors = two_pairs(parent).get("errors", [])
    assert len(errors) == len(lines), errors
    for line, start in zip(errors, lines):
        assert line.startswith(start) and ". Fix: remove it there and set " in line, line


def test_the_group_wide_values_are_fleet_defaults():
    """The group-wide values (the image, the ports, the model, ...) written for the parent group are fleet defaults."""
    assert "dspark_image" in inventory_rules.GROUP_WIDE_VARS and "dspark_image" not in inventory_rules.NOT_FLEET_WIDE
    assert two_pairs({"dspark_api_port": 8000, "dspark_fabric_cidr": "10.77.77.0/30"}).get("errors", []) == []
