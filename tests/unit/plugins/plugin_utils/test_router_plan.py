"""The router's plan (plugin_utils._router_plan): serving groups, heads and one backend server per group."""

from ansible_collections.dspark.cluster.plugins.filter.router_plan import router_plan
from ansible_collections.dspark.cluster.plugins.plugin_utils import _router_plan

GROUPS = {"dspark": ["a0", "a1", "b0", "b1", "x"], "pair_a": ["a0", "a1"], "pair_b": ["b1", "b0"], "dspark_router": ["r"]}
HOSTVARS = {
    "a0": {"dspark_group": "pair_a", "dspark_rank": 0, "dspark_mgmt_address": "10.0.0.1", "ansible_host": "127.0.0.1",
           "serve_api_key": "k-a"},
    "a1": {"dspark_group": "pair_a", "dspark_rank": 1},
    "b0": {"dspark_group": "pair_b", "dspark_rank": "0", "ansible_host": "10.0.0.3", "dspark_api_port": "9000",
           "serve_served_model_name": "other", "serve_api_keys": ["k-b1", "k-b2"]},
    "b1": {"dspark_group": "pair_b", "dspark_rank": 1},
    "x": {"dspark_group": ""},
    "r": {},
}


def test_every_serving_group_and_one_server_per_head():
    found = _router_plan.plan(GROUPS, HOSTVARS)
    assert found["serving_groups"] == ["pair_a", "pair_b"]
    assert found["heads"] == {"pair_a": ["a0"], "pair_b": ["b0"]}
    assert found["servers"] == [
        {"name": "pair_a", "head": "a0", "address": "10.0.0.1", "port": 8888, "model": "deepseek-v4-flash", "keys": ["k-a"]},
        {"name": "pair_b", "head": "b0", "address": "10.0.0.3", "port": 9000, "model": "other", "keys": ["k-b1", "k-b2"]}]
    assert found["health_key"] == "k-a" and found["model"] == "deepseek-v4-flash"


def test_router_settings_win():
    found = router_plan(HOSTVARS, GROUPS, ["pair_b"], "served", "k-router")
    assert [s["name"] for s in found["servers"]] == ["pair_b"] and found["servers"][0]["model"] == "served"
    assert found["health_key"] == "k-router" and found["model"] == "served"


def test_a_group_without_one_head_has_no_server():
    hostvars = dict(HOSTVARS, a1=dict(HOSTVARS["a1"], dspark_rank=0))
    found = _router_plan.plan(GROUPS, hostvars, ["pair_a", "missing"])
    assert found["heads"] == {"pair_a": ["a0", "a1"], "missing": []}
    assert found["servers"] == [] and found["health_key"] == "" and found["model"] == "deepseek-v4-flash"


def test_the_inventory_name_is_the_last_address():
    found = _router_plan.plan({"g": ["h"]}, {"h": {"dspark_rank": 0}}, ["g"], "m")
    assert found["servers"][0]["address"] == "h" and found["model"] == "m"
