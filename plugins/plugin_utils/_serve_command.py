# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serve role's vLLM command line (private; issue #25), the one copy of what roles/serve/vars/main.yml computed
in Jinja: the flags every vLLM build takes (the multi-node mp launch) and, in between, in the recipe's order (a changed
order would restart running groups), its DeepSeek-V4/GB10 flags unless serve_recipe_args is false. Every value is
written as Jinja's ``string`` filter wrote it (``str``), the JSON options as Ansible's ``to_json`` (json.dumps, keys in
the order given). Pure Python, no Ansible imports.
"""

from __future__ import annotations

import json

from ansible_collections.dspark.cluster.plugins.plugin_utils import _inputs, _serve_lmcache

THINKING_KWARGS = {
    "off": '{"thinking": false}',
    "low": '{"thinking": true, "reasoning_effort": "low"}',
    "high": '{"thinking": true, "reasoning_effort": "high"}',
    "max": '{"thinking": true, "reasoning_effort": "max"}',
}
REASONING_CONFIG = {"reasoning_parser": "deepseek_v4", "reasoning_start_str": "<think>", "reasoning_end_str": "</think>"}
# The variables the command reads (the filter's input mapping), besides the group model.
VARIABLES = (
    "dspark_model", "dspark_model_revision", "dspark_api_port", "dspark_tensor_parallel_size", "dspark_rank",
    "serve_served_model_name", "serve_host", "serve_recipe_args", "serve_kv_cache_dtype", "serve_block_size",
    "serve_max_model_len", "serve_max_num_seqs", "serve_max_num_batched_tokens", "serve_long_prefill_token_threshold",
    "serve_mtp_num_tokens", "serve_gpu_memory_utilization", "serve_speculative_method", "serve_draft_sample_method",
    "serve_default_thinking", "serve_extra_args", "serve_trust_remote_code", "serve_lmcache", "serve_lmcache_port",
)


class CommandError(ValueError):
    """An input the command cannot be written from (the message names the variable, the value and the fix)."""


def jinja_int(value):
    """Jinja's ``int`` filter: int(value), else int(float(value)), else 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def to_json(value):
    """Ansible's ``to_json`` of plain data: json.dumps with its default separators, keys in the order given."""
    return json.dumps(value)


def command(values, group):
    """The argv of ``vllm serve`` for one member: ``values`` maps VARIABLES to the member's values, ``group`` is its
    serving group's model (plugin_utils._group_model.group_model: size, master_address, master_port, is_head)."""
    missing = [name for name in VARIABLES if name not in values]
    if missing:
        raise CommandError("serve command: %s not given. Fix: pass every variable of _serve_command.VARIABLES" % ", ".join(missing))
    v = values
    recipe = _inputs.as_bool(v["serve_recipe_args"]) is True
    # Only on request (#26): with it, the checkpoint's config.json `auto_map` can name Python files of the checkpoint,
    # which vLLM then imports and runs. Same place as the recipe's flag, so a group that sets it keeps its command.
    trust = _inputs.as_bool(v["serve_trust_remote_code"])
    if trust is None:
        raise CommandError("serve_trust_remote_code=%r is not a boolean. Fix: set it to true (only for a checkpoint whose "
                           "config.json auto_map names Python files of the repository) or false" % (v["serve_trust_remote_code"],))
    thinking = v["serve_default_thinking"]
    if recipe and thinking not in THINKING_KWARGS:
        raise CommandError("serve_default_thinking=%r is not a reasoning default. Fix: set it to one of: %s"
                           % (thinking, ", ".join(THINKING_KWARGS)))
    extra = v["serve_extra_args"]
    if not isinstance(extra, (list, tuple)):
        raise CommandError("serve_extra_args=%r is not a list. Fix: give the extra vLLM arguments as a list" % (extra,))
    seqs, mtp = jinja_int(v["serve_max_num_seqs"]), jinja_int(v["serve_mtp_num_tokens"])
    argv = ["vllm", "serve", v["dspark_model"],
            "--revision", v["dspark_model_revision"],
            "--served-model-name", v["serve_served_model_name"],
            "--host", v["serve_host"], "--port", str(v["dspark_api_port"])]
    if trust:
        argv += ["--trust-remote-code"]
    argv += ["--tensor-parallel-size", str(v["dspark_tensor_parallel_size"]), "--pipeline-parallel-size", "1"]
    if recipe:
        argv += ["--kv-cache-dtype", v["serve_kv_cache_dtype"], "--block-size", str(v["serve_block_size"])]
    argv += ["--max-model-len", str(v["serve_max_model_len"]),
             "--max-num-seqs", str(v["serve_max_num_seqs"]),
             "--max-num-batched-tokens", str(v["serve_max_num_batched_tokens"])]
    if recipe:
        argv += ["--long-prefill-token-threshold", str(v["serve_long_prefill_token_threshold"]),
                 "--max-cudagraph-capture-size", str(seqs * (mtp + 1)),
                 "--gpu-memory-utilization", str(v["serve_gpu_memory_utilization"]),
                 "--enable-prefix-caching", "--enable-prompt-tokens-details", "--async-scheduling", "--enable-chunked-prefill",
                 "--speculative-config", to_json({"method": v["serve_speculative_method"], "num_speculative_tokens": mtp,
                                                  "draft_sample_method": v["serve_draft_sample_method"]}),
                 "--tokenizer-mode", "deepseek_v4"]
    argv += ["--distributed-executor-backend", "mp"]
    if recipe:
        argv += ["--moe-backend", "flashinfer_b12x",
                 "--tool-call-parser", "deepseek_v4", "--enable-auto-tool-choice",
                 "--reasoning-parser", "deepseek_v4",
                 "--reasoning-config", to_json(REASONING_CONFIG),
                 "--default-chat-template-kwargs", THINKING_KWARGS[thinking],
                 "--generation-config", "vllm", "--enable-flashinfer-autotune"]
    # LMCache (#45): this node's server on loopback; only with it, so that the command of every other group stays.
    if _serve_lmcache.enabled(v):
        argv += ["--kv-transfer-config", _serve_lmcache.kv_transfer_config(v, group)]
    return argv + launch_args(group, v["dspark_rank"], group["master_port"]) + list(extra)


def launch_args(group, rank, master_port):
    """The multi-node mp launch of one rank, every engine's: the group's size, the rank, the head's fabric address and
    the engine's rendezvous port; ``--headless`` on every rank but the head's."""
    argv = ["--nnodes", str(group["size"]), "--node-rank", str(rank),
            "--master-addr", group["master_address"], "--master-port", str(master_port)]
    return argv if group.get("is_head") else argv + ["--headless"]


def sidecar_command(engine, rank, tensor_parallel_size, host, port, group):
    """The argv of ``vllm serve`` for one member's rank of a sidecar engine (issue #46; no role starts one yet).

    ``engine``: one entry of plugin_utils._group_engines.sidecars(); ``rank`` and ``tensor_parallel_size``: the member's
    dspark_rank and the group's dspark_tensor_parallel_size (every engine spans all of the group's GPUs); ``host`` and
    ``port``: where it listens (127.0.0.1 and the engine port behind the head's edge); ``group``: the group model. The
    same multi-node launch as the main engine on the sidecar's own rendezvous port, its own memory share always (the
    main engine's recipe flags are the DeepSeek checkpoint's, not a sidecar's), its extra arguments last."""
    argv = ["vllm", "serve", engine["model"], "--revision", engine["revision"],
            "--served-model-name", engine["served_model_name"], "--host", host, "--port", str(port)]
    if engine.get("trust_remote_code"):
        argv += ["--trust-remote-code"]
    argv += ["--tensor-parallel-size", str(tensor_parallel_size), "--pipeline-parallel-size", "1",
             "--gpu-memory-utilization", str(engine["gpu_memory_utilization"])]
    for key in ("max_model_len", "max_num_seqs"):
        if engine.get(key) is not None:
            argv += ["--" + key.replace("_", "-"), str(engine[key])]
    argv += ["--distributed-executor-backend", "mp"] + launch_args(group, rank, engine["master_port"])
    return argv + list(engine.get("extra_args") or [])


# --------------------------------------------------------------------------- the compose file (was Jinja in
# roles/serve/templates/compose.yaml.j2; the template prints these lines under its header).
# The role's variables compose_lines reads, by their names: the lookup dspark.cluster.role_vars hands them over
# (reads='serve_compose', registered in _role_vars.READS), so none is copied by hand under another name.
COMPOSE_VARIABLES = (
    "serve_project", "serve_container_name", "serve_shm_size", "serve_stop_grace_period", "serve_jit_cache_dir",
    "serve_ulimits",
) + _serve_lmcache.VARIABLES
# Its other inputs: what the role computes (the definition, the probes) and the inventory's values
# (roles/serve/vars/main.yml _serve_compose_lines combines them with the lookup's mapping).
COMPOSE_VALUES = COMPOSE_VARIABLES + (
    "image_id", "entrypoint", "argv", "group", "rank", "hash", "environment", "hf_cache", "cache_read_only",
    "hotfix_dir", "keys_file", "infiniband", "gpu", "fabric_address",
)


def compose_scalar(value):
    """One value of the compose file: its text with `$` doubled (compose would otherwise substitute the shell's variables
    itself) as a JSON string, valid YAML: a newline, quote or colon in a value cannot add keys."""
    return to_json(str(value).replace("$", "$$"))


def _compose_list(values):
    return to_json([str(value).replace("$", "$$") for value in values])


def compose_lines(values):
    """The compose file of one rank from ``name:`` on, one line each; ``values`` maps COMPOSE_VALUES to the rank's values
    (``hotfix_dir`` and ``keys_file`` empty when the rank mounts no hotfixes and no keys file)."""
    missing = [name for name in COMPOSE_VALUES if name not in values]
    if missing:
        raise CommandError("serve compose file: %s not given. Fix: pass every value of _serve_command.COMPOSE_VALUES" % ", ".join(missing))
    v = values
    environment = {str(key): str(value).replace("$", "$$")
                   for key, value in _serve_lmcache.engine_environment(v["environment"], v).items()}
    out = [
        "name: %s" % compose_scalar(v["serve_project"]),
        "services:",
        "  vllm:",
        "    container_name: %s" % compose_scalar(v["serve_container_name"]),
        "    image: %s" % compose_scalar(v["image_id"]),
        "    pull_policy: never",
        '    # "$@" is the command below, quoted: nothing is word-split, and no secret is on it.',
        "    entrypoint: %s" % _compose_list(v["entrypoint"]),
        "    command: %s" % _compose_list(v["argv"]),
        "    network_mode: host",
        "    ipc: host",
        "    shm_size: %s" % compose_scalar(v["serve_shm_size"]),
        "    # Never restart a rank alone (after a crash or a reboot): the group restarts as one unit (playbooks/serve.yml,",
        "    # dspark-fleet watch). A lone rank cannot rejoin the rendezvous and loops (upstream issue #38).",
        '    restart: "no"',
        "    stop_grace_period: %s" % compose_scalar(v["serve_stop_grace_period"]),
    ] + _labels(v) + [
        "    # The API keys (rank 0 only): VLLM_API_KEY from the 0600 file next to this one.",
        "    env_file: [secrets.env]",
        "    environment: %s" % to_json(environment),
        "    volumes:",
        "      # Read-only where the cache is a read-only mount (the NFS mode's clients); JIT caches stay local.",
        "      - %s" % compose_scalar("%s:/cache/huggingface%s" % (v["hf_cache"], ":ro" if v["cache_read_only"] else "")),
        "      - %s" % compose_scalar("%s:/cache/jit" % v["serve_jit_cache_dir"]),
    ]
    if v["hotfix_dir"]:
        out += ["      # The recipe's hotfixes and the script that runs them before vLLM (upstream order, fail-closed), read-only.",
                "      - %s" % compose_scalar("%s/patches:/opt/dspark-patches:ro" % v["hotfix_dir"]),
                "      - %s" % compose_scalar("%s:/opt/dspark-serve:ro" % v["hotfix_dir"])]
    if v["keys_file"]:
        out += ["      # Several API keys: the 0600 YAML file vLLM reads with --config (rank 0 only), read-only.",
                "      - %s" % compose_scalar("%s:ro" % v["keys_file"])]
    if v["serve_ulimits"]:
        out.append("    ulimits: %s" % to_json(v["serve_ulimits"]))
    if v["infiniband"]:
        out += ['    devices: ["/dev/infiniband:/dev/infiniband"]',
                "    cap_add: [IPC_LOCK]"]
    if v["gpu"]:
        out += GPU_LINES
    if _serve_lmcache.enabled(v):
        out += ["    # LMCache's server first: without it vLLM hangs at the connector's registration instead of failing.",
                "    depends_on: {lmcache: {condition: service_healthy}}"]
        out += _lmcache_service(v)
    return out


ENGINE_LABEL = "dspark.cluster/engine"


def _labels(v):
    """The rank's labels: its group, its rank and the definition's fingerprint (a changed one restarts the group)."""
    out = ["    labels:",
           "      dspark.cluster/group: %s" % compose_scalar(v["group"]),
           "      dspark.cluster/rank: %s" % compose_scalar(v["rank"]),
           "      dspark.cluster/config: %s" % compose_scalar(v["hash"])]
    # A sidecar engine's containers (issue #46) say which: serve_node_info finds them all by this label, wanted or not.
    if v.get("engine"):
        out.append("      %s: %s" % (ENGINE_LABEL, compose_scalar(v["engine"])))
    return out


GPU_LINES = ["    deploy:",
             "      resources:",
             "        reservations:",
             "          devices: [{driver: nvidia, count: all, capabilities: [gpu]}]"]


def _lmcache_service(v):
    """The LMCache server's service (issue #45, plugin_utils._serve_lmcache): the serving image, the host's network and
    IPC as vLLM's (the KV blocks pass through a shared-memory segment), the rank's labels, its health check."""
    argv = _serve_lmcache.server_argv(v, v["group"], v["rank"], v["fabric_address"])
    out = ["  lmcache:",
           "    container_name: %s" % compose_scalar(v["serve_lmcache_container_name"]),
           "    image: %s" % compose_scalar(v["image_id"]),
           "    pull_policy: never",
           "    entrypoint: %s" % _compose_list(argv[:1]),
           "    command: %s" % _compose_list(argv[1:]),
           "    network_mode: host",
           "    ipc: host",
           '    restart: "no"',
           "    stop_grace_period: %s" % compose_scalar(v["serve_stop_grace_period"])]
    out += _labels(v)
    out += ["    environment: %s" % to_json(_serve_lmcache.ENVIRONMENT),
            "    healthcheck:",
            "      test: %s" % _compose_list(_serve_lmcache.healthcheck(v)),
            '      interval: "5s"',
            '      timeout: "5s"',
            "      retries: 3",
            "      start_period: %s" % compose_scalar("%ss" % _inputs.as_int(v["serve_lmcache_start_period"]))]
    if v["serve_lmcache_disk_dir"]:
        out += ["    volumes:",
                "      # The disk tier, which outlives the group's restarts.",
                "      - %s" % compose_scalar("%s:%s" % (v["serve_lmcache_disk_dir"], _serve_lmcache.DISK_MOUNT))]
    if v["serve_ulimits"]:
        out.append("    ulimits: %s" % to_json(v["serve_ulimits"]))
    if v["gpu"]:
        out += GPU_LINES
    return out
