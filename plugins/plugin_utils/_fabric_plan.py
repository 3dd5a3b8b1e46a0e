# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric role's validation and planning (was Jinja in roles/fabric/vars/main.yml).

Each function takes ``inputs``: the role's variables as ``_fabric_plan_inputs`` in the role's vars gathers them
(``model`` is the group model of ``_group_model``, ``pre``/``gid``/``post`` the node reads registered by the role's
tasks) and returns what one variable of the role used to compute. The filter ``dspark.cluster.fabric_plan`` exposes
them by name. Pure Python (stdlib ``ipaddress``), no Ansible imports, no I/O.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re

IFNAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
_DIGITS_RE = re.compile(r"^[0-9]+$")
# The head receives each worker's test on the worker's port + this offset.
HEAD_PORT_OFFSET = 100


def _int(value, default=0):
    """Jinja's ``| int``: a number, else ``default``."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        try:
            return int(float(str(value).strip()))
        except ValueError:
            return default


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


def input_problems(inputs):
    """Everything wrong with the inputs, checked on the controller before any node is touched."""
    model = inputs["model"]
    group = inputs.get("group")
    shown = group if group is not None else "?"
    problems = []
    if not model.get("known") or inputs.get("host") not in model["members"]:
        problems.append("dspark_group=%s is not an inventory group that holds this host. Fix: set dspark_group to the name of the serving group"
                        " of this host." % (group if group is not None else "(unset)"))
    iface = "" if inputs.get("interface") is None else str(inputs.get("interface"))
    if not IFNAME_RE.match(iface):
        problems.append("dspark_fabric_interface=%s is not a Linux interface name. Fix: set the ConnectX netdev that carries the fabric address,"
                        " e.g. enp1s0f1np1." % iface)
    if not str(inputs.get("hca") or ""):
        problems.append("dspark_fabric_hca is not set. Fix: set the RDMA device(s) of the fabric port in NCCL_IB_HCA syntax, e.g. rocep1s0f1"
                        " (ibdev2netdev prints the pairs).")
    mtu_text = str(inputs.get("mtu"))
    if not _DIGITS_RE.match(mtu_text) or not 1500 <= int(mtu_text) <= 9216:
        problems.append("dspark_fabric_mtu=%s is not an MTU between 1500 and 9216. Fix: 9000 on a direct ConnectX link." % mtu_text)
    cidr = "" if inputs.get("cidr") is None else str(inputs.get("cidr"))
    network = _net(cidr)
    if network is None:
        problems.append("dspark_fabric_cidr=%s is not an IPv4 network in CIDR form without host bits. Fix: write it as network/prefix,"
                        " e.g. 192.168.100.0/30." % cidr)
    addresses, bad, outside, pairs = [], [], [], []
    for member in model["members"]:
        text = str(model["addresses"].get(member, ""))
        pairs.append("%s=%s" % (member, text))
        address = _address(text) if "/" not in text else None
        if address is None:
            bad.append("%s=%s" % (member, text))
            continue
        addresses.append(text)
        if network is not None and not _usable(network, address):
            outside.append("%s=%s" % (member, text))
    if bad:
        problems.append("dspark_fabric_address is not an IPv4 address on %s. Fix: give every node of group %s its own fabric IPv4 inside"
                        " dspark_fabric_cidr." % (", ".join(bad), shown))
    if outside:
        span = _span(addresses) if len(addresses) > 1 else ""
        problems.append("dspark_fabric_cidr=%s does not hold (as usable host addresses) the fabric addresses %s of group %s (all: %s). Fix: set"
                        " dspark_fabric_cidr to a network that holds every address of the group%s, or correct dspark_fabric_address."
                        % (cidr, ", ".join(outside), shown, ", ".join(pairs), (", e.g. " + span) if span else ""))
    if len(set(addresses)) != len(addresses):
        problems.append("dspark_fabric_address repeats within group %s (%s). Fix: give every node its own address." % (shown, ", ".join(pairs)))
    second = inputs.get("secondary_interface") or ""
    if second:
        scidr = str(inputs.get("secondary_cidr"))
        snetwork = _net(scidr)
        if not IFNAME_RE.match(second) or second == iface:
            problems.append("fabric_secondary_interface=%s is not a Linux interface name other than dspark_fabric_interface. Fix: set the second"
                            " interface of the port, e.g. enP2p1s0f1np1, or leave it empty." % second)
        saddress = inputs.get("secondary_address") or ""
        if snetwork is None:
            problems.append("fabric_secondary_cidr=%s is not an IPv4 network in CIDR form without host bits. Fix: give the second interface its"
                            " own network, e.g. 192.168.101.0/30." % scidr)
        elif network is not None and network.overlaps(snetwork):
            problems.append("fabric_secondary_cidr=%s overlaps dspark_fabric_cidr=%s. Fix: each interface of the port needs its own subnet."
                            % (scidr, cidr))
        elif not saddress and not bad and network is not None and host_number(inputs) >= (
                snetwork.num_addresses - (1 if snetwork.prefixlen < 31 else 0)):
            problems.append("fabric_secondary_cidr=%s is too small for host number %d of dspark_fabric_address=%s. Fix: use a network as large as"
                            " dspark_fabric_cidr or set fabric_secondary_address." % (scidr, host_number(inputs), inputs.get("address")))
        elif saddress and (_address(saddress) is None or not _usable(snetwork, _address(saddress))):
            problems.append("fabric_secondary_address=%s is not a usable address of fabric_secondary_cidr=%s. Fix: choose an address inside it."
                            % (saddress, scidr))
    return problems


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


def backend_problems(inputs):
    """What the node itself says is wrong for the chosen backend (read before any change)."""
    pre = inputs.get("pre") or {}
    problems = []
    if container(inputs):
        if live_differs(inputs):
            problems.append("this node is a container (%s), whose interfaces belong to the container engine, and %s lack(s) the fabric address or"
                            " MTU %d. Fix: attach the container to its fabric network with dspark_fabric_address and MTU %d, or run the role on"
                            " the host." % (pre.get("container"), ", ".join(str(link["name"]) for link in links(inputs)), mtu(inputs), mtu(inputs)))
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


def files_to_write(inputs, files):
    """The rendered files whose checksum (sha1) or mode differs from what fabric_check read on the node."""
    paths = (inputs.get("pre") or {}).get("paths") or {}
    out = []
    for entry in files:
        now = paths.get(entry["dest"]) or {}
        if now.get("checksum") != hashlib.sha1(str(entry["content"]).encode("utf-8")).hexdigest() or now.get("mode") != entry["mode"]:
            out.append(entry)
    return out


def sysctls_differ(inputs):
    """Whether a live sysctl differs from fabric_sysctls (whitespace collapsed, as the kernel prints tabs)."""
    live = (inputs.get("pre") or {}).get("sysctls") or {}
    return any(" ".join(str(value).split()) != live.get(key, "") for key, value in (inputs.get("sysctls") or {}).items())


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
    """Who sends and receives what between the head and every worker (peer_plans: member -> its _fabric_bw_plan)."""
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
