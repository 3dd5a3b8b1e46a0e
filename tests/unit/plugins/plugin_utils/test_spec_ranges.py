"""The numeric ranges that extend the roles' argument specs (plugin_utils._spec_ranges, issue #44 item 2).

Each range belongs to a number option of a role's meta/argument_specs.yml whose default lies in it, and a rule reads
it: the rules of the serving roles and the router through _rules_base.ranges, the monitoring role's check_settings.
"""

import os

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _inputs, _plan_vars, _role_rules, _rules_base, _spec_ranges

ROLES_DIR = os.path.join(_role_rules.COLLECTION_ROOT, "roles")
# Every role's options, monitoring's too (not a role of the serving hosts, so not in _plan_vars.SPEC_ROLES).
ALL_SPECS = _plan_vars.load_specs(ROLES_DIR, sorted(os.listdir(ROLES_DIR)))
RANGES = _spec_ranges.RANGES


@pytest.mark.parametrize("var", sorted(RANGES))
def test_a_range_is_of_a_number_option_and_its_default_is_in_it(var):
    spec = ALL_SPECS.get(var)
    assert spec is not None, "%s is not an option of any role's meta/argument_specs.yml" % var
    assert spec.get("type") in ("int", "float"), (var, spec.get("type"))
    assert _spec_ranges.is_float(var) == (spec["type"] == "float"), "%s: float bounds for a float option only" % var
    low, high, low_open = RANGES[var]
    number = _inputs.as_float if _spec_ranges.is_float(var) else _inputs.as_int
    default = number(spec.get("default"))
    assert default is not None and _spec_ranges.within(default, var), (var, spec.get("default"))
    assert _inputs.range_problem(spec["default"], low, high, low_open, number=number) is None, var


def test_every_range_is_read_by_a_rule():
    read = set()
    for item in _role_rules.RULES:
        read.update(item.variables)
    monitoring = sorted(var for var in RANGES if ALL_SPECS[var]["role"] == "monitoring")
    assert sorted(set(RANGES) - read - set(monitoring)) == []
    # monitoring's ranges are its check_settings' (one line per value outside the range)
    settings = {var: ALL_SPECS[var].get("default") for var in ALL_SPECS if var.startswith("monitoring_")}
    assert _role_rules.check_settings("monitoring", settings) == []
    for var in monitoring:
        low = RANGES[var].low
        outside = low if RANGES[var].low_open else low - 1
        problems = _role_rules.check_settings("monitoring", dict(settings, **{var: outside}))
        assert [line for line in problems if line.startswith(var + "=")], (var, problems)


@pytest.mark.parametrize("var, value, text", [
    ("serve_gpu_memory_utilization", 0, "is outside its range (0 < x <= 1)"),
    ("serve_gpu_memory_utilization", "1.5", "is outside its range (0 < x <= 1)"),
    ("serve_max_num_seqs", 0, "is outside its range (greater than 0)"),
    ("serve_mtp_num_tokens", "4", "is outside its range (at least 5)"),
])
def test_ranges_words_a_value_outside_as_range_problem(var, value, text):
    class Member:  # a member whose values are the defaults but ``var``'s
        specs = ALL_SPECS

        def __getitem__(self, name):
            return value if name == var else ALL_SPECS[name].get("default")

    found = _rules_base.ranges(Member(), [var, "serve_max_model_len"])
    assert [(f[0], f[1], f[2]) for f in found] == [(var, value, text)], found
    assert found[0][3].startswith("set a value ") and found[0][3].endswith(", e.g. %s" % ALL_SPECS[var]["default"])
