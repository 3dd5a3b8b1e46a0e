"""A role's variables by its argument spec's names (plugin_utils._role_vars): the names are the spec's, secrets only on
request, a plan's declared reads are options of its role, and no role hands its own variables to Python through a
hand-written mapping (issue #44: a variable is written in its defaults and its spec, nowhere else)."""

import os
import re

import pytest
import yaml

from ansible_collections.dspark.cluster.plugins.plugin_utils import _role_vars, _serve_command

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


def test_no_role_hands_its_variables_over_in_a_hand_written_mapping():
    """'router_port': router_port and the like (an option of the role's spec; facts the role publishes under its prefix,
    such as fabric_links, are not options), in any role's vars, tasks or templates: read them by role_vars."""
    found = []
    for role in sorted(os.listdir(ROLES)):
        if not os.path.exists(os.path.join(ROLES, role, "meta", "argument_specs.yml")):
            continue
        options = set(_role_vars.names(role, secrets=True))
        pattern = re.compile(r"""['"](%s_[a-z0-9_]+)['"]\s*:\s*\1\b""" % role)
        for folder, _dirs, files in os.walk(os.path.join(ROLES, role)):
            for name in files:
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as handle:
                    found += ["%s: %s" % (os.path.relpath(path, ROOT), m.group(1)) for m in pattern.finditer(handle.read())
                              if m.group(1) in options]
    assert not found, found
