"""inventory: serving groups, members, heads and --groups patterns from `ansible-inventory --list` JSON."""

import pytest

from dspark_fleet.inventory import Inventory, InventoryError, inventory_path, list_inventory, split_patterns

LISTED = {
    "_meta": {"hostvars": {
        "a0": {"dspark_group": "pair_a", "dspark_rank": 0, "dspark_model": "m/a", "dspark_model_revision": "r" * 40},
        "a1": {"dspark_group": "pair_a", "dspark_rank": 1},
        "b1": {"dspark_group": "pair_b", "dspark_rank": "1"},
        "b0": {"dspark_group": "pair_b", "dspark_rank": "0", "dspark_model": "m/b"},
        "c0": {"dspark_group": "trio_c", "dspark_rank": 0},
        "c1": {"dspark_group": "trio_c", "dspark_rank": 1},
        "c2": {"dspark_group": "trio_c", "dspark_rank": 2},
        "other": {},
    }},
    "all": {"children": ["ungrouped", "dspark", "monitoring"]},
    "dspark": {"children": ["pair_a", "pair_b", "trio_c"]},
    "pair_a": {"hosts": ["a0", "a1"]},
    "pair_b": {"hosts": ["b1", "b0"]},
    "trio_c": {"hosts": ["c0"], "children": ["trio_c_workers"]},
    "trio_c_workers": {"hosts": ["c1", "c2"]},
    "monitoring": {"hosts": ["other"]},
}


def test_ranks_are_read_as_the_roles_read_them():
    """The collection's group model orders members and finds the head: a boolean or a fraction is no rank, members
    without a usable rank come last in inventory order (what tp_ranks and the roles do with the same inventory)."""
    data = {"_meta": {"hostvars": {"x": {"dspark_rank": True}, "y": {"dspark_rank": "1"}, "z": {"dspark_rank": 0.0},
                                   "w": {"dspark_rank": "+0"}}},
            "dspark": {"children": ["g"]}, "g": {"hosts": ["x", "y", "z", "w"]}}
    inv = Inventory(data)
    assert inv.ordered_members("g") == ["w", "y", "x", "z"]
    assert inv.head("g") == "w"
    assert [inv.rank(h) for h in "xyzw"] == [None, 1, None, 0]


def test_groups_members_heads():
    inv = Inventory(LISTED)
    assert inv.groups == ["pair_a", "pair_b", "trio_c"]
    assert inv.members["trio_c"] == ["c0", "c1", "c2"]          # nested children count
    assert inv.ordered_members("pair_b") == ["b0", "b1"]         # by rank, string ranks too
    assert inv.head("pair_b") == "b0"
    assert inv.head_var("pair_a", "dspark_model") == "m/a"
    assert inv.head_var("pair_a", "dspark_model_revision") == "r" * 40
    assert inv.head_var("trio_c", "dspark_model") is None
    assert inv.member_vars("pair_a") == {"a0": LISTED["_meta"]["hostvars"]["a0"], "a1": {"dspark_group": "pair_a",
                                                                                         "dspark_rank": 1}}


def test_select_by_names_and_patterns_in_inventory_order():
    inv = Inventory(LISTED)
    assert inv.select([]) == ["pair_a", "pair_b", "trio_c"]
    assert inv.select(["trio_c", "pair_a"]) == ["pair_a", "trio_c"]
    assert inv.select(["pair_*"]) == ["pair_a", "pair_b"]
    assert inv.select(["*_[bc]"]) == ["pair_b", "trio_c"]


def test_unknown_patterns_are_named():
    inv = Inventory(LISTED)
    with pytest.raises(InventoryError, match=r"'pair_z', 'monitoring' \(serving groups: pair_a, pair_b, trio_c\)"):
        inv.select(["pair_a", "pair_z", "monitoring"])


def test_split_patterns():
    assert split_patterns(["pair_a,pair_b", " trio_* ", "pair_a", ""]) == ["pair_a", "pair_b", "trio_*"]
    assert split_patterns([]) == []


@pytest.mark.parametrize("data, message", [
    ({"all": {"children": ["ungrouped"]}}, "no group 'dspark'"),
    ({"dspark": {"hosts": ["x"]}}, "no child groups"),
])
def test_inventories_without_serving_groups(data, message):
    with pytest.raises(InventoryError, match=message):
        Inventory(data)


def test_inventory_path(tmp_path):
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    assert inventory_path("hosts.yml", cwd=str(tmp_path)) == str(tmp_path / "hosts.yml")
    with pytest.raises(InventoryError, match="does not exist"):
        inventory_path("missing.yml", cwd=str(tmp_path))


def test_list_inventory_of_the_fake_project(fake_project, venv_path):
    import os
    data = list_inventory(str(fake_project / "inventory.yml"), str(fake_project),
                          dict(os.environ, ANSIBLE_CONFIG=str(fake_project / "ansible.cfg")))
    inv = Inventory(data)
    assert inv.groups == ["grp_ok", "grp_bad"]
    assert inv.vars_of("bad-head")["fake_fail"] == "serve"


def test_list_inventory_failures(tmp_path, fake_project, venv_path):
    import os
    bad = tmp_path / "hosts.yml"
    bad.write_text("all: [this is not an inventory\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(fake_project / "ansible.cfg"), ANSIBLE_INVENTORY_UNPARSED_FAILED="True")
    with pytest.raises(InventoryError, match="failed"):
        list_inventory(str(bad), str(fake_project), env)
    with pytest.raises(InventoryError, match="cannot run"):
        list_inventory(str(bad), str(fake_project), env, executable=str(tmp_path / "no-such-ansible-inventory"))
