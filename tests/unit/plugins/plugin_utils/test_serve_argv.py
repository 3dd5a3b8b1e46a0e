"""The serve role's vLLM command line (plugin_utils._serve_command); under real Ansible against the old Jinja's output:
tests/unit/playbooks/test_serve_command.py and test_role_plans.py."""

import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dspark.cluster.plugins.filter.serve_command import serve_command
from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_command

VALUES = {
    "dspark_model": "org/model", "dspark_model_revision": "a" * 40, "dspark_api_port": 8888, "dspark_tensor_parallel_size": 2,
    "dspark_rank": 1, "serve_served_model_name": "m", "serve_host": "0.0.0.0", "serve_recipe_args": True,
    "serve_kv_cache_dtype": "fp8", "serve_block_size": 256, "serve_max_model_len": 4096, "serve_max_num_seqs": "6",
    "serve_max_num_batched_tokens": 8192, "serve_long_prefill_token_threshold": 1024, "serve_mtp_num_tokens": 5,
    "serve_gpu_memory_utilization": 0.835, "serve_speculative_method": "dspark", "serve_draft_sample_method": "probabilistic",
    "serve_default_thinking": "high", "serve_extra_args": ["--seed", "1"], "serve_trust_remote_code": False,
    "serve_lmcache": False, "serve_lmcache_port": 5555,
}
GROUP = {"size": 2, "master_address": "10.0.0.1", "master_port": 25000, "is_head": False, "members": ["h0", "h1"],
         "addresses": {"h1": "10.0.0.2", "h0": "10.0.0.1"}}


def test_the_recipe_flags_in_order():
    argv = _serve_command.command(VALUES, GROUP)
    assert argv[:11] == ["vllm", "serve", "org/model", "--revision", "a" * 40, "--served-model-name", "m", "--host", "0.0.0.0",
                         "--port", "8888"]
    assert argv[argv.index("--max-cudagraph-capture-size") + 1] == "36"          # 6 x (5 + 1)
    assert argv[argv.index("--speculative-config") + 1] == (
        '{"method": "dspark", "num_speculative_tokens": 5, "draft_sample_method": "probabilistic"}')
    assert argv[argv.index("--default-chat-template-kwargs") + 1] == '{"thinking": true, "reasoning_effort": "high"}'
    assert argv[-11:] == ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "25000",
                          "--headless", "--seed", "1"]


def test_without_the_recipe_only_the_common_flags():
    argv = _serve_command.command(dict(VALUES, serve_recipe_args="no", serve_default_thinking="nonsense"), dict(GROUP, is_head=True))
    assert "--trust-remote-code" not in argv and "--speculative-config" not in argv and "--headless" not in argv
    assert argv[argv.index("--distributed-executor-backend") - 2:argv.index("--distributed-executor-backend")] == [
        "--max-num-batched-tokens", "8192"]


@pytest.mark.parametrize("recipe", [True, False])
def test_trust_remote_code_only_on_request(recipe):
    """#26: never implied by the recipe's flags; when asked for, in the recipe's place (after --port), so a group that
    sets it keeps the command (and the config hash) it had when the recipe always passed it."""
    off = _serve_command.command(dict(VALUES, serve_recipe_args=recipe), GROUP)
    on = _serve_command.command(dict(VALUES, serve_recipe_args=recipe, serve_trust_remote_code="true"), GROUP)
    assert "--trust-remote-code" not in off
    assert on == off[:11] + ["--trust-remote-code"] + off[11:]


@pytest.mark.parametrize("value, number", [(6, 6), ("6", 6), ("6.7", 6), (6.9, 6), ("six", 0), (None, 0), (True, 1)])
def test_jinja_int(value, number):
    assert _serve_command.jinja_int(value) == number


@pytest.mark.parametrize("values, text", [
    (dict(VALUES, serve_default_thinking="medium"), "serve_default_thinking='medium' is not a reasoning default. Fix: "),
    (dict(VALUES, serve_extra_args="--seed 1"), "serve_extra_args='--seed 1' is not a list. Fix: "),
    ({"dspark_model": "x"}, "dspark_model_revision"),
    (dict(VALUES, serve_trust_remote_code="maybe"), "serve_trust_remote_code='maybe' is not a boolean. Fix: "),
])
def test_bad_inputs_name_the_variable_and_the_fix(values, text):
    with pytest.raises(AnsibleFilterError) as raised:
        serve_command(values, GROUP)
    assert text in str(raised.value)


@pytest.mark.parametrize("on", [True, "yes"])
def test_lmcache_adds_its_connector_before_the_multi_node_flags(on):
    """#45: the connector to every server of the group on its fabric address, in node-rank order (the head's scheduler
    looks prompts up on all of them); the rest of the command as without it."""
    off = _serve_command.command(VALUES, GROUP)
    argv = _serve_command.command(dict(VALUES, serve_lmcache=on, serve_lmcache_port=5600), GROUP)
    at = argv.index("--kv-transfer-config")
    assert argv[:at] + argv[at + 2:] == off and argv[at + 2] == "--nnodes"
    assert json.loads(argv[at + 1]) == {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                                        "kv_connector_extra_config": {
                                            "lmcache.mp.server_urls": "tcp://10.0.0.1:5600,tcp://10.0.0.2:5600"}}


SIDECAR = {"name": "vl", "model": "cyankiwi/Qwen3-VL-4B-Instruct-AWQ-4bit", "revision": "b" * 40, "served_model_name": "qwen3-vl-4b",
           "image": "img", "api_port": 8889, "master_port": 25100, "engine_port": 18889, "gpu_memory_utilization": 0.12,
           "max_model_len": 65536, "max_num_seqs": None, "trust_remote_code": True,
           "extra_args": ["--limit-mm-per-prompt", '{"image":4}']}


def test_a_sidecar_rank_launches_on_its_own_rendezvous_port_with_its_own_share():
    argv = _serve_command.sidecar_command(SIDECAR, 1, 2, "0.0.0.0", 8889, GROUP)
    assert argv == ["vllm", "serve", "cyankiwi/Qwen3-VL-4B-Instruct-AWQ-4bit", "--revision", "b" * 40,
                    "--served-model-name", "qwen3-vl-4b", "--host", "0.0.0.0", "--port", "8889", "--trust-remote-code",
                    "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1", "--gpu-memory-utilization", "0.12",
                    "--max-model-len", "65536", "--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", "1",
                    "--master-addr", "10.0.0.1", "--master-port", "25100", "--headless",
                    "--limit-mm-per-prompt", '{"image":4}']


def test_a_sidecar_head_behind_the_edge_serves_the_api():
    argv = _serve_command.sidecar_command(dict(SIDECAR, trust_remote_code=False, max_model_len=None, max_num_seqs=4, extra_args=[]), 0, 3, "127.0.0.1",
                                          18889, dict(GROUP, size=3, is_head=True))
    assert "--headless" not in argv and "--trust-remote-code" not in argv
    assert argv[argv.index("--port") - 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "18889"
    assert argv[argv.index("--max-num-seqs") + 1] == "4" and "--max-model-len" not in argv
    assert argv[-8:] == ["--nnodes", "3", "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "25100"]
    # The main engine's DeepSeek flags never reach a sidecar.
    assert not {"--speculative-config", "--kv-cache-dtype", "--reasoning-parser", "--tokenizer-mode"} & set(argv)
