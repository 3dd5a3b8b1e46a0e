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
import ipaddress
import os
import re

import yaml

from ansible_collections.dspark.cluster.plugins.plugin_utils import _nfs_plan, inventory_rules

# The roles with an argument spec, and the prefixes whose unknown names are typos.
SPEC_ROLES = ("checkpoint", "docker_runtime", "fabric", "nfs_export", "preflight", "router", "serve")
PREFIXES = tuple(role + "_" for role in SPEC_ROLES) + ("dspark_",)

# Names the lab inventories set for their own use (the key and state directory of lab/lab.sh).
LAB_NAMES = ("dspark_lab_state",)

BOOL_STRINGS = frozenset(("y", "yes", "on", "1", "true", "t", "n", "no", "off", "0", "false", "f"))
_INT_RE = re.compile(r"^\s*[-+]?[0-9]+\s*$")
_FLOAT_RE = re.compile(r"^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$")


# Names whose values are secrets even without no_log in a spec (a misspelt key, a token): never shown in a message.
_SECRET_NAME_RE = re.compile(r"api_?keys?|token|passw|secret|proxy", re.IGNORECASE)


class Hidden:
    """Stands for a secret's value in a message (issue #13): the problem is named, the value is not."""

    def __repr__(self):
        return "<not shown: secret>"

    __str__ = __repr__


HIDDEN = Hidden()


def is_secret(name, spec=None):
    """no_log in the option's spec, or a name that says key, token, password, secret or proxy."""
    return bool((spec or {}).get("no_log")) or bool(_SECRET_NAME_RE.search(name))


class TemplateFailure:
    """A variable whose value could not be templated: its raw text and the error."""

    def __init__(self, raw, error):
        self.raw = raw
        self.error = error

    def __repr__(self):
        return "TemplateFailure(%r, %r)" % (self.raw, self.error)


def _load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


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
        if not 1 <= port <= 65535:
            return "is not a TCP port", "choose a port in 1-65535"
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


def check_group_ranks(name, members, values_of, world_size):
    """The rank variables of the checkpoint and nfs_export roles must name a member of the group."""
    problems = []
    last = world_size - 1
    for host in members:
        values = values_of(host)
        for var in ("checkpoint_source_rank", "nfs_export_rank"):
            value = values.get(var)
            if value is None or isinstance(value, TemplateFailure):
                continue
            rank = inventory_rules._as_int(value)
            if rank is None:
                continue  # the type check reports it
            if not 0 <= rank <= last:
                problems.append((host, var, value, "is not a rank of group %s (ranks 0..%d)" % (name, last),
                                 "set the rank of the node that holds the checkpoint, 0..%d" % last))
    return problems


_TRUE_STRINGS = frozenset(("y", "yes", "on", "1", "true", "t"))
_LOOPBACK_NAMES = frozenset(("localhost", "localhost.localdomain", "ip6-localhost"))


def is_loopback(host):
    """True when an API bind address (serve_host) listens on loopback only: 127.0.0.0/8, ::1, localhost."""
    text = str(host).strip().strip("[]").lower()
    if text in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def _is_true(value):
    if isinstance(value, bool):
        return value
    return isinstance(value, (str, int)) and str(value).strip().lower() in _TRUE_STRINGS


def check_api_auth(name, members, values_of, specs):
    """Closed by default (issue #13): the head's API beyond loopback needs a key, or serve_allow_unauthenticated.

    The head (members[0], rank order) decides; the problem is returned for every member so that place() reports a
    group-wide setting once, for the group. Role defaults are not in hostvars: an unset name reads its spec default.
    A key's value is never part of a message.
    """
    if not members:
        return []
    values = values_of(members[0])

    def read(var):
        value = values.get(var)
        if value is None:
            return (specs.get(var) or {}).get("default")
        return value

    names = ("serve_host", "serve_api_key", "serve_api_keys", "serve_allow_unauthenticated")
    if any(isinstance(values.get(var), TemplateFailure) for var in names):
        return []  # reported as a template failure
    host = read("serve_host")
    if host is None or is_loopback(host) or _is_true(read("serve_allow_unauthenticated")):
        return []
    if read("serve_api_key") or read("serve_api_keys"):
        return []
    problem = ("makes the API of group %s listen beyond loopback (head %s) while serve_api_key and serve_api_keys are empty: "
               "anyone who reaches the port can use the model" % (name, members[0]))
    fix = ("set serve_api_key (or serve_api_keys), or bind the API to 127.0.0.1 (serve_host), or accept an open API "
           "with serve_allow_unauthenticated: true")
    return [(member, "serve_host", host, problem, fix) for member in members]


def check_nfs_clients(name, members, values_of):
    """NFS mode: the clients an operator set (nfs_export_clients) stay inside the group's fabric network (issue #13).

    The rule is the nfs_export role's own (``_nfs_plan.client_findings``), asked on the exporting node's values. The
    default (the peers' fabric addresses) is left to the fabric rules, which check every member's address.
    """
    if not members:
        return []
    head = values_of(members[0])
    if str(head.get("dspark_checkpoint_mode") or "") != "nfs":
        return []
    values = {host: values_of(host) for host in members}
    rank = None
    for var in ("nfs_export_rank", "checkpoint_source_rank"):
        for host in members:
            value = values[host].get(var)
            if value is not None and not isinstance(value, TemplateFailure):
                rank = inventory_rules._as_int(value)
                break
        if rank is not None or any(values[h].get(var) is not None for h in members):
            break
    rank = 1 if rank is None else rank
    server = next((h for h in members if inventory_rules._as_int(values[h].get("dspark_rank")) == rank), None)
    if server is None:
        return []  # check_group_ranks reports a rank outside the group
    clients = values[server].get("nfs_export_clients")
    cidr = values[server].get("dspark_fabric_cidr")
    if clients is None or isinstance(clients, TemplateFailure) or isinstance(cidr, TemplateFailure):
        return []
    peers = [str(values[h].get("dspark_fabric_address")) for h in members
             if h != server and values[h].get("dspark_fabric_address") and not isinstance(values[h].get("dspark_fabric_address"), TemplateFailure)]
    return _nfs_plan.client_findings(server, clients, cidr, peers)


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
