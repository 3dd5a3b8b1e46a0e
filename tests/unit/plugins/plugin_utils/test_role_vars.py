"""A role's variables by its argument spec's names (plugin_utils._role_vars): the names are the spec's, secrets only on
request, a plan's declared reads are options of its role, and no role hands its own variables to Python through a
hand-written mapping (issue #44: a variable is written in its defaults and its spec, nowhere else)."""

import os
import re

import pytest
import yaml

from ansible_collections.dspark.cluster.plugins.plugin_utils import _qualify_plan, _role_vars, _serve_command, _serve_edge

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
ROLES = os.path.join(ROOT, "roles")


def spec_options(role):
    with open(os.path.join(ROLES, role, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        entries = yaml.safe_load(handle)["argument_specs"]
    options = {}
    for entry in entries.values():
        options.update((entry or {}).get("options") or {})
    return options


@pytest.mark.parametrize("role", sorted(r for r in os.listdir(ROLES)
                                        if os.path.exists(os.path.join(ROLES, r, "meta", "argument_specs.yml"))))
def test_names_are_the_specs_options_and_secrets_only_on_request(role):
    options = spec_options(role)
    if not options:
        pytest.fail("%s's argument spec has no options" % role)
    secret = {name for name, spec in options.items() if (spec or {}).get("no_log")}
    assert _role_vars.names(role, secrets=True) == sorted(options)
    assert _role_vars.names(role) == sorted(set(options) - secret)


def test_router_secrets_are_left_out_unless_asked_for():
    assert "router_api_key" not in _role_vars.names("router")
    assert {"router_api_key", "router_tls_key"} <= set(_role_vars.names("router", secrets=True))


def test_a_role_without_a_spec_is_refused_by_name():
    with pytest.raises(ValueError, match="'supervisor' has no meta/argument_specs.yml"):
        _role_vars.names("supervisor")


def test_pick_takes_the_defined_options_only_and_what_a_plan_reads():
    variables = {"serve_block_size": 256, "serve_api_key": "sk-secret", "serve_image": "x", "servefoo": 1,
                 "dspark_rank": 0}
    assert _role_vars.pick("serve", variables) == [("serve_block_size", 256), ("serve_image", "x")]
    assert _role_vars.pick("serve", variables, reads="serve_command") == [("serve_block_size", 256)]
    with pytest.raises(ValueError, match="reads='serve_cmd' is not a plan"):
        _role_vars.pick("serve", variables, reads="serve_cmd")


def test_every_role_variable_a_plan_reads_is_an_option_of_its_role():
    for plan, names in _role_vars.READS.items():
        role = plan.split("_", maxsplit=1)[0]
        declared = [name for name in names if name.startswith(role + "_")]
        assert set(declared) <= set(_role_vars.names(role, secrets=True)), plan
    assert set(_role_vars.READS["serve_command"]) == set(_serve_command.VARIABLES)
    assert _role_vars.READS["serve_compose"] == _serve_command.COMPOSE_VARIABLES
    assert _role_vars.READS["serve_edge"] == _serve_edge.VARIABLES
    assert {plan: names for plan, names in _role_vars.READS.items() if plan.startswith("qualify_")} == {
        "qualify_" + part: names for part, names in _qualify_plan.VARIABLES.items()}


# What stays a hand-written copy of a role's own variable, each with its reason: (file, variable) -> why.
_DIGEST = ("the definition hash: its keys are part of the recorded digest of every running group, so renaming them "
           "(or reading the variables by role_vars' names) would restart every serving group")
KEPT = {
    ("roles/serve/tasks/definition.yml", "serve_ulimits"): _DIGEST,
    ("roles/serve/tasks/definition.yml", "serve_shm_size"): _DIGEST,
    ("roles/serve/tasks/definition.yml", "serve_jit_cache_dir"): _DIGEST,
    ("roles/serve/tasks/definition.yml", "serve_stop_grace_period"): _DIGEST,
    ("roles/checkpoint/tasks/scp_receiver.yml", "checkpoint_scp_user"):
        "a loop item of ansible.builtin.file (its owner option), no plan's input",
}
# Roles left out of both checks, each with its reason.
# Roles left out of both checks, each with its reason (none now).
KEPT_ROLES = {}


def role_files(role, folders=None, roles_dir=ROLES):
    """(path from the roles' folder's parent: roles/..., text) of every file of ``role``, or of its ``folders`` only."""
    for folder, dirs, files in os.walk(os.path.join(roles_dir, role)):
        dirs[:] = [d for d in dirs if d != "__pycache__"]          # bytecode a test's import left, not the role's
        for name in sorted(files):
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, os.path.dirname(roles_dir))
            if folders and relative.split(os.sep)[2] not in folders:
                continue
            with open(path, encoding="utf-8") as handle:
                yield relative, handle.read()


def test_no_role_hands_its_variables_over_in_a_hand_written_mapping():
    """'router_port': router_port and the like (an option of the role's spec; facts the role publishes under its prefix,
    such as fabric_links, are not options), in any role's vars, tasks or templates: read them by role_vars."""
    found = []
    for role in sorted(set(SPEC_ROLES) - set(KEPT_ROLES)):
        options = set(_role_vars.names(role, secrets=True))
        pattern = re.compile(r"""['"](%s_[a-z0-9_]+)['"]\s*:\s*\1\b""" % role)
        for path, text in role_files(role):
            found += ["%s: %s" % (path, m.group(1)) for m in pattern.finditer(text) if m.group(1) in options]
    assert not found, found


def role_copies(role, roles_dir=ROLES):
    """(path, variable) of each `'<key>': <role>_<name>` copy of one of the role's options, as is (followed by `,` or
    `}`: nothing computed from it), in its vars and tasks."""
    options = set(_role_vars.names(role, secrets=True))
    pattern = re.compile(r"""['"][A-Za-z_][A-Za-z0-9_]*['"]\s*:\s*(%s_[a-z0-9_]+)\s*(?=[,}])""" % role)
    for path, text in role_files(role, ("vars", "tasks"), roles_dir):
        for match in pattern.finditer(text):
            if match.group(1) in options:
                yield path, match.group(1)


SPEC_ROLES = sorted(r for r in os.listdir(ROLES) if os.path.exists(os.path.join(ROLES, r, "meta", "argument_specs.yml")))


def test_no_role_copies_its_variables_under_other_names():
    """{'shm_size': serve_shm_size, 'interval': qualify_gid_interval, ...}: a plan reads the role's variables by their
    names (its module declares them; lookup('dspark.cluster.role_vars', role, reads=plan)). Only KEPT stays."""
    found, kept = [], set()
    for role in SPEC_ROLES:
        for path, name in role_copies(role):
            if (path, name) in KEPT:
                kept.add((path, name))
            elif role not in KEPT_ROLES:
                found.append("%s: %s" % (path, name))
    assert not found, found
    assert kept == set(KEPT), "KEPT names copies that are gone: %s" % sorted(set(KEPT) - kept)
    assert all(KEPT.values()) and all(KEPT_ROLES.values())


def test_the_check_finds_a_copy_under_another_name(tmp_path):
    """The pattern catches the mappings this change removed, and leaves computed values and other variables alone."""
    vars_dir = tmp_path / "roles" / "qualify" / "vars"
    vars_dir.mkdir(parents=True)
    (vars_dir / "main.yml").write_text(
        "a: \"{{ {'interval': qualify_gid_interval, 'floor': {'min_gbits': qualify_bandwidth_min_gbits}} }}\"\n"
        "b: \"{{ {'x': qualify_rdma | bool, 'y': qualify_not_an_option, 'z': dspark_rank, 'w': qualify_gpu ~ ''} }}\"\n")
    assert sorted(role_copies("qualify", str(tmp_path / "roles"))) == [
        ("roles/qualify/vars/main.yml", "qualify_bandwidth_min_gbits"), ("roles/qualify/vars/main.yml", "qualify_gid_interval")]
