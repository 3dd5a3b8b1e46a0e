# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several routers behind one service address (private; issue #42, docs/design-router-ha.md).

VRRP by keepalived between the hosts of group dspark_router, unicast to each other over the management network: the
address (router_vip) lives on one router at a time and moves when that router, its HAProxy or its link dies. HAProxy
listens for the API on that address only, so one router takes the requests at a time and the per-key limits are
counted in one place; HAProxy's peers protocol copies its stick tables to the other routers, so the limits hold
after the address moves. Pure Python, no Ansible imports: ``hostvars`` is any mapping of host -> mapping of variables.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_model

# keepalived's VRRPv2 simple password: at most 8 characters, written into keepalived.conf between double quotes.
AUTH_PASS_RE = re.compile(r'^[A-Za-z0-9_.:+=@%,/-]{1,8}\Z')
INTERFACE_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}\Z")
# Priorities when none is set: the first router of the inventory the highest (it takes the address first).
FIRST_PRIORITY = 150
PRIORITY_STEP = 10
# This router's health, run by keepalived every second (roles/router/templates/dspark-router-check.j2): its HAProxy
# answers on the runtime API and sees at least one serving group up. A router cut off from the heads (its checks all
# failed) hands the address on instead of answering 503; with every group down no router holds it.
CHECK_SCRIPT = "/usr/local/sbin/dspark-router-check"


def routers(groups):
    """The hosts of group dspark_router, in inventory order."""
    return list((groups or {}).get("dspark_router") or [])


def mgmt_address(hostvars, host):
    hvars = _group_model.host_vars(hostvars, host)
    return str(_group_model.get(hvars, "dspark_mgmt_address", _group_model.get(hvars, "ansible_host", host)))


def vip(value):
    """router_vip as an ipaddress.IPv4Interface, or None when it is not an IPv4 address with a prefix length."""
    if not isinstance(value, str) or "/" not in value:
        return None
    try:
        iface = ipaddress.ip_interface(value)
    except ValueError:
        return None
    return iface if iface.version == 4 and iface.network.prefixlen < 32 else None


def priorities(hostvars, hosts):
    """host -> its VRRP priority: router_vrrp_priority where set on the host (not 0), else 150, 140, ... in inventory
    order (never below 1)."""
    out = {}
    for index, host in enumerate(hosts):
        given = _group_model.as_int(_group_model.get(_group_model.host_vars(hostvars, host), "router_vrrp_priority", 0))
        out[host] = given if given else max(1, FIRST_PRIORITY - PRIORITY_STEP * index)
    return out


def problems(settings, host, groups, hostvars):
    """The VRRP settings' problems on one router, as (variable, value, problem, fix); [] when router_vip is empty and
    this is the only router. ``settings``: router_vip, router_vrrp_interface, router_vrrp_router_id,
    router_vrrp_auth_pass, router_vrrp_advert_interval, router_peers_port, router_bind_address (as the role reads them).
    """
    hosts = routers(groups)
    value = settings.get("router_vip") or ""
    out = []
    if not value:
        if len(hosts) > 1:
            out.append(("router_vip", "", "is empty, and group dspark_router has %d hosts (%s): each would be an endpoint "
                        "of its own, and every per-key limit would let through that many times its value"
                        % (len(hosts), ", ".join(hosts)),
                        "set router_vip to one free address of the routers' management network, with its prefix "
                        "length (e.g. 10.0.0.200/24), for the group dspark_router"))
        return out
    address = vip(value)
    if address is None:
        return [("router_vip", value, "is not an IPv4 address with its prefix length",
                 "give the service address as ADDRESS/PREFIX, e.g. 10.0.0.200/24")]
    by_host = dict((h, mgmt_address(hostvars, h)) for h in hosts)
    for other, addr in by_host.items():
        try:
            inside = ipaddress.ip_address(addr) in address.network
        except ValueError:
            out.append(("dspark_mgmt_address", addr, "of router %s is not an IP address: keepalived sends VRRP to its "
                        "peers' addresses" % other, "set dspark_mgmt_address on %s to its management address" % other))
            continue
        if addr == str(address.ip):
            out.append(("router_vip", value, "is router %s's own management address" % other,
                        "give the service address a free address of that network"))
        elif not inside:
            out.append(("router_vip", value, "is not in the network of router %s's management address %s"
                        % (other, addr), "pick an address of the routers' management network (every router must be "
                        "able to hold it), or fix dspark_mgmt_address"))
    taken = [h for h, hvars in ((h, _group_model.host_vars(hostvars, h)) for h in (groups or {}).get("all") or [])
             if h not in by_host and str(_group_model.get(hvars, "dspark_mgmt_address", "")) == str(address.ip)]
    if taken:
        out.append(("router_vip", value, "is the management address of %s" % ", ".join(taken),
                    "give the service address a free address of that network"))
    router_id = _group_model.as_int(settings.get("router_vrrp_router_id"))
    if router_id is None or not 1 <= router_id <= 255:
        out.append(("router_vrrp_router_id", settings.get("router_vrrp_router_id"), "is not a VRRP router id (1-255)",
                    "pick a number 1-255 that no other VRRP group on this network uses"))
    password = settings.get("router_vrrp_auth_pass")
    if not isinstance(password, str) or not AUTH_PASS_RE.match(password):
        out.append(("router_vrrp_auth_pass", password,
                    "is not 1-8 characters of letters, digits and _ . : + = @ % , / - (VRRPv2's simple password)",
                    "set it in the routers' vault, e.g. with `openssl rand -base64 6`"))
    interface = settings.get("router_vrrp_interface") or ""
    if interface and not INTERFACE_RE.match(str(interface)):
        out.append(("router_vrrp_interface", interface, "is not an interface name",
                    "name the interface that holds the management address, or leave it empty to find it"))
    advert = _group_model.as_int(settings.get("router_vrrp_advert_interval"))
    if advert is None or not 1 <= advert <= 255:
        out.append(("router_vrrp_advert_interval", settings.get("router_vrrp_advert_interval"),
                    "is not a whole number of seconds 1-255", "1 (the address moves within about 3 s of a failure)"))
    prio = priorities(hostvars, hosts)
    for other in hosts:
        if not 1 <= prio[other] <= 254:
            out.append(("router_vrrp_priority", prio[other], "of router %s is not 1-254" % other,
                        "give each router its own priority 1-254, or none (150, 140, ... in inventory order)"))
    seen = {}
    for other in hosts:
        seen.setdefault(prio[other], []).append(other)
    for level, names in sorted(seen.items()):
        if len(names) > 1:
            out.append(("router_vrrp_priority", level, "is shared by routers %s" % ", ".join(names),
                        "give each router its own priority"))
    port = _group_model.as_int(settings.get("router_peers_port"))
    if len(hosts) > 1 and (port is None or not 1 <= port <= 65535):
        out.append(("router_peers_port", settings.get("router_peers_port"), "is not a port",
                    "the TCP port the routers copy their limit tables over (e.g. 10000)"))
    bind = settings.get("router_bind_address")
    if bind not in (None, "", "*", "0.0.0.0", str(address.ip)):
        out.append(("router_bind_address", bind, "is set, and so is router_vip=%s: the API listens on the service "
                    "address only (one router takes the requests, so the per-key limits count them once)" % value,
                    "leave router_bind_address at 0.0.0.0"))
    return out


def interface_of(ip_addr_lines, address):
    """The interface that holds ``address``, from `ip -o -4 addr show` output; None when no interface does."""
    for line in (ip_addr_lines or "").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "inet" and parts[3].split("/")[0] == address:
            return parts[1].split("@")[0]
    return None


def holds(ip_addr_lines, router_vip):
    """Whether this router holds the service address ``router_vip`` (ADDRESS/PREFIX), from `ip -o -4 addr show`
    output; False when it is not a valid service address."""
    address = vip(router_vip)
    return address is not None and interface_of(ip_addr_lines, str(address.ip)) is not None


def keepalived(settings, host, groups, hostvars, interface):
    """keepalived.conf of router ``host`` as a list of lines. ``settings``: as in problems(); ``interface``: where the
    management address (and so the service address) lives. The password is in it: the file is root's, mode 0600."""
    hosts = routers(groups)
    address = vip(settings["router_vip"])
    own = mgmt_address(hostvars, host)
    peers = [mgmt_address(hostvars, other) for other in hosts if other != host]
    lines = [
        "global_defs {",
        "    router_id %s" % re.sub(r"[^A-Za-z0-9_.-]", "_", host),
        "    enable_script_security",
        "    script_user root",
        "}",
        "",
        "vrrp_script dspark_haproxy {",
        "    script \"%s\"" % CHECK_SCRIPT,
        "    interval 1",
        "    timeout 2",
        "    fall 2",
        "    rise 2",
        "}",
        "",
        "vrrp_instance dspark_api {",
        "    # Every router starts as a backup; the highest priority takes the address. nopreempt: a router that comes",
        "    # back does not take it back (each move costs the requests in flight on the router that loses it).",
        "    state BACKUP",
        "    nopreempt" if not settings.get("router_vrrp_preempt") else "    # preempt: the highest priority takes it back",
        "    interface %s" % interface,
        "    virtual_router_id %d" % _group_model.as_int(settings["router_vrrp_router_id"]),
        "    priority %d" % priorities(hostvars, hosts)[host],
        "    advert_int %d" % _group_model.as_int(settings["router_vrrp_advert_interval"]),
        "    unicast_src_ip %s" % own,
        "    unicast_peer {",
    ] + ["        %s" % peer for peer in peers] + [
        "    }",
        "    authentication {",
        "        auth_type PASS",
        "        auth_pass \"%s\"" % settings["router_vrrp_auth_pass"],
        "    }",
        "    virtual_ipaddress {",
        "        %s dev %s" % (address.with_prefixlen, interface),
        "    }",
        "    track_script {",
        "        dspark_haproxy",
        "    }",
        "    # Gratuitous ARP again after taking the address, for switches and clients that missed the first; and when",
        "    # a lower-priority router claimed it meanwhile (a partition healed), so that clients come back here.",
        "    garp_master_delay 1",
        "    garp_master_repeat 3",
        "    garp_lower_prio_repeat 3",
        "}",
    ]
    for line in lines:
        if re.search(r"[\x00-\x1f\x7f]", line):
            raise ValueError("keepalived.conf would get a line break or control character: %r" % line)
    return lines


def haproxy_settings(settings, host, groups, hostvars):
    """What haproxy.cfg needs of the service address: {'vip': address or '', 'peers': [(name, address, port)],
    'localpeer': host}. Peers only with more than one router and a service address."""
    hosts = routers(groups)
    address = vip(settings.get("router_vip") or "")
    if address is None:
        return {"vip": "", "peers": [], "localpeer": host}
    port = _group_model.as_int(settings.get("router_peers_port"))
    peers = [(other, mgmt_address(hostvars, other), port) for other in hosts] if len(hosts) > 1 else []
    return {"vip": str(address.ip), "peers": peers, "localpeer": host}
