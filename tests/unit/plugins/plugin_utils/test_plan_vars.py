"""Table-driven tests of the whole-run role variable rules (strict types, unknown names, ranks, placement)."""

import os

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _plan_vars as plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
SPECS = plan.load_specs(os.path.join(ROOT, "roles"))
KNOWN = plan.known_names(SPECS, plan.internal_names(ROOT))

LIST = {"type": "list", "elements": "str", "default": []}
DICT = {"type": "dict", "default": {}}
INT = {"type": "int", "default": 8}
FLOAT = {"type": "float", "default": 0.9}
BOOL = {"type": "bool", "default": False}
STR = {"type": "str", "default": "x"}
CHOICE = {"type": "str", "choices": ["warn", "fail"], "default": "warn"}
MODE = {"type": "str", "choices": ["600", "660"], "default": "660"}


@pytest.mark.parametrize("name, value, spec, expected", [
    ("serve_extra_args", "--max-num-seqs", LIST, "is a string, not a list"),
    ("serve_extra_args", "a,b", LIST, "is a string, not a list"),
    ("serve_extra_args", {"a": 1}, LIST, "is a dict, not a list"),
    ("serve_extra_args", ["--x", ["nested"]], LIST, "has element 1"),
    ("serve_extra_args", ["--x", {"k": 1}], LIST, "has element 1"),
    ("serve_env", "A=1", DICT, "is a string, not a dict"),
    ("serve_env", ["A=1"], DICT, "is a list, not a dict"),
    ("serve_max_num_seqs", "eight", INT, "is not an integer"),
    ("serve_max_num_seqs", "8.5", INT, "is not an integer"),
    ("serve_max_num_seqs", 8.5, INT, "is a number, not an integer"),
    ("serve_max_num_seqs", True, INT, "is a boolean, not an integer"),
    ("serve_max_num_seqs", [8], INT, "is a list, not an integer"),
    ("serve_gpu_memory_utilization", "most", FLOAT, "is not a number"),
    ("serve_gpu_memory_utilization", False, FLOAT, "is a boolean, not a number"),
    ("fabric_checks", "maybe", BOOL, "is not a boolean"),
    ("fabric_checks", 2, BOOL, "is a number, not a boolean"),
    ("fabric_checks", [True], BOOL, "is a list, not a boolean"),
    ("serve_image", ["a"], STR, "is a list, not a string"),
    ("serve_image", {"a": 1}, STR, "is a dict, not a string"),
    ("serve_image", True, STR, "is a boolean, not a string"),
    ("fabric_bandwidth_on_low", "abort", CHOICE, "is not one of the choices"),
    ("router_admin_socket_mode", "644", MODE, "is not one of the choices"),
    ("serve_config_dir", "etc/dspark", {"type": "str", "default": "/etc/dspark/serve"}, "is not an absolute path"),
    ("serve_config_dir", "", {"type": "str", "default": "/etc/dspark/serve"}, "is not an absolute path"),
    ("checkpoint_ssh_key_path", "id_ed25519", {"type": "str", "default": "/etc/dspark/checkpoint/id_ed25519"}, "is not an absolute path"),
    ("docker_runtime_data_root", "var/lib/docker", {"type": "path", "default": ""}, "is not an absolute path"),
    ("fabric_bandwidth_port", 70000, {"type": "int", "default": 18515}, "is not a TCP port"),
    ("fabric_bandwidth_port", "0", {"type": "int", "default": 18515}, "is not a TCP port"),
])
def test_wrong_type_is_reported_with_a_fix(name, value, spec, expected):
    found = plan.type_problem(name, value, spec)
    assert found is not None and expected in found[0], found
    assert found[1]


@pytest.mark.parametrize("name, value, spec", [
    ("serve_extra_args", ["--max-num-seqs", "8"], LIST),
    ("serve_extra_args", [], LIST),
    ("serve_extra_args", ["--x", 8], LIST),
    ("serve_env", {"A": "1"}, DICT),
    ("serve_max_num_seqs", 8, INT),
    ("serve_max_num_seqs", "8", INT),
    ("serve_max_num_seqs", " -1 ", INT),
    ("serve_gpu_memory_utilization", 0.9, FLOAT),
    ("serve_gpu_memory_utilization", 1, FLOAT),
    ("serve_gpu_memory_utilization", "0.85", FLOAT),
    ("fabric_checks", True, BOOL),
    ("fabric_checks", "false", BOOL),
    ("fabric_checks", "Yes", BOOL),
    ("fabric_checks", 0, BOOL),
    ("serve_image", "repo/img:1", STR),
    ("checkpoint_nfs_vers", 4.2, STR),
    ("fabric_bandwidth_on_low", "fail", CHOICE),
    ("router_admin_socket_mode", 660, MODE),
    ("serve_config_dir", "/etc/dspark/serve", {"type": "str", "default": "/etc/dspark/serve"}),
    ("serve_hotfix_recipe_cache_dir", "~/.cache/dspark", {"type": "str", "default": "~/.cache"}),
    ("docker_runtime_data_root", "", {"type": "str", "default": ""}),
    ("router_health_path", "/v1/models", {"type": "str", "default": "/v1/models"}),
    ("fabric_bandwidth_port", 18515, {"type": "int", "default": 18515}),
    ("anything", [1, "a"], {"type": "raw"}),
])
def test_right_type_passes(name, value, spec):
    assert plan.type_problem(name, value, spec) is None


@pytest.mark.parametrize("name, suggestion", [
    ("serve_max_num_seq", "serve_max_num_seqs"),
    ("serve_extra_arg", "serve_extra_args"),
    ("fabric_check", "fabric_checks"),
    ("checkpoint_source_rnak", "checkpoint_source_rank"),
    ("nfs_export_client", "nfs_export_clients"),
    ("docker_runtime_user", "docker_runtime_users"),
    ("preflight_connect_timout", "preflight_connect_timeout"),
    ("dspark_fabric_addres", "dspark_fabric_address"),
    ("dspark_tensor_paralel_size", "dspark_tensor_parallel_size"),
    ("router_prot", "router_port"),
    ("serve_zzzzzz_qqqq", None),
    ("dspark_something_else_entirely", None),
])
def test_unknown_prefixed_name_is_reported_with_did_you_mean(name, suggestion):
    problem, fix = plan.unknown_problem(name, KNOWN)
    if suggestion:
        assert "did you mean %s?" % suggestion in problem
        assert suggestion in fix
    else:
        assert "did you mean" not in problem and fix


@pytest.mark.parametrize("name", [
    "serve_extra_args", "router_target_group", "dspark_rank", "dspark_fabric_hca", "dspark_mgmt_address", "dspark_hf_cache",
    "dspark_has_gpu", "dspark_lab_state", "preflight_inventory", "fabric_nccl_env", "serve_status", "serve_tp_ranks",
    "docker_runtime_image_id", "ansible_host", "my_own_var", "vllm_thing",
])
def test_known_or_unprefixed_names_pass(name):
    assert plan.unknown_problem(name, KNOWN) is None


def test_specs_come_from_every_role():
    assert {spec["role"] for spec in SPECS.values()} == set(plan.SPEC_ROLES)
    assert SPECS["serve_extra_args"]["type"] == "list"
    assert SPECS["router_target_group"]["role"] == "router"  # from the drain/enable entry points


def test_check_host_reports_template_failure_unknown_and_type_but_not_null():
    values = {
        "serve_max_model_len": plan.TemplateFailure("{{ nothing }}", "'nothing' is undefined"),
        "serve_extra_args": "--max-num-seqs",
        "serve_max_num_seq": 3,
        "serve_api_key": None,
        "serve_max_num_seqs": 8,
    }
    problems = plan.check_host("a-head", values, SPECS, KNOWN)
    assert [(p[1], p[3].split(" (")[0]) for p in problems] == [
        ("serve_extra_args", "is a string, not a list"),
        ("serve_max_model_len", "cannot be templated"),
        ("serve_max_num_seq", "is not a variable of this collection"),
    ]
    assert problems[1][2] == "{{ nothing }}" and "'nothing' is undefined" in problems[1][3]


def test_secret_values_are_never_in_a_message():
    """Issue #13: a wrong type, a misspelt name or a failed template of a key, token or proxy names the problem only."""
    values = {
        "serve_api_keys": "sk-live-aaaa",                                   # a string, not a list (no_log spec)
        "router_api_key": ["sk-live-bbbb"],                                 # a list, not a string
        "serve_api_kye": "sk-live-cccc",                                    # misspelt
        "checkpoint_hf_token": plan.TemplateFailure("{{ hf_dddd", "unexpected end: {{ hf_dddd"),
        "docker_runtime_proxy": "http://u:sk-live-eeee@p:1",                # a string, not a dict
    }
    problems = plan.check_host("a-head", values, SPECS, KNOWN)
    assert sorted(p[1] for p in problems) == sorted(values)
    lines = plan.place(problems, {"pair_a": ["a-head"]})
    text = "\n".join(lines)
    for secret in ("aaaa", "bbbb", "cccc", "dddd", "eeee"):
        assert secret not in text, text
    assert "a-head: serve_api_keys=<not shown: secret> is a string, not a list" in text
    assert plan.type_problem("serve_api_keys", ["ok", ["sk-x"]], SPECS["serve_api_keys"])[0] == (
        "has element 1 (<not shown: secret>) that is a list, not a string")
    assert not plan.is_secret("serve_max_num_seqs", SPECS["serve_max_num_seqs"])


GROUPS = {"all": ["a0", "a1", "b0", "b1"], "dspark": ["a0", "a1", "b0", "b1"], "pair_a": ["a0", "a1"], "pair_b": ["b0", "b1"],
          "gpu": ["a0", "a1"]}


@pytest.mark.parametrize("hosts, extra, expected", [
    (["a0", "a1"], (), ["group pair_a: serve_env='A=1' is bad. Fix: fix it"]),
    (["a0", "a1", "b0", "b1"], (), ["group dspark: serve_env='A=1' is bad. Fix: fix it"]),
    (["a0"], (), ["a0: serve_env='A=1' is bad. Fix: fix it"]),
    (["a0", "b0"], (), ["a0: serve_env='A=1' is bad. Fix: fix it", "b0: serve_env='A=1' is bad. Fix: fix it"]),
    (["a0", "a1"], ("serve_env",), ["extra vars (-e): serve_env='A=1' is bad. Fix: fix it"]),
])
def test_place_reports_a_problem_once_where_it_was_set(hosts, extra, expected):
    problems = [(h, "serve_env", "A=1", "is bad", "fix it") for h in hosts]
    assert plan.place(problems, GROUPS, serving={"pair_a", "pair_b"}, extra_vars=extra) == expected


def test_place_keeps_different_values_apart():
    problems = [("a0", "serve_env", "A=1", "is bad", "fix"), ("a1", "serve_env", "B=2", "is bad", "fix")]
    assert plan.place(problems, GROUPS) == ["a0: serve_env='A=1' is bad. Fix: fix", "a1: serve_env='B=2' is bad. Fix: fix"]


def test_internal_names_read_registers_set_facts_and_role_vars(tmp_path):
    (tmp_path / "roles" / "serve" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "serve" / "vars").mkdir(parents=True)
    (tmp_path / "roles" / "serve" / "vars" / "main.yml").write_text("serve_internal: 1\n_serve_private: 2\n")
    (tmp_path / "roles" / "serve" / "tasks" / "main.yml").write_text(
        "- block:\n    - ansible.builtin.set_fact:\n        serve_fact: 1\n      register: serve_reg\n"
        "  rescue:\n    - ansible.builtin.debug: {}\n      vars: {serve_task_var: 1, other: 2}\n")
    assert plan.internal_names(str(tmp_path)) == {"serve_internal", "serve_fact", "serve_reg", "serve_task_var"}


@pytest.mark.parametrize("line, dropped", [
    ("a0: dspark_fabric_address is not set (x). Fix: y", True),
    ("a0: dspark_fabric_address='1.2.3.4' is bad. Fix: y", True),
    ("group pair_a: dspark_fabric_address='differs' between members. Fix: y", True),
    ("a1: dspark_fabric_address is not set (x). Fix: y", False),
    ("a0: dspark_fabric_address_x=1 is bad. Fix: y", False),
    ("a0: dspark_rank is not set (x). Fix: y", False),
])
def test_lines_about_a_variable_that_failed_to_template_are_dropped(line, dropped):
    assert plan.without_lines_about([line], [("a0", "dspark_fabric_address")]) == ([] if dropped else [line])
