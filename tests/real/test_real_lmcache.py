"""LMCache beside the real engine (issue #45, serve_lmcache in inventories/lab-real/group_vars/real_pair.yml): a server
per node from the serving image (lmcache 0.5.6 in lab/engine), TP=2 over Gloo, the CPU build's shared-memory transfer.

In file order, before test_real_engine.py (whose last test stops the group): the servers run healthy beside both ranks
on the fabric address and loopback; an L1 the nodes cannot hold is refused by qualify (the site.yml gate); a killed
server is named by verify and status, a real worker rank killed next by status, `dspark-fleet watch` restarts the
WHOLE group as one unit (engines and servers: vLLM's own prefix cache and LMCache's L1 gone), and a prompt sent
before the kills is then read from the disk tier. This is the real lab's only supervisor restart (one real restart
for the server, the worker and the disk tier).
Time to first token is printed, not asserted (a benchmark's business: bench/bench_lmcache_ttft.py).
"""

import re
import time

import openai

from reallab import (GROUP, HEAD, HEAD_API, INVENTORY, KEYS, MODEL, MODEL_NAME, PAIR, WORKER, fleet, node, playbook,
                     rank_state)

SERVER = "dspark-lmcache"
ENGINE_PORT = 18888          # serve_engine_port (the engine behind the API edge, loopback only)
HTTP_PORT = 8080             # serve_lmcache_http_port
DISK = "/var/lib/dspark/lmcache"
# A recovery on the 2-core machine: a check, the logs, a restart of real vLLM and the servers (more beside CI's lanes).
RECOVERY_BOUND_S = 900
# About 200 tokens of tiny-llama's tokenizer (its /tokenize: 99 for 12 items): a context of 256 (serve_max_model_len) holds it and one chunk of 128
# (serve_lmcache_chunk_size) is cached whole.
PROMPT = " ".join("item %d is %s;" % (i, ("red", "green", "blue", "amber")[i % 4]) for i in range(24))


def server_state(host):
    rc, out = node(host, "docker inspect --format '{{.State.Status}} {{.State.Health.Status}}' %s" % SERVER)
    return out.strip() if rc == 0 else "absent"


def metric(host, port, name):
    """The sum of a metric's samples on ``host``'s loopback ``port`` (0 when absent)."""
    rc, out = node(host, "curl -s http://127.0.0.1:%d/metrics" % port)
    assert rc == 0, out
    return sum(float(line.rsplit(" ", 1)[1]) for line in out.splitlines()
               if re.match(r"^%s(\{| )" % re.escape(name), line))


def first_token_seconds():
    """Time to the first streamed token of PROMPT through the head's API edge, and its prompt tokens."""
    client = openai.OpenAI(base_url=HEAD_API, api_key=KEYS[0], timeout=300, max_retries=0)
    started = time.monotonic()
    stream = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=4, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    first, usage = None, None
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].text is not None:
            first = time.monotonic() - started
        usage = chunk.usage or usage
    return first, usage.prompt_tokens


def test_a_healthy_server_beside_each_rank_on_the_fabric_and_loopback():
    for host in (HEAD, WORKER):
        assert server_state(host) == "running healthy", host
        rc, out = node(host, "ss -Hltn")
        fabric = PAIR["hosts"][host]["dspark_fabric_address"]
        assert "%s:5555 " % fabric in out and "127.0.0.1:%d " % HTTP_PORT in out, (host, out)
        assert "0.0.0.0:%d " % HTTP_PORT not in out and "0.0.0.0:5555 " not in out, (host, out)


def test_an_l1_the_node_cannot_hold_is_refused_before_anything_changes():
    """The qualify gate of site.yml (before any role changes a node) judges the L1 against the node's memory and its
    /dev/shm: this machine's 24 GiB and the lab nodes' 2 GiB /dev/shm cannot hold a 64 GB L1."""
    rc, out = playbook("playbooks/qualify.yml", "-e", "serve_lmcache_l1_size_gb=64", "-e", "qualify_fast=true")
    flat = " ".join(out.split())
    assert rc != 0, out[-3000:]
    assert "LMCache L1 65536 MiB (serve_lmcache_l1_size_gb)" in flat and "cannot all fit" in flat, out[-3000:]
    # The running server's segment counts as there (0.5 GB of the L1 when the group serves, 0 when it is stopped).
    assert re.search(r"disk /dev/shm: /dev/shm \(LMCache's L1 \(serve_lmcache_l1_size_gb=64, \d+ bytes of it there "
                     r"already\) and vLLM's 160 MiB\) at /dev/shm: 2\.0 GiB free, 6\d\.\d GiB needed", flat), out[-3000:]
    assert "Fix: Lower serve_lmcache_l1_size_gb, or give the node's /dev/shm room for it" in flat, out[-3000:]
    assert "Fix: Lower serve_lmcache_l1_size_gb to at most" in flat, out[-3000:]


def disk_files(host):
    rc, out = node(host, "find %s -name '*.data' | wc -l" % DISK)
    assert rc == 0, (host, out)
    return int(out.strip())


def test_a_killed_server_and_worker_are_named_and_one_restart_brings_the_group_and_the_prompt_back(tmp_path):
    """One restart of the real group proves four things (each real restart costs minutes of CI on 2 cores):
    - a killed LMCache server is named by verify and by status (the group's engines still run);
    - a real worker rank killed next is named by status (the head keeps answering /v1/models until a generation
      fails, so status must read the rank, not the API);
    - `dspark-fleet watch --once` restarts the WHOLE group as one unit, engines and servers on both nodes (vLLM's
      prefix cache and LMCache's L1 gone): watch acts on verify's failure whatever its cause, so the server alone
      takes the same path;
    - the prompt sent before the kills is then read from LMCache's disk tier, and the engine answers a greedy chat."""
    before, tokens = first_token_seconds()
    assert 128 < tokens < 250, tokens
    deadline = time.monotonic() + 60
    while not (disk_files(HEAD) and disk_files(WORKER)) and time.monotonic() < deadline:
        time.sleep(2)
    assert disk_files(HEAD) and disk_files(WORKER), "the prompt's chunks never reached the disk tier"
    rc, out = node(WORKER, "docker kill %s" % SERVER)
    assert rc == 0, out
    rc, out = playbook("playbooks/verify.yml")
    flat = " ".join(out.split())
    assert rc != 0 and "The container %s beside rank 1 on %s is exited" % (SERVER, WORKER) in flat, out[-3000:]
    rc, out = playbook("playbooks/status.yml")
    assert rc != 0 and "LMCache server down or unhealthy on %s" % WORKER in " ".join(out.split()), out[-3000:]
    rc, out = node(WORKER, "docker kill dspark-vllm")
    assert rank_state(WORKER) == "exited", out
    died = time.monotonic()
    rc, status = playbook("playbooks/status.yml")
    assert rc != 0 and "%s=exited" % WORKER in " ".join(status.split()), status[-3000:]
    rc, out = fleet("watch", "-i", INVENTORY, "--groups", GROUP, "--plain", "--once", "--state-dir", tmp_path / "state",
                    "--artifacts", tmp_path / "artifacts", timeout=RECOVERY_BOUND_S + 300)
    print("\nkilled real worker and LMCache server -> serving again (watch --once): %.1f s" % (time.monotonic() - died))
    assert rc == 0, out[-4000:]
    assert rank_state(HEAD) == "running" and rank_state(WORKER) == "running"
    assert server_state(HEAD) == server_state(WORKER) == "running healthy"
    # A fresh engine and fresh servers: nothing of the prompt in vLLM's prefix cache or in LMCache's L1.
    assert metric(HEAD, ENGINE_PORT, "vllm:external_prefix_cache_hits_total") == 0
    after, dummy = first_token_seconds()
    hits = metric(HEAD, ENGINE_PORT, "vllm:external_prefix_cache_hits_total")
    print("LMCache: first token %.3f s before the restart, %.3f s after it (%d prompt tokens, %d read from LMCache)"
          % (before, after, tokens, hits))
    assert hits >= 128, hits
    assert metric(HEAD, ENGINE_PORT, "vllm:prefix_cache_hits_total") == 0
    for host in (HEAD, WORKER):
        assert metric(host, HTTP_PORT, "lmcache_mp_lookup_hit_l2_tokens_total") >= 128, host
    check = MODEL["transformers_check"]
    answer = openai.OpenAI(base_url=HEAD_API, api_key=KEYS[0], timeout=120, max_retries=0).chat.completions.create(
        model=MODEL_NAME, messages=check["messages"], max_tokens=4, temperature=0)
    assert answer.choices[0].message.content
