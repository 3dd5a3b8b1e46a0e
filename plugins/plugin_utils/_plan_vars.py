# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role variables of a whole run, checked on the controller before any node changes (private).

Every role keeps one definition of its inputs, its meta/argument_specs.yml; a role run alone still validates
itself through Ansible. Preflight reads the same files and checks every role's variables that the operator set
(inventory, group_vars, host_vars, -e) on every host of the run, more strictly than Ansible's argument spec:
a string is not a list, a dict is not a 'k=v' string, an int is an int, a choice is one of the choices, a
directory or path is absolute. A name with a role's prefix that no role knows is a typo ("did you mean").
Plain Python, no Ansible imports: the action plugin dspark.cluster.preflight_validate is a thin shell around it.
"""

from __future__ import annotations

import difflib
import functools
import os

import yaml

from ansible_collections.dspark.cluster.plugins.plugin_utils import _inputs, _role_rules, inventory_rules

# The roles with an argument spec, and the prefixes whose unknown names are typos.
SPEC_ROLES = ("checkpoint", "docker_runtime", "fabric", "nfs_export", "preflight", "qualify", "router", "serve")
PREFIXES = tuple(role + "_" for role in SPEC_ROLES) + ("dspark_",)

# Ports where 0 means "no listener" (the router's plain HTTP port and its stats page).
PORTS_ZERO_OFF = ("router_port", "router_stats_port")

# Names the lab inventories set for their own use (the key and state directory of lab/lab.sh).
LAB_NAMES = ("dspark_lab_state",)

BOOL_STRINGS = _inputs.BOOL_STRINGS
_INT_RE = _inputs.INT_RE
_FLOAT_RE = _inputs.FLOAT_RE

# One definition of a secret's stand-in, of a failed template and of a secret name (plugin_utils._role_rules).
Hidden = _role_rules.Hidden
HIDDEN = _role_rules.HIDDEN
TemplateFailure = _role_rules.TemplateFailure
is_secret = _role_rules.is_secret


def _load(path):
    with open(path, encoding="utf-8") as handle:
        # Every forked worker that checks a role's inputs reads all the roles' files once (0.37 s pure Python, 0.04 s).
        return yaml.load(handle, Loader=_role_rules.SAFE_LOADER) or {}  # nosec B506: a safe loader


def load_specs(roles_dir, roles=SPEC_ROLES):
    """name -> option spec of every role's meta/argument_specs.yml (entry point main first, then the others)."""
    specs = {}
    for role in roles:
        path = os.path.join(roles_dir, role, "meta", "argument_specs.yml")
        if not os.path.exists(path):
            continue
        entries = _load(path).get("argument_specs") or {}
        for entry in sorted(entries, key=lambda e: (e != "main", e)):
            for name, spec in ((entries[entry] or {}).get("options") or {}).items():
                specs.setdefault(name, dict(spec or {}, role=role))
    return specs


def _task_names(node, names):
    """Names a task list defines: register, set_fact keys, vars of blocks and tasks (recursively)."""
    if isinstance(node, list):
        for item in node:
            _task_names(item, names)
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("register"), str):
        names.add(node["register"])
    for key in ("ansible.builtin.set_fact", "set_fact", "vars"):
        if isinstance(node.get(key), dict):
            names.update(k for k in node[key] if isinstance(k, str))
    for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
        _task_names(node.get(key), names)


def internal_names(root):
    """Names the collection itself sets with a role prefix (role vars, registers, set_facts), so never typos."""
    names = set()
    for role in SPEC_ROLES:
        for sub in ("vars", "tasks", "handlers"):
            folder = os.path.join(root, "roles", role, sub)
            if not os.path.isdir(folder):
                continue
            for entry in sorted(os.listdir(folder)):
                if not entry.endswith((".yml", ".yaml")):
                    continue
                data = _load(os.path.join(folder, entry))
                if sub == "vars" and isinstance(data, dict):
                    names.update(data)
                else:
                    _task_names(data, names)
    folder = os.path.join(root, "playbooks")
    if os.path.isdir(folder):
        for entry in sorted(os.listdir(folder)):
            if entry.endswith((".yml", ".yaml")):
                _task_names(_load(os.path.join(folder, entry)), names)
    return {n for n in names if n.startswith(PREFIXES)}


COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@functools.lru_cache(maxsize=4)
def collection_specs(root=COLLECTION_ROOT):
    """The argument specs of every role and the names the collection sets itself, read once per process."""
    specs = load_specs(os.path.join(root, "roles"))
    return specs, frozenset(known_names(specs, internal_names(root)))


def known_names(specs, internal=()):
    return set(specs) | set(internal) | set(inventory_rules.CONTRACT_VARS) | set(LAB_NAMES)


def watched(name):
    """The variables preflight reads from hostvars: every name with a role's prefix."""
    return isinstance(name, str) and name.startswith(PREFIXES)


def unknown_problem(name, known):
    """(problem, fix) for a prefixed name that no role knows, else None."""
    if name in known or not name.startswith(PREFIXES):
        return None
    prefix = next(p for p in PREFIXES if name.startswith(p))
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    if close:
        return ("is not a variable of this collection (did you mean %s?)" % close[0],
                "rename it to %s, or remove it" % close[0])
    return ("is not a variable of this collection (no %s* variable has this name)" % prefix,
            "remove it or correct the name (the README lists every role's variables)")


def _is_path_option(name, spec):
    return spec.get("type") == "path" or name.endswith(("_dir", "_path"))


def _kind(value):
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a dict"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "a %s" % type(value).__name__


def _scalar_problem(value, kind):
    """Whether value is acceptable as a scalar of type kind (Ansible's conversions, minus the lenient ones)."""
    if kind in ("str", "path", "raw") or kind is None:
        if kind == "raw":
            return None
        if isinstance(value, (dict, list, tuple)) or isinstance(value, bool) or value is None:
            return "is %s, not a string" % _kind(value)
        return None
    if kind == "int":
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and _INT_RE.match(value))):
            return "is %s, not an integer" % _kind(value) if not isinstance(value, str) else "is not an integer"
        return None
    if kind == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok and not (isinstance(value, str) and _FLOAT_RE.match(value)):
            return "is %s, not a number" % _kind(value) if not isinstance(value, str) else "is not a number"
        return None
    if kind == "bool":
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return None
        if isinstance(value, str) and value.strip().lower() in BOOL_STRINGS:
            return None
        return "is %s, not a boolean" % _kind(value) if not isinstance(value, str) else "is not a boolean"
    return None


def _example(name, spec):
    default = spec.get("default")
    if spec.get("type") == "list":
        sample = default if isinstance(default, list) and default else ["..."]
        return "write a YAML list, e.g. %s: %s (with -e pass JSON: -e '{\"%s\": [...]}')" % (name, _yaml_flow(sample), name)
    if spec.get("type") == "dict":
        return "write a YAML mapping, e.g. %s: {KEY: value} (with -e pass JSON)" % name
    if spec.get("type") == "int":
        return "write a whole number%s" % ("" if default is None else ", e.g. %s: %s" % (name, default))
    if spec.get("type") == "float":
        return "write a number%s" % ("" if default is None else ", e.g. %s: %s" % (name, default))
    if spec.get("type") == "bool":
        return "write true or false (with -e pass JSON: -e '{\"%s\": false}')" % name
    return "write a plain string%s" % ("" if default in (None, "") else ", e.g. %s: %s" % (name, default))


def _yaml_flow(value):
    return yaml.safe_dump(value, default_flow_style=True, width=10000).strip()


def type_problem(name, value, spec):
    """(problem, fix) when value does not fit the option spec strictly, else None."""
    kind = spec.get("type", "str")
    if kind == "list":
        if not isinstance(value, (list, tuple)):
            return "is %s, not a list" % _kind(value), _example(name, spec)
        elements = spec.get("elements")
        for index, item in enumerate(value):
            problem = _scalar_problem(item, elements) if elements not in (None, "dict", "list") else None
            if elements == "dict" and not isinstance(item, dict):
                problem = "is %s, not a dict" % _kind(item)
            if problem:
                shown = HIDDEN if is_secret(name, spec) else item
                return ("has element %d (%r) that %s" % (index, shown, problem),
                        "make every element a %s" % ("string" if elements in ("str", "path") else elements))
        return None
    if kind == "dict":
        if not isinstance(value, dict):
            return "is %s, not a dict" % _kind(value), _example(name, spec)
        return None
    problem = _scalar_problem(value, kind)
    if problem:
        return problem, _example(name, spec)
    choices = spec.get("choices")
    if choices and value not in choices and str(value) not in [str(c) for c in choices]:
        return "is not one of the choices", "choose one of: %s" % ", ".join(str(c) for c in choices)
    if kind in ("str", "path") and _is_path_option(name, spec) and isinstance(value, str):
        empty_ok = spec.get("default", None) in ("", None)
        if not value and empty_ok:
            return None
        if not (value.startswith("/") or value.startswith("~")):
            return "is not an absolute path", "write the full path starting with / (e.g. %s)" % (spec.get("default") or "/var/lib/dspark/...")
    if kind == "int" and name.endswith("_port"):
        port = int(value)
        low = 0 if name in PORTS_ZERO_OFF else 1
        if not low <= port <= 65535:
            return "is not a TCP port", "choose a port in %d-65535%s" % (low, " (0: none)" if low == 0 else "")
    return None


def check_host(host, values, specs, known):
    """Problems of one host's role variables: [(host, var, value, problem, fix)].

    values: name -> templated value, or TemplateFailure, for every watched name the host has.
    """
    problems = []
    for name in sorted(values):
        value = values[name]
        spec = specs.get(name)
        secret = is_secret(name, spec)
        if isinstance(value, TemplateFailure):
            problems.append((host, name, HIDDEN if secret else value.raw,
                             "cannot be templated (%s)" % ("error not shown: secret" if secret else value.error),
                             "define the variables it uses or correct the expression"))
            continue
        found = unknown_problem(name, known)
        if found:
            # A misspelt secret ("serve_api_kye") is as secret as the name it was meant to be.
            secret = secret or any(is_secret(m, specs.get(m)) for m in difflib.get_close_matches(name, known, n=3, cutoff=0.75))
            problems.append((host, name, HIDDEN if secret else value) + found)
            continue
        if spec is None or value is None:
            continue  # null means "use the role's default", as for Ansible
        found = type_problem(name, value, spec)
        if found:
            problems.append((host, name, HIDDEN if secret else value) + found)
    return problems


def without_lines_about(lines, pairs):
    """lines, less those about one of the (host, variable) pairs: for that host, or for a group (any member)."""
    def about(line, host, var):
        if line.startswith(("%s: %s=" % (host, var), "%s: %s is not set" % (host, var))):
            return True
        return line.startswith("group ") and (": %s=" % var in line or ": %s is not set" % var in line)
    return [line for line in lines if not any(about(line, host, var) for host, var in pairs)]


def place(problems, groups, serving=(), extra_vars=()):
    """One message per problem: a problem seen on exactly the hosts of a group is reported once, for the group.

    problems: [(host, var, value, problem, fix)]; groups: inventory group -> hosts; serving: the serving group
    names (preferred when several groups have the same hosts); extra_vars: names given with -e (reported once,
    as "extra vars (-e)").
    """
    by_key = {}
    order = []
    for host, var, value, problem, fix in problems:
        key = (var, repr(value), problem, fix)
        if key not in by_key:
            by_key[key] = (value, [])
            order.append(key)
        by_key[key][1].append(host)
    sets = {}
    for group, hosts in (groups or {}).items():
        if group in ("all", "ungrouped") or not hosts:
            continue
        sets.setdefault(frozenset(hosts), []).append(group)
    lines = []
    for key in order:
        var, dummy, problem, fix = key
        value, hosts = by_key[key]
        if var in extra_vars:
            lines.append(inventory_rules.message("extra vars (-e)", var, value, problem, fix))
            continue
        hits = frozenset(hosts)
        names = sets.get(hits, []) if len(hits) > 1 else []
        if names:
            group = sorted(names, key=lambda g: (g not in serving, g != "dspark", g))[0]
            lines.append(inventory_rules.message("group %s" % group, var, value, problem, fix))
            continue
        for host in sorted(hits):
            lines.append(inventory_rules.message(host, var, value, problem, fix))
    return lines
