# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint role's input rules (private; registered in _rules_base.RULES, run through plugin_utils._role_rules).

Also what other modules read: the group's checkpoint mode (``mode``, the nfs_export rules' too), the modes
(inventory_rules), the revision policy, and the rsync and URL patterns the playbook tests hold to. Pure Python, no
Ansible imports.
"""

from __future__ import annotations

import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _inputs
from ansible_collections.dspark.cluster.plugins.plugin_utils._rules_base import HIDDEN, MOUNT_PATH_RE, ranges, rule

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


def mode(member):
    return str(member["dspark_checkpoint_mode"] or "")


def _cache(member):
    value = member["dspark_hf_cache"]
    return value.rstrip("/") if isinstance(value, str) and value.startswith("/") else None


@rule("checkpoint.mode", ["dspark_checkpoint_mode"])
def _checkpoint_mode(member):
    """dspark_checkpoint_mode is nfs or scp."""
    if mode(member) not in CHECKPOINT_MODES:
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
    if mode(member) != "scp":
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
    if mode(member) != "scp" or not isinstance(value, (list, tuple)):
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
    if mode(member) in CHECKPOINT_MODES and not member.group.address(member.host):
        return [("dspark_fabric_address", None, "the checkpoint is copied or mounted over the fabric",
                 "set this node's fabric address in the inventory")]
    return []


@rule("checkpoint.scp_user", ["checkpoint_scp_user", "dspark_checkpoint_mode"])
def _checkpoint_scp_user(member):
    """SCP mode: checkpoint_scp_user is an unprivileged user name (never root)."""
    value = member["checkpoint_scp_user"]
    if mode(member) != "scp" or (isinstance(value, str) and _USER_RE.match(value) and value != "root"):
        return []
    return [("checkpoint_scp_user", value, "is not an unprivileged user name (root would let rrsync receive as root)",
             "use a system account name such as dspark-ckpt")]


SCP_NUMBERS = ("checkpoint_scp_streams", "checkpoint_rsync_timeout", "checkpoint_scp_connect_timeout",
               "checkpoint_scp_alive_interval", "checkpoint_scp_retries", "checkpoint_scp_retry_delay")


@rule("checkpoint.scp_numbers", SCP_NUMBERS + ("dspark_checkpoint_mode",))
def _checkpoint_scp_numbers(member):
    """SCP mode: streams 1-10 (sshd's MaxStartups), timeouts > 0, keep-alive, retries and delay >= 0 (_spec_ranges)."""
    return ranges(member, SCP_NUMBERS) if mode(member) == "scp" else []


@rule("checkpoint.scp_cipher", ["checkpoint_scp_cipher", "dspark_checkpoint_mode"])
def _checkpoint_scp_cipher(member):
    """SCP mode: checkpoint_scp_cipher is a comma-separated list of OpenSSH cipher names."""
    value = member["checkpoint_scp_cipher"]
    if mode(member) != "scp" or (isinstance(value, str) and _CIPHER_RE.match(value)):
        return []
    return [("checkpoint_scp_cipher", value, "is not a comma-separated list of OpenSSH cipher names",
             "for example aes128-gcm@openssh.com,chacha20-poly1305@openssh.com")]


@rule("checkpoint.nfs_source", ["dspark_fabric_address", "checkpoint_source_rank", "dspark_checkpoint_mode"],
      covered_by="fabric: dspark_fabric_address")
def _checkpoint_nfs_source(member):
    """NFS mode: the source (the NFS server) has a fabric address."""
    source = member.group.host_of_rank(member["checkpoint_source_rank"])
    if mode(member) != "nfs" or source is None or member.group.address(source):
        return []
    return [("dspark_fabric_address", None, "on the checkpoint source %s, the NFS server's address" % source,
             "set dspark_fabric_address on %s in the inventory" % source)]


@rule("checkpoint.nfs_vers", ["checkpoint_nfs_vers", "dspark_checkpoint_mode"])
def _checkpoint_nfs_vers(member):
    """NFS mode: checkpoint_nfs_vers is 4, 4.0, 4.1 or 4.2 (the export serves NFSv4 only)."""
    value = member["checkpoint_nfs_vers"]
    if mode(member) != "nfs" or _NFS_VERS_RE.match(str(value)):
        return []
    return [("checkpoint_nfs_vers", value, "is not an NFSv4 version (the export serves NFSv4 only)", "use 4.2, 4.1, 4.0 or 4")]


NFS_NUMBERS = ("checkpoint_nfs_nconnect", "checkpoint_nfs_rsize", "checkpoint_nfs_wsize", "checkpoint_nfs_timeo",
               "checkpoint_nfs_probe_timeout")


@rule("checkpoint.nfs_numbers", NFS_NUMBERS + ("dspark_checkpoint_mode",))
def _checkpoint_nfs_numbers(member):
    """NFS mode: nconnect 1-16 (the kernel's limit), rsize/wsize >= 4096, timeo and the probe's timeout > 0 (_spec_ranges)."""
    return ranges(member, NFS_NUMBERS) if mode(member) == "nfs" else []


@rule("checkpoint.nfs_options", ["checkpoint_nfs_extra_options", "dspark_checkpoint_mode"])
def _checkpoint_nfs_options(member):
    """NFS mode: checkpoint_nfs_extra_options holds none of the options the role sets from its variables."""
    value = member["checkpoint_nfs_extra_options"]
    if mode(member) != "nfs" or not isinstance(value, (list, tuple)):
        return []
    bad = [str(o) for o in value if NFS_MOUNT_FORBIDDEN_RE.match(str(o))]
    if not bad:
        return []
    return [("checkpoint_nfs_extra_options", list(value), "contains %s, which the role sets from its own variables (ro, nosuid "
             "and nodev always)" % ", ".join(bad), "remove them and set checkpoint_nfs_* instead")]


DOWNLOAD_NUMBERS = ("checkpoint_download_timeout", "checkpoint_download_probe_timeout", "checkpoint_download_retries",
                    "checkpoint_download_retry_delay")


@rule("checkpoint.download_numbers", ("checkpoint_download",) + DOWNLOAD_NUMBERS)
def _checkpoint_download_numbers(member):
    """Download: its timeouts > 0, its retries and their delay >= 0 (_spec_ranges)."""
    return ranges(member, DOWNLOAD_NUMBERS) if _inputs.is_true(member["checkpoint_download"]) else []


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
