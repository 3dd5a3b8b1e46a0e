# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric role's validation and planning (was Jinja in roles/fabric/vars/main.yml).

Each function takes ``inputs``: the role's variables as the role's ``vars/main.yml`` (``_fabric_input_values``)
gathers them into ``_fabric_plan_inputs`` (``model`` is the group model of ``_group_model``; ``pre``/``gid``/``post``/...
are the node reads the ``tasks/plan_*.yml`` steps add) and returns what one variable of the role used to compute. The filter
``dspark.cluster.fabric_plan`` gives them one phase of the role at a time (``PHASES``, at the end: one structure per
phase). The input rules (``group_findings``, ``node_findings``) are the one definition preflight runs too
(``inventory_rules.check_fabric``). Pure Python (stdlib ``ipaddress``), no I/O.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _findings, _group_model, _inputs

IFNAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
# NCCL_IB_HCA: an optional ^ (exclude) and = (exact match), then device[:port] separated by commas.
HCA_RE = re.compile(r"^\^?=?[A-Za-z0-9_.-]+(?::[0-9]+)?(?:,[A-Za-z0-9_.-]+(?::[0-9]+)?)*$")
MTU_MIN, MTU_MAX = 1500, 9216
# The role's inputs (keys of _fabric_plan_inputs) that come from the inventory: preflight builds the same inputs.
INPUT_VARS = {"interface": "dspark_fabric_interface", "hca": "dspark_fabric_hca", "address": "dspark_fabric_address",
              "cidr": "dspark_fabric_cidr", "mtu": "dspark_fabric_mtu", "secondary_interface": "fabric_secondary_interface",
              "secondary_cidr": "fabric_secondary_cidr", "secondary_address": "fabric_secondary_address",
              "bandwidth_extra_args": "fabric_bandwidth_extra_args"}
# The fabric role's own variables the plan reads, under its keys (the rest of INPUT_VARS is the inventory's): the role
# hands them over by their names (lookup dspark.cluster.role_vars, reads='fabric_plan'), phase "values" renames them.
ROLE_VARS = {"network_backend": "fabric_network_backend", "netplan_renderer": "fabric_netplan_renderer",
             "ring_rx": "fabric_ring_rx", "ring_tx": "fabric_ring_tx", "sysctls": "fabric_sysctls",
             "ipv6_disable": "fabric_ipv6_disable", "ipv6_link_local": "fabric_ipv6_link_local", "memlock": "fabric_memlock",
             "bandwidth_port": "fabric_bandwidth_port", "bandwidth_duration": "fabric_bandwidth_duration",
             "bandwidth_min_gbits": "fabric_bandwidth_min_gbits", "bandwidth_on_low": "fabric_bandwidth_on_low"}
VARIABLES = dict(INPUT_VARS, **ROLE_VARS)
# The head receives each worker's test on the worker's port + this offset.
HEAD_PORT_OFFSET = 100


def _int(value, default=0):
    """An integer input (the collection's one reading, plugin_utils._inputs.as_int), else ``default``."""
    number = _inputs.as_int(value)
    return default if number is None else number


def _float(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _net(cidr):
    """The IPv4 network that ``cidr`` is written as exactly (network/prefix, no host bits, 2+ addresses), else None."""
    cidr = "" if cidr is None else str(cidr)
    if "/" not in cidr:
        return None
    try:
        network = ipaddress.IPv4Network(cidr, strict=True)
    except ValueError:
        return None
    if network.num_addresses < 2 or str(network) != cidr:
        return None
    return network


def _address(value):
    try:
        return ipaddress.IPv4Address(str(value))
    except ValueError:
        return None


def _usable(network, address):
    """ansible.utils.network_in_usable: inside the network, not its network or broadcast address (except /31)."""
    if address not in network:
        return False
    if network.num_addresses == 2:
        return True
    return address not in (network.network_address, network.broadcast_address)


def _span(addresses):
    """The smallest network that holds every address (ansible.utils.cidr_merge(..., 'span'))."""
    numbers = [int(ipaddress.IPv4Address(a)) for a in addresses]
    low, high = min(numbers), max(numbers)
    prefix = 32 - (low ^ high).bit_length()
    return str(ipaddress.IPv4Network((low, prefix), strict=False))


def _prefix(cidr):
    """The prefix length of a network (None when it is not one; the input checks say why)."""
    try:
        return ipaddress.IPv4Network(str(cidr), strict=False).prefixlen
    except ValueError:
        return None


def mtu(inputs):
    return _int(inputs.get("mtu"), 9000)


def host_number(inputs):
    """This node's host number in dspark_fabric_cidr; the second port gets the same one in its own network."""
    network = ipaddress.IPv4Network(str(inputs["cidr"]), strict=False)
    return int(ipaddress.IPv4Address(str(inputs["address"]))) - int(network.network_address)


def secondary_address(inputs):
    """fabric_secondary_address, else this node's host number in fabric_secondary_cidr ('' when there is none)."""
    if inputs.get("secondary_address"):
        return inputs["secondary_address"]
    try:
        network = ipaddress.IPv4Network(str(inputs.get("secondary_cidr") or ""), strict=False)
        number = host_number(inputs)
    except ValueError:
        return ""
    if not 0 <= number < network.num_addresses:
        return ""
    return str(network[number])


def links(inputs):
    """The fabric links of this node: the primary port and the optional second interface."""
    out = [{"link": "primary", "name": inputs.get("interface"), "variable": "dspark_fabric_interface",
            "address": inputs.get("address"), "cidr": inputs.get("cidr"),
            "prefix": _prefix(inputs.get("cidr"))}]
    if inputs.get("secondary_interface"):
        out.append({"link": "secondary", "name": inputs["secondary_interface"], "variable": "fabric_secondary_interface",
                    "address": secondary_address(inputs), "cidr": inputs.get("secondary_cidr"),
                    "prefix": _prefix(inputs.get("secondary_cidr"))})
    return out


def _shown(value):
    """A value as a message shows it: missing or empty is "not set"."""
    return None if value is None or value == "" else value


def loose_net(text):
    """The IPv4 network ``text`` names (host bits allowed), else None."""
    if "/" not in text:
        return None
    try:
        return ipaddress.IPv4Network(text, strict=False)
    except ValueError:
        return None


def group_findings(inputs, mtu_min=MTU_MIN, mtu_max=MTU_MAX):
    """The group-wide rules (MTU, CIDR, every member's address), as (where, variable, value, problem, fix).

    Preflight asks them once per group; the role, run alone, on every node (a peer's bad address breaks this node too).
    """
    model = inputs["model"]
    where = "group %s" % inputs.get("group") if model.get("known") else str(inputs.get("host"))
    out = []
    value = inputs.get("mtu")
    number = _group_model.as_int(value)
    if number is None or not mtu_min <= number <= mtu_max:
        out.append((where, "dspark_fabric_mtu", _shown(value), "is outside %d-%d" % (mtu_min, mtu_max),
                    "use 9000 when every hop of the direct ConnectX link carries jumbo frames"))
    cidr = inputs.get("cidr")
    text = "" if cidr is None else str(cidr)
    network = loose_net(text)
    if network is None:
        out.append((where, "dspark_fabric_cidr", _shown(cidr), "is not an IPv4 network in CIDR form",
                    "write it as network/prefix, e.g. 192.168.100.0/24"))
    elif str(network) != text:
        out.append((where, "dspark_fabric_cidr", cidr, "is not written as its network address (host bits set)",
                    "use the network address %s" % network))
    elif network.num_addresses < 2:
        out.append((where, "dspark_fabric_cidr", cidr, "holds one address only", "use a network with an address for every node, e.g. a /30"))
        network = None
    valid = {}
    for member in model["members"]:
        raw = str(model["addresses"].get(member, ""))
        address = _address(raw) if "/" not in raw else None
        if address is None:
            out.append((member, "dspark_fabric_address", _shown(raw), "is not an IPv4 address",
                        "set this node's address on the fabric, inside dspark_fabric_cidr (%s)" % text))
        else:
            valid[member] = (raw, address)
    span = _span([raw for raw, dummy in valid.values()]) if len(valid) > 1 else ""
    if span and _prefix(span) < 16:  # addresses that far apart are a typo, not a network to suggest
        span = ""
    seen = {}
    for member, (raw, address) in valid.items():
        if address in seen:
            out.append((member, "dspark_fabric_address", raw, "is also the address of %s" % seen[address],
                        "give every node of the group its own fabric address"))
        seen.setdefault(address, member)
        if network is None:
            continue
        if address not in network:
            out.append((member, "dspark_fabric_address", raw, "is outside dspark_fabric_cidr (%s)" % network,
                        "choose an address inside %s or set dspark_fabric_cidr to a network that holds every address of the group%s"
                        % (network, (", e.g. " + span) if span else "")))
        elif not _usable(network, address):
            out.append((member, "dspark_fabric_address", raw, "is the network or broadcast address of %s" % network,
                        "use a host address between %s and %s" % (network[1], network[-2])))
    return out


def node_findings(inputs):
    """This node's own rules (interface, HCA, second link), as (host, variable, value, problem, fix)."""
    host = str(inputs.get("host"))
    out = []
    iface = inputs.get("interface")
    if not isinstance(iface, str) or not IFNAME_RE.match(iface):
        out.append((host, "dspark_fabric_interface", _shown(iface), "is not a Linux interface name",
                    "set the ConnectX netdev that carries the fabric address, e.g. enp1s0f1np1"))
    hca = inputs.get("hca")
    if hca is None or hca == "":
        out.append((host, "dspark_fabric_hca", None, "NCCL needs the RDMA device(s) of the fabric port",
                    "set them in NCCL_IB_HCA syntax, e.g. rocep1s0f1 (ibdev2netdev prints the pairs)"))
    elif not isinstance(hca, str) or not HCA_RE.match(hca):
        out.append((host, "dspark_fabric_hca", hca, "is not in NCCL_IB_HCA syntax",
                    "write one string of device[:port] names separated by commas, e.g. rocep1s0f1 or =rocep1s0f1,roceP2p1s0f1"))
    extra = inputs.get("bandwidth_extra_args")
    for arg in extra if isinstance(extra, list) else []:
        # ib_write_bw gets each item as one argv entry: "--tclass 106" would be one unknown option.
        if isinstance(arg, str) and (not arg.strip() or len(arg.split()) > 1):
            out.append((host, "fabric_bandwidth_extra_args", extra, "has the item %r, which is not one argument" % arg,
                        "write one list item per argument, e.g. [--tclass, \"106\"] or [--tclass=106]"))
            break
    second = inputs.get("secondary_interface") or ""
    if not second:
        return out
    if not isinstance(second, str) or not IFNAME_RE.match(second) or second == iface:
        out.append((host, "fabric_secondary_interface", second, "is not a Linux interface name other than dspark_fabric_interface",
                    "set the second interface of the port, e.g. enP2p1s0f1np1, or leave it empty"))
    scidr = inputs.get("secondary_cidr")
    snetwork = _net(scidr)
    network = _net(inputs.get("cidr"))
    saddress = inputs.get("secondary_address") or ""
    own = _address(inputs.get("address")) if "/" not in str(inputs.get("address")) else None
    if snetwork is None:
        out.append((host, "fabric_secondary_cidr", _shown(scidr), "is not an IPv4 network in CIDR form without host bits",
                    "give the second interface its own network, e.g. 192.168.101.0/30"))
    elif network is not None and network.overlaps(snetwork):
        out.append((host, "fabric_secondary_cidr", scidr, "overlaps dspark_fabric_cidr (%s)" % network,
                    "each interface of the port needs its own subnet"))
    elif not saddress and own is not None and network is not None and host_number(inputs) >= (
            snetwork.num_addresses - (1 if snetwork.prefixlen < 31 else 0)):
        out.append((host, "fabric_secondary_cidr", scidr, "is too small for host number %d of dspark_fabric_address=%s"
                    % (host_number(inputs), inputs.get("address")),
                    "use a network as large as dspark_fabric_cidr or set fabric_secondary_address"))
    elif saddress and (_address(saddress) is None or not _usable(snetwork, _address(saddress))):
        out.append((host, "fabric_secondary_address", saddress, "is not a usable address of fabric_secondary_cidr (%s)" % scidr,
                    "choose an address inside it"))
    return out


def input_findings(inputs):
    """Every rule of the role's inputs, for a role run alone: the group membership, the group's rules, this node's."""
    model = inputs["model"]
    out = []
    found = _group_model.membership_problem(inputs.get("group"), model.get("known"), inputs.get("host") in model["members"])
    if found:
        out.append((str(inputs.get("host")), "dspark_group", _shown(inputs.get("group"))) + found)
    return out + group_findings(inputs) + node_findings(inputs)


def input_problems(inputs):
    """Everything wrong with the inputs, checked on the controller before any node is touched: one standard line each."""
    return [_findings.message(*finding) for finding in input_findings(inputs)]


def pre_args(inputs):
    """The fabric links as fabric_check reads them before the change: existence, and the networks to keep clear."""
    planned = links(inputs)
    return {
        "interfaces": [{"name": link["name"], "variable": link["variable"], "require_up": False} for link in planned],
        "networks": [{"cidr": link["cidr"], "variable": link["variable"].replace("_interface", "_cidr")} for link in planned],
    }


def post_interfaces(inputs):
    """The fabric links as fabric_check judges them after the change."""
    return [{"name": link["name"], "variable": link["variable"], "mtu": mtu(inputs), "address": "%s/%s" % (link["address"], link["prefix"]),
             "require_up": True} for link in inputs.get("fabric_links") or []]


def backend(inputs):
    if inputs.get("network_backend") != "auto":
        return inputs.get("network_backend")
    return "netplan" if (inputs.get("pre") or {}).get("tools", {}).get("netplan") else "networkd"


def container(inputs):
    return (inputs.get("pre") or {}).get("container") is not None


def live_differs(inputs):
    """Whether the fabric addresses are missing or wrong right now (then they are applied even with unchanged files)."""
    interfaces = (inputs.get("pre") or {}).get("interfaces") or {}
    for link in links(inputs):
        live = interfaces.get(link["name"]) or {}
        if ("%s/%s" % (link["address"], link["prefix"])) not in (live.get("ipv4") or []) or live.get("mtu", 0) != mtu(inputs) \
                or not live.get("up", False):
            return True
    return False


def live_states(inputs):
    """What is wrong with each fabric link right now, a link that is down named as down (its address and MTU then follow)."""
    interfaces = (inputs.get("pre") or {}).get("interfaces") or {}
    out = []
    for link in links(inputs):
        live = interfaces.get(link["name"])
        wanted = "%s/%s" % (link["address"], link["prefix"])
        if live is None:
            out.append("%s does not exist" % link["name"])
            continue
        if not live.get("up", False) or live.get("carrier") is False:
            carrier = "no" if live.get("carrier") is False else "yes"
            out.append("%s is DOWN (operstate %s, carrier %s)" % (link["name"], live.get("operstate", "unknown"), carrier))
            continue
        if wanted not in (live.get("ipv4") or []):
            out.append("%s lacks the fabric address %s" % (link["name"], wanted))
        if live.get("mtu", 0) != mtu(inputs):
            out.append("%s has MTU %s, not %d" % (link["name"], live.get("mtu"), mtu(inputs)))
    return out


def backend_problems(inputs):
    """What the node itself says is wrong for the chosen backend (read before any change)."""
    pre = inputs.get("pre") or {}
    problems = []
    if container(inputs):
        states = live_states(inputs)
        if states:
            down = any(" is DOWN" in state for state in states)
            problems.append("this node is a container (%s), whose interfaces belong to the container engine: %s. Fix: %s"
                            % (pre.get("container"), "; ".join(states),
                               "bring the link up (`ip link set <name> up`; check the cable and the peer)" if down else
                               "attach the container to its fabric network with dspark_fabric_address and MTU %d, or run the role "
                               "on the host." % mtu(inputs)))
        return problems
    chosen = backend(inputs)
    renderer = inputs.get("netplan_renderer")
    needs = ["systemd-networkd"] if chosen == "networkd" or renderer == "networkd" else ["NetworkManager"]
    if chosen == "netplan" and not (pre.get("tools") or {}).get("netplan"):
        problems.append("fabric_network_backend=netplan but netplan is not installed on this node. Fix: install netplan.io or set"
                        " fabric_network_backend: networkd.")
    for service in needs:
        state = (pre.get("services") or {}).get(service, "unknown")
        if state != "active":
            problems.append("fabric_network_backend=%s%s needs %s, which is %s on this node. Fix: choose the backend that manages this node's"
                            " network (netplan with NetworkManager on DGX OS, networkd on Debian)."
                            % (chosen, (" with fabric_netplan_renderer=%s" % renderer) if chosen == "netplan" else "", service, state))
    return problems


def rings(inputs):
    """Ring sizes to set: the wanted size clamped to the driver's maximum; 0 keeps the current one."""
    wanted_rx, wanted_tx = _int(inputs.get("ring_rx")), _int(inputs.get("ring_tx"))
    read = (inputs.get("pre") or {}).get("rings") or {}
    out = []
    for link in inputs.get("fabric_links") or links(inputs):
        ring = read.get(link["name"]) or {}
        if ring.get("supported", False) and (wanted_rx > 0 or wanted_tx > 0):
            rx = min(wanted_rx, ring["rx_max"]) if wanted_rx > 0 else ring["rx"]
            tx = min(wanted_tx, ring["tx_max"]) if wanted_tx > 0 else ring["tx"]
            out.append({"name": link["name"], "rx": rx, "tx": tx, "rx_max": ring["rx_max"], "tx_max": ring["tx_max"],
                        "change": rx != ring["rx"] or tx != ring["tx"]})
    return out


def ipv6_sysctls(inputs):
    """{key: 1} that turns IPv6 off on each fabric link when fabric_ipv6_disable is true (issue #26 point 5), else {}.

    The fabric speaks IPv4 only (addresses, RoCE v2 GIDs of IPv4-mapped form, NCCL_IB_ADDR_FAMILY=AF_INET), so an IPv6
    address there only adds a way in. A name with a dot (a VLAN, eth1.100) is written with "/" separators, which
    sysctl.d and procps keep as they are. inputs: ipv6_disable, fabric_links (the plan's) or the link inputs, and the
    node's read (live_sysctls, else pre.sysctls).
    """
    if _inputs.as_bool(inputs.get("ipv6_disable")) is not True:
        return {}
    # What the node read (fabric_check): a key it found missing (a kernel booted without IPv6) has nothing to turn
    # off, and `sysctl -p` fails on a missing key.
    live = inputs.get("live_sysctls")
    if live is None:
        live = (inputs.get("pre") or {}).get("sysctls")
    live = live if isinstance(live, dict) else {}
    out = {}
    for link in inputs.get("fabric_links") or links(inputs):
        name = str(link.get("name") or "")
        key = ("net/ipv6/conf/%s/disable_ipv6" if "." in name else "net.ipv6.conf.%s.disable_ipv6") % name
        if IFNAME_RE.match(name) and not (key in live and live[key] is None):
            out[key] = 1
    return out


def sysctl_keys(inputs):
    """The sysctls fabric_check reads before the change: fabric_sysctls, and the fabric links' disable_ipv6 (a name
    with a dot is left out: fabric_check reads a key by turning its dots into slashes)."""
    return list(inputs.get("sysctls") or {}) + [key for key in ipv6_sysctls(dict(inputs, live_sysctls={})) if "/" not in key]


def sysctls_differ(inputs):
    """Whether a live sysctl differs from fabric_sysctls or a fabric link's disable_ipv6 (whitespace collapsed, as the
    kernel prints tabs). A disable_ipv6 that does not exist (a kernel without IPv6) needs nothing."""
    live = (inputs.get("pre") or {}).get("sysctls") or {}
    if any(" ".join(str(value).split()) != live.get(key, "") for key, value in (inputs.get("sysctls") or {}).items()):
        return True
    return any(live.get(key) is not None and live.get(key) != str(value) for key, value in ipv6_sysctls(inputs).items()
               if key in live)


def rank_env(inputs):
    """This rank's part of the NCCL/Gloo environment (the node's own interfaces, HCA, GID index and address)."""
    env = {"NCCL_SOCKET_IFNAME": inputs.get("interface"), "GLOO_SOCKET_IFNAME": inputs.get("interface"),
           "TP_SOCKET_IFNAME": inputs.get("interface"), "NCCL_IB_HCA": inputs.get("hca"), "VLLM_HOST_IP": inputs.get("address")}
    gid = inputs.get("gid") or {}
    if "gid_index" in gid:
        env["NCCL_IB_GID_INDEX"] = str(gid["gid_index"])
    return env


def ping_peers(inputs, peer_links):
    """Pings from every fabric link of this node to the same link of every peer (peer_links: peer -> its fabric_links)."""
    out = []
    for peer in inputs["model"]["peers"]:
        for link in inputs.get("fabric_links") or []:
            for theirs in peer_links.get(peer) or []:
                if theirs.get("link") == link["link"]:
                    out.append({"name": peer, "address": theirs["address"], "interface": link["name"], "mtu": mtu(inputs)})
    return out


def bw_links(inputs):
    """Bandwidth tests: the RDMA port of each fabric link of this node (from the GID resolution)."""
    members = (inputs.get("gid") or {}).get("members") or []
    out = []
    for link in inputs.get("fabric_links") or []:
        for member in members:
            if member.get("netdev") == link["name"]:
                out.append({"link": link["link"], "index": 0 if link["link"] == "primary" else 1, "device": member["device"],
                            "ib_port": member["port"], "address": link["address"]})
                break
    return out


def bandwidth_port(base, worker_rank, index, to_head=False):
    """The TCP port of one test: the worker receives on base + 2 x (rank - 1) + link, the head on that + 100."""
    return _int(base) + (HEAD_PORT_OFFSET if to_head else 0) + 2 * (_int(worker_rank) - 1) + index


def bandwidth(inputs, peer_plans):
    """Who sends and receives what between the head and every worker (peer_plans: member -> its GID phase's bw_links)."""
    model = inputs["model"]
    mine = bw_links(inputs)
    base = inputs.get("bandwidth_port")
    plan = {"head_sends": [], "head_receives": [], "worker_sends": [], "worker_receives": []}
    if model["is_head"]:
        for worker in model["peers"]:
            rank = model["ranks"].get(worker)
            theirs = peer_plans.get(worker) or []
            for link in mine:
                same = [entry for entry in theirs if entry.get("link") == link["link"]]
                for entry in same:
                    plan["head_sends"].append({"peer": worker, "link": link["link"], "device": link["device"], "ib_port": link["ib_port"],
                                               "server": entry["address"], "tcp_port": bandwidth_port(base, rank, link["index"])})
                if same:
                    plan["head_receives"].append({"peer": worker, "link": link["link"], "device": link["device"], "ib_port": link["ib_port"],
                                                  "tcp_port": bandwidth_port(base, rank, link["index"], to_head=True)})
        return plan
    head = model["head"]
    rank = model["rank"]
    for link in mine:
        plan["worker_receives"].append(dict(link, tcp_port=bandwidth_port(base, rank, link["index"])))
        for entry in peer_plans.get(head) or []:
            if entry.get("link") == link["link"]:
                plan["worker_sends"].append({"peer": head, "link": link["link"], "device": link["device"], "ib_port": link["ib_port"],
                                             "server": entry["address"], "tcp_port": bandwidth_port(base, rank, link["index"], to_head=True)})
    return plan


def server_timeout(inputs):
    """A server waits for every send the head makes before its turn comes."""
    return 60 + inputs["model"]["size"] * 2 * (_int(inputs.get("bandwidth_duration")) + 30)


def bw_results(inputs):
    """The bandwidth measurements of this node as data (from the registered send results)."""
    results = list((inputs.get("bw_sent") or {}).get("results") or []) + list((inputs.get("bw_received") or {}).get("results") or [])
    out = []
    for result in results:
        if "item" not in result or result.get("skipped"):
            continue
        item = result["item"]
        measured = "gbits_average" in result
        out.append({"from": inputs.get("host"), "to": item.get("peer"), "link": item.get("link"), "device": item.get("device"),
                    "server_address": item.get("server"), "gbits_average": result.get("gbits_average"),
                    "min_gbits": _float(inputs.get("bandwidth_min_gbits")), "meets_threshold": result.get("meets_threshold", False),
                    "error": None if measured else result.get("msg", "no result")})
    return out


def bw_low(inputs):
    """One line per measurement below fabric_bandwidth_min_gbits."""
    return ["RDMA write bandwidth %s -> %s over %s is %s Gb/s, below fabric_bandwidth_min_gbits=%s. Fix: check the cable and both ends' MTU,"
            " the PCIe width of each controller (current_link_width x4) and that both halves of the port are in dspark_fabric_hca; about 13 Gb/s"
            " means a degraded ConnectX-7 init (power-cycle the node)." % (b["from"], b["to"], b["device"], b["gbits_average"], b["min_gbits"])
            for b in bw_results(inputs) if b["error"] is None and not b["meets_threshold"]]


def check_problems(inputs):
    """The problems of the fabric check: fabric_check's, failed measurements, and low bandwidth when it fails the run."""
    failed = ["ib_write_bw %s -> %s over %s failed: %s" % (b["from"], b["to"], b["device"], b["error"])
              for b in bw_results(inputs) if b["error"] is not None]
    low = bw_low(inputs) if inputs.get("bandwidth_on_low") == "fail" else []
    return list((inputs.get("post") or {}).get("problems") or []) + failed + low


def _text(value):
    """A value as a template renders it into a string (None is empty)."""
    return "" if value is None else str(value)


def check_result(inputs):
    """This node's fabric check result, as data (published as fabric_check_result and written to the report)."""
    post = inputs.get("post") or {}
    problems = check_problems(inputs)
    return {
        "host": inputs.get("host"),
        "group": inputs.get("group"),
        "rank": _int(inputs["model"].get("rank")),
        "ok": not problems,
        "problems": problems,
        "warnings": bw_low(inputs) if inputs.get("bandwidth_on_low") == "warn" else [],
        "gid_index": inputs.get("gid_index"),
        "links": post.get("links") or [],
        "rdma": post.get("rdma") or [],
        "pings": [{key: value for key, value in ping.items() if key not in ("output", "rc")} for ping in post.get("pings") or []],
        "bandwidth": bw_results(inputs),
        "nccl_env": inputs.get("nccl_env"),
    }


def report(inputs, results):
    """The group's report (results: member -> its fabric_check_result)."""
    members = inputs["model"]["members"]
    return {
        "group": inputs.get("group"),
        "ok": all((results.get(member) or {}).get("ok") for member in members),
        "nodes": {member: results.get(member) for member in members},
    }


def summary(inputs):
    """The one line a successful check prints."""
    result = inputs.get("check_result") or {}
    rdma = result.get("rdma") or []
    line = "fabric OK: %s up at MTU %d with %s; DF ping of %d bytes to %s; %s; NCCL_IB_GID_INDEX=%s" % (
        ", ".join(_text(link.get("interface")) for link in result.get("links") or []), mtu(inputs),
        ", ".join(_text(link.get("address")) for link in inputs.get("fabric_links") or []), mtu(inputs) - 28,
        ", ".join(inputs["model"]["peers"]),
        (", ".join(_text(r.get("device")) for r in rdma if r.get("used")) + " ACTIVE") if rdma else "RDMA not checked",
        _text(inputs.get("gid_index")))
    line += "".join("; ib_write_bw -> %s %s Gb/s" % (_text(b.get("to")), _text(b.get("gbits_average"))) for b in result.get("bandwidth") or [])
    line += "".join(". WARNING: %s" % _text(w) for w in result.get("warnings") or [])
    return line


# --------------------------------------------------------------------------- the files and the handler's script
# (was Jinja in roles/fabric/tasks/plan_files.yml, now _fabric_files of its vars/main.yml, its templates and
# handlers/main.yml). Their inputs are the values the role decided before (backend, in_container, fabric_links, rings,
# mtu) and the role's file paths, under these keys.

def link_local(inputs):
    """Whether the fabric links keep an IPv6 link-local address: fabric_ipv6_link_local, never with fabric_ipv6_disable
    (networkd and NetworkManager turn IPv6 back on for a link whose configuration asks for a link-local address)."""
    return _inputs.as_bool(inputs.get("ipv6_link_local")) is True and _inputs.as_bool(inputs.get("ipv6_disable")) is not True


def netplan_lines(inputs):
    """The ethernets of the netplan file: one block per fabric link, the renderer set per interface."""
    renderer = inputs.get("netplan_renderer")
    out = []
    for link in inputs.get("fabric_links") or []:
        out += ["    %s:" % link["name"],
                "      renderer: %s" % renderer,
                "      dhcp4: false",
                "      dhcp6: false",
                "      accept-ra: false",
                "      link-local: %s" % ("[ipv6]" if link_local(inputs) else "[]"),
                "      mtu: %s" % inputs.get("mtu"),
                "      addresses: [%s/%s]" % (link["address"], link["prefix"]),
                "      optional: true"]
        if renderer == "networkd":
            out.append("      ignore-carrier: true")
    return out


def sysctl_lines(inputs):
    """``key = value`` per fabric sysctl, sorted by key without case (Jinja's dictsort), then each fabric link's
    ``disable_ipv6`` with fabric_ipv6_disable, prefixed "-": systemd-sysctl at boot runs before the NIC exists and
    skips it quietly; udev's systemd-sysctl call sets it when the interface appears."""
    lines = ["%s = %s" % (key, value) for key, value in sorted((inputs.get("sysctls") or {}).items(), key=lambda item: str(item[0]).lower())]
    return lines + ["-%s = %s" % (key, value) for key, value in ipv6_sysctls(inputs).items()]


def rings_lines(inputs):
    """The udev rules that set each fabric port's ring sizes when it appears, by its udev NAME and its kernel name."""
    return ['ACTION=="add", SUBSYSTEM=="net", %s=="%s", RUN+="/usr/sbin/ethtool -G $name rx %s tx %s"' % (key, ring["name"], ring["rx"], ring["tx"])
            for ring in inputs.get("rings") or [] for key in ("NAME", "KERNEL")]


def files(inputs):
    """The files the role writes on this node: kind, dest, mode, src (the template), and what the template prints
    (``link`` for a networkd file, ``lines`` for the netplan, sysctl and rings files; netplan's ``validate`` command).

    inputs: backend, in_container, fabric_links, rings (the plan's), mtu, netplan_renderer, ipv6_link_local, ipv6_disable,
    live_sysctls (the node's read), sysctls, memlock, and paths (networkd_dir, networkd_prefix, netplan_file,
    netplan_validate, sysctl_file, rings_rule, limits_file).
    """
    paths = inputs["paths"]
    out = []
    if not inputs.get("in_container"):
        if inputs.get("backend") == "networkd":
            for link in inputs.get("fabric_links") or []:
                out.append({"kind": "network", "dest": "%s/%s-%s.network" % (paths["networkd_dir"], paths["networkd_prefix"], link["link"]),
                            "mode": "0644", "src": "fabric.network.j2", "link": link})
        else:
            out.append({"kind": "network", "dest": paths["netplan_file"], "mode": "0600", "src": "fabric-netplan.yaml.j2",
                        "validate": paths["netplan_validate"], "lines": netplan_lines(inputs)})
        out.append({"kind": "sysctl", "dest": paths["sysctl_file"], "mode": "0644", "src": "sysctl.conf.j2", "lines": sysctl_lines(inputs)})
        if inputs.get("rings"):
            out.append({"kind": "rings", "dest": paths["rings_rule"], "mode": "0644", "src": "rings.rules.j2", "lines": rings_lines(inputs)})
    if str(inputs.get("memlock")):
        out.append({"kind": "limits", "dest": paths["limits_file"], "mode": "0644", "src": "limits.conf.j2"})
    return out


def apply_script(inputs):
    """The handler's shell script that applies the fabric addresses to the fabric interfaces only, then waits for them.

    networkd reconfigures just those links, netplan is generated (never ``netplan apply``, which restarts every interface)
    and NetworkManager brings up just their profiles. inputs: backend, netplan_renderer, fabric_links.
    """
    links = inputs.get("fabric_links") or []
    out = ["set -eu"]
    if inputs.get("backend") == "netplan":
        out.append("netplan generate")
    if inputs.get("backend") == "networkd" or inputs.get("netplan_renderer") == "networkd":
        out += ["networkctl reload", "networkctl reconfigure %s" % " ".join(str(link["name"]) for link in links)]
    else:
        out.append("nmcli connection reload")
        out += ['nmcli --wait 30 connection up "netplan-%s"' % link["name"] for link in links]
    out += ["# The addresses come asynchronously; the RoCE v2 GIDs follow them.",
            "i=0",
            'while [ "$i" -lt 150 ]; do',
            "  missing="]
    for link in links:
        out += ['  case "$(ip -4 -o addr show dev %s)" in' % link["name"],
                '    *" %s/%s "*) ;;' % (link["address"], link["prefix"]),
                '    *) missing="$missing %s" ;;' % link["name"],
                "  esac"]
    out += ['  [ -z "$missing" ] && exit 0',
            "  i=$((i + 1))",
            "  sleep 0.2",
            "done",
            'echo "the fabric address did not appear on:$missing" >&2']
    out += ["networkctl status %s >&2 2>/dev/null || nmcli device show %s >&2 || true" % (link["name"], link["name"]) for link in links]
    out.append("exit 1")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the role's phases
# One structure per step of the role (tasks/plan_<phase>.yml sets it as _fabric_phase_<phase>, or vars/main.yml renders
# it where it is used: checks, report), each computed from the inputs and the node reads the role made by then.
# ``published`` maps a fact name to {member: its value} for what the members published with set_fact (fabric_links,
# _fabric_phase_gid, fabric_check_result).

def phase_values(values, published=None):
    """The plan's inputs from the variables by their names (VARIABLES): each under the plan's key; the values the role
    computed (host, group, model, the node's reads) as they are."""
    names = set(VARIABLES.values())
    out = {key: value for key, value in values.items() if key not in names}
    out.update((key, values.get(var)) for key, var in VARIABLES.items())
    return out


def phase_inputs(inputs, published=None):
    """From the inputs alone: the fabric links, what fabric_check reads before the change, the sysctls it reads."""
    return {"links": links(inputs), "pre_args": pre_args(inputs), "sysctl_keys": sysctl_keys(inputs)}


def phase_read(inputs, published=None):
    """From the node's read (``pre``): the backend, a container, what blocks a change, what differs, the rings."""
    return {"backend": backend(inputs), "container": container(inputs), "backend_problems": backend_problems(inputs),
            "live_differs": live_differs(inputs), "rings": rings(inputs), "sysctls_differ": sysctls_differ(inputs)}


def phase_gid(inputs, published=None):
    """After the GID index was resolved (``gid``): this rank's NCCL/Gloo environment and its RDMA ports (published
    for the peers' bandwidth tests)."""
    return {"rank_env": rank_env(inputs), "bw_links": bw_links(inputs)}


def phase_checks(inputs, published=None):
    """Once every member published its links and GID phase: what to check, whom to ping, the bandwidth tests."""
    published = published or {}
    peer_links = dict((peer, value or []) for peer, value in (published.get("fabric_links") or {}).items())
    peer_plans = dict((member, (value or {}).get("bw_links") or [])
                      for member, value in (published.get("_fabric_phase_gid") or {}).items())
    return {"post_interfaces": post_interfaces(inputs), "ping_peers": ping_peers(inputs, peer_links),
            "bandwidth": bandwidth(inputs, peer_plans), "server_timeout": server_timeout(inputs)}


def phase_result(inputs, published=None):
    """After the checks (``post``, ``bw_sent``, ``bw_received``): this node's result, as data."""
    return {"bw_results": bw_results(inputs), "bw_low": bw_low(inputs), "check_problems": check_problems(inputs),
            "check_result": check_result(inputs)}


def phase_report(inputs, published=None):
    """Once every member published fabric_check_result: the group's report and the line a passing check prints."""
    results = (published or {}).get("fabric_check_result") or {}
    return {"report": report(inputs, results), "summary": summary(inputs)}


# Phase -> (its function, the published facts it reads, whose: "peers" or "members").
PHASES = {
    "values": (phase_values, ()),
    "inputs": (phase_inputs, ()),
    "read": (phase_read, ()),
    "gid": (phase_gid, ()),
    "checks": (phase_checks, (("fabric_links", "peers"), ("_fabric_phase_gid", "members"))),
    "result": (phase_result, ()),
    "report": (phase_report, (("fabric_check_result", "members"),)),
    # Single values: the input rules as the plan sees them, the files, the handler's script.
    "input_problems": (lambda inputs, published=None: input_problems(inputs), ()),
    "files": (lambda inputs, published=None: files(inputs), ()),
    "apply_script": (lambda inputs, published=None: apply_script(inputs), ()),
}
