# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serve role's nftables ruleset for one member of a serving group (private, controller side, stdlib only).

One table of its own, `table inet dspark_serve`, with one input chain (policy accept: the operator's other rules and
services are untouched; a drop here is final whatever other tables accept):

- loopback, established/related traffic and SSH are always accepted;
- the group's fabric peers (their dspark_fabric_address) are accepted on every port: the rendezvous (master) port
  and the engine's other ports (NCCL/Gloo bootstrap and ZMQ sockets on ephemeral ports, bound to the fabric address);
- the API port is accepted from serve_api_allowed_cidrs (plus loopback and the fleet's routers), then dropped;
- the master port is dropped from anyone else, and so is anything else addressed to this node's fabric address;
- a sidecar engine of the group (issue #46, dspark_sidecars) is ruled as the main one: its API port accepted from the
  same sources and dropped for anyone else, its own rendezvous port dropped for everyone but the fabric peers;
- IPv6 (issue #26 point 5): the fabric speaks IPv4 only, so every new IPv6 packet that arrives on a fabric interface
  (iifname: dspark_fabric_interface, fabric_secondary_interface) is dropped, SSH excepted (always open); the fabric role
  can turn IPv6 off there too (fabric_ipv6_disable). The API and master port rules are family-neutral (inet): an IPv6
  stranger is dropped there as an IPv4 one is. Without a known interface name (serve run without preflight, which
  requires it) only those ports are closed over IPv6, and ``notes`` says why.

Policy for the management address (and any address other than the fabric one): the table drops the API port for
strangers and the rendezvous port for everyone but the fabric peers, in both families. It leaves the engine's other,
ephemeral listeners alone there: their ports are chosen at run time (NCCL/Gloo/ZMQ bind port 0), so no rule written
before the start can name them, and vLLM binds them to VLLM_HOST_IP (the fabric address, closed above); a listener on
the wildcard address is reachable over the management network, which the operator restricts (docs/security.md).

The file replaces the table atomically (`table`, `delete table`, `table {...}` in one nft transaction).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_engines

TABLE = "dspark_serve"
LOOPBACK = ("127.0.0.0/8", "::1/128")
# Linux interface names as the fabric role accepts them (plugin_utils/_fabric_plan.IFNAME_RE); nft quotes them.
IFNAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
# The variables that name a node's fabric interfaces, in the order the table lists them.
FABRIC_INTERFACE_VARS = ("dspark_fabric_interface", "fabric_secondary_interface")
# A group's sidecars (issue #46) as _group_engines reads them: the list's variable and a sidecar's name (it becomes part
# of a rule's comment here).
SIDECARS_VAR = _group_engines.VAR
SIDECAR_NAME_RE = _group_engines.NAME_RE
MAIN_ENGINE = _group_engines.MAIN


def _networks(values, var, problems):
    """(ipv4 networks, ipv6 networks) as text, in the order given, duplicates dropped."""
    v4, v6 = [], []
    if not isinstance(values, (list, tuple)):
        problems.append("%s=%r is not a list of networks. Fix: write a YAML list, e.g. [10.0.0.0/24]" % (var, values))
        return v4, v6
    for value in values:
        try:
            net = ipaddress.ip_network(str(value).strip(), strict=True)
        except ValueError as error:
            problems.append("%s has %r, which is not a network in CIDR form (%s). Fix: write address/prefix with the host "
                            "bits zero, e.g. 10.0.0.0/24 or 192.0.2.7/32" % (var, value, error))
            continue
        target = v4 if net.version == 4 else v6
        text = str(net) if net.prefixlen != net.max_prefixlen else str(net.network_address)
        if text not in target:
            target.append(text)
    return v4, v6


def _collapse(texts):
    nets = ipaddress.collapse_addresses(ipaddress.ip_network(t) for t in texts)
    return [str(n) if n.prefixlen != n.max_prefixlen else str(n.network_address) for n in nets]


def _port(value):
    """The TCP port a value stands for (an int or a string of digits, 1-65535), else None."""
    if isinstance(value, bool) or not str(value).strip().isdigit() or not 1 <= int(value) <= 65535:
        return None
    return int(value)


def _ports(values, var, problems):
    ports = []
    for value in values if isinstance(values, (list, tuple)) else [values]:
        port = _port(value)
        if port is None:
            problems.append("%s has %r, which is not a TCP port. Fix: use 1-65535" % (var, value))
        elif port not in ports:
            ports.append(port)
    return ports


def _sidecars(engine_ports, taken, group, problems):
    """[(name, api_port, master_port)] of the group's sidecars (None or [] for none; each a mapping with name, api_port
    and master_port, other keys ignored). ``taken`` maps each port the table already rules to its variable: a sidecar
    port that is one of them would meet that rule first (SSH open to all, LMCache's dropped, an engine's API open to
    the API's sources, a rendezvous closed to them)."""
    if engine_ports is None or engine_ports == []:
        return []
    if not isinstance(engine_ports, (list, tuple)):
        problems.append("group %s: %s=%r is not a list of sidecars. Fix: pass each sidecar's name, api_port and "
                        "master_port in a list, or none" % (group, SIDECARS_VAR, engine_ports))
        return []
    sidecars, names = [], set()
    for index, entry in enumerate(engine_ports):
        field = "%s[%d]" % (SIDECARS_VAR, index)
        if not isinstance(entry, dict):
            problems.append("group %s: %s=%r is not a mapping. Fix: give the sidecar's name, api_port and master_port"
                            % (group, field, entry))
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not SIDECAR_NAME_RE.match(name) or name == MAIN_ENGINE:
            problems.append("group %s: %s.name=%r is not a sidecar name. Fix: lower-case letters, digits and '-', at "
                            "most 16, starting with a letter, not %r (the main engine's), e.g. vl"
                            % (group, field, name, MAIN_ENGINE))
        elif name in names:
            problems.append("group %s: %s.name=%r is also another sidecar's. Fix: give every sidecar its own name"
                            % (group, field, name))
        names.add(name)
        ports = []
        for key in ("api_port", "master_port"):
            port = _port(entry.get(key))
            if port is None:
                problems.append("group %s: %s.%s=%r is not a TCP port. Fix: use 1-65535, a port no other engine of the "
                                "group uses" % (group, field, key, entry.get(key)))
            elif port in taken:
                problems.append("group %s: %s.%s=%d is also %s, whose rule would decide for both. Fix: give %s.%s a "
                                "port of its own" % (group, field, key, port, taken[port], field, key))
            else:
                taken[port] = "%s.%s" % (field, key)
            ports.append(port)
        sidecars.append((name, ports[0], ports[1]))
    return sidecars


def _address(value):
    try:
        addr = ipaddress.ip_address(str(value).strip())
    except ValueError:
        return None
    return str(addr) if addr.version == 4 else None


def _interfaces(fabric_interfaces, host, problems):
    """The fabric interface names to close to IPv6, from {variable: name} (or a list of names); empty ones skipped."""
    if fabric_interfaces is None:
        return []
    if isinstance(fabric_interfaces, dict):
        items = [(var, fabric_interfaces.get(var)) for var in FABRIC_INTERFACE_VARS if var in fabric_interfaces]
        items += [(var, value) for var, value in fabric_interfaces.items() if var not in FABRIC_INTERFACE_VARS]
    elif isinstance(fabric_interfaces, (list, tuple)):
        items = [("fabric interface", value) for value in fabric_interfaces]
    else:
        problems.append("%s: the fabric interfaces %r are not a list of names. Fix: pass dspark_fabric_interface (and "
                        "fabric_secondary_interface) as a list or a mapping" % (host, fabric_interfaces))
        return []
    names = []
    for var, value in items:
        if value is None or str(value).strip() == "":
            continue
        if not isinstance(value, str) or not IFNAME_RE.match(value):
            problems.append("%s: %s=%r is not a Linux interface name (1-15 of A-Za-z0-9_.-); the firewall drops IPv6 on "
                            "the fabric interface by its name. Fix: set the netdev that carries the fabric address, e.g. "
                            "enp1s0f1np1" % (host, var, value))
        elif value not in names:
            names.append(value)
    return names


def _set(name, kind, elements, interval=False):
    lines = ["\tset %s {" % name, "\t\ttype %s" % kind]
    if interval:
        lines.append("\t\tflags interval")
    if elements:
        lines.append("\t\telements = { %s }" % ", ".join(elements))
    lines.append("\t}")
    return lines


def plan(model, api_allowed_cidrs=(), ssh_ports=(22,), routers=(), table=TABLE, fabric_interfaces=None, local_ports=(),
         engine_ports=None):
    """{'ruleset', 'digest', 'problems', 'notes', 'peers', 'api_v4', 'api_v6', 'ports', 'fabric_interfaces'} for the
    host of a group model.

    model: the filter dspark.cluster.group_model's answer seen from the host (addresses, peers, host, ports).
    api_allowed_cidrs: serve_api_allowed_cidrs; routers: addresses of the fleet's router hosts (each a /32 or /128).
    fabric_interfaces: {variable: interface name} (dspark_fabric_interface, fabric_secondary_interface) or a list of
    names; every new IPv6 packet arriving on them is dropped. None or no name: only the API and master ports are
    closed over IPv6 (the family-neutral rules), and ``notes`` says why.
    local_ports: ports no one but loopback may reach, the fabric peers included (LMCache's server, issue #45: its
    Prometheus exporter binds every address).
    engine_ports: the group's sidecars (dspark_sidecars; name, api_port, master_port each), ruled as the main engine:
    the API port from the API's sources, the rendezvous port from the fabric peers. None or []: the ruleset is the same
    text as before sidecars existed (a changed one replaces the table on every node).
    """
    problems = []
    addresses = model.get("addresses") or {}
    host = model.get("host")
    own = _address(addresses.get(host))
    if own is None:
        problems.append("%s: dspark_fabric_address=%r is not an IPv4 address; the firewall needs it. Fix: set this node's "
                        "fabric address" % (host, addresses.get(host)))
    peers = []
    for peer in model.get("peers") or []:
        addr = _address(addresses.get(peer))
        if addr is None:
            problems.append("%s: dspark_fabric_address=%r is not an IPv4 address; the firewall cannot allow it. Fix: set "
                            "that node's fabric address" % (peer, addresses.get(peer)))
        elif addr not in peers and addr != own:
            peers.append(addr)
    ports = {}
    for name in ("master_port", "api_port"):
        found = _ports([model.get(name)], "dspark_" + name, problems) if model.get(name) is not None else []
        if not found:
            problems.append("group %s: dspark_%s=%r is not a TCP port. Fix: use 1-65535" % (model.get("group"), name, model.get(name)))
        ports[name] = found[0] if found else None
    interfaces = _interfaces(fabric_interfaces, host, problems)
    notes = []
    if not interfaces:
        notes.append("%s: dspark_fabric_interface is not set, so the firewall cannot drop IPv6 on the fabric interface by "
                     "its name: over IPv6 it closes only the API and rendezvous ports (as over IPv4); the engine's other "
                     "ports stay open over IPv6 unless the fabric role turns IPv6 off there (fabric_ipv6_disable). Fix: set "
                     "dspark_fabric_interface (preflight and the fabric role need it too)" % host)
    local = _ports(list(local_ports or ()), "serve_lmcache ports", problems)
    ssh = _ports(ssh_ports, "serve_firewall_ssh_ports", problems)
    if not ssh:
        problems.append("serve_firewall_ssh_ports=%r opens no SSH port: the firewall would lock Ansible out. Fix: list the "
                        "SSH port(s), e.g. [22]" % (ssh_ports,))
    taken = {port: var for var, values in (("serve_firewall_ssh_ports", ssh), ("serve_lmcache ports", local),
                                           ("dspark_master_port", [ports["master_port"]]),
                                           ("dspark_api_port", [ports["api_port"]])) for port in values if port}
    sidecars = _sidecars(engine_ports, taken, model.get("group"), problems)
    if api_allowed_cidrs is None:
        api_allowed_cidrs = []
    if isinstance(api_allowed_cidrs, (list, tuple)):
        api_allowed_cidrs = list(LOOPBACK) + list(api_allowed_cidrs)
    api_v4, api_v6 = _networks(api_allowed_cidrs, "serve_api_allowed_cidrs", problems)
    for router in routers or []:
        try:
            addr = ipaddress.ip_address(str(router).strip())
        except ValueError:
            continue  # a router name that is not an address: list its network in serve_api_allowed_cidrs
        target = api_v4 if addr.version == 4 else api_v6
        if str(addr) not in target:
            target.append(str(addr))
    # nft refuses overlapping intervals in one set: merge them (sorted, each network once).
    api_v4, api_v6 = _collapse(api_v4), _collapse(api_v6)
    result = {"problems": problems, "notes": notes, "fabric_interfaces": interfaces, "peers": peers, "api_v4": api_v4,
              "api_v6": api_v6, "ruleset": "", "digest": "", "table": table,
              "ports": dict(ports, ssh=ssh, local=local, sidecars=[
                  {"name": name, "api_port": api_port, "master_port": master_port} for name, api_port, master_port in sidecars])}
    if problems:
        return result
    api, master = ports["api_port"], ports["master_port"]
    lines = [
        "# dspark.cluster serve firewall of %s (group %s), generated by the serve role: edits are replaced." % (host, model.get("group")),
        "# Replaces table inet %s atomically; other tables are untouched." % table,
        "table inet %s" % table,
        "delete table inet %s" % table,
        "table inet %s {" % table,
    ]
    lines += _set("fabric_peers", "ipv4_addr", peers)
    lines += _set("api_allowed_v4", "ipv4_addr", api_v4, interval=True)
    lines += _set("api_allowed_v6", "ipv6_addr", api_v6, interval=True)
    lines += [
        "\tchain input {",
        "\t\ttype filter hook input priority filter; policy accept;",
        '\t\tiif "lo" accept',
        "\t\tct state established,related accept",
        "\t\ttcp dport { %s } accept comment \"SSH, always open\"" % ", ".join(str(p) for p in ssh),
    ]
    if interfaces:
        lines.append("\t\tmeta nfproto ipv6 iifname { %s } drop comment \"IPv6 on the fabric: the group speaks IPv4 there\""
                     % ", ".join('"%s"' % name for name in interfaces))
    if local:
        lines.append("\t\ttcp dport { %s } drop comment \"LMCache's server: loopback only\"" % ", ".join(str(p) for p in local))
    lines += [
        "\t\tip saddr @fabric_peers accept comment \"the group's fabric peers: rendezvous and engine ports\"",
        "\t\ttcp dport %d ip saddr @api_allowed_v4 accept comment \"API from serve_api_allowed_cidrs\"" % api,
        "\t\ttcp dport %d ip6 saddr @api_allowed_v6 accept comment \"API from serve_api_allowed_cidrs\"" % api,
        "\t\ttcp dport { %s } drop comment \"API and rendezvous from anyone else\"" % ", ".join(str(p) for p in sorted({api, master})),
    ]
    for name, api_port, master_port in sidecars:
        lines += [
            "\t\ttcp dport %d ip saddr @api_allowed_v4 accept comment \"sidecar %s: API from serve_api_allowed_cidrs\""
            % (api_port, name),
            "\t\ttcp dport %d ip6 saddr @api_allowed_v6 accept comment \"sidecar %s: API from serve_api_allowed_cidrs\""
            % (api_port, name),
            "\t\ttcp dport { %d, %d } drop comment \"sidecar %s: API and rendezvous from anyone else\""
            % (min(api_port, master_port), max(api_port, master_port), name),
        ]
    lines += [
        "\t\tip daddr %s drop comment \"the engine's other ports on the fabric address\"" % own,
        "\t}",
        "}",
    ]
    ruleset = "\n".join(lines) + "\n"
    result.update(ruleset=ruleset, digest=hashlib.sha256(ruleset.encode("utf-8")).hexdigest())
    return result
