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

import ipaddress

from ansible_collections.dspark.cluster.plugins.module_utils import qualify as _judge

FAIL = "fail"
PASS = "pass"
SKIP = "skip"
VERDICTS = ("fail", "warn", "pass", "info", "skip")

# What qualify_fabric_end_to_end accepts.
FABRIC_MODES = ("auto", "always", "never")


def check(name, subject, value, threshold, verdict, message, fix=None, variable=None, scope="node"):
    return {"check": name, "subject": subject, "value": value, "threshold": threshold, "verdict": verdict,
            "message": message, "fix": fix, "variable": variable, "scope": scope}


def _int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def disks(inputs):
    """node_qualify's `disks`: the model cache (what the model still needs plus the reserve) and Docker's root.

    inputs: hf_cache, model_bytes (0: unknown, the reserve only), present_bytes (what of the model the cache holds
    already), reserve_bytes, min_inodes, docker_root, docker_root_min_bytes.
    """
    model = _int(inputs.get("model_bytes"))
    present = _int(inputs.get("present_bytes"))
    need = max(0, model - present) + _int(inputs.get("reserve_bytes"))
    out = [{"path": inputs["hf_cache"], "need_bytes": need, "need_inodes": _int(inputs.get("min_inodes")),
            "variable": "qualify_model_bytes" if model else "qualify_disk_reserve_bytes",
            "label": "the model cache (dspark_hf_cache): %s" % (
                "the model's %d bytes, %d already there, plus the reserve" % (model, min(present, model))
                if model else "the reserve only (qualify_model_bytes is 0: set it to the checkpoint's size)")}]
    if inputs.get("docker_root") and _int(inputs.get("docker_root_min_bytes")) > 0:
        out.append({"path": inputs["docker_root"], "need_bytes": _int(inputs["docker_root_min_bytes"]),
                    "need_inodes": 0, "variable": "qualify_docker_root_min_bytes",
                    "label": "Docker's data root (qualify_docker_root)"})
    return out


def links(inputs):
    """node_qualify's `links`: the fabric interface and the second one when the fabric role has one."""
    speed = _int(inputs.get("min_speed_mbps"))
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
    """The members (in rank order) that do not hold their fabric address. inputs: members, addressed ({host: bool})."""
    addressed_of = inputs.get("addressed") or {}
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

    inputs: mode (qualify_fabric_end_to_end), result (the fabric_check run; None or skipped when it did not run),
    unaddressed (the members without their fabric address, for the skip's message).
    """
    mode = inputs.get("mode")
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
    the `links` it was asked to check}), max_offset_ms, time_sync_required.
    """
    planned_links = inputs.get("planned_links") or {}
    members = {}
    for host, res in (inputs.get("measured") or {}).items():
        if not res:
            continue
        members[host] = {"time": res.get("time") or {}, "links": list(planned_links.get(host) or [])}
    checks = _judge.judge_group(members, max_offset_ms=_int(inputs.get("max_offset_ms"), 100),
                                offset_variable="qualify_time_max_offset_ms")
    if inputs.get("time_sync_required") in (False, "false", "False", "no"):
        # Clocks nobody keeps in step (qualify_time_sync_required: false): their state is reported, not a failure.
        checks = [dict(c, verdict="warn", message=c["message"] + " (not required: qualify_time_sync_required is "
                       "false)") if c["check"] == "time" and c["verdict"] == FAIL else c for c in checks]
    return checks


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
    """The qualify_result fact of one host (inputs: host, group, node, fabric, group_level: lists of checks): every
    check, the node's first, and whether none failed."""
    checks = [dict(c, scope=c.get("scope") or "node") for c in (inputs.get("node") or [])]
    checks += list(inputs.get("fabric") or [])
    checks += [dict(c, scope="group") for c in (inputs.get("group_level") or [])]
    return {"host": inputs["host"], "group": inputs["group"], "ok": not any(c.get("verdict") == FAIL for c in checks),
            "counts": counts(checks), "checks": checks}
