# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The qualify role's plan and its checks of the group (private; issue #27).

The node's own measurements and verdicts are module_utils.qualify's (run by the module dspark.cluster.node_qualify
on each node). This module plans what the node checks (the disks and their needs, the ports, the fabric links and
the peers to ping), turns the fabric_check result into checks of the same shape, and judges the group from what
every member measured. A check: {check, subject, value, threshold, verdict, message, fix, variable, scope}.
Pure Python, no Ansible imports.
"""

from __future__ import annotations

import base64
import ipaddress
import json

from ansible_collections.dspark.cluster.plugins.module_utils import qualify as _judge
from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_engines, _inputs, _serve_lmcache

FAIL = "fail"
PASS = "pass"
SKIP = "skip"
VERDICTS = ("fail", "warn", "pass", "info", "skip")

# What qualify_fabric_end_to_end accepts.
FABRIC_MODES = ("auto", "always", "never")

# The role's variables each part reads, by their names: the lookup dspark.cluster.role_vars hands them over
# (reads='qualify_<part>', registered in _role_vars.READS), so that none is copied by hand under another name.
_GID = ("qualify_gid_interval",)
_FLOOR = ("qualify_bandwidth_min_gbits", "qualify_bandwidth_min_fraction")
VARIABLES = {
    "disks": ("qualify_model_bytes", "qualify_disk_reserve_bytes", "qualify_disk_min_inodes", "qualify_docker_root",
              "qualify_docker_root_min_bytes"),
    "links": ("qualify_link_min_speed_mbps",),
    "fabric_checks": ("qualify_fabric_end_to_end",),
    "group_checks": ("qualify_time_max_offset_ms", "qualify_time_sync_required"),
    "gid_checks": _GID,
    "bandwidth_floor": _FLOOR,
    "rdma_checks": _GID + _FLOOR,
    "rdma_skip": ("qualify_rdma",),
    "bandwidth_plan": ("qualify_bandwidth_port",),
    "memory_shares": ("qualify_memory_fraction",),
}


def check(name, subject, value, threshold, verdict, message, fix=None, variable=None, scope="node"):
    return {"check": name, "subject": subject, "value": value, "threshold": threshold, "verdict": verdict,
            "message": message, "fix": fix, "variable": variable, "scope": scope}


def _int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _num(value, default=0.0):
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def disks(inputs):
    """node_qualify's `disks`: the model cache (what the model still needs plus the reserve) and Docker's root.

    inputs: VARIABLES["disks"] by their names (qualify_model_bytes 0: the checkpoint manifest's size), hf_cache,
    manifest_bytes (the size a member's checkpoint manifest gives; 0: none), present_bytes (what of the model the
    cache holds already) or present_path (where the model is in the cache: node_qualify measures it, and its label's
    {present} says what it found); lmcache_disk_dir and lmcache_disk_gb (LMCache's disk tier, '' when none);
    lmcache_l1_gb (0 when serve_lmcache is off), lmcache_group and lmcache_rank (its shared-memory segment's name).
    """
    model = _int(inputs.get("qualify_model_bytes"))
    source = "qualify_model_bytes"
    if not model and _int(inputs.get("manifest_bytes")):
        model, source = _int(inputs.get("manifest_bytes")), "the checkpoint manifest"
    measured = bool(inputs.get("present_path"))
    present = _int(inputs.get("present_bytes"))
    need = _int(inputs.get("qualify_disk_reserve_bytes")) + (0 if measured else max(0, model - present))
    # `variable` names the path's variable (the module's Fix offers another path); the label, what sets the need.
    out = [{"path": inputs["hf_cache"], "need_bytes": need, "need_inodes": _int(inputs.get("qualify_disk_min_inodes")),
            "variable": "dspark_hf_cache",
            "label": "the model cache: %s" % (
                "the model's %d bytes (%s), %s already there, plus qualify_disk_reserve_bytes"
                % (model, source, "{present}" if measured else min(present, model))
                if model else "qualify_disk_reserve_bytes only (qualify_model_bytes is 0 and no member has a checkpoint "
                              "manifest yet: set it to the checkpoint's size)")}]
    if measured and model:
        out[0].update(model_bytes=model, present_path=inputs["present_path"])
    if inputs.get("qualify_docker_root") and _int(inputs.get("qualify_docker_root_min_bytes")) > 0:
        out.append({"path": inputs["qualify_docker_root"], "need_bytes": _int(inputs["qualify_docker_root_min_bytes"]),
                    "need_inodes": 0, "variable": "qualify_docker_root",
                    "label": "Docker's data root: qualify_docker_root_min_bytes"})
    # LMCache's L1 segment (serve_lmcache, issue #45) in the /dev/shm that vLLM shares with it (ipc: host): the server
    # refuses to start when /dev/shm cannot hold the L1; vLLM needs its 160 MiB beside it. A running server's segment
    # counts as there (its apparent size is the whole L1).
    if _num(inputs.get("lmcache_l1_gb")) > 0:
        l1 = int(_num(inputs["lmcache_l1_gb"]) * 1024 ** 3)
        segment = "/dev/shm/lmcache_l1_pool_" + _serve_lmcache.shm_name(inputs.get("lmcache_group"), inputs.get("lmcache_rank"))
        out.append({"path": "/dev/shm", "need_bytes": _serve_lmcache.ENGINE_SHM_MIB * 1024 ** 2, "need_inodes": 0,
                    "variable": "serve_lmcache_l1_size_gb", "model_bytes": l1, "present_path": segment,
                    "label": "LMCache's L1 (serve_lmcache_l1_size_gb=%s, {present} bytes of it there already) and vLLM's "
                             "160 MiB" % inputs["lmcache_l1_gb"],
                    "fix": "Lower serve_lmcache_l1_size_gb, or give the node's /dev/shm room for it (a tmpfs: mount -o "
                           "remount,size=<bytes> /dev/shm, and its size in /etc/fstab)"})
    # LMCache's disk tier (serve_lmcache_disk_dir, issue #45): its bound less what it holds already.
    if inputs.get("lmcache_disk_dir"):
        size = _int(inputs.get("lmcache_disk_gb")) * 1024 ** 3
        out.append({"path": inputs["lmcache_disk_dir"], "need_bytes": 0, "need_inodes": 0,
                    "variable": "serve_lmcache_disk_dir", "model_bytes": size, "present_path": inputs["lmcache_disk_dir"],
                    "label": "LMCache's disk tier: serve_lmcache_disk_size_gb=%d GB, {present} bytes of it there already"
                             % _int(inputs.get("lmcache_disk_gb"))})
    return out


def memory_shares(inputs):
    """node_qualify's `memory_shares`: every engine of the node's group, the main engine first (qualify_memory_fraction,
    serve_gpu_memory_utilization on a node with a GPU), then its sidecars (issue #46), each {name, share, variable}.

    inputs: qualify_memory_fraction, sidecars (the group's dspark_sidecars). A list that _group_engines refuses is
    preflight's to name: here it gives the shares it could read, a share outside 0 < x < 1 left out.
    """
    shares = []
    main = _inputs.as_float(inputs.get("qualify_memory_fraction"))
    if main is not None:
        shares.append({"name": _group_engines.MAIN, "share": main, "variable": "qualify_memory_fraction"})
    value = inputs.get("sidecars")
    if main == 0:
        # A node without a GPU (qualify_memory_fraction 0): vLLM's CPU build sizes its KV cache by VLLM_CPU_KVCACHE_SPACE,
        # no engine's share sizes anything there.
        return shares
    engines, dummy = _group_engines.sidecars(value)
    # sidecars() reads every mapping of the list, in order, into one engine: their indexes name the variables.
    indexes = [index for index, entry in enumerate(value) if isinstance(entry, dict)] if isinstance(value, list) else []
    for index, engine in zip(indexes, engines):
        share = engine["gpu_memory_utilization"]
        if share is None or not 0 < share < 1:
            continue
        name = engine["name"] if isinstance(engine["name"], str) and engine["name"] else "%s[%d]" % (_group_engines.VAR, index)
        shares.append({"name": name, "share": share,
                       "variable": "%s[%d].gpu_memory_utilization" % (_group_engines.VAR, index)})
    return shares


def links(inputs):
    """node_qualify's `links`: the fabric interface and the second one when the fabric role has one.

    inputs: interface, secondary_interface, qualify_link_min_speed_mbps.
    """
    speed = _int(inputs.get("qualify_link_min_speed_mbps"))
    out = [{"name": inputs["interface"], "variable": "dspark_fabric_interface", "min_speed_mbps": speed}]
    if inputs.get("secondary_interface"):
        out.append({"name": inputs["secondary_interface"], "variable": "fabric_secondary_interface",
                    "min_speed_mbps": speed})
    return out


def read_interfaces(inputs):
    """fabric_check's `interfaces` to read the links as they are (nothing required: the fabric may not be set up)."""
    return [{"name": item["name"], "variable": item["variable"], "require_up": False} for item in links(inputs)]


def ping_interfaces(inputs):
    """fabric_check's `interfaces` for the end-to-end check: the fabric interface at its MTU with its address.

    inputs: interface, mtu, address, cidr.
    """
    prefix = ipaddress.ip_network(str(inputs["cidr"]), strict=False).prefixlen
    return [{"name": inputs["interface"], "variable": "dspark_fabric_interface", "mtu": _int(inputs["mtu"], 9000),
             "address": "%s/%d" % (inputs["address"], prefix)}]


def unaddressed(inputs):
    """The members (in rank order) that do not hold their fabric address. inputs: members, addressed ({host: bool})
    or measured ({host: node_qualify's result, whose `fabric` says it, or None})."""
    addressed_of = inputs.get("addressed")
    if addressed_of is None:
        addressed_of = dict((host, bool(((res or {}).get("fabric") or {}).get("addressed")))
                            for host, res in (inputs.get("measured") or {}).items())
    return [host for host in inputs.get("members") or [] if not addressed_of.get(host)]


def ports(inputs):
    """node_qualify's `ports`: the API and rendezvous ports, on the head (the only rank that listens on them)."""
    if not inputs.get("is_head"):
        return []
    return [{"port": _int(inputs["api_port"]), "label": "the API", "variable": "dspark_api_port"},
            {"port": _int(inputs["master_port"]), "label": "the rendezvous (master port)",
             "variable": "dspark_master_port"}]


def addressed(inputs):
    """Whether fabric_check's read-only result (``read``) shows ``address`` on the fabric interface (the fabric was
    set up)."""
    address = inputs.get("address")
    for link in (inputs.get("read") or {}).get("links") or []:
        if any(str(a).split("/", maxsplit=1)[0] == address for a in link.get("ipv4") or []):
            return True
    return False


def peers(inputs):
    """fabric_check's `peers`: every other member's fabric address, from this node's fabric interface at the MTU.

    inputs: host, interface, mtu, addresses ({member: its dspark_fabric_address} of the group).
    """
    out = []
    for host, address in (inputs.get("addresses") or {}).items():
        if host == inputs["host"] or not address:
            continue
        out.append({"name": host, "address": address, "interface": inputs["interface"],
                    "mtu": _int(inputs["mtu"], 9000)})
    return out


def fabric_checks(inputs):
    """Checks from fabric_check's result (links with the MTU and address, and DF pings at the full MTU both ways).

    inputs: qualify_fabric_end_to_end, result (the fabric_check run; None or skipped when it did not run),
    unaddressed (the members without their fabric address, for the skip's message).
    """
    mode = inputs.get("qualify_fabric_end_to_end")
    result = inputs.get("result")
    if not result or result.get("skipped"):
        result = None
    unaddressed = inputs.get("unaddressed") or []
    if mode == "never":
        return [check("mtu_end_to_end", "fabric", None, None, SKIP,
                      "not checked (qualify_fabric_end_to_end is never)", variable="qualify_fabric_end_to_end")]
    if result is None:
        return [check("mtu_end_to_end", "fabric", None, None, SKIP,
                      "not checked: the fabric is not set up yet on %s (no fabric address; a first provision). The "
                      "fabric role checks it end to end once configured." % ", ".join(unaddressed or ["a member"]),
                      variable="qualify_fabric_end_to_end")]
    out = []
    for link in result.get("links") or []:
        problems = link.get("problems") or []
        out.append(check("fabric_link", link.get("interface"), {"mtu": link.get("mtu"), "ipv4": link.get("ipv4")},
                         {"mtu": link.get("mtu_expected"), "address": link.get("address_expected")},
                         FAIL if problems else PASS, " ".join(_message(p) for p in problems) or "MTU and address as planned",
                         fix=" ".join(_fix(p) for p in problems) or None, variable=link.get("variable")))
    for ping in result.get("pings") or []:
        ok = bool(ping.get("ok"))
        subject = "%s -> %s (%s)" % (ping.get("interface"), ping.get("peer"), ping.get("address"))
        answered = (ping.get("size") or 0, ping.get("received"), ping.get("transmitted"))
        message = ("%d-byte DF pings answered (%s of %s)" % answered
                   if ok else "no %d-byte ping with Don't Fragment came back from %s (%s of %s answered%s)" % (
                       ping.get("size") or 0, ping.get("peer"), ping.get("received"), ping.get("transmitted"),
                       "; the packet is too long for a link on the way" if ping.get("too_long") else ""))
        out.append(check("mtu_end_to_end", subject, ping.get("received"), ping.get("mtu"), PASS if ok else FAIL,
                         message, fix=None if ok else "the MTU must be %s on both ends and every switch port between "
                         "(`ip link show` on both nodes); after a firmware reboot re-run the fabric role"
                         % ping.get("mtu"), variable="dspark_fabric_mtu"))
    return out


def _message(problem):
    return problem.split(" Fix: ")[0]


def _fix(problem):
    parts = problem.split(" Fix: ", 1)
    return parts[1] if len(parts) > 1 else ""


def group_checks(inputs):
    """The group's checks (clocks, interface names), judged on the head from what every member measured.

    inputs: measured ({host: node_qualify's result, or None when the member did not answer}), planned_links ({host:
    the `links` it was asked to check}), qualify_time_max_offset_ms, qualify_time_sync_required.
    """
    planned_links = inputs.get("planned_links") or {}
    members = {}
    for host, res in (inputs.get("measured") or {}).items():
        if not res:
            continue
        members[host] = {"time": res.get("time") or {}, "links": list(planned_links.get(host) or [])}
    checks = _judge.judge_group(members, max_offset_ms=_int(inputs.get("qualify_time_max_offset_ms"), 100),
                                offset_variable="qualify_time_max_offset_ms")
    if inputs.get("qualify_time_sync_required") in (False, "false", "False", "no"):
        # Clocks nobody keeps in step (qualify_time_sync_required: false): their state is reported, not a failure.
        checks = [dict(c, verdict="warn", message=c["message"] + " (not required: qualify_time_sync_required is "
                       "false)") if c["check"] == "time" and c["verdict"] == FAIL else c for c in checks]
    return checks


def rdma_port(inputs):
    """The RDMA device and port of the fabric interface, from roce_gid_index's result (``gid``), else None.

    inputs: gid, interface.
    """
    for member in (inputs.get("gid") or {}).get("members") or []:
        if member.get("netdev") == inputs.get("interface"):
            return {"device": member.get("device"), "ib_port": _int(member.get("port"), 1)}
    return None


def gid_checks(inputs):
    """The RoCE v2 GID of the fabric address: it exists, and two reads ``interval`` seconds apart give one index.

    inputs: first, second (roce_gid_index results; second None or skipped in fast mode), qualify_gid_interval, hca.
    """
    first, second = inputs.get("first") or {}, inputs.get("second") or {}
    hca = inputs.get("hca")
    if first.get("skipped"):
        return []
    if first.get("failed") or first.get("gid_index") is None:
        return [check("gid", hca, None, "a RoCE v2 GID for the fabric address", FAIL,
                      "no usable RoCE v2 GID index for dspark_fabric_hca=%s: %s" % (hca, first.get("msg") or "none found"),
                      fix="check that the HCA carries the fabric address (`show_gids`, `ibdev2netdev`), that the link is "
                          "up, and that dspark_fabric_hca names it", variable="dspark_fabric_hca")]
    index = first["gid_index"]
    if not second or second.get("skipped"):
        return [check("gid", hca, index, None, PASS, "RoCE v2 GID index %s carries the fabric address" % index,
                      variable="dspark_fabric_hca")]
    later = second.get("gid_index")
    if second.get("failed") or later != index:
        return [check("gid", hca, {"first": index, "second": later}, "the same index on two reads", FAIL,
                      "the RoCE v2 GID index moved from %s to %s within %s s (a link event, or an address being "
                      "changed)" % (index, later if later is not None else "none", inputs.get("qualify_gid_interval")),
                      fix="find what changes the link (`ip monitor link address`, the network manager); the serve role "
                          "resolves the index at every start, but NCCL fails when it moves while the group runs",
                      variable="dspark_fabric_hca")]
    return [check("gid", hca, index, "the same index on two reads", PASS,
                  "RoCE v2 GID index %s, the same on two reads %s s apart" % (index, inputs.get("qualify_gid_interval")),
                  variable="dspark_fabric_hca")]


def bandwidth_floor(inputs):
    """The lowest acceptable RDMA bandwidth in Gb/s: qualify_bandwidth_min_gbits, or qualify_bandwidth_min_fraction of
    the link's speed when the link reports one and that is higher. inputs: qualify_bandwidth_min_gbits,
    qualify_bandwidth_min_fraction, checks (this node's node_qualify checks, whose link_speed gives the speed),
    interface."""
    floor = float(inputs.get("qualify_bandwidth_min_gbits") or 0)
    speed = link_speed(inputs.get("checks"), inputs.get("interface"))
    if speed > 0:
        floor = max(floor, float(inputs.get("qualify_bandwidth_min_fraction") or 0) * speed / 1000.0)
    return round(floor, 3)


def link_speed(checks, interface):
    """The speed in Mb/s that node_qualify measured for ``interface`` (0 when it has none)."""
    for item in checks or []:
        if item.get("check") == "link_speed" and item.get("subject") == interface and isinstance(item.get("value"), int):
            return item["value"] if item["value"] > 0 else 0
    return 0


def bandwidth_checks(inputs):
    """Checks from the head's rdma_bandwidth runs to each worker. inputs: runs (the registered loop results), floor."""
    out = []
    floor = float(inputs.get("floor") or 0)
    for run in (inputs.get("runs") or {}).get("results") or []:
        if run.get("skipped"):
            continue
        item = run.get("item") or {}
        subject = "%s -> %s (%s)" % (item.get("device"), item.get("peer"), item.get("server"))
        gbits = run.get("gbits_average")
        if run.get("failed") or gbits is None:
            out.append(check("rdma_bandwidth", subject, None, floor, FAIL,
                             "ib_write_bw to %s did not run: %s" % (item.get("peer"), run.get("msg") or "no result"),
                             fix="check the peer's server (perftest installed, the TCP port free), the GID index and "
                                 "the link on both nodes", variable="qualify_bandwidth_min_gbits"))
        elif gbits < floor:
            out.append(check("rdma_bandwidth", subject, gbits, floor, FAIL,
                             "RDMA write bandwidth to %s is %.2f Gb/s, below the floor %.2f Gb/s"
                             % (item.get("peer"), gbits, floor),
                             fix="half a ConnectX port down, an MTU of 1500 on the way, or flow control off: check "
                                 "both halves (`ibdev2netdev`), the MTU end to end and `ethtool -a`; or lower "
                                 "qualify_bandwidth_min_gbits / qualify_bandwidth_min_fraction",
                             variable="qualify_bandwidth_min_gbits"))
        else:
            out.append(check("rdma_bandwidth", subject, gbits, floor, PASS,
                             "RDMA write bandwidth to %s is %.2f Gb/s (floor %.2f Gb/s)" % (item.get("peer"), gbits, floor),
                             variable="qualify_bandwidth_min_gbits"))
    return out


def rdma_checks(inputs):
    """This node's RoCE checks: ``skip`` (rdma_skip's) when the RoCE checks did not run, else gid_checks of ``gid``
    plus bandwidth_checks of ``bandwidth`` (runs, and floor: bandwidth_floor's checks and interface); the role's
    VARIABLES["rdma_checks"] by their names, each handed to the part that reads it."""
    if inputs.get("skip"):
        return list(inputs["skip"])
    bandwidth = inputs.get("bandwidth") or {}
    gid = dict(inputs.get("gid") or {}, **{name: inputs.get(name) for name in VARIABLES["gid_checks"]})
    floor = dict(bandwidth.get("floor") or {}, **{name: inputs.get(name) for name in VARIABLES["bandwidth_floor"]})
    return gid_checks(gid) + bandwidth_checks({"runs": bandwidth.get("runs") or {}, "floor": bandwidth_floor(floor)})


def bandwidth_peer(hostvars_of):
    """What a member published for the bandwidth tests: its fabric address, rank and RDMA port."""
    hostvars_of = hostvars_of or {}
    return {"address": hostvars_of.get("dspark_fabric_address"), "rank": hostvars_of.get("dspark_rank"),
            "port": hostvars_of.get("_qualify_rdma_port")}


def rdma_skip(inputs):
    """Why the RoCE checks (GID, bandwidth) do not run on this node, as one skip check, or [] when they run.

    inputs: qualify_rdma, hca, container (fabric_check's), unaddressed.
    """
    reason = None
    if not inputs.get("qualify_rdma") or inputs.get("qualify_rdma") in ("false", "False", "no"):
        reason = "qualify_rdma is false"
    elif not inputs.get("hca"):
        reason = "dspark_fabric_hca is not set (no RDMA device named)"
    elif inputs.get("container"):
        reason = "this node is a container (%s): its RDMA devices are the host's" % inputs["container"]
    elif inputs.get("unaddressed"):
        reason = "the fabric is not set up yet on %s (a first provision)" % ", ".join(inputs["unaddressed"])
    if reason is None:
        return []
    return [check("gid", inputs.get("hca") or "rdma", None, None, SKIP, "RoCE not checked: %s" % reason,
                  variable="qualify_rdma")]


# TCP port of one measurement: base + sender's rank x PORT_STRIDE + receiver's rank (groups below 64 members).
PORT_STRIDE = 64


def bandwidth_plan(inputs):
    """Every ordered pair of the group, one measurement each: this member receives from every other member (one
    server per sender, started at once) and sends to every other member in turn (the senders go one at a time).

    inputs: rank, qualify_bandwidth_port, port ({device, ib_port} of this node or None), peers ({host: bandwidth_peer} of the other
    members).
    """
    base = _int(inputs.get("qualify_bandwidth_port"), 18600)
    mine = inputs.get("port")
    rank = _int(inputs.get("rank"))
    plan = {"receive": [], "send": []}
    if not mine:
        return plan
    for host, peer in (inputs.get("peers") or {}).items():
        if not peer or not peer.get("port") or not peer.get("address"):
            continue
        other = _int(peer.get("rank"))
        plan["receive"].append(dict(mine, peer=host, tcp_port=base + other * PORT_STRIDE + rank))
        plan["send"].append(dict(mine, peer=host, server=peer["address"], tcp_port=base + rank * PORT_STRIDE + other))
    return plan


def manifest_bytes(inputs):
    """The model's size from the checkpoint manifest a member holds (its total_size; the largest when several
    differ), else 0. inputs: slurped ({host: ansible.builtin.slurp's result or None})."""
    best = 0
    for result in (inputs.get("slurped") or {}).values():
        if not result or result.get("failed") or not result.get("content"):
            continue
        try:
            doc = json.loads(base64.b64decode(result["content"]).decode("utf-8"))
            best = max(best, int(doc.get("total_size") or 0))
        except (ValueError, TypeError, AttributeError):
            continue
    return best


def gpu_checks(inputs):
    """The GPU seen from inside a container of the serving image: `nvidia-smi -L` run with --gpus all.

    inputs: image (node_qualify's `image`: docker, present; or docker image inspect's result), run (docker run's result,
    None when skipped), want (GPUs per node), image_name.
    """
    image = inputs.get("image") or {}
    name = inputs.get("image_name")
    docker = image.get("docker") if "docker" in image else not (image.get("skipped") or image.get("rc") is None)
    present = image.get("present") if "present" in image else image.get("rc") == 0
    if not docker:
        return [check("gpu", "container", None, None, SKIP, "GPU in a container not checked: Docker is not there yet "
                      "(the docker_runtime role installs it)", variable="qualify_gpu")]
    if not present:
        return [check("gpu", "container", None, None, SKIP, "GPU in a container not checked: the serving image %s is not "
                      "on this node yet (docker_runtime loads it; qualify again after)" % name, variable="qualify_gpu")]
    run = inputs.get("run") or {}
    want = _int(inputs.get("want"), 1)
    lines = [line for line in (run.get("stdout") or "").splitlines() if line.strip().startswith("GPU ")]
    if run.get("rc") != 0 or len(lines) < want:
        said = (run.get("stderr") or run.get("stdout") or run.get("msg") or "").strip().splitlines()
        return [check("gpu", "container", len(lines), want, FAIL,
                      "the serving image sees %d GPU(s) with --gpus all, %d wanted (dspark_gpus_per_node)%s"
                      % (len(lines), want, (": " + said[-1][:200]) if said else ""),
                      fix="check the NVIDIA Container Toolkit (`nvidia-ctk runtime configure --runtime=docker`, then "
                          "restart docker) and the driver (`nvidia-smi` on the host); the docker_runtime role's GPU "
                          "smoke test does the same", variable="dspark_gpus_per_node")]
    return [check("gpu", "container", len(lines), want, PASS, "the serving image sees %s" % "; ".join(lines),
                  variable="dspark_gpus_per_node")]


def counts(checks):
    out = dict((v, 0) for v in VERDICTS)
    for item in checks:
        out[item.get("verdict")] = out.get(item.get("verdict"), 0) + 1
    return out


def failures(checks):
    """One line per failing check: subject, message and its fix."""
    lines = []
    for item in checks:
        if item.get("verdict") != FAIL:
            continue
        line = "%s %s: %s" % (item.get("check"), item.get("subject"), item.get("message"))
        if item.get("fix"):
            line += " Fix: %s" % item["fix"]
        lines.append(line)
    return lines


def result(inputs):
    """The qualify_result fact of one host (inputs: host, group, node, fabric, rdma, gpu, group_level: lists of checks):
    every check, the node's first, and whether none failed."""
    checks = [dict(c, scope=c.get("scope") or "node") for c in (inputs.get("node") or [])]
    checks += list(inputs.get("fabric") or [])
    checks += list(inputs.get("rdma") or [])
    checks += list(inputs.get("gpu") or [])
    checks += [dict(c, scope="group") for c in (inputs.get("group_level") or [])]
    return {"host": inputs["host"], "group": inputs["group"], "ok": not any(c.get("verdict") == FAIL for c in checks),
            "counts": counts(checks), "checks": checks}
