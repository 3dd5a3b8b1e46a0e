# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_serve_status.py: status.yml's rank that failed first (tp_ranks' rule) and its text."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _serve_status as st

HOSTS = ["spark-head", "spark-r1"]
RUNNING = {"state": "running", "exit_code": "0", "oom_killed": "false", "finished_at": "0001-01-01T00:00:00Z"}


def exited(code, at, oom="false"):
    return {"state": "exited", "exit_code": str(code), "oom_killed": oom, "finished_at": at}


def test_a_killed_worker_leads_and_the_head_is_its_consequence():
    out = st.view(HOSTS, [0, 1], [RUNNING, exited(137, "2026-12-01T16:07:19.2048Z")])
    first = out["first_failure"]
    assert first["host"] == "spark-r1" and first["rank"] == 1 and first["killed"] is True
    assert first["finished"] == "2026-12-01T16:07:19.204800000" and first["label"] == "exited (137, killed)"
    assert out["text"] == ("rank 1 on spark-r1 failed first: its container exited (137, killed) at "
                           "2026-12-01T16:07:19.204800000Z; rank 0 on spark-head: lost its peer rank 1 (consequence); ")
    assert [r["label"] for r in out["rows"]] == ["running", "exited (137, killed)"]


def test_the_one_that_ended_first_leads_when_both_ended():
    out = st.view(HOSTS, ["0", "1"], [exited(1, "2026-12-01T16:07:24Z"), exited(143, "2026-12-01T16:07:19.5Z")])
    assert out["first_failure"]["host"] == "spark-r1" and out["first_failure"]["killed"] is False
    assert out["text"].startswith("rank 1 on spark-r1 failed first: its container exited (143) at "
                                  "2026-12-01T16:07:19.500000000Z;")


def test_an_oom_killed_head_beside_an_absent_worker():
    out = st.view(HOSTS, [0, 1], [exited(137, "2026-12-01T16:07:24Z", oom="true"), {"state": "absent"}])
    assert out["first_failure"]["host"] == "spark-head"
    assert out["rows"][1]["label"] == "absent" and out["rows"][1]["ended"] is False


@pytest.mark.parametrize("containers", [
    [exited(1, "2026-12-01T16:07:24Z"), exited(1, "2026-12-01T16:07:24Z")],     # same time, neither killed
    [RUNNING, RUNNING],                                                           # nothing ended
    [{"state": "not in play"}, None],                                             # nothing known
])
def test_no_first_failure_when_the_containers_cannot_tell(containers):
    out = st.view(HOSTS, [0, 1], containers)
    assert out["first_failure"] is None and out["text"] == ""


def test_a_time_that_never_happened_is_not_a_finish():
    assert st.row("h", 0, exited(137, "0001-01-01T00:00:00Z"))["finished"] == ""
    assert st.row("h", 0, exited(137, "garbage"))["finished"] == ""


@pytest.mark.parametrize("lmcache, down", [
    (None, []),                                                                    # serve_lmcache off everywhere
    ([None, None], []),
    ([{"state": "running", "health": "healthy"}, {"state": "running", "health": "none"}], []),
    ([{"state": "running", "health": "healthy"}, {"state": "exited", "health": "unhealthy"}], ["spark-r1"]),
    ([{"state": "running", "health": "unhealthy"}, {"state": "absent", "health": "none"}], ["spark-head", "spark-r1"]),
])
def test_lmcache_servers_that_do_not_serve(lmcache, down):
    """#45: a group whose LMCache server is down or unhealthy does not serve as set, whatever its engine says."""
    assert st.view(HOSTS, [0, 1], [RUNNING, RUNNING], lmcache=lmcache)["lmcache_down"] == down
