# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A serving group's engines (issue #46, private): the main engine and its sidecars, each one tensor-parallel vLLM
over all of the group's nodes with its own model, ports and share of every node's memory.

The sidecars are a group fact (``dspark_sidecars``, a list in the inventory, the same on every member). This module
reads and checks that list and the group's memory budget: what preflight refuses before any change (the rule
serve.sidecars), what the serve role starts (plugin_utils._serve_sidecars) and what qualify weighs against each
node's memory (plugin_utils._qualify_plan). Pure Python, no Ansible imports.
"""

from __future__ import annotations

import re

from ansible_collections.dspark.cluster.plugins.plugin_utils import _inputs

VAR = "dspark_sidecars"
MAIN = "main"
# A name becomes part of a compose project, a container, a firewall comment and a router backend: short, lower case.
NAME_RE = re.compile(r"^[a-z](?:[a-z0-9-]{0,14}[a-z0-9])?$")
# A Hugging Face model id (also dspark_model's rule: plugin_utils.inventory_rules).
MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
SERVED_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
# vLLM behind the head's API edge listens on 127.0.0.1 at the API port plus this, as the main engine does by default
# (serve_engine_port 18888 for dspark_api_port 8888).
ENGINE_PORT_OFFSET = 10000
# An engine's ports, and the variables that hold the main engine's.
MAIN_PORT_VARS = (("api_port", "dspark_api_port"), ("master_port", "dspark_master_port"), ("engine_port", "serve_engine_port"))
REQUIRED = ("name", "model", "revision", "api_port", "master_port", "gpu_memory_utilization")
OPTIONAL = ("served_model_name", "engine_port", "image", "max_model_len", "max_num_seqs", "trust_remote_code", "extra_args")
EXAMPLE = ("{name: vl, model: cyankiwi/Qwen3-VL-4B-Instruct-AWQ-4bit, revision: <40 hex>, served_model_name: qwen3-vl-4b, "
           "api_port: 8889, master_port: 25100, gpu_memory_utilization: 0.12}")


def _field(index, key):
    return "%s[%d].%s" % (VAR, index, key)


def _positive(entry, index, key, problems):
    if key not in entry:
        return None
    number = _inputs.as_int(entry[key])
    if number is None or number < 1:
        problems.append((_field(index, key), entry[key], "is not a positive integer", "set a whole number of 1 or more"))
    return number


def _port(entry, index, key, problems, default=None):
    value = entry.get(key, default)
    port = _inputs.as_port(value, 1024)
    if port is None:
        problems.append((_field(index, key), value, "is not a port in 1024-65535",
                         "choose a free TCP port in 1024-65535 that no other engine of the group uses"))
    return port


def _sidecar(entry, index, image, problems):
    """One list entry as an engine (its values read once), problems appended as (var, value, problem, fix)."""
    if not isinstance(entry, dict):
        problems.append(("%s[%d]" % (VAR, index), entry, "is not a mapping", "write each sidecar as %s" % EXAMPLE))
        return None
    unknown = sorted(str(key) for key in entry if key not in REQUIRED + OPTIONAL)
    if unknown:
        problems.append(("%s[%d]" % (VAR, index), unknown, "names keys a sidecar does not have",
                         "remove or correct them; a sidecar has %s" % ", ".join(REQUIRED + OPTIONAL)))
    missing = [key for key in REQUIRED if key not in entry]
    if missing:
        problems.append(("%s[%d]" % (VAR, index), sorted(entry), "lacks %s" % ", ".join(missing),
                         "give every sidecar %s, e.g. %s" % (", ".join(REQUIRED), EXAMPLE)))
    name = entry.get("name")
    if "name" in entry and (not isinstance(name, str) or not NAME_RE.match(name) or name == MAIN):
        problems.append((_field(index, "name"), name, "is not a sidecar name (lower-case letters, digits and '-', "
                         "at most 16, starting with a letter; not %r, the main engine's)" % MAIN, "name it e.g. vl"))
    model = entry.get("model")
    if "model" in entry and (not isinstance(model, str) or not MODEL_RE.match(model)):
        problems.append((_field(index, "model"), model, "is not a Hugging Face model id",
                         "write it as organisation/name, e.g. cyankiwi/Qwen3-VL-4B-Instruct-AWQ-4bit"))
    revision = entry.get("revision")
    # Imported here: the module stays stdlib-only at import, so that the edge and the firewall read its constants.
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _rules_checkpoint
    found = _rules_checkpoint.revision_problem(revision, model) if "revision" in entry else None
    if found:
        problems.append((_field(index, "revision"), revision) + found)
    served = entry.get("served_model_name", name)
    if not isinstance(served, str) or not SERVED_RE.match(served):
        problems.append((_field(index, "served_model_name"), served, "is not a model name a client can send",
                         "use letters, digits and . _ : / - (at most 128), e.g. qwen3-vl-4b"))
    share = _inputs.as_float(entry.get("gpu_memory_utilization"))
    if "gpu_memory_utilization" in entry and (share is None or not 0 < share < 1):
        problems.append((_field(index, "gpu_memory_utilization"), entry["gpu_memory_utilization"],
                         "is not a share of the node's memory (0 < x < 1)", "set the fraction this engine may use, e.g. 0.12"))
    api = _port(entry, index, "api_port", problems) if "api_port" in entry else None
    master = _port(entry, index, "master_port", problems) if "master_port" in entry else None
    engine_port = None
    if api is not None or "engine_port" in entry:
        engine_port = _port(entry, index, "engine_port", problems,
                            default=api + ENGINE_PORT_OFFSET if api is not None else None)
    trust = _inputs.as_bool(entry.get("trust_remote_code", False))
    if trust is None:
        problems.append((_field(index, "trust_remote_code"), entry["trust_remote_code"], "is not a boolean",
                         "set true only for a checkpoint whose config.json auto_map names Python files, else false"))
    extra = entry.get("extra_args", [])
    if not isinstance(extra, list) or not all(isinstance(arg, (str, int, float)) and not isinstance(arg, bool) for arg in extra):
        problems.append((_field(index, "extra_args"), extra, "is not a list of vLLM arguments",
                         "give them as a list of strings, e.g. ['--limit-mm-per-prompt', '{\"image\":4}']"))
        extra = []
    image_ref = entry.get("image", image)
    if not isinstance(image_ref, str) or not image_ref.strip():
        problems.append((_field(index, "image"), image_ref, "is empty", "leave it out (the group's dspark_image) or name an image"))
    return {
        "name": name, "model": model, "revision": revision, "served_model_name": served, "image": image_ref,
        "api_port": api, "master_port": master, "engine_port": engine_port, "gpu_memory_utilization": share,
        "max_model_len": _positive(entry, index, "max_model_len", problems),
        "max_num_seqs": _positive(entry, index, "max_num_seqs", problems),
        "trust_remote_code": bool(trust), "extra_args": [str(arg) for arg in extra],
    }


def sidecars(value, image=None):
    """The group's sidecars from ``dspark_sidecars`` (None or [] for none): (engines, problems), each problem a
    (var, value, problem, fix) tuple. ``image`` is the group's dspark_image, every sidecar's default."""
    if value is None or value == []:
        return [], []
    if not isinstance(value, list):
        return [], [(VAR, value, "is not a list", "give the sidecars as a list of mappings, e.g. [%s], or [] for none" % EXAMPLE)]
    problems, engines = [], []
    for index, entry in enumerate(value):
        engine = _sidecar(entry, index, image, problems)
        if engine is not None:
            # Its place in the list: an entry refused as no mapping has none, so the others keep theirs in messages.
            engine["index"] = index
            engines.append(engine)
    return engines, problems


def clash_problems(engines, main):
    """Names, served names and ports two engines of the group share. ``main`` holds the main engine's values:
    served_model_name, api_port, master_port and engine_port (None where unknown or not used)."""
    problems = []
    owners = {}

    def claim(kind, value, var):
        if value is None:
            return
        first = owners.setdefault((kind, value), var)
        if first != var:
            problems.append((var, value, "is also %s" % first,
                             "give every engine of the group its own %s" % ("port" if kind == "port" else kind)))

    claim("served model name", main.get("served_model_name"), "serve_served_model_name")
    for key, var in MAIN_PORT_VARS:
        claim("port", main.get(key), var)
    for position, engine in enumerate(engines):
        index = engine.get("index", position)
        claim("name", engine.get("name"), _field(index, "name"))
        claim("served model name", engine.get("served_model_name"), _field(index, "served_model_name"))
        for key, dummy in MAIN_PORT_VARS:
            claim("port", engine.get(key), _field(index, key))
    return problems


def memory_shares(main_share, engines):
    """Every engine's share of a node's memory, main first: [(name, share)] (a share that is not a number is left out)."""
    shares = []
    main = _inputs.as_float(main_share)
    if main is not None:
        shares.append((MAIN, main))
    shares += [(engine["name"], engine["gpu_memory_utilization"]) for engine in engines
               if engine.get("gpu_memory_utilization") is not None]
    return shares


def shares_text(shares):
    """'main 0.8 + vl 0.12 = 0.92'."""
    total = sum(share for dummy, share in shares)
    return "%s = %s" % (" + ".join("%s %g" % (name, share) for name, share in shares), "%g" % round(total, 6))


def budget_problem(main_share, engines):
    """(var, value, problem, fix) when the engines' shares of a node's memory add up to 1 or more (each vLLM takes its
    share of the whole node; on a DGX Spark that memory is also the host's), else None. The node's own reserve and
    LMCache's L1 are qualify's: they need the node's MemTotal."""
    shares = memory_shares(main_share, engines)
    if len(shares) < 2 or sum(share for dummy, share in shares) < 1:
        return None
    return ("serve_gpu_memory_utilization", shares_text(shares),
            "with the sidecars' gpu_memory_utilization leaves nothing of each node's memory to the host",
            "lower the shares so that they add up to well below 1; the recipe runs its main engine at 0.80 beside "
            "its vision sidecar")
