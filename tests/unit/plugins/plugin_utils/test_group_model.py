"""Table-driven tests of the group model that every role, tp_ranks and the preflight rules share."""

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_model as gm
from ansible_collections.dspark.cluster.plugins.filter.group_model import FilterModule


def inventory(ranks, addresses=None):
    """groups and hostvars of one group 'g' whose hosts (inventory order) have the given ranks."""
    hosts = list(ranks)
    hostvars = {}
    for i, host in enumerate(hosts):
        hostvars[host] = {"dspark_group": "g"}
        if ranks[host] is not None:
            hostvars[host]["dspark_rank"] = ranks[host]
        if addresses is None:
            hostvars[host]["dspark_fabric_address"] = "10.0.0.%d" % (i + 1)
        elif addresses.get(host) is not None:
            hostvars[host]["dspark_fabric_address"] = addresses[host]
    return {"all": hosts, "dspark": hosts, "g": hosts}, hostvars


@pytest.mark.parametrize("ranks, members", [
    ({"a": 0, "b": 1}, ["a", "b"]),
    ({"b": 1, "a": 0}, ["a", "b"]),
    # The fleet lab's trio with its ranks reversed: inventory order does not matter.
    ({"c0": 2, "c1": 1, "c2": 0}, ["c2", "c1", "c0"]),
    # Ranks as the inventory may hold them: strings of digits.
    ({"x": "10", "y": "2", "z": 0}, ["z", "y", "x"]),
    # No usable rank: last, in inventory order (the validators report them).
    ({"p": None, "q": "head", "r": 0}, ["r", "p", "q"]),
    # Equal ranks keep inventory order.
    ({"m": 1, "n": 1, "o": 0}, ["o", "m", "n"]),
    ({"solo": 0}, ["solo"]),
])
def test_members_by_rank(ranks, members):
    groups, hostvars = inventory(ranks)
    model = gm.group_model("g", groups, hostvars)
    assert model["members"] == members
    assert model["head"] == members[0]
    assert model["workers"] == members[1:]
    assert model["size"] == len(members)
    assert "peers" not in model


@pytest.mark.parametrize("host, rank, is_head, peers", [
    ("c2", 0, True, ["c1", "c0"]),
    ("c1", 1, False, ["c2", "c0"]),
    ("c0", 2, False, ["c2", "c1"]),
])
def test_seen_from_a_host(host, rank, is_head, peers):
    groups, hostvars = inventory({"c0": 2, "c1": 1, "c2": 0})
    model = gm.group_model("g", groups, hostvars, host)
    assert (model["host"], model["rank"], model["is_head"], model["peers"]) == (host, rank, is_head, peers)
    assert model["master_address"] == "10.0.0.3"
    assert model["addresses"] == {"c0": "10.0.0.1", "c1": "10.0.0.2", "c2": "10.0.0.3"}
    assert model["ranks"] == {"c0": 2, "c1": 1, "c2": 0}
    assert model["rank_hosts"] == {0: ["c2"], 1: ["c1"], 2: ["c0"]}
    assert model["master_port"] is None and model["api_port"] is None


@pytest.mark.parametrize("head_vars, master_port, api_port", [
    ({"dspark_master_port": 25000, "dspark_api_port": 8888}, 25000, 8888),
    ({"dspark_master_port": "25001", "dspark_api_port": " 8000 "}, 25001, 8000),
    ({"dspark_master_port": "x"}, None, None),
])
def test_ports_are_the_heads(head_vars, master_port, api_port):
    groups, hostvars = inventory({"w": 1, "h": 0})
    hostvars["h"].update(head_vars)
    hostvars["w"].update(dspark_master_port=1, dspark_api_port=2)
    model = gm.group_model("g", groups, hostvars, "w")
    assert (model["master_port"], model["api_port"]) == (master_port, api_port)


@pytest.mark.parametrize("group", ["nope", "", None])
def test_unknown_group_is_the_host_alone(group):
    groups, hostvars = inventory({"a": 0, "b": 1})
    model = gm.group_model(group, groups, hostvars, "b")
    assert model["known"] is False
    assert model["members"] == ["b"] and model["head"] == "b" and model["peers"] == []
    assert model["is_head"] is False
    assert gm.group_model(group, groups, hostvars)["members"] == []


def test_duplicate_and_missing_ranks_and_addresses():
    groups, hostvars = inventory({"a": 0, "b": 0, "c": None}, addresses={"a": "10.0.0.1", "b": None, "c": "10.0.0.3"})
    model = gm.group_model("g", groups, hostvars, "c")
    assert model["rank_hosts"] == {0: ["a", "b"]}
    assert model["ranks"]["c"] is None and model["rank"] is None and model["is_head"] is False
    assert model["addresses"] == {"a": "10.0.0.1", "b": "", "c": "10.0.0.3"}
    # A member missing from hostvars altogether reads as unset.
    del hostvars["b"]
    assert gm.group_model("g", groups, hostvars)["members"] == ["a", "b", "c"]
    hostvars["b"] = None
    assert gm.group_model("g", groups, hostvars)["members"] == ["a", "b", "c"]


@pytest.mark.parametrize("value, number", [(0, 0), ("3", 3), (" 4 ", 4), ("-1", -1), (True, None), ("1.0", None), (None, None), ("x", None)])
def test_as_int(value, number):
    assert gm.as_int(value) == number


def test_filter_shell():
    groups, hostvars = inventory({"w": 1, "h": 0})
    flt = FilterModule().filters()["group_model"]
    assert flt(hostvars, groups, "g", "w") == gm.group_model("g", groups, hostvars, "w")
    assert flt(hostvars, groups, "g")["members"] == ["h", "w"]
