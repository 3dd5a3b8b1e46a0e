"""A serving group's sidecar engines (issue #46): what dspark_sidecars reads as, and what it refuses."""

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_engines as ge

REV = "0123456789abcdef0123456789abcdef01234567"
IMAGE = "ghcr.io/anemll/dspark-vllm-gx10:0.1.1"
MAIN = {"served_model_name": "deepseek-v4-flash", "api_port": 8888, "master_port": 25000, "engine_port": 18888}


def vl(**changes):
    entry = {"name": "vl", "model": "cyankiwi/Qwen3-VL-4B-Instruct-AWQ-4bit", "revision": REV,
             "served_model_name": "qwen3-vl-4b", "api_port": 8889, "master_port": 25100, "gpu_memory_utilization": 0.12}
    entry.update(changes)
    return {key: value for key, value in entry.items() if value is not ge}


def variables(problems):
    return [problem[0] for problem in problems]


@pytest.mark.parametrize("value", [None, []])
def test_no_sidecars(value):
    assert ge.sidecars(value, IMAGE) == ([], [])


def test_the_recipes_vision_sidecar_reads_with_its_defaults():
    engines, problems = ge.sidecars([vl(api_port="8889")], IMAGE)
    assert problems == []
    assert engines == [{
        "name": "vl", "model": "cyankiwi/Qwen3-VL-4B-Instruct-AWQ-4bit", "revision": REV, "served_model_name": "qwen3-vl-4b",
        "image": IMAGE, "api_port": 8889, "master_port": 25100, "engine_port": 18889, "gpu_memory_utilization": 0.12,
        "max_model_len": None, "max_num_seqs": None, "trust_remote_code": False, "extra_args": [], "index": 0,
    }]
    assert ge.clash_problems(engines, MAIN) == []
    assert ge.budget_problem(0.80, engines) is None


def test_served_name_defaults_to_the_name_and_arguments_are_strings():
    engines, problems = ge.sidecars([vl(served_model_name=ge, extra_args=["--limit-mm-per-prompt", '{"image":4}', "--seed", 7],
                                        image="registry.example/vl:1", max_num_seqs="4", trust_remote_code="yes")], IMAGE)
    assert problems == []
    assert engines[0]["served_model_name"] == "vl"
    assert engines[0]["extra_args"] == ["--limit-mm-per-prompt", '{"image":4}', "--seed", "7"]
    assert (engines[0]["image"], engines[0]["max_num_seqs"], engines[0]["trust_remote_code"]) == ("registry.example/vl:1", 4, True)


@pytest.mark.parametrize("entry, var, words", [
    (vl(name="Vision"), "dspark_sidecars[0].name", "not a sidecar name"),
    (vl(name="main"), "dspark_sidecars[0].name", "main engine's"),
    (vl(name="a-very-long-sidecar-name"), "dspark_sidecars[0].name", "at most 16"),
    (vl(model="Qwen3-VL-4B"), "dspark_sidecars[0].model", "not a Hugging Face model id"),
    (vl(revision="main"), "dspark_sidecars[0].revision", "branch, tag or short id"),
    (vl(revision=""), "dspark_sidecars[0].revision", "tip of main"),
    (vl(served_model_name="qwen vl"), "dspark_sidecars[0].served_model_name", "client can send"),
    (vl(api_port=80), "dspark_sidecars[0].api_port", "1024-65535"),
    (vl(master_port="25100/tcp"), "dspark_sidecars[0].master_port", "1024-65535"),
    (vl(api_port=60000), "dspark_sidecars[0].engine_port", "1024-65535"),
    (vl(gpu_memory_utilization=12), "dspark_sidecars[0].gpu_memory_utilization", "0 < x < 1"),
    (vl(gpu_memory_utilization="0"), "dspark_sidecars[0].gpu_memory_utilization", "0 < x < 1"),
    (vl(gpu_memory_utilization=True), "dspark_sidecars[0].gpu_memory_utilization", "0 < x < 1"),
    (vl(max_model_len=0), "dspark_sidecars[0].max_model_len", "positive integer"),
    (vl(trust_remote_code="maybe"), "dspark_sidecars[0].trust_remote_code", "not a boolean"),
    (vl(extra_args="--enforce-eager"), "dspark_sidecars[0].extra_args", "list of vLLM arguments"),
    (vl(extra_args=[True]), "dspark_sidecars[0].extra_args", "list of vLLM arguments"),
    (vl(image=""), "dspark_sidecars[0].image", "empty"),
    (vl(gpu_memory_utilisation=0.1), "dspark_sidecars[0]", "keys a sidecar does not have"),
    (vl(master_port=ge), "dspark_sidecars[0]", "lacks master_port"),
    ("vl", "dspark_sidecars[0]", "not a mapping"),
])
def test_a_bad_sidecar_is_named_with_its_fix(entry, var, words):
    engines, problems = ge.sidecars([entry], IMAGE)
    assert var in variables(problems), problems
    problem = next(p for p in problems if p[0] == var)
    assert words in problem[2] + problem[3]
    assert problem[3]  # a fix


def test_not_a_list():
    assert variables(ge.sidecars({"vl": vl()}, IMAGE)[1]) == ["dspark_sidecars"]


def test_every_problem_of_a_sidecar_at_once():
    problems = ge.sidecars([vl(name="X", api_port=1, gpu_memory_utilization=2)], IMAGE)[1]
    assert set(variables(problems)) == {"dspark_sidecars[0].name", "dspark_sidecars[0].api_port",
                                        "dspark_sidecars[0].gpu_memory_utilization"}


@pytest.mark.parametrize("second, main, var, first", [
    (vl(served_model_name="b", api_port=8890, master_port=25101), MAIN, "dspark_sidecars[1].name", "dspark_sidecars[0].name"),
    (vl(name="vl2", served_model_name="deepseek-v4-flash", api_port=8890, master_port=25101), MAIN,
     "dspark_sidecars[1].served_model_name", "serve_served_model_name"),
    (vl(name="vl2", served_model_name="b", api_port=8888, master_port=25101, engine_port=18890), MAIN,
     "dspark_sidecars[1].api_port", "dspark_api_port"),
    (vl(name="vl2", served_model_name="b", api_port=8890, master_port=25000), MAIN, "dspark_sidecars[1].master_port",
     "dspark_master_port"),
    (vl(name="vl2", served_model_name="b", api_port=8890, master_port=25101, engine_port=18888), MAIN,
     "dspark_sidecars[1].engine_port", "serve_engine_port"),
    # Ports are one space: a sidecar's API port on another engine's rendezvous port clashes too.
    (vl(name="vl2", served_model_name="b", api_port=25100, master_port=25101), MAIN, "dspark_sidecars[1].api_port",
     "dspark_sidecars[0].master_port"),
    # Without the edge the main engine has no engine port: 18888 is then free.
    (vl(name="vl2", served_model_name="b", api_port=8890, master_port=25101, engine_port=18888),
     dict(MAIN, engine_port=None), None, None),
])
def test_two_engines_never_share_a_name_or_a_port(second, main, var, first):
    engines, problems = ge.sidecars([vl(), second], IMAGE)
    assert problems == []
    clashes = ge.clash_problems(engines, main)
    if var is None:
        assert clashes == []
        return
    assert variables(clashes) == [var]
    assert "is also %s" % first in clashes[0][2]


def test_memory_shares_that_fill_the_node_are_refused_naming_each():
    engines = ge.sidecars([vl(), vl(name="ocr", served_model_name="ocr", api_port=8890, master_port=25101,
                                    gpu_memory_utilization="0.1")], IMAGE)[0]
    problem = ge.budget_problem(0.835, engines)
    assert problem[0] == "serve_gpu_memory_utilization"
    assert problem[1] == "main 0.835 + vl 0.12 + ocr 0.1 = 1.055"
    assert "0.80" in problem[3]
    assert ge.budget_problem(0.7, engines) is None
    # Exactly the whole node is refused too: nothing left for the host.
    assert ge.budget_problem(0.88, engines[:1]) is not None
    # No sidecar: the main engine's own range is serve's rule, not this one.
    assert ge.budget_problem(0.99, []) is None
    assert ge.memory_shares("x", engines) == [("vl", 0.12), ("ocr", 0.1)]


def test_a_clash_names_the_entry_by_its_place_in_the_list_past_one_that_is_no_mapping():
    from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_engines as ge
    good = {"name": "vl", "model": "o/m", "revision": "a" * 40, "api_port": 8888, "master_port": 25100,
            "gpu_memory_utilization": 0.1}
    engines, dummy = ge.sidecars(["not a mapping", good])
    assert [problem[0] for problem in ge.clash_problems(engines, {"api_port": 8888})] == ["dspark_sidecars[1].api_port"]
