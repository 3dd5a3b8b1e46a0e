# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' input rules, each written once (private; issue #25).

Every rule a role checks of its inputs lives here, registered in ``RULES``. Preflight runs all of them for every
member of every serving group of the run (plugins/action/preflight_validate.py) before any node changes; a role
run on its own (``--tags``, or the role alone) runs its own ones through the action ``dspark.cluster.role_inputs``
at its start. A rule reads one member's effective values (what the inventory, group_vars, host_vars or -e set,
else the role's default) and those of its group, and returns ``(variable, value, problem, fix)`` tuples about
that member; the callers add the host and word them as one line (``_findings.message``). A secret's value is
never part of a result. A rule may read the node's facts (``NODE_FACTS``: the role's play gathers them, preflight
has them only from a fact cache) and, on the controller, a file an input names (docker_runtime's image archive).
Pure Python, no Ansible imports.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
import tarfile
from collections import namedtuple

import yaml

from ansible_collections.dspark.cluster.plugins.plugin_utils import _fabric_plan, _group_model, _inputs, _nfs_plan, _router_plan

# libyaml's safe loader where PyYAML has it (about 8 times faster: the specs are read by every forked worker).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Rule = namedtuple("Rule", "name role variables check doc covered_by")
RULES = []
# Roles whose rules read a host outside the serving groups (the router, group dspark_router): check_router runs them.
ROUTER_ROLES = ("router",)
# Variables a rule may read beside the role variables and the inventory contract: Ansible's own, of the node.
NODE_FACTS = ("ansible_facts", "ansible_host")
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SECRET_NAME_RE = re.compile(r"api_?keys?|token|passw|secret|proxy", re.IGNORECASE)


class Hidden:
    """Stands for a secret's value in a message (issue #13): the problem is named, the value is not."""

    def __repr__(self):
        return "<not shown: secret>"

    __str__ = __repr__


HIDDEN = Hidden()


class TemplateFailure:
    """A variable whose value could not be templated: its raw text and the error."""

    def __init__(self, raw, error):
        self.raw = raw
        self.error = error

    def __repr__(self):
        return "TemplateFailure(%r, %r)" % (self.raw, self.error)


def is_secret(name, spec=None):
    """no_log in the option's spec, or a name that says key, token, password, secret or proxy."""
    return bool((spec or {}).get("no_log")) or bool(_SECRET_NAME_RE.search(name))


def rule(name, variables, covered_by=None):
    """Register a rule of role ``name.split('.')[0]`` over ``variables`` (skipped when one failed to template).

    covered_by: in preflight another rule (the inventory contract's or the fabric's) reports the same input already:
    the rule then runs only in the role's own check, so that preflight says every mistake once.
    """
    def register(check):
        RULES.append(Rule(name, name.split(".")[0], tuple(variables), check, (check.__doc__ or "").strip(), covered_by))
        return check
    return register


# -- a member's effective values ---------------------------------------------------------------------------------

class Member:
    """One member of a serving group: its effective inputs and the group's other members."""

    def __init__(self, host, group, values, specs):
        self.host = host
        self.group = group
        self.values = values
        self.specs = specs

    def raw(self, var):
        return self.values.get(var)

    def __getitem__(self, var):
        value = self.values.get(var)
        if value is not None:
            return value
        if var in _DERIVED:
            return _DERIVED[var](self)
        return (self.specs.get(var) or {}).get("default")

    def failed(self, var):
        return isinstance(self.values.get(var), TemplateFailure)

    def member(self, host):
        return self.group.members[host]


class Group:
    """A serving group: its name, its hosts in rank order and each one's Member view."""

    def __init__(self, name, hosts, values_of, specs, running=None):
        self.name = name
        self.running = running
        self.members = {host: Member(host, self, values_of(host), specs) for host in hosts}
        self.ordered = _group_model.members_by_rank(list(hosts), lambda h: self.members[h].raw("dspark_rank"))
        self.rank_hosts = {}
        for host in hosts:
            rank = _inputs.as_int(self.members[host].raw("dspark_rank"))
            if rank is not None:
                self.rank_hosts.setdefault(rank, []).append(host)

    def host_of_rank(self, value):
        """The one member whose dspark_rank is ``value``, else None (none or several)."""
        rank = _inputs.as_int(value)
        hosts = self.rank_hosts.get(rank, []) if rank is not None else []
        return hosts[0] if len(hosts) == 1 else None

    def ranks_text(self):
        ranks = sorted(self.rank_hosts)
        if ranks and ranks == list(range(len(ranks))):
            return "ranks 0..%d" % ranks[-1]
        return "ranks %s" % ", ".join(str(r) for r in ranks)

    def address(self, host):
        value = self.members[host].raw("dspark_fabric_address")
        return "" if value is None or isinstance(value, TemplateFailure) else str(value).strip()


def _export_rank(member):
    value = member["checkpoint_source_rank"]
    return 1 if value is None else value


def _export_clients(member):
    server = member.group.host_of_rank(member["nfs_export_rank"])
    return [member.group.address(h) for h in member.group.ordered if h != server and member.group.address(h)]


def _controller_trust_dir(dummy_member):
    # The controller's configuration, read only when the default is asked for.
    from ansible import constants  # pylint: disable=import-outside-toplevel
    return "%s/dspark/checkpoint-trust" % constants.config.get_config_value("ANSIBLE_HOME")


# Role defaults that are templates (roles/*/defaults/main.yml): what they render to, in Python.
_DERIVED = {
    "checkpoint_trust_dir": _controller_trust_dir,
    "nfs_export_rank": _export_rank,
    "nfs_export_clients": _export_clients,
    "serve_image": lambda member: member["dspark_image"],
}


# -- running them ------------------------------------------------------------------------------------------------

def check_member(member, roles=None, preflight=False):
    """[(host, variable, value, problem, fix)] of every rule of ``roles`` (all when None) on one member."""
    out = []
    router = isinstance(member, RouterHost)
    for item in RULES:
        if roles is not None and item.role not in roles:
            continue
        if (item.role in ROUTER_ROLES) != router:
            continue
        if preflight and item.covered_by:
            continue
        if any(member.failed(var) for var in item.variables):
            continue  # reported as a variable that cannot be templated
        for var, value, problem, fix in item.check(member) or ():
            shown = HIDDEN if value is not None and is_secret(var, member.specs.get(var)) else value
            out.append((member.host, var, shown, problem, fix))
    return out


def check_group(name, hosts, values_of, specs, roles=None, preflight=False, only=None, running=None):
    """Every rule on every member of a serving group (``only``: the members to report on; ``running``: the role that
    asks at its start, whose rules then apply whatever the group's mode)."""
    group = Group(name, hosts, values_of, specs, running)
    out = []
    for host in group.ordered:
        if only is None or host in only:
            out.extend(check_member(group.members[host], roles, preflight))
    return out


def check_router(host, values, specs, groups, hostvars):
    """[(host, variable, value, problem, fix)] of the router's rules on one host of group dspark_router: its own
    values (``values``) and the heads of the serving groups it routes to (read from ``hostvars``)."""
    return check_member(RouterHost(host, values, specs, groups, hostvars))


# -- shared input classes ----------------------------------------------------------------------------------------

def _ranges(member, table):
    """(var, value, problem, fix) for each var of ``table`` (var -> (low, high, low_open, number)) out of range."""
    out = []
    for var, (low, high, low_open, number) in table.items():
        value = member[var]
        found = _inputs.range_problem(value, low, high, low_open, (member.specs.get(var) or {}).get("default"), number)
        if found:
            out.append((var, value) + found)
    return out


def _int_range(low=None, high=None):
    return (low, high, False, _inputs.as_int)


def _positive():
    return (0, None, True, _inputs.as_int)


COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
# git check-ref-format, simplified: no spaces, control chars, '..', '~^:?*[\\', no leading '-' or '/'.
REF_RE = re.compile(r"^(?!-)(?!/)(?!.*\.\.)(?!.*//)[^\s~^:?*\[\\\x00-\x1f\x7f]+(?<!/)(?<!\.lock)(?<!\.)$")


def revision_problem(revision, model=None):
    """The one revision policy: a 40-hex commit id (the checkpoint's snapshot directory is named after it)."""
    fix = "pin the 40-character lower-case commit id%s" % (
        " (git ls-remote https://huggingface.co/%s <branch> prints it)" % model if isinstance(model, str) and model else "")
    if not isinstance(revision, str) or not revision.strip():
        return "is empty, which would serve whatever the tip of main is today", fix
    if COMMIT_RE.match(revision):
        return None
    if not REF_RE.match(revision):
        return "is not a valid git revision", fix
    return ("is a branch, tag or short id, not a 40-hex commit: the checkpoint role names the snapshot directory after the "
            "commit, and a branch can change under a running fleet", fix)


# Keys reach vLLM from a 0600 file (--api-key in a YAML config, or its env file): characters that YAML, the shell or a
# header would read differently are refused, so that the key vLLM checks is the key the operator wrote.
KEY_RE = re.compile(r"^[A-Za-z0-9._~+/=:@-]+\Z")
# A serve path becomes a bind mount `source:target` and a file name: absolute, no colon, no white space or control.
MOUNT_PATH_RE = re.compile(r"^/[^:\s\x00-\x1f\x7f]*\Z")
SERVE_MOUNT_PATHS = ("serve_jit_cache_dir", "serve_config_dir", "serve_hotfix_node_dir")

# -- checkpoint ----------------------------------------------------------------------------------------------------

CHECKPOINT_MODES = ("nfs", "scp")
_CIPHER_RE = re.compile(r"^[A-Za-z0-9@._-]+(,[A-Za-z0-9@._-]+)*$")
_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\Z")
_NFS_VERS_RE = re.compile(r"^4(\.[0-2])?$")
# Refused in checkpoint_rsync_options: deleting, in-place writing, anything that would keep owners, groups,
# devices, special files, links or other modes (the role sets those), and --timeout (checkpoint_rsync_timeout).
RSYNC_FORBIDDEN_LONG = (
    "delete", "del$", "remove-source-files", "inplace", "append", "archive", "owner", "group", "devices", "specials",
    "links", "hard-links", "perms", "executability", "chmod", "chown", "usermap", "groupmap", "super", "fake-super",
    "acls", "xattrs", "copy-unsafe-links", "safe-links", "munge-links", "no-copy-links", "no-munge-links",
    "keep-dirlinks", "copy-dirlinks", "timeout", "rsync-path", "files-from", "from0", "filter", "include", "exclude",
    "relative", "rsh")
RSYNC_FORBIDDEN_RE = re.compile(r"^--(%s)|^-[^-]*[aogDlHpEAXkKRfFe]" % "|".join(RSYNC_FORBIDDEN_LONG))
NFS_MOUNT_FORBIDDEN_RE = re.compile(r"^((rw|ro|soft|hard|suid|dev|nosuid|nodev)$|(vers|nfsvers|nconnect|rsize|wsize|timeo)=)")
# The URL variables of the download: http(s), a host name, IPv4 or [IPv6] address, an optional port and path; nothing
# else (no user:password@, which would show in logs and `ps`; no whitespace or control character; no query or
# fragment, which would break the URLs built on it). Empty is allowed (each has its default meaning).
URL_RE = re.compile(
    r"^https?://([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?|\[[0-9A-Fa-f:.]+\])"
    r"(:[0-9]{1,5})?(/[A-Za-z0-9._~%!$&()*+,;=:@/-]*)?\Z")
_CREDENTIALS_RE = re.compile(r"^[^:/?#]*://[^/?#]*@")
URL_FIXES = {
    "checkpoint_download_endpoint": "set the Hub's address, e.g. https://hf-mirror.example.org or the lab's "
                                    "http://10.231.0.1:5990, or \"\" for the public Hub",
    "checkpoint_download_pip_index": "set a PEP 503 index, e.g. https://pypi.example.org/simple/ or the lab's "
                                     "http://10.231.0.1:5990/simple/, or \"\" for pip's own configuration",
    "checkpoint_download_probe_url": "set a URL to probe, e.g. https://huggingface.co, or \"\" to probe the endpoint",
}


def _mode(member):
    return str(member["dspark_checkpoint_mode"] or "")


def _cache(member):
    value = member["dspark_hf_cache"]
    return value.rstrip("/") if isinstance(value, str) and value.startswith("/") else None


@rule("checkpoint.mode", ["dspark_checkpoint_mode"])
def _checkpoint_mode(member):
    """dspark_checkpoint_mode is nfs or scp."""
    if _mode(member) not in CHECKPOINT_MODES:
        return [("dspark_checkpoint_mode", member["dspark_checkpoint_mode"], "is not a known checkpoint mode",
                 "set dspark_checkpoint_mode to one of: %s (group_vars)" % ", ".join(CHECKPOINT_MODES))]
    return []


@rule("checkpoint.revision", ["dspark_model_revision", "dspark_model"])
def _checkpoint_revision(member):
    """dspark_model_revision is a 40-hex commit id (one policy in preflight and in the role)."""
    found = revision_problem(member["dspark_model_revision"], member["dspark_model"])
    return [("dspark_model_revision", member["dspark_model_revision"]) + found] if found else []


@rule("checkpoint.source_rank", ["checkpoint_source_rank"])
def _checkpoint_source_rank(member):
    """checkpoint_source_rank names exactly one member of the group."""
    value = member["checkpoint_source_rank"]
    if _inputs.as_int(value) is None or member.group.host_of_rank(value):
        return []
    return [("checkpoint_source_rank", value, "is not a rank of group %s (%s)" % (member.group.name, member.group.ranks_text()),
             "set checkpoint_source_rank to the dspark_rank of the node that holds the checkpoint")]


@rule("checkpoint.hf_cache", ["dspark_hf_cache"])
def _checkpoint_hf_cache(member):
    """dspark_hf_cache is an absolute directory below / without colons or white space (a bind mount source)."""
    value = member["dspark_hf_cache"]
    if value is None:
        return [("dspark_hf_cache", None, "the Hugging Face cache directory of every node",
                 "set dspark_hf_cache in group_vars, e.g. /var/lib/dspark/hf-cache")]
    found = _inputs.absolute_path_problem(value, "/var/lib/dspark/hf-cache")
    if found or str(value).strip("/") == "":
        return [("dspark_hf_cache", value) + (found or ("is / itself", "set a directory below /, e.g. /var/lib/dspark/hf-cache"))]
    if not MOUNT_PATH_RE.match(str(value)):
        return [("dspark_hf_cache", value, "contains a colon or white space (serve bind-mounts it as `source:target`)",
                 "choose a plain absolute path, e.g. /var/lib/dspark/hf-cache")]
    return []


@rule("checkpoint.manifest_dir", ["checkpoint_manifest_dir", "dspark_hf_cache"])
def _checkpoint_manifest_dir(member):
    """checkpoint_manifest_dir is absolute and outside the Hugging Face cache."""
    value = member["checkpoint_manifest_dir"]
    found = _inputs.absolute_path_problem(value, "/var/lib/dspark/checkpoint")
    if found:
        return [("checkpoint_manifest_dir", value) + found]
    cache = _cache(member)
    if cache and isinstance(value, str) and _inputs.inside(value, cache):
        return [("checkpoint_manifest_dir", value, "is inside dspark_hf_cache=%s (a read-only NFS mount on the clients, a copy "
                 "target in SCP mode)" % member["dspark_hf_cache"], "choose a directory outside the Hugging Face cache, "
                 "e.g. /var/lib/dspark/checkpoint")]
    return []


@rule("checkpoint.trust_dir", ["checkpoint_trust_dir"])
def _checkpoint_trust_dir(member):
    """checkpoint_trust_dir is "" (no records) or an absolute directory on the controller."""
    value = member["checkpoint_trust_dir"]
    if value == "":
        return []
    found = _inputs.absolute_path_problem(value, "/home/ops/.ansible/dspark/checkpoint-trust")
    if found or str(value).strip("/") == "":
        return [("checkpoint_trust_dir", value) + (found or ("is / itself", "set a directory of the controller's, e.g. "
                                                             "/home/ops/.ansible/dspark/checkpoint-trust, or \"\" for none"))]
    return []


@rule("checkpoint.ssh_key_path", ["checkpoint_ssh_key_path", "dspark_hf_cache", "dspark_checkpoint_mode"])
def _checkpoint_ssh_key_path(member):
    """SCP mode: checkpoint_ssh_key_path is absolute and outside the Hugging Face cache."""
    if _mode(member) != "scp":
        return []
    value = member["checkpoint_ssh_key_path"]
    found = _inputs.absolute_path_problem(value, "/etc/dspark/checkpoint/id_ed25519")
    if found:
        return [("checkpoint_ssh_key_path", value) + found]
    cache = _cache(member)
    if cache and isinstance(value, str) and _inputs.inside(value, cache):
        return [("checkpoint_ssh_key_path", value, "is inside dspark_hf_cache=%s, which is copied to the other nodes"
                 % member["dspark_hf_cache"], "choose a path outside the Hugging Face cache, e.g. /etc/dspark/checkpoint/id_ed25519")]
    return []


@rule("checkpoint.rsync_options", ["checkpoint_rsync_options", "dspark_checkpoint_mode"])
def _checkpoint_rsync_options(member):
    """SCP mode: checkpoint_rsync_options holds none of the options the copy sets itself or must never use."""
    value = member["checkpoint_rsync_options"]
    if _mode(member) != "scp" or not isinstance(value, (list, tuple)):
        return []
    bad = [str(o) for o in value if RSYNC_FORBIDDEN_RE.match(str(o))]
    if not bad:
        return []
    return [("checkpoint_rsync_options", list(value), "contains %s: the copy never deletes, never writes in place and sets "
             "links, modes, owners, filters and the timeout itself (--archive is not accepted: files arrive 0644 without "
             "owner, group or devices)" % ", ".join(bad), "remove them (checkpoint_rsync_timeout sets the timeout)")]


@rule("checkpoint.scp_address", ["dspark_fabric_address", "dspark_checkpoint_mode"], covered_by="fabric: dspark_fabric_address")
def _checkpoint_scp_address(member):
    """The copy runs over the fabric: every member has dspark_fabric_address."""
    if _mode(member) in CHECKPOINT_MODES and not member.group.address(member.host):
        return [("dspark_fabric_address", None, "the checkpoint is copied or mounted over the fabric",
                 "set this node's fabric address in the inventory")]
    return []


@rule("checkpoint.scp_user", ["checkpoint_scp_user", "dspark_checkpoint_mode"])
def _checkpoint_scp_user(member):
    """SCP mode: checkpoint_scp_user is an unprivileged user name (never root)."""
    value = member["checkpoint_scp_user"]
    if _mode(member) != "scp" or (isinstance(value, str) and _USER_RE.match(value) and value != "root"):
        return []
    return [("checkpoint_scp_user", value, "is not an unprivileged user name (root would let rrsync receive as root)",
             "use a system account name such as dspark-ckpt")]


@rule("checkpoint.scp_numbers", ["checkpoint_scp_streams", "checkpoint_rsync_timeout", "checkpoint_scp_connect_timeout",
                                 "checkpoint_scp_alive_interval", "checkpoint_scp_retries", "checkpoint_scp_retry_delay",
                                 "dspark_checkpoint_mode"])
def _checkpoint_scp_numbers(member):
    """SCP mode: streams 1-10 (sshd's MaxStartups), timeouts > 0, keep-alive, retries and delay >= 0."""
    if _mode(member) != "scp":
        return []
    return _ranges(member, {
        "checkpoint_scp_streams": _int_range(1, 10),
        "checkpoint_rsync_timeout": _positive(),
        "checkpoint_scp_connect_timeout": _positive(),
        "checkpoint_scp_alive_interval": _int_range(0),
        "checkpoint_scp_retries": _int_range(0),
        "checkpoint_scp_retry_delay": _int_range(0),
    })


@rule("checkpoint.scp_cipher", ["checkpoint_scp_cipher", "dspark_checkpoint_mode"])
def _checkpoint_scp_cipher(member):
    """SCP mode: checkpoint_scp_cipher is a comma-separated list of OpenSSH cipher names."""
    value = member["checkpoint_scp_cipher"]
    if _mode(member) != "scp" or (isinstance(value, str) and _CIPHER_RE.match(value)):
        return []
    return [("checkpoint_scp_cipher", value, "is not a comma-separated list of OpenSSH cipher names",
             "for example aes128-gcm@openssh.com,chacha20-poly1305@openssh.com")]


@rule("checkpoint.nfs_source", ["dspark_fabric_address", "checkpoint_source_rank", "dspark_checkpoint_mode"],
      covered_by="fabric: dspark_fabric_address")
def _checkpoint_nfs_source(member):
    """NFS mode: the source (the NFS server) has a fabric address."""
    source = member.group.host_of_rank(member["checkpoint_source_rank"])
    if _mode(member) != "nfs" or source is None or member.group.address(source):
        return []
    return [("dspark_fabric_address", None, "on the checkpoint source %s, the NFS server's address" % source,
             "set dspark_fabric_address on %s in the inventory" % source)]


@rule("checkpoint.nfs_vers", ["checkpoint_nfs_vers", "dspark_checkpoint_mode"])
def _checkpoint_nfs_vers(member):
    """NFS mode: checkpoint_nfs_vers is 4, 4.0, 4.1 or 4.2 (the export serves NFSv4 only)."""
    value = member["checkpoint_nfs_vers"]
    if _mode(member) != "nfs" or _NFS_VERS_RE.match(str(value)):
        return []
    return [("checkpoint_nfs_vers", value, "is not an NFSv4 version (the export serves NFSv4 only)", "use 4.2, 4.1, 4.0 or 4")]


@rule("checkpoint.nfs_numbers", ["checkpoint_nfs_nconnect", "checkpoint_nfs_rsize", "checkpoint_nfs_wsize", "checkpoint_nfs_timeo",
                                 "checkpoint_nfs_probe_timeout", "dspark_checkpoint_mode"])
def _checkpoint_nfs_numbers(member):
    """NFS mode: nconnect 1-16 (the kernel's limit), rsize/wsize >= 4096, timeo and the probe's timeout > 0."""
    if _mode(member) != "nfs":
        return []
    return _ranges(member, {
        "checkpoint_nfs_nconnect": _int_range(1, 16),
        "checkpoint_nfs_rsize": _int_range(4096),
        "checkpoint_nfs_wsize": _int_range(4096),
        "checkpoint_nfs_timeo": _positive(),
        "checkpoint_nfs_probe_timeout": _positive(),
    })


@rule("checkpoint.nfs_options", ["checkpoint_nfs_extra_options", "dspark_checkpoint_mode"])
def _checkpoint_nfs_options(member):
    """NFS mode: checkpoint_nfs_extra_options holds none of the options the role sets from its variables."""
    value = member["checkpoint_nfs_extra_options"]
    if _mode(member) != "nfs" or not isinstance(value, (list, tuple)):
        return []
    bad = [str(o) for o in value if NFS_MOUNT_FORBIDDEN_RE.match(str(o))]
    if not bad:
        return []
    return [("checkpoint_nfs_extra_options", list(value), "contains %s, which the role sets from its own variables (ro, nosuid "
             "and nodev always)" % ", ".join(bad), "remove them and set checkpoint_nfs_* instead")]


@rule("checkpoint.download_numbers", ["checkpoint_download", "checkpoint_download_timeout", "checkpoint_download_retries",
                                      "checkpoint_download_retry_delay", "checkpoint_download_probe_timeout"])
def _checkpoint_download_numbers(member):
    """Download: its timeouts > 0, its retries and their delay >= 0."""
    if not _inputs.is_true(member["checkpoint_download"]):
        return []
    return _ranges(member, {
        "checkpoint_download_timeout": _positive(),
        "checkpoint_download_probe_timeout": _positive(),
        "checkpoint_download_retries": _int_range(0),
        "checkpoint_download_retry_delay": _int_range(0),
    })


def url_problem(var, value):
    """(problem, fix) for a download URL that is not http(s)://host[:port][/path], else None ("" is allowed)."""
    if value in (None, "") or (isinstance(value, str) and URL_RE.match(value)):
        return None
    text = str(value)
    if _inputs.CONTROL_RE.search(text) or re.search(r"\s", text):
        return "contains whitespace or a control character", URL_FIXES[var]
    if _CREDENTIALS_RE.match(text):
        where = ("pip reads an index's login from root's ~/.netrc on the node" if var == "checkpoint_download_pip_index"
                 else "a Hugging Face token goes in checkpoint_hf_token (vault), which reaches the download only on its "
                      "standard input")
        return ("carries credentials (user:password@, shown as ***), which would show in logs and in the process list",
                "remove them from the URL; %s" % where)
    if not re.match(r"^https?://", text):
        return "is not an http:// or https:// URL", URL_FIXES[var]
    return ("is not an http(s) URL of a host name or address with an optional port and path (no query, no fragment, no "
            "character outside RFC 3986's path characters)", URL_FIXES[var])


def shown_url(value):
    """A URL as a message shows it: any user:password@ replaced by ***@."""
    return re.sub(r"//[^/?#]*@", "//***@", str(value), count=1)


@rule("checkpoint.download_urls", ["checkpoint_download", "checkpoint_download_endpoint", "checkpoint_download_pip_index",
                                   "checkpoint_download_probe_url"])
def _checkpoint_download_urls(member):
    """Download: the endpoint, pip index and probe URL are http(s)://host[:port][/path] without credentials, or ""."""
    if not _inputs.is_true(member["checkpoint_download"]):
        return []
    out = []
    for var in URL_FIXES:
        found = url_problem(var, member[var])
        if found:
            out.append((var, shown_url(member[var])) + found)
    return out


@rule("checkpoint.insecure_endpoint", ["checkpoint_download", "checkpoint_download_endpoint", "checkpoint_hf_token",
                                       "checkpoint_allow_insecure_endpoint"])
def _checkpoint_insecure_endpoint(member):
    """Download with a token: checkpoint_download_endpoint is not plain http://, unless
    checkpoint_allow_insecure_endpoint says so (issue #41: huggingface_hub sends the token on every request)."""
    endpoint = member["checkpoint_download_endpoint"]
    if (not _inputs.is_true(member["checkpoint_download"]) or not member["checkpoint_hf_token"]
            or _inputs.is_true(member["checkpoint_allow_insecure_endpoint"])
            or not isinstance(endpoint, str) or not endpoint.lower().startswith("http://")):
        return []
    return [("checkpoint_download_endpoint", shown_url(endpoint), "is plain http:// and checkpoint_hf_token is set: the "
             "download would send the token in clear (an Authorization header on every request to the endpoint)",
             "use the endpoint's https:// URL, or leave checkpoint_hf_token empty, or on a network you trust (the lab's "
             "endpoint) set checkpoint_allow_insecure_endpoint: true")]


@rule("checkpoint.download_venv", ["checkpoint_download", "checkpoint_download_venv"])
def _checkpoint_download_venv(member):
    """Download: checkpoint_download_venv is an absolute directory."""
    value = member["checkpoint_download_venv"]
    found = _inputs.absolute_path_problem(value, "/opt/dspark/hf-venv")
    if not _inputs.is_true(member["checkpoint_download"]) or not found:
        return []
    return [("checkpoint_download_venv", value) + found]


@rule("checkpoint.hf_token", ["checkpoint_hf_token"])
def _checkpoint_hf_token(member):
    """checkpoint_hf_token has no control character and no white space around it."""
    found = _inputs.control_problem(member["checkpoint_hf_token"], secret=True)
    return [("checkpoint_hf_token", HIDDEN) + found] if found else []


# -- nfs_export (groups in NFS mode; the exporting node is the node of nfs_export_rank) ---------------------------

NFS_EXPORT_FORBIDDEN = ("rw", "no_root_squash", "insecure", "no_auth_nlm", "crossmnt", "nohide")
NFS_EXPORT_REQUIRED = ("ro", "root_squash")
# exports(5) splits on white space, reads `#` as a comment, `"` and `\` as quoting, `(` `)` `,` `=` as the option
# syntax and `*` `?` `[` `@` as wildcards or netgroups: a path or option holding one of them would change the export.
EXPORT_PATH_RE = re.compile(r"^/[A-Za-z0-9/._+~:%-]*\Z")
EXPORT_OPTION_RE = re.compile(r"^[a-z_][a-z0-9_]*(=[A-Za-z0-9_./:-]+)?\Z")
_EXPORTS_FILE_RE = re.compile(r"^/etc/exports\.d/[^/\s]+\.exports\Z")
_NFS_CONF_RE = re.compile(r"^/etc/nfs\.conf\.d/[^/\s]+\.conf\Z")


def _nfs(member):
    """The group is in NFS mode, or the nfs_export role itself asks (it runs for NFS groups only)."""
    return _mode(member) == "nfs" or member.group.running == "nfs_export"


def _exporting(member):
    """NFS mode, and this member is the exporting node."""
    return _nfs(member) and member.group.host_of_rank(member["nfs_export_rank"]) == member.host


@rule("nfs_export.rank", ["nfs_export_rank", "checkpoint_source_rank", "dspark_checkpoint_mode"])
def _nfs_export_rank(member):
    """NFS mode: nfs_export_rank (default checkpoint_source_rank) names exactly one member of the group."""
    value = member["nfs_export_rank"]
    if not _nfs(member) or _inputs.as_int(value) is None or member.group.host_of_rank(value):
        return []
    var = "nfs_export_rank" if member.raw("nfs_export_rank") is not None else "checkpoint_source_rank"
    if var == "checkpoint_source_rank" and member.raw(var) is not None:
        return []  # checkpoint.source_rank says so
    return [(var, value, "is not a rank of group %s (%s)" % (member.group.name, member.group.ranks_text()),
             "set it to the dspark_rank of the node that holds the checkpoint")]


@rule("nfs_export.path", ["dspark_hf_cache", "nfs_export_rank", "dspark_checkpoint_mode"])
def _nfs_export_path(member):
    """NFS mode, the exporting node: dspark_hf_cache can be written into exports(5) safely (letters, digits and /._+-~:% only)."""
    value = member["dspark_hf_cache"]
    if not _exporting(member) or not isinstance(value, str) or not MOUNT_PATH_RE.match(value) or EXPORT_PATH_RE.match(value):
        return []  # not absolute, or with a colon or white space: checkpoint.hf_cache says it for every member
    return [("dspark_hf_cache", value, "cannot be exported safely: exports(5) treats white space, line breaks and the characters "
             "#\"\\()*?[],=@ specially", "use a path of letters, digits and /._+-~:% only, e.g. /var/lib/dspark/hf-cache")]


@rule("nfs_export.clients", ["nfs_export_clients", "nfs_export_rank", "dspark_fabric_cidr", "dspark_checkpoint_mode"])
def _nfs_export_clients(member):
    """NFS mode: every nfs_export_clients entry is an address or network inside the fabric network (no host names,
    wildcards, netgroups or 0.0.0.0/0), and there is at least one."""
    if not _exporting(member):
        return []
    clients = member["nfs_export_clients"]
    if clients is not None and not isinstance(clients, (list, tuple, str)):
        return []
    if isinstance(clients, str) and member.raw("nfs_export_clients") is not None:
        return []  # a string for a list: the type rule says so
    peers = [member.group.address(h) for h in member.group.ordered if h != member.host and member.group.address(h)]
    if clients is not None and not clients and not peers:
        return []  # the fabric rules report the peers' missing addresses
    return [found[1:] for found in _nfs_plan.client_findings(member.host, clients, member["dspark_fabric_cidr"], peers)]


@rule("nfs_export.bind_address", ["dspark_fabric_address", "dspark_fabric_cidr", "dspark_checkpoint_mode"],
      covered_by="fabric: dspark_fabric_address")
def _nfs_export_bind_address(member):
    """NFS mode: nfsd listens on the exporting node's fabric address, an address of the fabric network."""
    if not _exporting(member):
        return []
    return [found[1:] for found in _nfs_plan.bind_findings(member.host, member.raw("dspark_fabric_address"), member["dspark_fabric_cidr"])]


@rule("nfs_export.options", ["nfs_export_options", "nfs_export_rank", "dspark_checkpoint_mode"])
def _nfs_export_options(member):
    """NFS mode, the exporting node: the export stays read-only and root-squashed; one plain option per entry."""
    value = member["nfs_export_options"]
    if not _exporting(member) or not isinstance(value, (list, tuple)):
        return []
    text = [str(o) for o in value]
    unsafe = [o for o in text if not EXPORT_OPTION_RE.match(o)]
    if unsafe:
        return [("nfs_export_options", list(value), "contains %s: one option per entry, `name` or `name=value`" % ", ".join(unsafe),
                 "write each option alone (letters, digits, _ . / : -), no commas, parentheses or white space")]
    bad = [o for o in text if o in NFS_EXPORT_FORBIDDEN]
    if bad:
        return [("nfs_export_options", list(value), "contains %s: the export must stay read-only and root-squashed (the cache "
                 "holds the Hugging Face token)" % ", ".join(bad), "remove them")]
    missing = [o for o in NFS_EXPORT_REQUIRED if o not in text]
    if missing:
        return [("nfs_export_options", list(value), "lacks %s" % ", ".join(missing), "add them")]
    return []


@rule("nfs_export.files", ["nfs_export_file", "nfs_export_conf_file", "nfs_export_rank", "dspark_checkpoint_mode"])
def _nfs_export_files(member):
    """NFS mode, the exporting node: the role writes /etc/exports.d/*.exports and /etc/nfs.conf.d/*.conf only."""
    if not _exporting(member):
        return []
    out = []
    for var, pattern, default in (("nfs_export_file", _EXPORTS_FILE_RE, "/etc/exports.d/dspark.exports"),
                                  ("nfs_export_conf_file", _NFS_CONF_RE, "/etc/nfs.conf.d/dspark.conf")):
        value = member[var]
        if not (isinstance(value, str) and pattern.match(value)):
            out.append((var, value, "is outside %s" % default.rsplit("/", 1)[0] + "/*" + default[default.rindex("."):],
                        "keep the default path %s, or another file name in that directory" % default))
    return out


# -- serve ---------------------------------------------------------------------------------------------------------

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


@rule("serve.open_api", ["serve_host", "serve_api_key", "serve_api_keys", "serve_allow_unauthenticated"])
def _serve_open_api(member):
    """Closed by default (issue #13): an API beyond loopback needs serve_api_key(s) or serve_allow_unauthenticated.
    The head decides (it serves the API); every member reports it, so that preflight says it once for the group."""
    head = member.member(member.group.ordered[0]) if member.group.ordered else member
    host = head["serve_host"]
    if host is None or is_loopback(host) or _inputs.is_true(head["serve_allow_unauthenticated"]):
        return []
    if head["serve_api_key"] or head["serve_api_keys"]:
        return []
    return [("serve_host", host, "makes the API of group %s listen beyond loopback (head %s) while serve_api_key and "
             "serve_api_keys are empty: anyone who reaches the port can use the model" % (member.group.name, head.host),
             "set serve_api_key (or serve_api_keys), or bind the API to 127.0.0.1 (serve_host), or accept an open API with "
             "serve_allow_unauthenticated: true")]


@rule("serve.engine_port", ["serve_edge", "serve_engine_port", "dspark_api_port", "dspark_master_port"])
def _serve_engine_port(member):
    """With the API edge (serve_edge), vLLM listens on 127.0.0.1:serve_engine_port: a TCP port that is neither the
    edge's (dspark_api_port) nor the group's rendezvous (dspark_master_port)."""
    if not _inputs.is_true(member["serve_edge"]):
        return []
    value = member["serve_engine_port"]
    port = _inputs.as_int(value)
    if port is None or isinstance(value, bool) or not 0 < port < 65536:
        return [("serve_engine_port", value, "is not a TCP port (1-65535)",
                 "set serve_engine_port to a free port for vLLM on loopback, e.g. 18888")]
    for var in ("dspark_api_port", "dspark_master_port"):
        if _inputs.as_int(member[var]) == port:
            return [("serve_engine_port", value, "equals %s: vLLM listens on 127.0.0.1:serve_engine_port behind the API "
                     "edge, which needs %s for itself" % (var, var), "give serve_engine_port another free port")]
    return []


@rule("serve.numbers", ["serve_gpu_memory_utilization", "serve_max_num_seqs", "serve_max_num_batched_tokens",
                        "serve_max_model_len", "serve_start_timeout", "serve_mtp_num_tokens", "serve_memory_guard_mib",
                        "serve_memory_guard_wait"])
def _serve_numbers(member):
    """The fraction of GPU memory 0 < x <= 1; counts, lengths and the start timeout > 0; at least 5 MTP tokens (the
    checkpoint's block size); the memory guard's size and wait >= 0."""
    return _ranges(member, {
        "serve_gpu_memory_utilization": (0, 1, True, _inputs.as_float),
        "serve_max_num_seqs": _positive(),
        "serve_max_num_batched_tokens": _positive(),
        "serve_max_model_len": _positive(),
        "serve_start_timeout": _positive(),
        "serve_mtp_num_tokens": _int_range(5),
        "serve_memory_guard_mib": _int_range(0),
        "serve_memory_guard_wait": _int_range(0),
    })


@rule("serve.api_keys", ["serve_api_key", "serve_api_keys"])
def _serve_api_keys(member):
    """serve_api_key(s) hold no control character and no white space around a key (a vault value with a newline),
    and each key has at least _inputs.API_KEY_MIN characters."""
    out = []
    key = member["serve_api_key"]
    found = _inputs.control_problem(key, secret=True) or _inputs.short_key_problem(key)
    if found:
        out.append(("serve_api_key", HIDDEN) + found)
    keys = member["serve_api_keys"]
    if isinstance(keys, (list, tuple)):
        for index, item in enumerate(keys):
            found = _inputs.control_problem(item, secret=True) or _inputs.short_key_problem(item)
            if found:
                out.append(("serve_api_keys", HIDDEN, "has element %d that %s" % (index, found[0]), found[1]))
                break
    return out


@rule("serve.one_key_setting", ["serve_api_key", "serve_api_keys"])
def _serve_one_key_setting(member):
    """At most one of serve_api_key and serve_api_keys is set."""
    keys = member["serve_api_keys"]
    if member["serve_api_key"] and keys and isinstance(keys, (list, tuple)):
        return [("serve_api_keys", HIDDEN, "is set together with serve_api_key (the keys are not shown)",
                 "set one of them: serve_api_key for one key, serve_api_keys for several")]
    return []


@rule("serve.key_characters", ["serve_api_key", "serve_api_keys"])
def _serve_key_characters(member):
    """Each API key is letters, digits and -._~+/=:@ only (no quote, backslash, `$`, `#`, inner white space or
    non-ASCII character); control characters and short keys are serve.api_keys'."""
    keys = member["serve_api_keys"]
    values = [("serve_api_key", member["serve_api_key"])]
    if isinstance(keys, (list, tuple)):
        values += [("serve_api_keys", item) for item in keys]
    bad = [var for var, key in values if isinstance(key, str) and key
           and not (_inputs.control_problem(key, secret=True) or _inputs.short_key_problem(key)) and not KEY_RE.match(key)]
    if not bad:
        return []
    return [(bad[0], HIDDEN, "has %d key(s) with white space, a quote, a backslash, `$`, `#` or a non-ASCII character (not "
             "shown)" % len(bad), "use keys of letters, digits and -._~+/=:@ only, e.g. the output of `openssl rand -hex 24`")]


@rule("serve.keys_off_argv", ["serve_extra_args", "serve_extra_env", "serve_api_key", "serve_api_keys"])
def _serve_keys_off_argv(member):
    """No key on vLLM's command line (serve_extra_args --api-key, or --config when several keys reach vLLM through
    it) nor in serve_extra_env's VLLM_API_KEY (the compose file is world-readable)."""
    out = []
    args = member["serve_extra_args"]
    keys = member["serve_api_keys"]
    several = isinstance(keys, (list, tuple)) and len(keys) > 1
    if isinstance(args, (list, tuple)):
        flags = []
        for arg in args:
            flag = str(arg).split("=", 1)[0].replace("_", "-")
            if (flag == "--api-key" or (several and flag == "--config")) and flag not in flags:
                flags.append(flag)
        if flags:
            out.append(("serve_extra_args", "<holds %s>" % ", ".join(flags),
                        "puts %s on vLLM's command line, which every local user sees (`ps`) and vLLM logs" % " and ".join(flags),
                        "set serve_api_key or serve_api_keys instead (several keys reach vLLM through its --config file)"))
    env = member["serve_extra_env"]
    if isinstance(env, dict) and "VLLM_API_KEY" in env:
        out.append(("serve_extra_env", "<sets VLLM_API_KEY>", "sets VLLM_API_KEY, which would be written to the "
                    "world-readable compose file", "set serve_api_key (a 0600 file on rank 0 only) and remove it from "
                    "serve_extra_env"))
    return out


@rule("serve.mount_paths", list(SERVE_MOUNT_PATHS))
def _serve_mount_paths(member):
    """The directories serve bind-mounts or writes (the model cache, JIT caches, config, recipe) are absolute paths
    without colons, white space or control characters (a bind mount is `source:target`)."""
    out = []
    for var in SERVE_MOUNT_PATHS:
        value = member[var]
        if value is None or (isinstance(value, str) and MOUNT_PATH_RE.match(value)):
            continue
        out.append((var, value, "is not an absolute path without colons, white space or control characters (it becomes "
                    "a bind mount `source:target`)", "choose a plain absolute path, e.g. %s" % (
                        (member.specs.get(var) or {}).get("default") or "/var/lib/dspark/hf")))
    return out


@rule("serve.hf_cache_path", ["dspark_hf_cache"], covered_by="checkpoint.hf_cache")
def _serve_hf_cache_path(member):
    """The serve role alone: dspark_hf_cache, its model mount, is an absolute path without colons or white space
    (preflight says it through checkpoint.hf_cache)."""
    return [problem for problem in _checkpoint_hf_cache(member) if problem[2] != "the Hugging Face cache directory of every node"]


@rule("serve.jit_cache_outside_model_cache", ["serve_jit_cache_dir", "dspark_hf_cache"])
def _serve_jit_cache_outside(member):
    """serve_jit_cache_dir is not inside dspark_hf_cache (the NFS mode mounts the model cache read-only, and compiled
    kernels must not mix with the checkpoint the manifest covers)."""
    jit, cache = member["serve_jit_cache_dir"], member["dspark_hf_cache"]
    if not (isinstance(jit, str) and isinstance(cache, str) and jit.startswith("/") and cache.startswith("/")):
        return []
    if _inputs.inside(jit, cache):
        return [("serve_jit_cache_dir", jit, "is inside dspark_hf_cache=%s, which the NFS mode mounts read-only" % cache,
                 "choose a local directory outside it (default %s)" % (
                     (member.specs.get("serve_jit_cache_dir") or {}).get("default") or "/var/lib/dspark/jit-cache"))]
    return []


@rule("serve.image", ["serve_image", "dspark_image"], covered_by="inventory: dspark_image")
def _serve_image(member):
    """serve_image (default dspark_image) is set."""
    value = member["serve_image"]
    if isinstance(value, str) and value.strip():
        return []
    return [("serve_image", value or None, "the serving image", "set dspark_image (or serve_image) to the image, pinned by digest")]


# -- docker_runtime ------------------------------------------------------------------------------------------------

# The role's own tables (roles/docker_runtime/vars/main.yml: the Debian architecture names, the distributions' engine
# packages), read from there so that the rule and the role's install steps share one definition.
DOCKER_RUNTIME_VARS = os.path.join(COLLECTION_ROOT, "roles", "docker_runtime", "vars", "main.yml")
# A proxy value is written single-quoted into a systemd environment file: a quote or a line break would end the value
# or start a new variable (`%` and `$` are literal there).
_PROXY_RE = re.compile(r"^[^'\x00-\x1f\x7f]*\Z")
# An entry of dockerd's insecure-registries: HOST[:PORT] (a name, or an [IPv6] address) or an IPv4 CIDR, nothing else.
_REGISTRY_HOST = r"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])"
_REGISTRY_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
_REGISTRY_CIDR = r"([0-9]{1,3}\.){3}[0-9]{1,3}/([0-9]|[12][0-9]|3[0-2])"
REGISTRY_RE = re.compile(r"^(%s(:%s)?|%s)\Z" % (_REGISTRY_HOST, _REGISTRY_PORT, _REGISTRY_CIDR))


@functools.lru_cache(maxsize=1)
def docker_runtime_tables(path=DOCKER_RUNTIME_VARS):
    """(architecture -> Debian architecture, distribution -> its engine and compose packages) of the role's vars."""
    with open(path, encoding="utf-8") as handle:
        data = yaml.load(handle, Loader=SAFE_LOADER) or {}  # nosec B506: a safe loader
    return dict(data.get("_docker_runtime_deb_arch") or {}), dict(data.get("_docker_runtime_distribution_packages") or {})


def _facts(member):
    facts = member.raw("ansible_facts")
    return facts if isinstance(facts, dict) else {}


@rule("docker_runtime.platform", ["docker_runtime_package_source", "ansible_facts"])
def _docker_runtime_platform(member):
    """The node is Debian or Ubuntu (apt), of an architecture the role knows, and the distribution's own packages are
    known when docker_runtime_package_source is distribution. Needs the node's facts: the role's play gathers them;
    preflight gathers none and checks what a fact cache holds."""
    facts = _facts(member)
    if not facts:
        return []
    arches, packages = docker_runtime_tables()
    out = []
    family, arch, distribution = facts.get("os_family"), facts.get("architecture"), facts.get("distribution")
    if family is not None and family != "Debian":
        out.append(("ansible_facts.os_family", family, "is not Debian: the role installs Docker with apt (Debian, Ubuntu, "
                    "DGX OS)", "run docker_runtime on Debian or Ubuntu nodes only, or install the engine another way and "
                    "skip the role (--skip-tags docker_runtime)"))
    if arch is not None and arch not in arches:
        out.append(("ansible_facts.architecture", arch, "has no Debian architecture name known to the role (known: %s)"
                    % ", ".join(sorted(arches)), "run the role on arm64 (DGX Spark) or amd64 nodes"))
    source = member["docker_runtime_package_source"]
    if source == "distribution" and distribution is not None and distribution not in packages:
        out.append(("docker_runtime_package_source", source, "has no known engine packages on %s (ansible_facts.distribution; "
                    "known: %s)" % (distribution, ", ".join(sorted(packages))),
                    "set docker_runtime_package_source: docker (Docker's own apt repository)"))
    return out


@rule("docker_runtime.image", ["dspark_image"], covered_by="inventory: dspark_image")
def _docker_runtime_image(member):
    """dspark_image, the image every node pulls or loads, is set (preflight says it through the inventory rules)."""
    value = member["dspark_image"]
    if isinstance(value, str) and value.strip():
        return []
    return [("dspark_image", value or None, "the serving image every node pulls or loads",
             "set dspark_image to the image, pinned by digest (group_vars)")]


@rule("docker_runtime.proxy", ["docker_runtime_proxy"])
def _docker_runtime_proxy(member):
    """docker_runtime_proxy's values hold no single quote, line break or other control character (they are written
    single-quoted into a systemd environment file); the values are never shown (credentials)."""
    proxy = member["docker_runtime_proxy"]
    if not isinstance(proxy, dict):
        return []  # the type rule says so
    bad = [str(key) for key, value in proxy.items() if value is not None and not _PROXY_RE.match(str(value))]
    if not bad:
        return []
    return [("docker_runtime_proxy", HIDDEN, "has %s with a single quote, a line break or another control character (the "
             "value is not shown: it may hold a password)" % ", ".join(bad), "percent-encode those characters in the URL "
             "(' is %27)")]


@rule("docker_runtime.insecure_registries", ["docker_runtime_insecure_registries"])
def _docker_runtime_insecure_registries(member):
    """Each entry of docker_runtime_insecure_registries is HOST:PORT, a bare HOST or an IPv4 CIDR, with no scheme, path
    or space (dockerd refuses to start on an entry it cannot parse, and a scheme or a path never matches a pull)."""
    value = member["docker_runtime_insecure_registries"]
    if not isinstance(value, (list, tuple)):
        return []  # the type rule says so
    bad = [str(entry) for entry in value if not REGISTRY_RE.match(str(entry))]
    if not bad:
        return []
    return [("docker_runtime_insecure_registries", list(value), "holds %s: each entry must be HOST:PORT (e.g. "
             "10.231.0.250:5000 or registry.lab:5000, port 1-65535), a bare HOST or an IPv4 CIDR, with no scheme (http://), "
             "path or spaces" % ", ".join(repr(entry) for entry in bad),
             "write the registry as it appears in dspark_image before the first '/'")]


@functools.lru_cache(maxsize=16)
def _archive_images(path, size, mtime):  # pylint: disable=unused-argument  # size and mtime key the cache
    """The number of images a `docker save` archive holds (its manifest.json), else the reason it cannot be read."""
    try:
        with tarfile.open(path, "r:*") as archive:
            handle = archive.extractfile("manifest.json")
            manifest = json.load(handle) if handle is not None else None
    except (OSError, tarfile.TarError, KeyError, ValueError) as error:
        return "%s: %s" % (type(error).__name__, str(error).strip() or "unreadable")
    return len(manifest) if isinstance(manifest, list) else "its manifest.json is not a list of images"


@rule("docker_runtime.image_tarball", ["docker_runtime_image_source", "docker_runtime_image_tarball"])
def _docker_runtime_image_tarball(member):
    """With docker_runtime_image_source tarball, docker_runtime_image_tarball is a readable `docker save` archive of one
    image on the controller (its manifest.json is read here, before any node changes)."""
    if member["docker_runtime_image_source"] != "tarball":
        return []
    path = member["docker_runtime_image_tarball"]
    fix = "create it with `docker save -o FILE <dspark_image>` and give its controller path"
    if not isinstance(path, str) or not path.strip():
        return [("docker_runtime_image_tarball", None, "docker_runtime_image_source is tarball", fix)]
    try:
        stat = os.stat(path)
        found = _archive_images(path, stat.st_size, stat.st_mtime)
    except OSError as error:
        found = "%s: %s" % (type(error).__name__, error.strerror or error)
    if found == 1:
        return []
    detail = "holds %d images" % found if isinstance(found, int) else found
    return [("docker_runtime_image_tarball", path, "is not a readable `docker save` archive of one image on the "
             "controller (%s)" % detail, fix)]


# -- fabric --------------------------------------------------------------------------------------------------------

# Preflight runs these rules through inventory_rules.check_fabric (with its MTU limits; a finding on every member said
# once, for the group): covered_by keeps them out of its run of every role's rules.
FABRIC_COVERED = "inventory: fabric"


def fabric_inputs(member):
    """The fabric plan's inputs (plugin_utils._fabric_plan) of one member, as roles/fabric/tasks/plan_inputs.yml builds
    them: the inventory's values, the role's defaults, and the group model."""
    group = member.group
    views = {host: other.values for host, other in group.members.items()}
    model = _group_model.group_model(group.name, {group.name: list(group.members)}, views, member.host)
    inputs = {key: member[var] for key, var in _fabric_plan.INPUT_VARS.items()}
    for key in ("secondary_interface", "secondary_cidr", "secondary_address"):
        inputs[key] = inputs[key] if inputs[key] is not None else ""
    inputs["mtu"] = 9000 if inputs["mtu"] is None else inputs["mtu"]
    inputs.update(host=member.host, group=group.name, model=model)
    return inputs


@rule("fabric.group", ["dspark_fabric_mtu", "dspark_fabric_cidr", "dspark_fabric_address", "preflight_mtu_min",
                       "preflight_mtu_max"], covered_by=FABRIC_COVERED)
def _fabric_group(member):
    """The group's fabric: dspark_fabric_mtu within preflight_mtu_min..preflight_mtu_max, dspark_fabric_cidr an IPv4
    network, this member's dspark_fabric_address an address of it, its own in the group (_fabric_plan.group_findings)."""
    low = _inputs.as_int(member["preflight_mtu_min"])
    high = _inputs.as_int(member["preflight_mtu_max"])
    found = _fabric_plan.group_findings(fabric_inputs(member), _fabric_plan.MTU_MIN if low is None else low,
                                        _fabric_plan.MTU_MAX if high is None else high)
    return [finding[1:] for finding in found if finding[0] == member.host or str(finding[0]).startswith("group ")]


@rule("fabric.node", list(_fabric_plan.INPUT_VARS.values()), covered_by=FABRIC_COVERED)
def _fabric_node(member):
    """This node's fabric port: dspark_fabric_interface a Linux interface name, dspark_fabric_hca in NCCL_IB_HCA syntax,
    the optional second interface in its own subnet (_fabric_plan.node_findings)."""
    return [finding[1:] for finding in _fabric_plan.node_findings(fabric_inputs(member))]


@rule("fabric.management", ["dspark_fabric_address", "dspark_mgmt_address", "ansible_host"], covered_by=FABRIC_COVERED)
def _fabric_management(member):
    """dspark_fabric_address is not the management address (dspark_mgmt_address, else ansible_host, else the host's
    name): the fabric is the ConnectX link's own network."""
    return [finding[1:] for finding in management_findings(member.host, member.raw("dspark_fabric_address"),
                                                           member.raw("dspark_mgmt_address"), member.raw("ansible_host"))]


def management_findings(host, address, mgmt_address, ansible_host):
    """[(host, variable, value, problem, fix)] when the fabric address equals the management address."""
    mgmt = mgmt_address or ansible_host or host
    if address is None or not str(address).strip() or str(mgmt).strip() != str(address).strip():
        return []
    var = "dspark_mgmt_address" if mgmt_address else "ansible_host"
    return [(host, "dspark_fabric_address", address, "equals the management address (%s=%s)" % (var, mgmt),
             "the fabric address is the ConnectX link's own address; Ansible and the router use the management network")]


# -- router (the hosts of group dspark_router, outside the serving groups) ------------------------------------------

class RouterHost:
    """A router host: its effective inputs, and the fleet as the router sees it (plugin_utils._router_plan)."""

    def __init__(self, host, values, specs, groups, hostvars):
        self.host = host
        self.values = values
        self.specs = specs
        self.groups = groups or {}
        self.hostvars = hostvars
        self._plan = None

    def raw(self, var):
        return self.values.get(var)

    def __getitem__(self, var):
        value = self.values.get(var)
        if value is not None or var == "router_groups":  # router_groups unset: every serving group
            return value
        return (self.specs.get(var) or {}).get("default")

    def failed(self, var):
        return isinstance(self.values.get(var), TemplateFailure)

    @property
    def plan(self):
        if self._plan is None:
            routed = self["router_groups"]
            self._plan = _router_plan.plan(self.groups, self.hostvars, routed if isinstance(routed, (list, tuple)) else None,
                                           str(self["router_served_model_name"] or ""))
        return self._plan


_SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+\Z")
_ADDRESS_RE = re.compile(r"^[A-Za-z0-9_.:-]+\Z")
_LOOPBACK_ADDRESS_RE = re.compile(r"^(127\.|localhost$|::1$|$)")
_MODEL_RE = re.compile(r"^[A-Za-z0-9_.:/@+-]+\Z")
_HEADER_RE = re.compile(r"^[A-Za-z0-9-]+\Z")
ROUTER_PORTS = ("router_port", "router_tls_port", "router_stats_port", "router_metrics_port")
ROUTER_HEALTH = ("router_health_interval", "router_health_fast_interval", "router_health_timeout", "router_health_fall",
                 "router_health_rise", "router_retries")
ROUTER_LIMITS = ("router_key_rate_limit", "router_key_concurrency_limit", "router_max_body_bytes",
                 "router_unauthenticated_rate")
# Strings written into haproxy.cfg or the systemd drop-in: each must be one word of a strict shape (no line break, space
# or quote can start another directive).
ROUTER_WORDS = {
    "router_metrics_address": (_router_plan.WORDS["router_metrics_address"], "an IP address or host name",
                               "an IPv4 or IPv6 address or a host name, e.g. 127.0.0.1"),
    "router_frontend_name": (_router_plan.NAME_RE, "a name", "letters, digits and _ . - only"),
    "router_backend_name": (_router_plan.NAME_RE, "a name", "letters, digits and _ . - only"),
    "router_bind_address": (_router_plan.BIND_RE, "an address to bind to", "an IPv4 or IPv6 address, a host name, * or \"\""),
    "router_admin_socket": (_router_plan.FILE_RE, "an absolute path", "an absolute path of letters, digits and _ . / - only"),
    "router_state_file": (_router_plan.FILE_RE, "an absolute path", "an absolute path of letters, digits and _ . / - only"),
    "router_tls_dir": (_router_plan.FILE_RE, "an absolute path", "an absolute path of letters, digits and _ . / - only"),
}


def _tls(router):
    return bool(router["router_tls_certificate"]) and bool(router["router_tls_key"])


@rule("router.groups", ["router_groups"])
def _router_groups(router):
    """Every routed group is a group of the inventory with exactly one head (dspark_rank 0), and its name is usable as
    an HAProxy server name."""
    out = []
    shown = list(router.plan["heads"])  # router_groups, or every serving group when it is unset
    for group, heads in router.plan["heads"].items():
        if group not in router.groups:
            out.append(("router_groups", shown, "names %s, which is not a group of the inventory" % group,
                        "name serving groups (children of dspark) only, or leave router_groups unset for all of them"))
        elif len(heads) != 1:
            out.append(("router_groups", shown, "names group %s, which has %d hosts with dspark_rank 0 (%s)"
                        % (group, len(heads), ", ".join(heads) or "none"), "give group %s exactly one head (dspark_rank: 0)" % group))
        if not _SERVER_NAME_RE.match(str(group)):
            out.append(("router_groups", shown, "names %r, which is not usable as an HAProxy server name" % group,
                        "rename the group: letters, digits, _ . - only"))
    return out


@rule("router.heads", ["router_groups"])
def _router_heads(router):
    """Each routed head's management address (dspark_mgmt_address, else ansible_host) is a host name or an address the
    router can reach (not loopback), and its dspark_api_port is a port."""
    out = []
    for server in router.plan["servers"]:
        address = server["address"]
        var = "dspark_mgmt_address"
        if _LOOPBACK_ADDRESS_RE.match(address):
            out.append((var, address, "of %s (head of %s) is not reachable from a router (dspark_mgmt_address, else ansible_host)"
                        % (server["head"], server["name"]), "set dspark_mgmt_address on %s to the address the router reaches "
                        "its API on" % server["head"]))
        elif not _ADDRESS_RE.match(address):
            out.append((var, address, "of %s (head of %s) is not a host name or an address" % (server["head"], server["name"]),
                        "set dspark_mgmt_address on %s to its management address" % server["head"]))
        if not 1 <= server["port"] <= 65535:
            out.append(("dspark_api_port", server["port"], "of %s (head of %s) is not a port" % (server["head"], server["name"]),
                        "set the API port of group %s (1-65535)" % server["name"]))
    return out


@rule("router.model", ["router_groups", "router_served_model_name"])
def _router_model(router):
    """The routed groups serve one model name (one endpoint serves one model), and it is a plain model name."""
    out = []
    servers = router.plan["servers"]
    if len({s["model"] for s in servers}) > 1:
        out.append(("serve_served_model_name", ", ".join("%s=%s" % (s["name"], s["model"]) for s in servers),
                    "differs between the routed groups: one endpoint serves one model",
                    "serve the same name everywhere, or route a subset with router_groups"))
    model = router.plan["model"]
    if not _MODEL_RE.match(str(model)):
        var = "router_served_model_name" if router["router_served_model_name"] else "serve_served_model_name"
        out.append((var, model, "is not a plain served model name", "letters, digits and _ . : / @ + - only"))
    return out


@rule("router.tls", ["router_tls_certificate", "router_tls_key"])
def _router_tls_pair(router):
    """router_tls_certificate and router_tls_key are both set (TLS) or both empty."""
    certificate, key = bool(router["router_tls_certificate"]), bool(router["router_tls_key"])
    if certificate == key:
        return []
    missing = "router_tls_key" if certificate else "router_tls_certificate"
    return [(missing, None, "%s is set without it" % ("router_tls_certificate" if certificate else "router_tls_key"),
             "set both (PEM) for TLS, or neither")]


@rule("router.listeners", list(ROUTER_PORTS) + ["router_tls_certificate", "router_tls_key"])
def _router_listeners(router):
    """The listener ports are ports (0-65535), something listens (router_port, or TLS), TLS and the stats page have
    their own ports."""
    out = _ranges(router, {var: _int_range(0, 65535) for var in ROUTER_PORTS})
    if out:
        return out
    port, tls_port, stats_port, metrics_port = (_inputs.as_int(router[var]) for var in ROUTER_PORTS)
    if None in (port, tls_port, stats_port, metrics_port):
        return []  # the type rule says so
    if port == 0 and not _tls(router):
        out.append(("router_port", 0, "turns plain HTTP off, and TLS is not configured: nothing would listen",
                    "set router_port, or router_tls_certificate and router_tls_key"))
    if _tls(router) and port == tls_port:
        out.append(("router_tls_port", tls_port, "is router_port too", "give TLS its own port"))
    if stats_port > 0 and stats_port in (port, tls_port):
        out.append(("router_stats_port", stats_port, "is also a listener port (router_port or router_tls_port)",
                    "give the stats page its own port, or 0 for none"))
    if metrics_port > 0 and metrics_port in (port, tls_port, stats_port):
        out.append(("router_metrics_port", metrics_port, "is also another listener's port (router_port, router_tls_port "
                    "or router_stats_port)", "give the exporter its own port, or 0 for none"))
    return out


@rule("router.metrics_sources", ["router_metrics_allowed_cidrs", "router_metrics_address"])
def _router_metrics_sources(router):
    """router_metrics_allowed_cidrs is a list of IP addresses or networks (HAProxy's ACL reads them); a list on a
    loopback-only exporter lets nobody in."""
    cidrs = router["router_metrics_allowed_cidrs"]
    if cidrs is None:
        return []
    if not isinstance(cidrs, (list, tuple)):
        return [("router_metrics_allowed_cidrs", cidrs, "is not a list", "give a list of addresses or networks, "
                 "e.g. [\"10.0.0.5/32\"]")]
    out = []
    for cidr in cidrs:
        try:
            ipaddress.ip_network(str(cidr), strict=False)
        except ValueError:
            out.append(("router_metrics_allowed_cidrs", cidr, "is not an IP address or network",
                        "give addresses or networks such as 10.0.0.5/32 or fd00::/64"))
    address = router["router_metrics_address"]
    if cidrs and not out and isinstance(address, str) and _LOOPBACK_ADDRESS_RE.match(address):
        out.append(("router_metrics_allowed_cidrs", list(cidrs), "lets hosts read the exporter, but "
                    "router_metrics_address=%s is loopback: they cannot reach it" % address,
                    "set router_metrics_address to the router's management address, or remove the CIDRs"))
    return out


@rule("router.health", list(ROUTER_HEALTH))
def _router_health(router):
    """The health check's intervals, timeout, fall and rise, and router_retries, are at least 1."""
    return _ranges(router, {var: _int_range(1) for var in ROUTER_HEALTH})


@rule("router.group_header", ["router_group_header"])
def _router_group_header(router):
    """router_group_header is a header name (letters, digits, -) or empty."""
    value = router["router_group_header"]
    if not value or _HEADER_RE.match(str(value)):
        return []
    return [("router_group_header", value, "is not a header name", "letters, digits and - only, or \"\" for none")]


@rule("router.health_path", ["router_health_path"])
def _router_health_path(router):
    """router_health_path is a plain absolute path (safe in haproxy.cfg) outside /v1: the check sends no key, and vLLM
    asks one for every /v1 path of a group with keys."""
    value = router["router_health_path"]
    if not isinstance(value, str) or not _router_plan.PATH_RE.match(value):
        return [("router_health_path", value, "is not a plain absolute path (letters, digits and _ . - in its segments)",
                 "use vLLM's /health")]
    if value == "/v1" or value.startswith("/v1/"):
        return [("router_health_path", value, "is under /v1: the health check sends no API key, and a group with keys "
                 "answers 401 there", "use vLLM's /health (no key; 503 once the engine core is dead)")]
    return []


@rule("router.api_key", ["router_api_key"])
def _router_api_key(router):
    """router_api_key is retired (issue #26): the health check sends no key, so the router needs none."""
    if not router["router_api_key"]:
        return []
    return [("router_api_key", HIDDEN, "is set, but the router no longer uses it: its health check (GET "
             "router_health_path, vLLM's /health) sends no API key",
             "remove router_api_key from the router's inventory (and the key from the router host's vault)")]


@rule("router.allowed_paths", ["router_allowed_paths"])
def _router_allowed_paths(router):
    """router_allowed_paths is a non-empty list of plain absolute paths (letters, digits and _ . - segments, no empty or
    dot-only segment, no %, space or quote): each is written into haproxy.cfg and compared byte for byte."""
    value = router["router_allowed_paths"]
    if not isinstance(value, (list, tuple)):
        return []  # the type rule says so
    if not value:
        return [("router_allowed_paths", [], "is empty: the router would forward no request",
                 "list the API paths to forward, e.g. /v1/chat/completions, or leave it unset for the OpenAI API paths")]
    bad = [path for path in value if not isinstance(path, str) or not _router_plan.PATH_RE.match(path)]
    if bad:
        return [("router_allowed_paths", list(value), "holds %s, which %s not a plain absolute path"
                 % (", ".join(repr(path) for path in bad), "is" if len(bad) == 1 else "are"),
                 "exact paths such as /v1/chat/completions: segments of letters, digits and _ . -, no //, .., %, "
                 "space or quote (the request's path must equal an entry byte for byte)")]
    return []


@rule("router.limits", list(ROUTER_LIMITS))
def _router_limits(router):
    """The per-key limits and the body bound are whole numbers, at least 0 (0: no limit)."""
    return _ranges(router, {var: _int_range(0) for var in ROUTER_LIMITS})


@rule("router.config_words", list(ROUTER_WORDS))
def _router_config_words(router):
    """The names, paths and bind address written into haproxy.cfg and the systemd drop-in are one word each, of a
    strict shape: no line break, space or quote can add a directive."""
    out = []
    for var, (pattern, what, fix) in ROUTER_WORDS.items():
        value = router[var]
        if value is None:
            continue
        if not isinstance(value, str) or not pattern.match(value):
            out.append((var, value, "is not %s that can be written into haproxy.cfg safely" % what, fix))
    return out
