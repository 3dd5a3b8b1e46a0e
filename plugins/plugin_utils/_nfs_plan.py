# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nfs_export role's network rules (issue #13 point 4): who may mount the cache and where nfsd listens.

One definition for the role (filter ``dspark.cluster.nfs_export_problems``, ``roles/nfs_export/tasks/validate.yml``)
and preflight (``plugins/action/preflight_validate.py``). Each rule returns (where, variable, value, problem, fix),
the collection's one-line format (``_findings.message``). Pure Python (stdlib ``ipaddress``), no I/O.
"""

from __future__ import annotations

import ipaddress

from ansible_collections.dspark.cluster.plugins.plugin_utils import _fabric_plan

WILDCARDS = "*?[@"


def fabric_network(cidr):
    """The group's fabric network (dspark_fabric_cidr, host bits allowed), else None (the fabric rules report why)."""
    return _fabric_plan.loose_net("" if cidr is None else str(cidr).strip())


def syntax_problem(client):
    """Why one nfs_export_clients entry cannot be written into exports(5) as one client (None when it can)."""
    raw = str(client)
    text = raw.strip()
    if not text:
        return "holds an empty entry"
    if text != raw or any(c.isspace() or ord(c) < 32 or ord(c) == 127 or c in '(),"#\\' for c in text):
        return ("holds %r, not one address or network: white space, a line break or exports(5) syntax would add clients or "
                "options" % raw)
    return None


def client_problem(client, network):
    """Why one nfs_export_clients entry may not mount the export (None when it is inside ``network``)."""
    found = syntax_problem(client)
    if found:
        return found
    text = str(client).strip()
    if any(c in text for c in WILDCARDS):
        return "holds %r, a wildcard or netgroup that exports(5) matches against host names" % text
    if text in ("0.0.0.0/0", "::/0"):
        return "holds %r, which opens the export to every address" % text
    try:
        client_net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return ("holds %r, a host name: exportfs resolves it through DNS when it exports, so the name, not the fabric, "
                "decides who mounts" % text)
    if client_net.version != 4:
        return "holds %r, an IPv6 client: the fabric network %s is IPv4" % (text, network)
    if client_net.prefixlen < network.prefixlen and client_net.supernet_of(network):
        return "holds %r, wider than the fabric network %s (dspark_fabric_cidr)" % (text, network)
    if not client_net.subnet_of(network):
        return "holds %r, outside the fabric network %s (dspark_fabric_cidr)" % (text, network)
    return None


def client_findings(where, clients, cidr, peer_addresses=()):
    """nfs_export_clients against the group's fabric network: every entry an address or network inside it.

    ``where`` is the exporting node (the role validates there); ``clients`` the list as given (a string is one
    entry: the type check reports it); ``cidr`` dspark_fabric_cidr. Nothing when the CIDR itself is not a network:
    the fabric rules say so, once.
    """
    network = fabric_network(cidr)
    if clients is None:
        return []
    entries = [clients] if isinstance(clients, (str, bytes)) else list(clients)
    if network is None:  # the fabric rules say why; what would break the exports file is said here
        return [(where, "nfs_export_clients", clients if isinstance(clients, str) else list(entries), problem,
                 "list only the fabric addresses of the group's other members, one per entry")
                for problem in filter(None, (syntax_problem(entry) for entry in entries))]
    fix = ("list only the fabric addresses of the group's other members (the default%s) or networks inside %s"
           % (": " + ", ".join(peer_addresses) if peer_addresses else "", network))
    if not entries:
        return [(where, "nfs_export_clients", [], "lets no client mount the export (an empty list is never opened to *)", fix)]
    out = []
    for entry in entries:
        problem = client_problem(entry, network)
        if problem:
            out.append((where, "nfs_export_clients", clients if isinstance(clients, str) else list(entries), problem, fix))
    return out


def bind_findings(where, address, cidr):
    """nfsd listens on the exporting node's fabric address only: it must be an address of the fabric network.

    For the role run alone; preflight leaves this to the fabric rules (``_fabric_plan.group_findings``), which report
    the same address once.
    """
    network = fabric_network(cidr)
    text = "" if address is None else str(address).strip()
    try:
        parsed = ipaddress.IPv4Address(text)
    except ValueError:
        parsed = None
    if parsed is None or (network is not None and parsed not in network):
        return [(where, "dspark_fabric_address", text or None,
                 "is not an address of the fabric network %s, so nfsd cannot be bound to it" % (network or cidr),
                 "set this node's fabric address (inside dspark_fabric_cidr); nfsd listens there only")]
    return []


def problems(where, clients, cidr, bind_address, peer_addresses=()):
    """Every network rule of the export, for the role's validation."""
    return client_findings(where, clients, cidr, peer_addresses) + bind_findings(where, bind_address, cidr)


# -- the checkpoint role's NFS client: what a failed test mount or verification means (roles/checkpoint/tasks/nfs.yml) --

def mount_fix(stdout, rc, source, export_dir, group, address, source_address):
    """The fix for a failed test mount of the export, from the probe's output and exit status (2: mounted, but the model
    is not visible through it): refused or not exported, the checkpoint missing on the source, else the server or the
    link is down."""
    text = "" if stdout is None else str(stdout)
    if "access denied" in text or "No such file" in text:
        return ("the server refuses this node or does not export %s: run playbooks/nfs_export.yml for %s and check that %s "
                "is in nfs_export_clients and that dspark_hf_cache is the same on both nodes (exportfs -v on %s)."
                % (export_dir, group, address or "this node", source))
    if str(rc).strip() == "2":
        return "download the checkpoint into %s on %s, or correct dspark_hf_cache." % (export_dir, source)
    return ("start the NFS server on %s (systemctl start nfs-server, or run playbooks/nfs_export.yml) and check the fabric "
            "link (ping %s) and that TCP port 2049 is open there." % (source, source_address))


def verify_fix(msg, source, model_dir):
    """The fix for a checkpoint that the mount shows differently from the manifest: files the squashed clients cannot
    read, else a snapshot that changed on the source since its manifest was built."""
    if "ermission" in ("" if msg is None else str(msg)):
        return ("the squashed clients cannot read some files: on %s run chmod -R o+rX %s, or run playbooks/nfs_export.yml "
                "with nfs_export_fix_permissions: true." % (source, model_dir))
    return ("the snapshot on %s changed since its manifest was built (a download in progress?): let it finish and run the "
            "playbook again." % source)
