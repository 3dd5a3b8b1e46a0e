"""The rules of router_target_group (plugin_utils._rules_router.target_problems), which the drain and enable playbooks
and the router role's target step assert: a router exists, a group is named, the group is routed by the router."""

from ansible_collections.dspark.cluster.plugins.filter.router_target import router_target_problems


def test_a_valid_request_has_no_problem():
    assert router_target_problems("pair_a", routers=["spark-router"]) == []
    assert router_target_problems("pair_a", routed=["pair_a", "pair_b"], router="spark-router") == []


def test_no_router_and_no_group_are_both_named_at_once():
    assert router_target_problems(None, routers=[]) == [
        "The inventory has no host in group dspark_router: there is no router to drain at.",
        "Name the group: -e router_target_group=<group>."]
    assert router_target_problems("", routers=[], action="enable")[0] == \
        "The inventory has no host in group dspark_router: there is no router."


def test_a_blank_name_is_no_name():
    assert router_target_problems("  ", routers=["r"]) == ["Name the group: -e router_target_group=<group>."]


def test_a_group_this_router_does_not_route_is_named_with_what_it_routes():
    assert router_target_problems("pair_z", routed=["pair_a", "pair_b"], router="spark-router") == [
        'router_target_group="pair_z" is not a serving group behind spark-router (routed: pair_a, pair_b).']
    assert router_target_problems("pair_a", routed=[], router="r") == [
        'router_target_group="pair_a" is not a serving group behind r (routed: none).']
