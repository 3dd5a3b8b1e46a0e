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
