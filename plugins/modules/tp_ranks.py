# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Documentation only: the work is done by the action plugin of the same name on the controller (its parts are in
# plugins/plugin_utils/_tp_*.py; the API probe is the module tp_api_probe).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tp_ranks
short_description: Wait until a tensor-parallel vLLM serving group is up, or name the rank, node and cause that broke it
version_added: 0.1.0
description:
  - Polls one serving group (an inventory group whose members have C(dspark_rank) 0..N-1, 0 being the head that runs
    the API server) until it serves, a known failure shows, or O(timeout) runs out. Run it once per group.
  - Every round it reads, on every member through that member's own Ansible connection, the serving container's
    C(docker inspect) state (status, exit code, restart count, start time) and its C(docker logs) (stdout and
    stderr, merged by timestamp across rounds; on the first look also the registration lines of the whole log).
    The logs are judged with the collection's vLLM log parser, for rank registration (C(world_size=W rank=R) and
    C(rank R in world size W is assigned as ...)), one init method for all ranks, head readiness, and a table of
    known failure signatures (rendezvous, NCCL, Gloo, RoCE GID/HCA, a peer lost during a collective, memory, process
    deaths, vLLM arguments, the engine-ready timeout).
  - The head is ready once the engine core logged the KV cache size of any build (C(GPU KV cache size) on a GPU
    build, C(CPU KV cache size) on the CPU build, C(XPU KV cache size) and so on) and then the API server logged
    C(Application startup complete.). A headless worker prints no ready line, so its last start-up step is its own
    KV cache line (C(Available KV cache memory) on a GPU, C(Explicitly set (X/Y\) GiB for KV cache on node N) on a
    CPU); the diagnosis at the timeout names the ranks whose log lacks it.
  - Every rank prints its C(world_size=W rank=R local_rank=L) line before the rendezvous. Up to vLLM 0.18 every rank
    also prints its assignment line; from 0.19 only each node's local rank 0 does (C(info_once), scope C(local)),
    after the collective group creation, so it also proves the other ranks whose C(world_size) line is in the same
    container log. Any C(dspark_gpus_per_node) is therefore counted from what vLLM really prints.
  - The API is probed from the head itself (the module M(dspark.cluster.tp_api_probe) run through the head's connection
    against C(http://127.0.0.1:<api_port>)). C(GET /v1/models) must list O(served_model_name); then
    exactly one real generation request (C(POST /v1/chat/completions), 16 tokens) must return choices. A C(/health)
    answer alone is not enough, since a wedged group still answers it.
  - Succeeds when every expected rank registered with the expected world size and the same init method, the API lists
    the model and the generation request returned choices.
  - Fails at once on a known failure signature, an exited or restarted container, a wrong served model name, an API
    key error or a generation request that times out (C(wedged)). At the timeout it names the missing ranks and their
    nodes. Every diagnosis names the rank, the node, the cause and the fix; the last lines of each rank's log are
    returned on failure.
  - Other members than the host the task runs on (or is delegated to) are reached with their own inventory
    connection variables, the way Ansible connects to a delegated host. The task's C(become) applies to the C(docker)
    commands on every member, with that member's own C(ansible_become), C(ansible_become_method),
    C(ansible_become_user) and password variables, as for a delegated host; without become the connection user must be
    in the C(docker) group. The probe module never becomes (it needs no privilege).
author:
  - dspark.cluster contributors (@dspark)
options:
  group:
    description:
      - The serving group (inventory group) to check. Defaults to the task host's C(dspark_group).
    type: str
  container:
    description: Name of the serving container, the same on every member.
    type: str
    default: dspark-vllm
  containers:
    description: Per-member container names (inventory host name to container name), overriding O(container).
    type: dict
  sidecars:
    description:
      - Per-member containers the engine needs beside it (inventory host name to container name), such as the LMCache
        server of C(serve_lmcache). One that is missing, stopped or unhealthy (its health check) fails the group.
    type: dict
  served_model_name:
    description: The name the head serves (C(--served-model-name)); C(/v1/models) must list it.
    type: str
    required: true
  api_port:
    description: The head's API port. Defaults to the head's C(dspark_api_port).
    type: int
  api_key:
    description: >-
      API key of the head (C(--api-key)); a no_log argument of the probe module (on its standard input with
      pipelining), never on a command line. Redacted from every log line the result returns.
    type: str
  redact:
    description: >-
      More secrets (the group's other API keys) to replace by C([REDACTED]) in every log line kept, reported or
      returned. Values shaped like secrets (vLLM's C('api_key': [...]), C(--api-key ...), C(VLLM_API_KEY=...),
      C(HF_TOKEN=...), C(Bearer ...), C(hf_...) tokens, URL passwords) are redacted in any case.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds to wait for the group, in total. Real starts take 5 to 25 minutes.
    type: int
    default: 1800
  poll_interval:
    description: Seconds between two polls.
    type: float
    default: 1.0
  generation_timeout:
    description: Seconds the one generation request may take before the group is called wedged.
    type: int
    default: 60
  log_lines:
    description: Lines of each container log read per poll (C(docker logs --tail)); only new lines are asked for.
    type: int
    default: 400
attributes:
  check_mode:
    description: Does not poll in check mode; returns the expected ranks and members as a prediction, marked skipped.
    support: full
  diff_mode:
    description: Nothing to diff.
    support: none
  platform:
    description: Runs on the controller; the members are POSIX hosts with Docker.
    support: full
    platforms: posix
requirements:
  - docker CLI on every member, usable by the connection user (or with the task's C(become))
  - Python on the head for the probe module (C(ansible_python_interpreter) or interpreter discovery)
notes:
  - Run it once per serving group, for example with C(run_once=true) and C(delegate_to) the group's head.
  - The members' ranks come from C(dspark_rank); the world size is the head's C(dspark_tensor_parallel_size), or the
    number of members times C(dspark_gpus_per_node). Nothing assumes two ranks.
  - A restarted rank cannot rejoin a running tensor-parallel group, so any restart of a member's container fails the
    task.
"""

EXAMPLES = r"""
- name: Wait for the TP group of this pair to serve
  dspark.cluster.tp_ranks:
    group: "{{ dspark_group }}"
    served_model_name: deepseek-v4-flash-0731
    timeout: 1800
  run_once: true
  delegate_to: "{{ groups[dspark_group] | map('extract', hostvars) | selectattr('dspark_rank', 'equalto', 0)
                   | map(attribute='inventory_hostname') | first }}"
  register: tp

- name: Show when the group became ready
  ansible.builtin.debug:
    msg: "{{ tp.registered_ranks | map(attribute='node') | list }} ready at {{ tp.ready_at }} ({{ tp.elapsed }} s)"
"""

RETURN = r"""
expected_ranks:
  description: The global ranks the group must register, 0..world size - 1.
  returned: always
  type: list
  elements: int
  sample: [0, 1]
expected_world_size:
  description: World size expected from the inventory.
  returned: always
  type: int
  sample: 2
world_size:
  description: World size the logs show, when all ranks agree; null otherwise.
  returned: always
  type: int
  sample: 2
registered_ranks:
  description: Ranks whose rank-assignment line was found, with the node and the evidence line.
  returned: always
  type: list
  elements: dict
  contains:
    rank:
      description: Global rank.
      type: int
    node:
      description: Inventory host running that rank.
      type: str
    evidence:
      description: The log line that proves the registration.
      type: str
    world_size:
      description: World size on that line.
      type: int
    tp_rank:
      description: Tensor-parallel rank on that line.
      type: int
    init_method:
      description: The rank's C(distributed_init_method).
      type: str
    via:
      description: >-
        C(local_rank0) when the rank printed only its C(world_size) line and its node's local rank 0 printed the
        assignment line (vLLM 0.19 and later); null when the rank printed its own assignment line.
      type: str
  sample: [{"rank": 1, "node": "spark-worker", "world_size": 2, "tp_rank": 1, "init_method": "tcp://192.168.100.1:25000",
            "evidence": "(Worker pid=94) INFO ... rank 1 in world size 2 is assigned as DP rank 0, PP rank 0, TP rank 1"}]
missing_ranks:
  description: Expected ranks that did not register, with their node.
  returned: always
  type: list
  elements: dict
  sample: [{"rank": 1, "node": "spark-worker"}]
init_method:
  description: The init method (C(tcp://master-addr:master-port)) all ranks use, when it is one.
  returned: when polled
  type: str
  sample: tcp://192.168.100.1:25000
api_ready:
  description: C(/v1/models) on the head lists O(served_model_name) (last probe).
  returned: always
  type: bool
generation_ok:
  description: The one generation request returned choices.
  returned: always
  type: bool
elapsed:
  description: Seconds spent polling.
  returned: always
  type: float
  sample: 312.4
ready_at:
  description: Epoch seconds (controller clock) when readiness was detected, for benchmarks; null unless ready.
  returned: always
  type: float
  sample: 1795000312.9
diagnosis:
  description: Why the group is not serving, root causes first; empty on success.
  returned: always
  type: list
  elements: dict
  contains:
    code:
      description: >-
        Failure code, for example C(nccl_init_error), C(nccl_runtime_error) (a collective failed while serving),
        C(nccl_connect_failed), C(wrong_gid_or_hca), C(wrong_hca), C(peer_lost), C(init_method_mismatch) (a rank dials
        another master address or port), C(nccl_init_hang) (every rank passed the rendezvous store, NCCL setup never
        finished), C(rendezvous_timeout), C(collective_timeout), C(bad_arguments), C(insufficient_free_memory),
        C(shm_too_small), C(container_exited), C(container_restarted), C(wedged), C(served_model_mismatch),
        C(api_not_ready), C(node_unreachable).
      type: str
    rank:
      description: Global rank concerned (the first rank of the node for node-level causes); null for the group.
      type: int
    node:
      description: Inventory host concerned; null for the group.
      type: str
    cause:
      description: What went wrong.
      type: str
    fix:
      description: What to change, naming the variable or flag.
      type: str
    evidence:
      description: The log line or API answer showing it.
      type: str
    severity:
      description: Always C(fatal) here.
      type: str
  sample: [{"code": "nccl_init_error", "rank": 1, "node": "spark-worker", "severity": "fatal",
            "cause": "NCCL failed to initialise its communicator (system or network error).",
            "fix": "Usually one literal NCCL_IB_GID_INDEX shared by both nodes ...",
            "evidence": "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"}]
msg:
  description: Summary; on failure it names rank, node, cause and fix of the root causes.
  returned: always
  type: str
  sample: "TP group lab_pair (2 ranks) is not serving after 41.0 s: rank 1 on spark-worker: nccl_init_error: ..."
logs:
  description: On failure, the last 40 lines of each node's container log keyed by the node's first rank (API keys and tokens redacted).
  returned: always
  type: dict
  sample: {"1": ["2026-11-29T20:10:41.1Z (Worker pid=94) ERROR ... RuntimeError: NCCL error: unhandled system error"]}
log_warnings:
  description: Warnings found in the logs (retries, earlier boots, stalls), at most 20.
  returned: always
  type: list
  elements: dict
members:
  description: The group's members in rank order with their ranks and container name.
  returned: always
  type: list
  elements: dict
  sample: [{"node": "spark-head", "node_rank": 0, "ranks": [0], "container": "dspark-vllm"}]
containers:
  description: Last C(docker inspect) facts per member (state, image ID the container runs, exit code, restart count, start time).
  returned: always
  type: dict
group:
  description: The serving group checked.
  returned: unless the arguments are invalid
  type: str
head:
  description: The group's head (rank 0).
  returned: unless the arguments are invalid
  type: str
api_port:
  description: The API port probed on the head.
  returned: unless the arguments are invalid
  type: int
api_state:
  description: What the last API probe saw.
  returned: when polled
  type: str
  sample: "/health HTTP 200, /v1/models HTTP 200, chat completion OK in 0.41s"
"""
