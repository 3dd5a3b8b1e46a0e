# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: reads the role-prefixed variables of every node (each templated alone) and hands them to
inventory_rules (the inventory contract), _plan_vars (every role's variables against its argument spec) and
_role_rules (every role's own input rules; the router's for the hosts of group dspark_router)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible.utils.vars import load_extra_vars

from ansible_collections.dspark.cluster.plugins.plugin_utils import _fabric_plan, _plan_vars, _role_rules, inventory_rules

# The inventory contract, the management address and the fabric role's inputs (its rules run here too).
NODE_VARS = tuple(dict.fromkeys(inventory_rules.CONTRACT_VARS + ("ansible_host",) + tuple(_fabric_plan.INPUT_VARS.values())))

# The router's hosts (roles/router): checked with the serving groups, whatever the play's hosts.
ROUTER_GROUP = "dspark_router"

ARGUMENT_SPEC = {
    "play_hosts": {"type": "list", "elements": "str"},
    "mtu_min": {"type": "int", "default": 1500},
    "mtu_max": {"type": "int", "default": 9216},
    "port_min": {"type": "int", "default": 1024},
    "port_max": {"type": "int", "default": 65535},
    "require_image_digest": {"type": "bool", "default": False},
    "require_pinned_revision": {"type": "bool", "default": False},
}


def lenient_args(task_args):
    """The arguments with each one that does not convert replaced by its default: the role passes preflight_ variables,
    and a wrong type among them is reported by the variable's name with every other argument spec problem."""
    args = {}
    for name, spec in ARGUMENT_SPEC.items():
        given = {name: task_args[name]} if name in task_args else {}
        checked = ArgumentSpecValidator({name: spec}).validate(given)
        args[name] = spec.get("default") if checked.error_messages else checked.validated_parameters.get(name)
    return args


def _first_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def read_host(hostvars, host):
    """{var: value or TemplateFailure} for the watched variables of one host, each templated alone.

    hostvars[host] templates on access (HostVarsVars), so one variable's error stays that variable's.
    """
    hv = hostvars.get(host) or {}
    values = {}
    for name in list(hv):
        if not (_plan_vars.watched(name) or name in NODE_VARS or name in _role_rules.NODE_FACTS):
            continue
        try:
            values[name] = hv[name]
        except Exception as error:  # pylint: disable=broad-except  # any templating error is reported, not raised
            values[name] = _plan_vars.TemplateFailure(raw_value(hostvars, host, name), _first_line(error))
    return values, list(hv.get("group_names") or [])


def raw_value(hostvars, host, name):
    """One variable of a host as written, untemplated (HostVars.raw_get; a plain mapping as it is), else None."""
    raw_get = getattr(hostvars, "raw_get", None)
    raw = raw_get(host) if callable(raw_get) else hostvars.get(host)
    try:
        return raw.get(name)
    except AttributeError:  # an undefined host
        return None


def extra_var_names(loader):
    """The names given with -e (inline, key=value or @file) as ansible-playbook parsed them (ansible.utils.vars.load_extra_vars
    reads ansible.context.CLIARGS; the parse of the run is cached, so an @file is not read again)."""
    return set(load_extra_vars(loader) or {})


def collect_nodes(hostvars, hosts, cache):
    """host -> {var: value} for the variables the inventory rules read; template failures read as unset."""
    nodes = {}
    for host in hosts:
        if host not in cache:
            cache[host] = read_host(hostvars, host)
        values, group_names = cache[host]
        node = {var: values.get(var) for var in NODE_VARS}
        node = {k: (None if isinstance(v, _plan_vars.TemplateFailure) else v) for k, v in node.items()}
        node["group_names"] = group_names
        nodes[host] = node
    return nodes


class ActionModule(ActionBase):
    """Runs on the controller only; never contacts a node."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        try:
            dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
            wrong_args = None
        except AnsibleActionFail as error:
            args, wrong_args = lenient_args(self._task.args), error
        play_hosts = args["play_hosts"] or list(task_vars.get("ansible_play_hosts_all") or [])
        groups = task_vars.get("groups") or {}
        hostvars = task_vars.get("hostvars") or {}

        # First pass finds the serving groups; their members (even outside --limit) are read too.
        cache = {}
        first = collect_nodes(hostvars, play_hosts, cache)
        wanted = set(play_hosts)
        for node in first.values():
            name = node.get("dspark_group")
            if isinstance(name, str):
                wanted.update(groups.get(name) or [])
        nodes = collect_nodes(hostvars, sorted(wanted), cache)

        settings = inventory_rules.Settings(
            mtu_min=args["mtu_min"], mtu_max=args["mtu_max"], port_min=args["port_min"], port_max=args["port_max"],
            require_image_digest=args["require_image_digest"], require_pinned_revision=args["require_pinned_revision"],
        )
        findings, summary = inventory_rules.validate(nodes, groups, play_hosts, settings)

        specs, known = _plan_vars.collection_specs()
        problems = []
        for host in sorted(wanted):
            problems.extend(_plan_vars.check_host(host, cache[host][0], specs, known))
        for name, group in sorted(summary.items()):
            # Every role's own input rules (plugin_utils._role_rules), the ones each role runs at its start; a variable
            # whose type is wrong is reported once, as such.
            typed = {(problem[0], problem[1]) for problem in problems}
            problems.extend(problem for problem in _role_rules.check_group(name, group["members"], lambda h: cache[h][0], specs,
                                                                           preflight=True)
                            if (problem[0], problem[1]) not in typed)
        # The router's rules (hosts of group dspark_router, outside the serving groups): its own variables against the
        # router's argument spec and its rules over the heads it routes to, before any change, as the router role runs them.
        routers = [host for host in groups.get(ROUTER_GROUP) or [] if host not in wanted]
        for host in routers:
            cache[host] = read_host(hostvars, host)
            found = _plan_vars.check_host(host, cache[host][0], specs, known)
            typed = {(problem[0], problem[1]) for problem in found}
            problems.extend(found)
            problems.extend(problem for problem in _role_rules.check_router(host, cache[host][0], specs, groups, hostvars)
                            if (problem[0], problem[1]) not in typed)
        wanted.update(routers)
        # A variable that failed to template is reported once, as such, not again as "not set" by the inventory rules.
        failed = [(host, var) for host in sorted(wanted) for var, value in cache[host][0].items()
                  if isinstance(value, _plan_vars.TemplateFailure)]
        errors = _plan_vars.without_lines_about(findings.errors, failed)
        errors += _plan_vars.place(problems, groups, serving=set(summary), extra_vars=extra_var_names(self._loader))
        if wrong_args is not None and not any(str(problem[1]).startswith("preflight_") for problem in problems):
            raise wrong_args  # an argument given literally, not through a preflight_ variable

        result.update(changed=False, groups=summary, errors=errors)
        if findings.warnings:
            result["warnings"] = findings.warnings
        if errors:
            result["failed"] = True
            result["msg"] = "Validation of the run failed (%d problem%s), nothing was changed:\n- %s" % (
                len(errors), "" if len(errors) == 1 else "s", "\n- ".join(errors))
        else:
            result["msg"] = "%d serving group(s) valid: %s" % (len(summary), ", ".join(sorted(summary)))
        return result
