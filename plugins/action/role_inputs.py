# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: a role's own inputs at the role's start, as preflight checks them: this host's variables with the role's
prefix against the collection's argument specs (plugin_utils._plan_vars.check_host: types, choices, absolute paths,
typos), then the role's own rules (plugin_utils._role_rules). The collection's playbooks import their roles with
``rolespec_validate: false`` (issue #40: one task per role and node less), so this is the role's argument-spec check there;
a role listed under ``roles:`` elsewhere is also validated by Ansible, as usual.

The router (role router) is checked as a router host: its values and the heads of the groups it routes to.
Otherwise this host's values are the task's (inventory, play, role defaults, -e), each templated alone; the other members of
its serving group are read from hostvars (their unset role variables read the role's default), as preflight reads
them. Only problems about this host are reported: every member runs the same check.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.dspark.cluster.plugins.plugin_utils import _findings, _group_model, _plan_vars, _role_rules

ARGUMENT_SPEC = {"role": {"type": "str", "required": True, "choices": sorted({r.role for r in _role_rules.RULES})}}


def _first_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def rule_variables(role):
    """Every variable a rule of ``role`` reads (and the group's shape)."""
    names = {"dspark_rank", "dspark_group", "dspark_fabric_address", "dspark_checkpoint_mode", "checkpoint_source_rank"}
    for item in _role_rules.RULES:
        if item.role == role:
            names.update(item.variables)
    return sorted(names)


class ActionModule(ActionBase):
    """Runs on the controller only; never contacts a node."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def _own_values(self, task_vars, names):
        values = {}
        for name in names:
            if name not in task_vars:
                continue
            try:
                values[name] = self._templar.template(task_vars[name])
            except Exception as error:  # pylint: disable=broad-except  # reported per variable, not raised
                values[name] = _role_rules.TemplateFailure(task_vars[name], _first_line(error))
        return values

    @staticmethod
    def _member_values(hostvars, host, names):
        member = hostvars.get(host) or {}
        values = {}
        for name in names:
            try:
                if name in member:
                    values[name] = member[name]
            except Exception as error:  # pylint: disable=broad-except  # reported by the member's own check
                values[name] = _role_rules.TemplateFailure(None, _first_line(error))
        return values

    def _spec_problems(self, task_vars, role, host):
        """(problems, typed): this host's ``<role>_`` variables against the argument specs, and the names they fault."""
        specs, known = _plan_vars.collection_specs()
        prefix = role + "_"
        # As preflight: the values the operator set; a role default (the same value as the spec's) is the role's own.
        names = sorted(name for name in task_vars
                       if name.startswith(prefix) and (name not in specs or task_vars[name] != specs[name].get("default")))
        values = self._own_values(task_vars, names)
        problems = _plan_vars.check_host(host, values, specs, known)
        return problems, {(problem[0], problem[1]) for problem in problems}

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        role = args["role"]
        host = task_vars.get("inventory_hostname")
        groups = task_vars.get("groups") or {}
        hostvars = task_vars.get("hostvars") or {}
        names = rule_variables(role)
        own = self._own_values(task_vars, names)
        typed_problems, typed = self._spec_problems(task_vars, role, host)
        name = own.get("dspark_group")
        known = isinstance(name, str) and name in groups
        found = _group_model.membership_problem(name, known, known and host in groups[name])
        if role in _role_rules.ROUTER_ROLES:
            # A router is no member of a serving group: its own values and the heads it routes to (from hostvars).
            specs = _plan_vars.collection_specs()[0]
            problems = typed_problems + [problem for problem in _role_rules.check_router(host, own, specs, groups, hostvars)
                                         if (problem[0], problem[1]) not in typed]
            errors = [_findings.message(*problem) for problem in problems]
        elif found:
            errors = [_findings.message(*problem) for problem in typed_problems]
            errors.append(_findings.message(host, "dspark_group", name, *found))
        else:
            members = list(groups[name])

            def values_of(member):
                return own if member == host else self._member_values(hostvars, member, names)

            specs = _plan_vars.collection_specs()[0]
            problems = typed_problems + [
                problem for problem in _role_rules.check_group(name, members, values_of, specs, roles=[role], only=[host],
                                                               running=role)
                if (problem[0], problem[1]) not in typed]
            errors = [_findings.message(*problem) for problem in problems]
        result.update(changed=False, errors=errors)
        if errors:
            result["failed"] = True
            result["msg"] = "%s: invalid %s input, nothing was changed:\n- %s" % (host, role, "\n- ".join(errors))
        else:
            result["msg"] = "%s: the %s inputs are valid" % (host, role)
        return result
