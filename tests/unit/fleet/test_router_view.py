"""dspark-fleet status: each router's view and where the service address is (router_view.py), from the reports that
playbooks/router_status.yml writes (their shape: roles/router/tasks/status.yml)."""

from dspark_fleet import router_view

VIP = "10.232.0.200"


def result(name, holds, passes, servers=None, ok=True):
    servers = servers if servers is not None else [
        {"name": "pair_a", "status": "UP", "admin": "ready", "in_rotation": True, "sessions": 1},
        {"name": "trio_c", "status": "UP", "admin": "ready", "in_rotation": True, "sessions": 0}]
    return {"router": name, "action": "status", "ok": ok, "servers": servers,
            "service_address": None if holds is None else {"address": VIP, "holds": holds, "check_passes": passes}}


ROUTERS = ["spark-router", "spark-router2"]


def test_a_healthy_pair_of_routers_has_one_holder_and_no_problem():
    section = router_view.view(ROUTERS, {"spark-router": result("spark-router", True, True),
                                         "spark-router2": result("spark-router2", False, True)}, None, "log")
    assert section["address"] == VIP and section["holders"] == ["spark-router"]
    assert section["routers"]["spark-router2"] == {
        "answered": True, "holds_address": False, "can_take_address": True,
        "servers": {"pair_a": {"status": "UP", "admin": "ready", "in_rotation": True, "sessions": 1},
                    "trio_c": {"status": "UP", "admin": "ready", "in_rotation": True, "sessions": 0}}}
    assert section["problems"] == []


def test_a_router_that_did_not_answer_is_named_and_leaves_one_able():
    section = router_view.view(ROUTERS, {"spark-router2": result("spark-router2", True, True)},
                               "spark-router: UNREACHABLE", "log")
    assert section["routers"]["spark-router"]["answered"] is False
    assert section["holders"] == ["spark-router2"]
    text = " | ".join(section["problems"])
    assert "router(s) spark-router did not answer (spark-router: UNREACHABLE)" in text
    assert "only 1 of 2 routers can take the service address (spark-router2)" in text


def test_no_holder_two_holders_and_a_cut_off_router_are_problems():
    none = router_view.view(ROUTERS, {"spark-router": result("spark-router", False, False),
                                      "spark-router2": result("spark-router2", False, False)}, None, None)
    assert none["holders"] == [] and any("no router holds the service address 10.232.0.200" in p
                                         for p in none["problems"])
    assert any("only 0 of 2 routers can take the service address (none)" in p for p in none["problems"])
    both = router_view.view(ROUTERS, {"spark-router": result("spark-router", True, True),
                                      "spark-router2": result("spark-router2", True, True)}, None, None)
    assert any(p.startswith("2 routers hold the service address 10.232.0.200 (spark-router, spark-router2)")
               for p in both["problems"])


def test_a_group_drained_on_one_router_only_is_a_problem():
    out = [{"name": "pair_a", "status": "UP", "admin": "drain", "in_rotation": False, "sessions": 0},
           {"name": "trio_c", "status": "UP", "admin": "ready", "in_rotation": True, "sessions": 0}]
    section = router_view.view(ROUTERS, {"spark-router": result("spark-router", True, True),
                                         "spark-router2": result("spark-router2", False, True, servers=out)}, None, None)
    assert section["problems"] == [
        "group pair_a is in rotation on spark-router but not on spark-router2: a drain or enable did not reach every "
        "router. Fix: run playbooks/router_drain.yml or router_enable.yml -e router_target_group=pair_a again"]


def test_one_router_without_a_service_address_has_no_address_problem():
    section = router_view.view(["spark-router"], {"spark-router": result("spark-router", None, None)}, None, None)
    assert section["address"] is None and section["holders"] == [] and section["problems"] == []
    assert section["routers"]["spark-router"]["holds_address"] is None


def test_the_table_shows_the_holder_and_each_groups_state(capsys):
    out = [{"name": "pair_a", "status": "DOWN", "admin": "drain", "in_rotation": False, "sessions": 0}]
    router_view.print_table(router_view.view(ROUTERS, {"spark-router": result("spark-router", True, True),
                                                       "spark-router2": result("spark-router2", False, False, out)},
                                             None, None))
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "Routers (service address 10.232.0.200):"
    assert lines[2].split() == ["router", "service", "address", "can", "take", "it", "pair_a", "trio_c"]
    assert lines[3].split() == ["spark-router", "HOLDS", "yes", "UP", "ready", "UP", "ready"]
    assert lines[4].split() == ["spark-router2", "backup", "NO", "DOWN", "drain", "(out)", "-"]
    assert any(line.startswith("  ! only 1 of 2 routers can take the service address") for line in lines)
