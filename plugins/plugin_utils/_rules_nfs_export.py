# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nfs_export role's input rules (private; groups in NFS mode, the exporting node is the node of nfs_export_rank).

Registered in _rules_base.RULES, run through plugin_utils._role_rules. Pure Python, no Ansible imports.
"""

from __future__ import annotations

import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _inputs, _nfs_plan
from ansible_collections.dspark.cluster.plugins.plugin_utils._rules_base import MOUNT_PATH_RE, rule
from ansible_collections.dspark.cluster.plugins.plugin_utils._rules_checkpoint import mode

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
    return mode(member) == "nfs" or member.group.running == "nfs_export"


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
