"""Table-driven tests of the preflight rules: one good pair, then one broken inventory per row."""

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import inventory_rules as rules

GROUP = {
    "dspark_group": "pair_a",
    "dspark_fabric_cidr": "192.168.100.0/24",
    "dspark_fabric_interface": "enp1s0f1np1",
    "dspark_fabric_hca": "rocep1s0f1",
    "dspark_fabric_mtu": 9000,
    "dspark_gpus_per_node": 1,
    "dspark_tensor_parallel_size": 2,
    "dspark_api_port": 8888,
    "dspark_master_port": 25000,
    "dspark_image": "ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:" + "a" * 64,
    "dspark_model": "deepseek-ai/DeepSeek-V4-Flash-0731",
    "dspark_model_revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
    "dspark_checkpoint_mode": "nfs",
}


def pair(**overrides):
    """A valid pair (head + worker); overrides are 'host.var' or 'var' (both hosts)."""
    nodes = {
        "head": dict(GROUP, dspark_rank=0, dspark_fabric_address="192.168.100.1", group_names=["dspark", "pair_a"]),
        "worker": dict(GROUP, dspark_rank=1, dspark_fabric_address="192.168.100.2", group_names=["dspark", "pair_a"]),
    }
    for key, value in overrides.items():
        host, dummy, var = key.rpartition("__")
        for name in [host] if host else list(nodes):
            nodes[name][var] = value
    groups = {"all": list(nodes), "dspark": list(nodes), "pair_a": list(nodes)}
    return nodes, groups


def run(nodes, groups, play_hosts=None, **settings):
    findings, summary = rules.validate(nodes, groups, play_hosts or list(nodes), rules.Settings(**settings))
    return findings, summary


def test_valid_pair_has_no_findings():
    findings, summary = run(*pair())
    assert findings.errors == []
    assert findings.warnings == []
    assert summary == {"pair_a": {"head": "head", "members": ["head", "worker"], "world_size": 2}}


@pytest.mark.parametrize("overrides, where, var, value_text", [
    ({"dspark_fabric_cidr": "192.168.100.0/33"}, "group pair_a", "dspark_fabric_cidr", "'192.168.100.0/33'"),
    ({"dspark_fabric_cidr": "not-a-cidr"}, "group pair_a", "dspark_fabric_cidr", "'not-a-cidr'"),
    ({"dspark_fabric_cidr": "192.168.100.0"}, "group pair_a", "dspark_fabric_cidr", "'192.168.100.0'"),
    ({"dspark_fabric_cidr": "fd00::/64"}, "group pair_a", "dspark_fabric_cidr", "'fd00::/64'"),
    ({"dspark_fabric_cidr": "192.168.100.7/24"}, "group pair_a", "dspark_fabric_cidr", "'192.168.100.7/24'"),
    ({"worker__dspark_rank": 0}, "group pair_a", "dspark_rank", "=0 is set on 2 hosts"),
    ({"worker__dspark_rank": 2}, "group pair_a", "dspark_rank", "[0, 2]"),
    ({"head__dspark_rank": 1, "worker__dspark_rank": 2}, "group pair_a", "dspark_rank", "has no head"),
    ({"worker__dspark_rank": "one"}, "worker", "dspark_rank", "'one'"),
    ({"worker__dspark_fabric_address": "192.168.100.1"}, "worker", "dspark_fabric_address", "also the address of head"),
    ({"worker__dspark_fabric_address": "10.0.0.2"}, "worker", "dspark_fabric_address", "outside dspark_fabric_cidr"),
    ({"worker__dspark_fabric_address": "192.168.100.300"}, "worker", "dspark_fabric_address", "not an IPv4 address"),
    ({"worker__dspark_fabric_address": "192.168.100.255"}, "worker", "dspark_fabric_address", "broadcast"),
    ({"worker__dspark_fabric_address": None}, "worker", "dspark_fabric_address", "is not set"),
    ({"dspark_fabric_interface": "enp1s0f1np1-too-long"}, "group pair_a", "dspark_fabric_interface", "not a Linux interface name"),
    # An address label, not a netdev: the fabric role refuses it too.
    ({"dspark_fabric_interface": "eth1:0"}, "group pair_a", "dspark_fabric_interface", "not a Linux interface name"),
    ({"dspark_tensor_parallel_size": 4}, "group pair_a", "dspark_tensor_parallel_size", "2 x 1 = 2"),
    ({"dspark_gpus_per_node": 0}, "group pair_a", "dspark_gpus_per_node", "=0"),
    ({"dspark_fabric_mtu": 65000}, "group pair_a", "dspark_fabric_mtu", "outside 1500-9216"),
    ({"dspark_fabric_mtu": 576}, "group pair_a", "dspark_fabric_mtu", "=576"),
    ({"dspark_fabric_mtu": True}, "group pair_a", "dspark_fabric_mtu", "=True"),
    ({"dspark_api_port": 80}, "group pair_a", "dspark_api_port", "not a port in 1024-65535"),
    ({"dspark_master_port": 70000}, "group pair_a", "dspark_master_port", "=70000"),
    ({"dspark_master_port": 8888}, "group pair_a", "dspark_master_port", "equals dspark_api_port"),
    ({"dspark_image": "Ghcr.io/UPPER/Case Image"}, "group pair_a", "dspark_image", "not a valid image reference"),
    ({"dspark_image": "repo/img@sha256:1234"}, "group pair_a", "dspark_image", "not a valid image reference"),
    ({"dspark_image": ""}, "group pair_a", "dspark_image", "is empty"),
    ({"dspark_model": "DeepSeek-V4-Flash"}, "group pair_a", "dspark_model", "not a Hugging Face model id"),
    ({"head__dspark_image": "ghcr.io/x/y:1"}, "group pair_a", "dspark_image", "differs"),
    # An optional group fact (issue #46): set, every member must agree on it.
    ({"head__dspark_sidecars": [{"name": "vl"}]}, "group pair_a", "dspark_sidecars", "between members ([] on worker; "
     "[{'name': 'vl'}] on head)"),
    ({"head__dspark_sidecars": [{"name": "vl"}], "worker__dspark_sidecars": [{"name": "ocr"}]}, "group pair_a", "dspark_sidecars",
     "differs"),
    ({"worker__ansible_host": "192.168.100.2"}, "worker", "dspark_fabric_address", "equals the management address (ansible_host"),
    ({"head__dspark_mgmt_address": "192.168.100.1"}, "head", "dspark_fabric_address", "equals the management address (dspark_mgmt"),
    ({"dspark_fabric_hca": ["rocep1s0f1"]}, "group pair_a", "dspark_fabric_hca", "not in NCCL_IB_HCA syntax"),
    ({"dspark_fabric_hca": "rocep1s0f1 roceP2p1s0f1"}, "group pair_a", "dspark_fabric_hca", "not in NCCL_IB_HCA syntax"),
    ({"dspark_fabric_hca": "rocep1s0f1;roceP2p1s0f1"}, "group pair_a", "dspark_fabric_hca", "not in NCCL_IB_HCA syntax"),
    # The fabric role's own rules (plugin_utils._fabric_plan), run by preflight too.
    ({"worker__dspark_fabric_hca": None}, "worker", "dspark_fabric_hca", "is not set (NCCL needs the RDMA device(s)"),
    ({"worker__dspark_fabric_hca": ""}, "worker", "dspark_fabric_hca", "is not set (NCCL needs the RDMA device(s)"),
    ({"fabric_secondary_interface": "enp2", "fabric_secondary_cidr": "192.168.101.1/24"}, "group pair_a", "fabric_secondary_cidr",
     "'192.168.101.1/24' is not an IPv4 network in CIDR form without host bits"),
    ({"fabric_secondary_interface": "enp2", "fabric_secondary_cidr": "192.168.100.0/25"}, "group pair_a", "fabric_secondary_cidr",
     "overlaps dspark_fabric_cidr"),
    ({"fabric_secondary_interface": "enp2"}, "group pair_a", "fabric_secondary_cidr", "is not set"),
    ({"head__fabric_secondary_interface": "enp1s0f1np1", "head__fabric_secondary_cidr": "192.168.101.0/24"}, "head",
     "fabric_secondary_interface", "other than dspark_fabric_interface"),
    ({"worker__fabric_secondary_interface": "enp2", "worker__fabric_secondary_cidr": "10.0.0.0/31"}, "worker", "fabric_secondary_cidr",
     "too small for host number 2"),
    ({"head__fabric_secondary_interface": "enp2", "head__fabric_secondary_cidr": "10.0.0.0/30",
      "head__fabric_secondary_address": "10.0.0.3"}, "head", "fabric_secondary_address", "is not a usable address"),
    ({"worker__fabric_bandwidth_extra_args": ["--tclass 106"]}, "worker", "fabric_bandwidth_extra_args",
     "has the item '--tclass 106', which is not one argument"),
    ({"worker__dspark_group": None}, "worker", "dspark_group", "is not set"),
    ({"worker__dspark_group": "pair_z"}, "worker", "dspark_group", "names no inventory group"),
])
def test_broken_inventory_is_reported_by_name(overrides, where, var, value_text):
    findings, dummy = run(*pair(**overrides))
    matching = [e for e in findings.errors if e.startswith(where + ": " + var) and value_text in e]
    assert matching, "expected an error about %s (%s) at %s, got %r" % (var, value_text, where, findings.errors)
    assert all("Fix: " in e for e in findings.errors)


@pytest.mark.parametrize("overrides", [
    {},                                                                    # unset on every member: no sidecars
    {"dspark_sidecars": None},
    {"dspark_sidecars": []},
    {"head__dspark_sidecars": []},                                         # [] and unset both say: no sidecars
    {"dspark_sidecars": [{"name": "vl"}]},                                 # the same everywhere (serve.sidecars reads it)
])
def test_members_agreeing_on_the_sidecars_pass(overrides):
    findings, dummy = run(*pair(**overrides))
    assert findings.errors == []


def test_the_sidecars_are_an_optional_group_fact():
    """In the contract (preflight's unknown-variable check accepts it), agreed on like the group-wide values, but not one
    of them: a group without sidecars leaves it out, and GROUP_WIDE_VARS' other readers are unchanged."""
    assert "dspark_sidecars" in rules.OPTIONAL_VARS and "dspark_sidecars" in rules.CONTRACT_VARS
    assert "dspark_sidecars" not in rules.GROUP_WIDE_VARS
    assert len(rules.CONTRACT_VARS) == len(set(rules.CONTRACT_VARS))


def test_missing_worker_is_reported():
    nodes, groups = pair()
    del nodes["worker"]
    groups = {"dspark": ["head"], "pair_a": ["head"]}
    findings, dummy = run(nodes, groups)
    assert any("group pair_a: members" in e and "has no worker" in e for e in findings.errors)
    assert any("dspark_tensor_parallel_size" in e and "1 x 1 = 1" in e for e in findings.errors)


def test_host_in_two_groups_is_reported():
    nodes, groups = pair()
    nodes["third"] = dict(GROUP, dspark_group="pair_b", dspark_rank=0, dspark_fabric_address="192.168.100.3",
                          group_names=["dspark", "pair_b"])
    nodes["worker"]["group_names"] = ["dspark", "pair_a", "pair_b"]
    groups["pair_b"] = ["third", "worker"]
    findings, dummy = run(nodes, groups)
    assert any(e.startswith("worker: group_names=['pair_a', 'pair_b'] puts the host in 2 serving groups") for e in findings.errors)


def test_limit_that_splits_a_group_is_reported():
    findings, dummy = run(*pair(), play_hosts=["head"])
    assert any(e.startswith("group pair_a: limit") and "leaves out worker" in e for e in findings.errors)


def test_unpinned_image_warns_by_default_and_fails_on_request():
    # The revision is the checkpoint role's rule (plugin_utils._role_rules: always a pinned commit).
    nodes, groups = pair(dspark_image="ghcr.io/anemll/dspark-vllm-gx10:0.1.1", dspark_model_revision="main")
    findings, dummy = run(nodes, groups)
    assert findings.errors == []
    assert [w.split("=")[0] for w in findings.warnings] == ["group pair_a: dspark_image"]
    findings, dummy = run(nodes, groups, require_image_digest=True)
    assert len(findings.errors) == 1


def test_fleet_of_pairs_and_a_four_node_group_validate_independently():
    nodes, groups = pair()
    quad = ["q0", "q1", "q2", "q3"]
    for rank, host in enumerate(quad):
        nodes[host] = dict(GROUP, dspark_group="quad", dspark_rank=rank, dspark_tensor_parallel_size=4,
                           dspark_fabric_cidr="10.77.0.0/29", dspark_fabric_address="10.77.0.%d" % (rank + 1),
                           group_names=["dspark", "quad"])
    groups["quad"] = list(reversed(quad))
    findings, summary = run(nodes, groups)
    assert findings.errors == []
    assert summary["quad"] == {"head": "q0", "members": quad, "world_size": 4}
    # Point-to-point links may reuse a subnet: same addresses in two groups are not a conflict.
    assert summary["pair_a"]["world_size"] == 2


def test_every_problem_is_reported_at_once():
    findings, dummy = run(*pair(dspark_fabric_mtu=100, dspark_api_port=80, worker__dspark_rank=0))
    assert len(findings.errors) >= 3


@pytest.mark.parametrize("hca", ["rocep1s0f1", "=rocep1s0f1,roceP2p1s0f1", "^mlx5_1", "mlx5_0:1,mlx5_1:1", "^=rxe0"])
def test_hca_syntax_accepted(hca):
    findings, dummy = run(*pair(dspark_fabric_hca=hca))
    assert findings.errors == []


def test_a_node_rule_broken_on_one_member_names_that_member():
    findings, dummy = run(*pair(worker__dspark_fabric_interface="eth1:0"))
    assert [e.split("=")[0] for e in findings.errors] == ["worker: dspark_fabric_interface"]


def test_second_fabric_link_accepted():
    findings, dummy = run(*pair(fabric_secondary_interface="enP2p1s0f1np1", fabric_secondary_cidr="192.168.101.0/24"))
    assert findings.errors == []


def test_group_wide_fabric_rules_are_reported_once_per_group():
    findings, dummy = run(*pair(dspark_fabric_mtu=100, dspark_fabric_cidr="192.168.100.0/33"))
    assert [e.split("=")[0] for e in findings.errors] == ["group pair_a: dspark_fabric_mtu", "group pair_a: dspark_fabric_cidr"]


def test_preflight_mtu_limits_apply_to_the_fabric_rule():
    findings, dummy = run(*pair(dspark_fabric_mtu=1400), mtu_min=1280)
    assert findings.errors == []


def test_fabric_address_differs_from_a_hostname_management_address():
    findings, dummy = run(*pair(head__ansible_host="spark-a-head.mgmt.example.net"))
    assert findings.errors == []


def test_slash_31_allows_both_addresses():
    findings, dummy = run(*pair(dspark_fabric_cidr="192.168.100.0/31", head__dspark_fabric_address="192.168.100.0",
                                worker__dspark_fabric_address="192.168.100.1"))
    assert findings.errors == []


# --------------------------------------------------------------------------- the run gate (playbooks/preflight.yml)

PAIR_GROUPS = {"all": ["a0", "a1", "rt"], "ungrouped": [], "dspark": ["a0", "a1"], "pair_a": ["a0", "a1"],
               "dspark_router": ["rt"]}


@pytest.mark.parametrize("groups, play_hosts, limit, expected", [
    ({"all": [], "ungrouped": []}, [], "", "inventory bad.yml: hosts=[] has no host: it did not parse"),
    ({"all": ["a0"], "ungrouped": [], "pair_a": ["a0"], "pairs": ["a0"]}, ["a0"], "",
     "inventory bad.yml: groups=['pair_a', 'pairs'] has no group dspark. Fix: put every serving group under"),
    ({"all": ["rt"], "ungrouped": [], "dspark": [], "dspark_router": ["rt"]}, ["rt"], "",
     "group dspark: hosts=[] is empty, so there is nothing to provision. Fix: "),
    (PAIR_GROUPS, ["rt"], "rt", "limit: --limit rt matches no host of group dspark (it matches rt). Fix: limit the run "
     "to serving groups or their hosts, e.g. --limit a0"),
])
def test_run_gate_names_why_the_run_would_do_nothing(groups, play_hosts, limit, expected):
    problems = rules.run_gate(groups, play_hosts, limit, ["bad.yml"])
    assert len(problems) == 1 and problems[0].startswith(expected), problems
    assert "Fix: " in problems[0]


@pytest.mark.parametrize("play_hosts", [["a0", "a1", "rt"], ["a1"]])
def test_run_gate_passes_a_run_with_a_serving_node(play_hosts):
    assert rules.run_gate(PAIR_GROUPS, play_hosts, "", ["hosts.yml"]) == []
