"""Preflight refuses bad sidecar engines (issue #46): the rule serve.sidecars (plugin_utils._rules_serve) over the group
fact dspark_sidecars, through the action dspark.cluster.preflight_validate on the pair of test_role_rules, one line per
problem naming the variable, the value and the fix; and tests/badinputs/sidecars.yml as Ansible reads it."""

import os

import pytest

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager

from ansible_collections.dspark.cluster.plugins.plugin_utils import _plan_vars, _role_rules, inventory_rules

from test_role_rules import SPECS, make_action, pair, preflight

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
BAD = os.path.join(ROOT, "tests", "badinputs")
REV = "0123456789abcdef0123456789abcdef01234567"
# The recipe's vision sidecar beside the pair's main engine (API 8888, rendezvous 25000, engine 18888, 0.835 of memory).
VL = {"name": "vl", "model": "cyankiwi/Qwen3-VL-4B-Instruct-AWQ-4bit", "revision": REV, "served_model_name": "qwen3-vl-4b",
      "api_port": 8889, "master_port": 25100, "gpu_memory_utilization": 0.12}


def vl(**changes):
    return dict(VL, **changes)


def errors(overrides):
    return preflight(overrides).get("errors", [])


@pytest.mark.parametrize("overrides", [
    {},                                                                     # no sidecars at all
    {"dspark_sidecars": []},
    {"dspark_sidecars": None},
    {"a-head__dspark_sidecars": []},                                        # [] on one member, unset on the other: none
    {"dspark_sidecars": [VL]},                                              # the recipe's, beside a main engine of 0.835
    {"dspark_sidecars": [vl(engine_port=18888)], "serve_edge": False},      # no edge: the main engine has no engine port
])
def test_no_finding(overrides):
    assert errors(overrides) == []


@pytest.mark.parametrize("overrides, line", [
    ({"dspark_sidecars": [vl(api_port=8888)]},
     "group pair_a: dspark_sidecars[0].api_port=8888 is also dspark_api_port. Fix: give every engine of the group its own port"),
    ({"dspark_sidecars": [vl(api_port="8888")]},                           # a port written as a string is the same port
     "group pair_a: dspark_sidecars[0].api_port=8888 is also dspark_api_port. Fix: give every engine of the group its own port"),
    ({"dspark_sidecars": [vl(master_port=25000)]},
     "group pair_a: dspark_sidecars[0].master_port=25000 is also dspark_master_port. Fix: give every engine of the group its "
     "own port"),
    ({"dspark_sidecars": [vl(engine_port=18888)]},
     "group pair_a: dspark_sidecars[0].engine_port=18888 is also serve_engine_port. Fix: give every engine of the group its own "
     "port"),
    ({"dspark_sidecars": [vl(served_model_name="deepseek-v4-flash")]},
     "group pair_a: dspark_sidecars[0].served_model_name='deepseek-v4-flash' is also serve_served_model_name. Fix: give every "
     "engine of the group its own served model name"),
    ({"dspark_sidecars": [vl(served_model_name="vision")], "serve_served_model_name": "vision"},
     "group pair_a: dspark_sidecars[0].served_model_name='vision' is also serve_served_model_name. Fix: "),
    ({"dspark_sidecars": [vl(gpu_memory_utilization=0.2)], "serve_gpu_memory_utilization": 0.9},
     "group pair_a: serve_gpu_memory_utilization='main 0.9 + vl 0.2 = 1.1' with the sidecars' gpu_memory_utilization leaves "
     "nothing of each node's memory to the host. Fix: lower the shares so that they add up to well below 1"),
    ({"dspark_sidecars": [vl(max_num_seq=4)]},
     "group pair_a: dspark_sidecars[0]=['max_num_seq'] names keys a sidecar does not have. Fix: remove or correct them; a "
     "sidecar has name, model, revision"),
    ({"dspark_sidecars": [{key: value for key, value in VL.items() if key != "revision"}]},
     "group pair_a: dspark_sidecars[0]=['api_port', 'gpu_memory_utilization', 'master_port', 'model', 'name', "
     "'served_model_name'] lacks revision. Fix: give every sidecar name, model, revision"),
    ({"dspark_sidecars": [vl(revision="main")]},
     "group pair_a: dspark_sidecars[0].revision='main' is a branch, tag or short id, not a 40-hex commit"),
    ({"dspark_sidecars": {"vl": VL}}, "group pair_a: dspark_sidecars={'vl': "),
    ({"dspark_sidecars": 8889}, "group pair_a: dspark_sidecars=8889 is not a list"),
    ({"dspark_sidecars": ["vl", VL]}, "group pair_a: dspark_sidecars[0]='vl' is not a mapping"),
    ({"dspark_sidecar": [VL]},                                              # the variable itself misspelt
     "group pair_a: dspark_sidecar=[{"),
])
def test_a_bad_sidecar_is_one_line_for_the_group(overrides, line):
    found = errors(overrides)
    assert len(found) == 1 and found[0].startswith(line), found
    assert ". Fix: " in found[0]


def test_the_misspelt_variable_is_named_with_the_right_one():
    assert "(did you mean dspark_sidecars?)" in errors({"dspark_sidecar": [VL]})[0]


def test_shares_that_fill_the_node_are_refused_on_the_member_whose_share_it_is():
    """The memory is each node's own: a worker with a larger main share than the head's is refused alone."""
    found = errors({"dspark_sidecars": [VL], "a-worker__serve_gpu_memory_utilization": 0.9})
    assert found == ["a-worker: serve_gpu_memory_utilization='main 0.9 + vl 0.12 = 1.02' with the sidecars' "
                     "gpu_memory_utilization leaves nothing of each node's memory to the host. Fix: lower the shares so "
                     "that they add up to well below 1; the recipe runs its main engine at 0.80 beside its vision sidecar"]


@pytest.mark.parametrize("overrides, start", [
    ({"serve_gpu_memory_utilization": 1.5}, "group pair_a: serve_gpu_memory_utilization=1.5 is outside its range"),
    ({"serve_gpu_memory_utilization": 0.9, "dspark_sidecars": [vl(gpu_memory_utilization=12)]},
     "group pair_a: dspark_sidecars[0].gpu_memory_utilization=12 is not a share of the node's memory"),
    # The engine port follows the API port (+ 10000): fixing api_port fixes both.
    ({"dspark_sidecars": [vl(api_port=8888, engine_port=None)]}, "group pair_a: dspark_sidecars[0].api_port=8888 is also"),
    # The main engine's own ports clashing is their rules' line (dspark_master_port's, serve.engine_port), not this one's.
    ({"dspark_master_port": 8888}, "group pair_a: dspark_master_port=8888 equals dspark_api_port"),
    ({"dspark_image": ""}, "group pair_a: dspark_image='' is empty"),       # the image the sidecar inherits
])
def test_one_mistake_is_one_line(overrides, start):
    overrides = dict({"dspark_sidecars": [VL]}, **overrides)
    overrides["dspark_sidecars"] = [{k: v for k, v in entry.items() if v is not None} for entry in overrides["dspark_sidecars"]]
    found = errors(overrides)
    assert len(found) == 1 and found[0].startswith(start), found


def test_members_that_disagree_are_one_line():
    found = errors({"a-head__dspark_sidecars": [VL]})
    assert len(found) == 1 and found[0].startswith("group pair_a: dspark_sidecars='differs' between members ([] on a-worker; "
                                                   "[{'name': 'vl'"), found
    assert "Fix: set dspark_sidecars once in the group's vars, not per host" in found[0]
    # The head's list is the group's: a problem in it is said once, for the group, beside the disagreement.
    found = errors({"a-head__dspark_sidecars": [vl(api_port=8888)]})
    assert [line.split("=")[0] for line in found] == ["group pair_a: dspark_sidecars", "group pair_a: dspark_sidecars[0].api_port"]


def test_the_role_alone_refuses_it_on_every_member():
    hostvars = pair({"dspark_sidecars": [vl(api_port=8888)]})
    for host in ("a-head", "a-worker"):
        found = _role_rules.check_group("pair_a", list(hostvars), hostvars.get, SPECS, roles=["serve"], only=[host], running="serve")
        assert [problem[:3] for problem in found] == [(host, "dspark_sidecars[0].api_port", 8888)], found


def test_a_template_failure_is_said_once_as_such():
    failure = _role_rules.TemplateFailure("{{ sidecars_undefined }}", "'sidecars_undefined' is undefined")
    hostvars = pair({"dspark_sidecars": failure})
    assert _role_rules.check_group("pair_a", list(hostvars), hostvars.get, SPECS, roles=["serve"]) == []
    found = errors({"dspark_sidecars": failure})
    assert len(found) == 1 and found[0].startswith("group pair_a: dspark_sidecars='{{ sidecars_undefined }}' cannot be "
                                                   "templated"), found
    # The head's value failing: no member reads it (the worker's rule reads the head's list).
    hostvars = pair({"a-head__dspark_sidecars": failure, "a-worker__dspark_sidecars": [vl(api_port=8888)]})
    assert _role_rules.check_group("pair_a", list(hostvars), hostvars.get, SPECS, roles=["serve"]) == []


def test_it_is_an_optional_group_fact_of_the_contract():
    assert "dspark_sidecars" in inventory_rules.OPTIONAL_VARS and "dspark_sidecars" in inventory_rules.CONTRACT_VARS
    assert "dspark_sidecars" not in inventory_rules.GROUP_WIDE_VARS   # not required of every group
    specs, known = _plan_vars.collection_specs()
    assert _plan_vars.check_host("a-head", {"dspark_sidecars": [VL]}, specs, known) == []


# -- tests/badinputs/sidecars.yml (run by tests/unit/playbooks/test_site_badinputs.py through site.yml) ---------------

BADINPUTS_LINES = [
    "group pair_a: dspark_sidecars[0].api_port=8888 is also dspark_api_port. Fix: ",
    "group pair_a: dspark_sidecars[1]=['api_port', 'gpu_memory_utilization', 'master_port', 'max_num_seq', 'model', 'name'] "
    "lacks revision. Fix: ",
    "group pair_a: dspark_sidecars[1]=['max_num_seq'] names keys a sidecar does not have. Fix: ",
    "group pair_a: serve_gpu_memory_utilization='main 0.835 + vl 0.12 + ocr 0.1 = 1.055' with the sidecars' "
    "gpu_memory_utilization leaves nothing of each node's memory to the host. Fix: ",
]


def test_the_badinputs_case_as_ansible_reads_it():
    """base.yml with the overlay sidecars.yml, read by ansible-core's inventory (the yaml plugin, its precedence), then
    preflight's action: the four lines its header promises, and nothing else."""
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[os.path.join(BAD, "base.yml"), os.path.join(BAD, "sidecars.yml")])
    variables = VariableManager(loader=loader, inventory=inventory)
    hostvars = {host.name: variables.get_vars(host=host, include_hostvars=False) for host in inventory.get_hosts()}
    groups = inventory.get_groups_dict()
    action, dummy = make_action()
    result = action.run(task_vars={"hostvars": hostvars, "groups": groups, "ansible_play_hosts_all": groups["dspark"]})
    found = sorted(result.get("errors", []))
    assert len(found) == len(BADINPUTS_LINES), found
    for line, start in zip(found, BADINPUTS_LINES):
        assert line.startswith(start), (line, start)
