# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serve role's input rules (private; registered in _rules_base.RULES, run through plugin_utils._role_rules).

Pure Python, no Ansible imports.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_engines, _inputs
from ansible_collections.dspark.cluster.plugins.plugin_utils._rules_base import HIDDEN, MOUNT_PATH_RE, ranges, rule
from ansible_collections.dspark.cluster.plugins.plugin_utils._rules_checkpoint import _checkpoint_hf_cache

# Keys reach vLLM from a 0600 file (--api-key in a YAML config, or its env file): characters that YAML, the shell or a
# header would read differently are refused, so that the key vLLM checks is the key the operator wrote.
KEY_RE = re.compile(r"^[A-Za-z0-9._~+/=:@-]+\Z")
SERVE_MOUNT_PATHS = ("serve_jit_cache_dir", "serve_config_dir", "serve_hotfix_node_dir")


_LOOPBACK_NAMES = frozenset(("localhost", "localhost.localdomain", "ip6-localhost"))


def is_loopback(host):
    """True when an API bind address (serve_host) listens on loopback only: 127.0.0.0/8, ::1, localhost."""
    text = str(host).strip().strip("[]").lower()
    if text in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


@rule("serve.open_api", ["serve_host", "serve_api_key", "serve_api_keys", "serve_allow_unauthenticated"])
def _serve_open_api(member):
    """Closed by default (issue #13): an API beyond loopback needs serve_api_key(s) or serve_allow_unauthenticated.
    The head decides (it serves the API); every member reports it, so that preflight says it once for the group."""
    head = member.member(member.group.ordered[0]) if member.group.ordered else member
    host = head["serve_host"]
    if host is None or is_loopback(host) or _inputs.is_true(head["serve_allow_unauthenticated"]):
        return []
    if head["serve_api_key"] or head["serve_api_keys"]:
        return []
    return [("serve_host", host, "makes the API of group %s listen beyond loopback (head %s) while serve_api_key and "
             "serve_api_keys are empty: anyone who reaches the port can use the model" % (member.group.name, head.host),
             "set serve_api_key (or serve_api_keys), or bind the API to 127.0.0.1 (serve_host), or accept an open API with "
             "serve_allow_unauthenticated: true")]


@rule("serve.engine_port", ["serve_edge", "serve_engine_port", "dspark_api_port", "dspark_master_port"])
def _serve_engine_port(member):
    """With the API edge (serve_edge), vLLM listens on 127.0.0.1:serve_engine_port: a TCP port that is neither the
    edge's (dspark_api_port) nor the group's rendezvous (dspark_master_port)."""
    if not _inputs.is_true(member["serve_edge"]):
        return []
    value = member["serve_engine_port"]
    port = _inputs.as_int(value)
    if port is None or isinstance(value, bool) or not 0 < port < 65536:
        return [("serve_engine_port", value, "is not a TCP port (1-65535)",
                 "set serve_engine_port to a free port for vLLM on loopback, e.g. 18888")]
    for var in ("dspark_api_port", "dspark_master_port"):
        if _inputs.as_int(member[var]) == port:
            return [("serve_engine_port", value, "equals %s: vLLM listens on 127.0.0.1:serve_engine_port behind the API "
                     "edge, which needs %s for itself" % (var, var), "give serve_engine_port another free port")]
    return []


SERVE_NUMBERS = ("serve_gpu_memory_utilization", "serve_max_num_seqs", "serve_max_num_batched_tokens", "serve_max_model_len",
                 "serve_start_timeout", "serve_mtp_num_tokens", "serve_memory_guard_mib", "serve_memory_guard_wait")


@rule("serve.numbers", SERVE_NUMBERS)
def _serve_numbers(member):
    """The fraction of GPU memory 0 < x <= 1; counts, lengths and the start timeout > 0; at least 5 MTP tokens (the
    checkpoint's block size); the memory guard's size and wait >= 0 (_spec_ranges)."""
    return ranges(member, SERVE_NUMBERS)


@rule("serve.api_keys", ["serve_api_key", "serve_api_keys"])
def _serve_api_keys(member):
    """serve_api_key(s) hold no control character and no white space around a key (a vault value with a newline),
    and each key has at least _inputs.API_KEY_MIN characters."""
    out = []
    key = member["serve_api_key"]
    found = _inputs.control_problem(key, secret=True) or _inputs.short_key_problem(key)
    if found:
        out.append(("serve_api_key", HIDDEN) + found)
    keys = member["serve_api_keys"]
    if isinstance(keys, (list, tuple)):
        for index, item in enumerate(keys):
            found = _inputs.control_problem(item, secret=True) or _inputs.short_key_problem(item)
            if found:
                out.append(("serve_api_keys", HIDDEN, "has element %d that %s" % (index, found[0]), found[1]))
                break
    return out


@rule("serve.one_key_setting", ["serve_api_key", "serve_api_keys"])
def _serve_one_key_setting(member):
    """At most one of serve_api_key and serve_api_keys is set."""
    keys = member["serve_api_keys"]
    if member["serve_api_key"] and keys and isinstance(keys, (list, tuple)):
        return [("serve_api_keys", HIDDEN, "is set together with serve_api_key (the keys are not shown)",
                 "set one of them: serve_api_key for one key, serve_api_keys for several")]
    return []


@rule("serve.key_characters", ["serve_api_key", "serve_api_keys"])
def _serve_key_characters(member):
    """Each API key is letters, digits and -._~+/=:@ only (no quote, backslash, `$`, `#`, inner white space or
    non-ASCII character); control characters and short keys are serve.api_keys'."""
    keys = member["serve_api_keys"]
    values = [("serve_api_key", member["serve_api_key"])]
    if isinstance(keys, (list, tuple)):
        values += [("serve_api_keys", item) for item in keys]
    bad = [var for var, key in values if isinstance(key, str) and key
           and not (_inputs.control_problem(key, secret=True) or _inputs.short_key_problem(key)) and not KEY_RE.match(key)]
    if not bad:
        return []
    return [(bad[0], HIDDEN, "has %d key(s) with white space, a quote, a backslash, `$`, `#` or a non-ASCII character (not "
             "shown)" % len(bad), "use keys of letters, digits and -._~+/=:@ only, e.g. the output of `openssl rand -hex 24`")]


@rule("serve.keys_off_argv", ["serve_extra_args", "serve_extra_env", "serve_api_key", "serve_api_keys"])
def _serve_keys_off_argv(member):
    """No key on vLLM's command line (serve_extra_args --api-key, or --config when several keys reach vLLM through
    it) nor in serve_extra_env's VLLM_API_KEY (the compose file is world-readable)."""
    out = []
    args = member["serve_extra_args"]
    keys = member["serve_api_keys"]
    several = isinstance(keys, (list, tuple)) and len(keys) > 1
    if isinstance(args, (list, tuple)):
        flags = []
        for arg in args:
            flag = str(arg).split("=", 1)[0].replace("_", "-")
            if (flag == "--api-key" or (several and flag == "--config")) and flag not in flags:
                flags.append(flag)
        if flags:
            out.append(("serve_extra_args", "<holds %s>" % ", ".join(flags),
                        "puts %s on vLLM's command line, which every local user sees (`ps`) and vLLM logs" % " and ".join(flags),
                        "set serve_api_key or serve_api_keys instead (several keys reach vLLM through its --config file)"))
    env = member["serve_extra_env"]
    if isinstance(env, dict) and "VLLM_API_KEY" in env:
        out.append(("serve_extra_env", "<sets VLLM_API_KEY>", "sets VLLM_API_KEY, which would be written to the "
                    "world-readable compose file", "set serve_api_key (a 0600 file on rank 0 only) and remove it from "
                    "serve_extra_env"))
    return out


@rule("serve.mount_paths", list(SERVE_MOUNT_PATHS))
def _serve_mount_paths(member):
    """The directories serve bind-mounts or writes (the model cache, JIT caches, config, recipe) are absolute paths
    without colons, white space or control characters (a bind mount is `source:target`)."""
    out = []
    for var in SERVE_MOUNT_PATHS:
        value = member[var]
        if value is None or (isinstance(value, str) and MOUNT_PATH_RE.match(value)):
            continue
        out.append((var, value, "is not an absolute path without colons, white space or control characters (it becomes "
                    "a bind mount `source:target`)", "choose a plain absolute path, e.g. %s" % (
                        (member.specs.get(var) or {}).get("default") or "/var/lib/dspark/hf")))
    return out


@rule("serve.hf_cache_path", ["dspark_hf_cache"], covered_by="checkpoint.hf_cache")
def _serve_hf_cache_path(member):
    """The serve role alone: dspark_hf_cache, its model mount, is an absolute path without colons or white space
    (preflight says it through checkpoint.hf_cache)."""
    return [problem for problem in _checkpoint_hf_cache(member) if problem[2] != "the Hugging Face cache directory of every node"]


@rule("serve.jit_cache_outside_model_cache", ["serve_jit_cache_dir", "dspark_hf_cache"])
def _serve_jit_cache_outside(member):
    """serve_jit_cache_dir is not inside dspark_hf_cache (the NFS mode mounts the model cache read-only, and compiled
    kernels must not mix with the checkpoint the manifest covers)."""
    jit, cache = member["serve_jit_cache_dir"], member["dspark_hf_cache"]
    if not (isinstance(jit, str) and isinstance(cache, str) and jit.startswith("/") and cache.startswith("/")):
        return []
    if _inputs.inside(jit, cache):
        return [("serve_jit_cache_dir", jit, "is inside dspark_hf_cache=%s, which the NFS mode mounts read-only" % cache,
                 "choose a local directory outside it (default %s)" % (
                     (member.specs.get("serve_jit_cache_dir") or {}).get("default") or "/var/lib/dspark/jit-cache"))]
    return []


@rule("serve.image", ["serve_image", "dspark_image"], covered_by="inventory: dspark_image")
def _serve_image(member):
    """serve_image (default dspark_image) is set."""
    value = member["serve_image"]
    if isinstance(value, str) and value.strip():
        return []
    return [("serve_image", value or None, "the serving image", "set dspark_image (or serve_image) to the image, pinned by digest")]


# -- LMCache beside every rank (issue #45; plugin_utils._serve_lmcache) ---------------------------------------------
LMCACHE_NUMBERS = ("serve_lmcache_l1_size_gb", "serve_lmcache_chunk_size", "serve_lmcache_port", "serve_lmcache_http_port",
                   "serve_lmcache_disk_size_gb", "serve_lmcache_start_period", "serve_lmcache_memory_reserve_mib")
LMCACHE_PORTS = ("serve_lmcache_port", "serve_lmcache_http_port")


@rule("serve.lmcache_numbers", list(LMCACHE_NUMBERS))
def _serve_lmcache_numbers(member):
    """The L1 and the disk bound at least 1 GB, chunks and the start period > 0, ports 1-65535, the reserve >= 0."""
    return ranges(member, LMCACHE_NUMBERS)


@rule("serve.lmcache_ports", ["serve_lmcache"] + list(LMCACHE_PORTS) + ["dspark_api_port", "dspark_master_port", "serve_edge",
                                                                        "serve_engine_port"])
def _serve_lmcache_ports(member):
    """With serve_lmcache, its two listeners differ from each other and from the API, engine and rendezvous ports
    (every one is on the host's network)."""
    if not _inputs.is_true(member["serve_lmcache"]):
        return []
    taken = [("dspark_api_port", member["dspark_api_port"]), ("dspark_master_port", member["dspark_master_port"])]
    if _inputs.is_true(member["serve_edge"]):
        taken.append(("serve_engine_port", member["serve_engine_port"]))
    out = []
    for var in LMCACHE_PORTS:
        value = member[var]
        port = _inputs.as_int(value)
        if port is None or isinstance(value, bool):
            continue  # the ranges rule names it
        clash = [name for name, other in taken if _inputs.as_int(other) == port]
        if clash:
            out.append((var, value, "equals %s: LMCache's server and the engine share the host's network" % clash[0],
                        "give %s a port no other listener of the node uses (default %s)" % (
                            var, (member.specs.get(var) or {}).get("default"))))
        taken.append((var, value))
    return out


@rule("serve.lmcache_disk_dir", ["serve_lmcache", "serve_lmcache_disk_dir", "dspark_hf_cache"])
def _serve_lmcache_disk_dir(member):
    """With serve_lmcache, the disk tier (serve_lmcache_disk_dir) is empty or an absolute path without colons or white
    space (a bind mount), outside dspark_hf_cache (read-only in every container, an NFS mount on the NFS mode's
    clients)."""
    value = member["serve_lmcache_disk_dir"]
    if not _inputs.is_true(member["serve_lmcache"]) or value in ("", None):
        return []
    if not (isinstance(value, str) and MOUNT_PATH_RE.match(value)) or value.rstrip("/") == "":
        return [("serve_lmcache_disk_dir", value, "is not an absolute path without colons, white space or control "
                 "characters (it becomes a bind mount `source:target`)",
                 "choose a directory on the node's NVMe, e.g. /var/lib/dspark/lmcache, or '' for no disk tier")]
    cache = member["dspark_hf_cache"]
    if isinstance(cache, str) and cache.startswith("/") and _inputs.inside(value, cache):
        return [("serve_lmcache_disk_dir", value, "is inside dspark_hf_cache=%s, which every container mounts read-only"
                 % cache, "choose a directory outside it, e.g. /var/lib/dspark/lmcache")]
    return []


@rule("serve.lmcache_chunk", ["serve_lmcache", "serve_lmcache_chunk_size", "serve_max_model_len"])
def _serve_lmcache_chunk(member):
    """With serve_lmcache, a chunk is not longer than the context (serve_max_model_len): LMCache stores whole chunks
    only, so a longer chunk would never cache anything."""
    if not _inputs.is_true(member["serve_lmcache"]):
        return []
    chunk, length = _inputs.as_int(member["serve_lmcache_chunk_size"]), _inputs.as_int(member["serve_max_model_len"])
    if chunk and length and chunk > length:
        return [("serve_lmcache_chunk_size", member["serve_lmcache_chunk_size"], "is longer than serve_max_model_len=%s: "
                 "LMCache stores whole chunks only, so no prompt would ever be cached" % member["serve_max_model_len"],
                 "set serve_lmcache_chunk_size to at most serve_max_model_len (e.g. 256, or 128 for short contexts)")]
    return []


@rule("serve.lmcache_one_connector", ["serve_lmcache", "serve_extra_args"])
def _serve_lmcache_one_connector(member):
    """With serve_lmcache, serve_extra_args sets no other KV connector (--kv-transfer-config, --kv-offloading-backend):
    vLLM takes one, and the role writes LMCache's."""
    args = member["serve_extra_args"]
    if not _inputs.is_true(member["serve_lmcache"]) or not isinstance(args, (list, tuple)):
        return []
    flags = sorted({str(arg).split("=", 1)[0].replace("_", "-") for arg in args} & {"--kv-transfer-config", "--kv-offloading-backend"})
    if flags:
        return [("serve_extra_args", "<holds %s>" % ", ".join(flags), "sets a KV connector while serve_lmcache writes "
                 "LMCache's (--kv-transfer-config); vLLM takes one", "remove %s from serve_extra_args, or set serve_lmcache: "
                 "false to run your own connector" % " and ".join(flags))]
    return []


LMCACHE_GROUP_WIDE = ("serve_lmcache", "serve_lmcache_port", "serve_lmcache_chunk_size")


@rule("serve.lmcache_group_agrees", list(LMCACHE_GROUP_WIDE))
def _serve_lmcache_group_agrees(member):
    """serve_lmcache, its request port and its chunk size are the same on every member of a group: the head's scheduler
    looks every prompt up on every member's server at one port, and servers of different chunk sizes cannot serve one
    engine. Every member says it in the head's words, so that preflight says it once for the group."""
    ordered = member.group.ordered
    if not ordered:
        return []
    out = []
    for var in LMCACHE_GROUP_WIDE:
        values = [(host, member.member(host)[var]) for host in ordered]
        differ = [(host, value) for host, value in values if str(value) != str(values[0][1])]
        if differ:
            out.append((var, values[0][1], "is %r on the head %s but %s" % (
                values[0][1], ordered[0], ", ".join("%r on %s" % (value, host) for host, value in differ)),
                "set %s once for the group (group_vars of %s), not per host" % (var, member.group.name)))
    return out


# -- sidecar engines beside the main one (issue #46; plugin_utils._group_engines) -------------------------------------
# The group's values the rule reads, the head's for every member: the main engine's name, ports and image (serve_image,
# the sidecars' default as serve reads them, is dspark_image unless set).
SIDECAR_GROUP_VARS = (_group_engines.VAR, "serve_image", "dspark_image", "serve_served_model_name", "dspark_api_port",
                      "dspark_master_port", "serve_edge", "serve_engine_port")


def _main_engine(head):
    """The main engine's values that no sidecar may share (_group_engines.clash_problems); a port that is no integer or a
    name that is no string is its own rule's to report."""
    name = head["serve_served_model_name"]
    return {
        "served_model_name": name if isinstance(name, str) else None,
        "api_port": _inputs.as_int(head["dspark_api_port"]),
        "master_port": _inputs.as_int(head["dspark_master_port"]),
        # vLLM listens on serve_engine_port only behind the edge; without it the port is free.
        "engine_port": _inputs.as_int(head["serve_engine_port"]) if _inputs.is_true(head["serve_edge"]) else None,
    }


def _said_once(value, found, clashes):
    """The sidecars' problems and clashes, less what another line says: an empty image a sidecar inherits (serve.image,
    the inventory's dspark_image), a clash between two of the main engine's own ports (dspark_master_port's rule,
    serve.engine_port), and the clash of an engine port left to its default (API port + 10000) whose API port clashes
    already (one mistake, one line)."""
    entries = value if isinstance(value, list) else []
    prefix = _group_engines.VAR + "[%d]"
    clashes = [problem for problem in clashes if problem[0].startswith(_group_engines.VAR + "[")]
    api_clash = {problem[0][:-len(".api_port")] for problem in clashes if problem[0].endswith(".api_port")}
    skip = set()
    for index, entry in enumerate(entries):
        if isinstance(entry, dict) and "image" not in entry:
            skip.add(prefix % index + ".image")
        if isinstance(entry, dict) and "engine_port" not in entry and prefix % index in api_clash:
            skip.add(prefix % index + ".engine_port")
    return [problem for problem in found + clashes if problem[0] not in skip]


@rule("serve.sidecars", list(SIDECAR_GROUP_VARS) + ["serve_gpu_memory_utilization"])
def _serve_sidecars(member):
    """dspark_sidecars, the group's sidecar engines, reads whole (_group_engines.sidecars: keys, names, models, pinned
    revisions, ports, shares); no two engines of the group, the main one included, share a name, a served model name or a
    port; and each node's memory shares, the main engine's serve_gpu_memory_utilization and every sidecar's, add up to
    less than 1. The group's values are the head's, so that every member says a group problem in the same words and
    preflight says it once (members that differ are the inventory rule's); the memory share is each member's own."""
    head = member.member(member.group.ordered[0]) if member.group.ordered else member
    if any(head.failed(var) for var in SIDECAR_GROUP_VARS):
        return []  # the head reports it as a variable that cannot be templated
    value = head[_group_engines.VAR]
    engines, found = _group_engines.sidecars(value, head["serve_image"])
    if not engines and not found:
        return []
    # clash_problems names each engine by its place in the list (an entry that is no mapping is a line already).
    clashes = _group_engines.clash_problems(engines, _main_engine(head)) if engines else []
    found = _said_once(value, found, clashes)
    # A share outside its range is already a line (serve.numbers, or the sidecar's own); the sum of the others still counts.
    fitting = [engine for engine in engines
               if engine["gpu_memory_utilization"] is not None and 0 < engine["gpu_memory_utilization"] < 1]
    main_share = member["serve_gpu_memory_utilization"]
    budget = None if ranges(member, ["serve_gpu_memory_utilization"]) else _group_engines.budget_problem(main_share, fitting)
    return found + ([budget] if budget else [])
