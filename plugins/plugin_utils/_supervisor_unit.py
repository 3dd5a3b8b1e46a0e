# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The supervisor's systemd unit values from playbooks/supervisor.yml's variables (private; issue #26).

``unit(values)`` checks every operator value that reaches dspark-fleet-watch.service (each problem names the
variable, the value and the fix) and prepares what the template writes: the ExecStart line quoted by systemd's
rules, the Environment= assignments, the paths. Nothing reaches the unit unchecked: paths are absolute, normalised
and made of a safe character set (no white space, quotes, ``%``, ``$``, ``\\`` or control characters), group
patterns use fnmatch's characters only, numbers are whole and in range; and every ExecStart argument is quoted
anyway (``quote``). Pure Python, no Ansible imports.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re

# A path the unit names: absolute, normalised, letters, digits and _ . / + @ , - only.
PATH_RE = re.compile(r"^/[A-Za-z0-9_./+@,-]*\Z")
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\Z")
# A serving group name or fnmatch pattern (dspark-fleet --groups): letters, digits, _ . - and * ? [ ] !
GROUP_RE = re.compile(r"^[A-Za-z0-9_.*?\[\]!-]{1,128}\Z")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# Safe to write unquoted as an ExecStart argument (never the first, which is the binary).
_BARE_RE = re.compile(r"^[A-Za-z0-9_./+@,:=-]+\Z")
MARKER_SCHEMA = "dspark-fleet-supervisor/1"
UNIT_NAME = "dspark-fleet-watch.service"
# A state directory that would hand a system directory to the service user (the playbook chowns it).
SYSTEM_DIRS = ("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/media", "/mnt", "/opt", "/proc",
               "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/local", "/var", "/var/lib",
               "/var/log", "/var/tmp")
INTEGERS = (  # variable, lowest, highest
    ("supervisor_interval", 1, 86400),
    ("supervisor_max_restarts", 0, 1000),
    ("supervisor_window_hours", 1, 720),
    ("supervisor_backoff_base", 1, 86400),
    ("supervisor_parallel", 1, 64),
    ("supervisor_keep_rounds", 0, 100000),
    ("supervisor_keep_days", 1, 3650),
)
# variable -> dspark-fleet watch option
OPTIONS = (
    ("supervisor_interval", "--interval"),
    ("supervisor_max_restarts", "--max-restarts"),
    ("supervisor_window_hours", "--window"),
    ("supervisor_backoff_base", "--backoff-base"),
    ("supervisor_parallel", "--parallel"),
    ("supervisor_keep_rounds", "--keep-rounds"),
    ("supervisor_keep_days", "--keep-days"),
)
KEY_NAME = ".ssh/id_nodes"
KNOWN_HOSTS_NAME = ".ssh/known_hosts"
# The supervisor's key in the nodes' authorized_keys (issue #41; the operator installs it): besides from=, no
# forwarding of any kind, no ~/.ssh/rc (restrict), and a terminal kept (Ansible's ssh asks for one without pipelining).
NODE_KEY_OPTIONS = "restrict,pty"
# One OpenSSH public key line (type, base64, optional comment), as ssh-keygen writes <key>.pub.
PUBLIC_KEY_RE = re.compile(r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)"
                           r"@openssh\.com) [A-Za-z0-9+/]+={0,3}( [^\x00-\x1f\x7f]*)?\Z")
PUBLIC_KEY_PLACEHOLDER = "<the public key of supervisor_ssh_private_key: ssh-keygen -y -f %s>"


def quote(arg):
    """One ExecStart argument as systemd reads it back unchanged: bare when it is plainly safe, else in double
    quotes with backslash and double quote escaped; ``%`` doubled (specifiers) and ``$`` doubled (variables)."""
    text = str(arg)
    if _CONTROL_RE.search(text):
        raise ValueError("a control character cannot be written into a unit: %r" % text)
    text = text.replace("%", "%%").replace("$", "$$")
    if _BARE_RE.match(text):
        return text
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def env_assignment(name, value):
    """One Environment= assignment, quoted (systemd expands specifiers there, not variables)."""
    text = "%s=%s" % (name, value)
    if _CONTROL_RE.search(text):
        raise ValueError("a control character cannot be written into a unit: %r" % text)
    return '"%s"' % text.replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')


def _shown(value):
    return repr(value) if isinstance(value, str) else "%r (%s)" % (value, type(value).__name__)


def _path(values, name, problems, required=True):
    value = values.get(name)
    if value in (None, "") and not required:
        return ""
    if not isinstance(value, str) or not value:
        problems.append("%s is %s: set it to an absolute path on the supervisor host" % (name, _shown(value)))
        return None
    if _CONTROL_RE.search(value):
        problems.append("%s is %s: it holds a newline or another control character; fix: write the path on one line"
                        % (name, _shown(value)))
        return None
    if not value.startswith("/"):
        problems.append("%s is %s: not an absolute path; fix: give the full path, starting with /" % (name, _shown(value)))
        return None
    if not PATH_RE.match(value):
        problems.append("%s is %s: only letters, digits and _ . / + @ , - may be in a path the unit names (no spaces, "
                        "quotes, %% or $); fix: use or link such a path" % (name, _shown(value)))
        return None
    normal = posixpath.normpath(value)
    if normal != value or "//" in value:
        problems.append("%s is %s: not a normalised path (no //, /./, /../ or trailing /); fix: write it as %s"
                        % (name, _shown(value), normal))
        return None
    return value


def _integer(values, name, low, high, problems):
    value = values.get(name)
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.isdigit())):
        problems.append("%s is %s: must be a whole number from %d to %d" % (name, _shown(value), low, high))
        return None
    number = int(value)
    if not low <= number <= high:
        problems.append("%s is %d: must be from %d to %d" % (name, number, low, high))
        return None
    return number


def _inside(path, folder):
    return path == folder or path.startswith(folder.rstrip("/") + "/")


_FROM_FIX = "list the address(es) the nodes see the supervisor connect from, e.g. ['10.0.0.5'] or ['10.0.0.0/28']"


def _from_entry(entry):
    """(text for from=, network, None) of one supervisor_node_key_from entry, else (None, problem, fix)."""
    text = entry.strip() if isinstance(entry, str) else None
    try:
        network = ipaddress.ip_network(text, strict=True) if text else None
    except ValueError:
        try:
            wide = ipaddress.ip_network(text, strict=False)
        except ValueError:
            wide = None
        if wide is not None:
            return None, "has bits set past its prefix length", "write the network, %s, or the address alone" % wide
        network = None
    if network is None:
        # sshd matches a host name only through reverse DNS (UseDNS, off by default); a pattern is too wide.
        return None, "is not an IP address or network (CIDR): host names and patterns are not taken", _FROM_FIX
    if network.prefixlen == 0:
        return None, "is every address and restricts nothing", _FROM_FIX
    return (text if "/" in text else str(network.network_address)), network, None


def node_key(values, host_address="", public_key=""):
    """The from= restriction of the supervisor's key in the nodes' authorized_keys (issue #41).

    ``supervisor_node_key_from``: the addresses or CIDR networks the nodes see the supervisor connect from; empty:
    ``host_address`` (this host's dspark_mgmt_address, else ansible_host) when that is an IP address other than
    loopback. ``public_key``: the text of supervisor_ssh_private_key's .pub ("" when there is none). Returns
    (problems, {node_key_from, node_key_options, node_key_line, node_key_message})."""
    problems, entries, networks = [], [], []
    given = values.get("supervisor_node_key_from")
    if given in (None, ""):
        given = []
    if isinstance(given, str) or not isinstance(given, (list, tuple)):
        problems.append("supervisor_node_key_from is %s: must be a list of IP addresses or networks; fix: %s"
                        % (_shown(given), _FROM_FIX))
        given = []
    for entry in given:
        text, network, fix = _from_entry(entry)
        if text is None:
            problems.append("supervisor_node_key_from has %s, which %s; fix: %s" % (_shown(entry), network, fix))
        else:
            entries.append(text)
            networks.append(network)
    host = None
    try:
        host = ipaddress.ip_address(str(host_address or "").strip().strip("[]"))
    except ValueError:
        pass
    notes = []
    if not given and host is not None and not (host.is_loopback or host.is_unspecified):
        entries = [str(host)]
        notes.append("supervisor_node_key_from is empty: this host's address %s (dspark_mgmt_address, else "
                     "ansible_host) is taken; set the list when the nodes see the supervisor at another address "
                     "(NAT, another network)." % host)
    elif not given:
        notes.append("supervisor_node_key_from is empty and this host's address (dspark_mgmt_address, else ansible_host: "
                     "%s) is not an IP address the nodes could see: set supervisor_node_key_from to the address(es) "
                     "they see the supervisor connect from, e.g. ['10.0.0.5']." % _shown(host_address or ""))
    elif host is not None and not (host.is_loopback or host.is_unspecified) and \
            not any(host.version == net.version and host in net for net in networks):
        notes.append("WARNING: this host's address %s (dspark_mgmt_address, else ansible_host) is in none of "
                     "supervisor_node_key_from: unless the nodes see the supervisor at one of those (NAT), they will "
                     "refuse its key." % host)
    options = 'from="%s",%s' % (",".join(entries), NODE_KEY_OPTIONS) if entries else ""
    key = (public_key or "").strip()
    if key and not PUBLIC_KEY_RE.match(key):
        notes.append("supervisor_ssh_private_key's .pub file is not one OpenSSH public key line: the line shows a "
                     "placeholder.")
        key = ""
    private = values.get("supervisor_ssh_private_key")
    placeholder = PUBLIC_KEY_PLACEHOLDER % (private if isinstance(private, str) and private else "KEY")
    line = "%s %s" % (options or 'from="<supervisor addresses>",' + NODE_KEY_OPTIONS, key or placeholder)
    message = ["The supervisor's key is root on every node: in the authorized_keys of the user its inventory connects "
               "as, on every node, its line should read (docs/design-supervisor.md, 'The key on the nodes'):",
               line] + notes
    return problems, {"node_key_from": entries, "node_key_options": options, "node_key_line": line,
                      "node_key_message": message}


def unit(values, host_address="", public_key=""):
    """{problems, exec_start, environment, user, state_dir, key_path, known_hosts_path, node_key_*, ...} from the
    playbook's ``supervisor_*`` variables (a mapping with those names as keys); ``host_address`` and ``public_key``
    as node_key says. When ``problems`` is not empty, the other values are not to be used."""
    problems = []
    user = values.get("supervisor_user")
    if not isinstance(user, str) or not USER_RE.match(user):
        problems.append("supervisor_user is %s: a user name is lower-case letters, digits, _ and - (at most 32, not "
                        "starting with a digit or -); fix: keep the default dspark-fleet" % _shown(user))
        user = None
    elif user == "root":
        problems.append("supervisor_user is 'root': the supervisor runs unprivileged (issue #26: an inventory line "
                        "would otherwise run as root here); fix: keep the default dspark-fleet")
        user = None
    project = _path(values, "supervisor_project_dir", problems)
    venv = _path(values, "supervisor_venv", problems)
    inventory = _path(values, "supervisor_inventory", problems)
    state = _path(values, "supervisor_state_dir", problems)
    vault = _path(values, "supervisor_vault_password_file", problems, required=False)
    if state:
        if state in SYSTEM_DIRS or state.count("/") < 2:
            problems.append("supervisor_state_dir is %r: the playbook gives it to %s; fix: a directory of its own, "
                            "e.g. /var/lib/dspark-fleet" % (state, user or "the service user"))
        for name, other in (("supervisor_project_dir", project), ("supervisor_venv", venv),
                            ("supervisor_inventory", inventory), ("supervisor_vault_password_file", vault)):
            if other and _inside(other, state):
                problems.append("supervisor_state_dir is %r and %s (%r) is inside it: the service user could change "
                                "what it runs; fix: keep the state directory apart" % (state, name, other))
            elif other and name != "supervisor_vault_password_file" and _inside(state, other):
                problems.append("supervisor_state_dir is %r, inside %s (%r): the service user would own a directory "
                                "of it; fix: keep the state directory apart, e.g. /var/lib/dspark-fleet"
                                % (state, name, other))
    groups = values.get("supervisor_groups")
    if groups is None or groups == "":
        groups = []
    if isinstance(groups, str) or not isinstance(groups, (list, tuple)):
        problems.append("supervisor_groups is %s: must be a list of group names or patterns, e.g. ['pair_*']"
                        % _shown(groups))
        groups = []
    for group in groups:
        if not isinstance(group, str) or not GROUP_RE.match(group):
            problems.append("supervisor_groups has %s: a group name or fnmatch pattern is letters, digits and "
                            "_ . - * ? [ ] ! only" % _shown(group))
    numbers = {}
    for name, low, high in INTEGERS:
        numbers[name] = _integer(values, name, low, high, problems)
    enabled = values.get("supervisor_service_enabled")
    if not isinstance(enabled, bool):
        problems.append("supervisor_service_enabled is %s: must be true or false (from -e, as JSON: "
                        "-e '{\"supervisor_service_enabled\": false}')" % _shown(enabled))
    for name in ("supervisor_ssh_private_key", "supervisor_ssh_known_hosts"):
        value = values.get(name)
        if value in (None, ""):
            continue
        if not isinstance(value, str) or _CONTROL_RE.search(value):
            problems.append("%s is %s: the path of a file on the machine running the playbook, on one line"
                            % (name, _shown(value)))
    found, key_line = node_key(values, host_address, public_key)
    problems += found
    out = {"problems": problems}
    if problems:
        return out
    key = posixpath.join(state, KEY_NAME) if values.get("supervisor_ssh_private_key") else ""
    argv = [posixpath.join(venv, "bin", "dspark-fleet"), "watch", "--plain", "-i", inventory]
    for group in groups:
        argv += ["--groups", group]
    for name, option in OPTIONS:
        argv += [option, str(numbers[name])]
    if vault:
        argv += ["--vault-password-file", vault]
    ansible_home = posixpath.join(state, "ansible")
    environment = [("DSPARK_FLEET_STATE_DIR", state), ("PYTHONUNBUFFERED", "1"), ("HOME", state),
                   ("ANSIBLE_HOME", ansible_home), ("ANSIBLE_LOCAL_TEMP", posixpath.join(ansible_home, "tmp"))]
    if key:
        environment.append(("ANSIBLE_PRIVATE_KEY_FILE", key))
    out.update(key_line)
    out.update({
        "user": user,
        "project_dir": project,
        "state_dir": state,
        "ansible_home": ansible_home,
        "key_path": key,
        "known_hosts_path": posixpath.join(state, KNOWN_HOSTS_NAME),
        "argv": argv,
        "exec_start": " ".join(quote(arg) for arg in argv),
        "environment": " ".join(env_assignment(name, value) for name, value in environment),
        # /etc/dspark-fleet/supervisor.json: what `dspark-fleet reprovision` needs to share the service's locks and
        # proven records (its state dir, user and environment), read by dspark_fleet/supervisor.py.
        "marker": {"schema": MARKER_SCHEMA, "unit": UNIT_NAME, "user": user, "state_dir": state,
                   "inventory": inventory, "project_dir": project, "command": argv[0],
                   "environment": dict((name, value) for name, value in environment if name != "PYTHONUNBUFFERED")},
    })
    return out
