"""dspark-fleet and plain ansible-playbook on the SIMULATED fleet lab (a pair and a trio): a failure stays
inside its group, --resume redoes only that group, status shows every group serving, a checkpoint changed on a target
after its verification is refused at the next start, plan changes nothing.

Runs first of the fleet-lab suites (file order) and converges the fleet for the others. The serving image is
the lab SIMULATOR, not vLLM; faults are injected through its DSPARK_SIM_* variables.
"""

import pytest

from fleetlab import (FLEET_VARS, GPUS, GROUPS, INVENTORY, chat, container_id, docker, faulty_inventory, fleet, node, playbook,
                      report)

NEVER_JOIN = {"DSPARK_SIM_NEVER_JOIN": "1", "DSPARK_SIM_RENDEZVOUS_TIMEOUT": "10"}
NCCL_ERROR = {"DSPARK_SIM_NCCL_ERROR": "1"}
STATE = {}
FACTS = FLEET_VARS
SNAPSHOT = "%s/hub/models--%s/snapshots/%s" % (FACTS["dspark_hf_cache"], FACTS["dspark_model"].replace("/", "--"),
                                               FACTS["dspark_model_revision"])


def ids(groups):
    return {host: container_id(host) for group in groups for host in GROUPS[group]}


def test_reprovision_keeps_a_faulty_group_inside_itself(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet")
    inventory = faulty_inventory(tmp, "spark-b1", NEVER_JOIN)
    rc, out = fleet("reprovision", "-i", inventory, "--parallel", 2, "--plain", "--artifacts", tmp / "run1")
    assert rc == 1, out[-4000:]
    # One progress line per event and group, never Ansible's own output.
    assert "TASK [" not in out and "PLAY RECAP" not in out, out[-4000:]
    result = report(tmp / "run1" / "report.json")
    STATE["report"] = tmp / "run1" / "report.json"
    groups = result["groups"]
    assert result["exit_code"] == 1 and result["totals"]["failed"] == 1 and result["totals"]["converged"] == 1

    failed = groups["pair_b"]
    assert failed["result"] == "failed", failed
    diagnosis = failed["failure"]["tp_ranks"]["diagnosis"]
    assert any(d.get("rank") == 1 and d.get("node") == "spark-b1" for d in diagnosis), diagnosis
    assert "spark-b1" in failed["failure"]["summary"], failed["failure"]
    assert failed["logs"]["stdout"] and failed["phases"]["serve"]["duration_s"] > 0
    # The failed group was stopped as one unit: no rank of it is left running alone.
    assert all(container_id(host) is None for host in GROUPS["pair_b"])

    for name in ("trio_c",):
        group = groups[name]
        assert group["result"] == "converged", group
        proof = group["tp_ranks"]
        # Every rank, also those that do not print "assigned as" (trio_c: 2 per node, vLLM 0.33 format).
        nodes = [host for host in GROUPS[name] for _gpu in range(GPUS[name])]
        assert proof["ok"] and proof["world_size"] == len(nodes)
        assert [(r["rank"], r["node"]) for r in proof["registered_ranks"]] == list(enumerate(nodes))
        assert group["image_id"].startswith("sha256:") and group["model_revision"]
        assert set(group["phases"]) >= {"preflight", "docker_runtime", "fabric", "checkpoint", "serve"}
        ok, text = chat(name)
        assert ok, "%s does not generate: %s" % (name, text)
    STATE["ids"] = ids(("trio_c",))
    # One command, one endpoint: the router was converged after the groups, the failed group included (its
    # server is marked down by the health check, not left out of the configuration).
    router = result["router"]
    assert router["result"] == "converged" and router["hosts"] == ["spark-router", "spark-router2"], router
    for name in ("spark-router", "spark-router2"):
        assert docker("exec", name, "systemctl", "is-active", "haproxy", "keepalived")[1].split() == ["active"] * 2


def test_resume_redoes_only_the_failed_group(tmp_path_factory):
    if "report" not in STATE:
        pytest.skip("needs the report of the faulty reprovision")
    tmp = tmp_path_factory.mktemp("resume")
    rc, out = fleet("reprovision", "-i", INVENTORY, "--parallel", 2, "--plain", "--artifacts", tmp,
                    "--resume", STATE["report"])
    assert rc == 0, out[-4000:]
    groups = report(tmp / "report.json")["groups"]
    assert groups["pair_b"]["result"] == "converged", groups["pair_b"]
    assert groups["trio_c"]["result"] == "skipped"
    # The skipped groups were not touched: the same containers still run.
    assert ids(("trio_c",)) == STATE["ids"]
    ok, text = chat("pair_b")
    assert ok, text


def test_status_shows_every_group_serving():
    rc, out = fleet("status", "-i", INVENTORY, "--parallel", len(GROUPS), "--plain", timeout=600)
    assert rc == 0, out[-4000:]
    for group, members in GROUPS.items():
        assert group in out and all(host in out for host in members), out[-3000:]
    # Each router's view, and which one holds the service address (issue #42): one of the two (after a moment with
    # every group down, the first whose check passes takes it), the other a backup that could take it.
    lines = out.splitlines()
    start = lines.index("Routers (service address 10.232.0.200):")
    rows = dict((line.split()[0], line.split()[1:]) for line in lines[start + 2:start + 4])
    groups = ["UP", "ready"] * len(GROUPS)
    assert sorted(rows) == ["spark-router", "spark-router2"], lines[start:start + 6]
    assert sorted(row[:2] for row in rows.values()) == [["HOLDS", "yes"], ["backup", "yes"]], lines[start:start + 6]
    assert all(row[2:] == groups for row in rows.values()), lines[start:start + 6]
    assert not [line for line in lines[start:] if line.startswith("  ! ")], lines[start:]


def test_a_checkpoint_changed_after_its_verification_is_refused_at_the_next_start():
    """Issue #26 point 4 on the fleet lab: on spark-b0 (a copy target: the source is rank 1) one byte of a shard is
    changed in place (its size kept) and a file is added to the snapshot after the copy was verified. The next start,
    serve.yml with the restart forced (the supervisor's own command), refuses the whole group and names both files;
    checkpoint.yml repairs the target, and the group starts again."""
    shard = "model-00002-of-00004.safetensors"
    rc, out, err = node("spark-b0", "python3 -c \"f=open('%s/%s','r+b'); f.seek(4096); b=f.read(1); f.seek(4096); "
                        "f.write(bytes([b[0] ^ 255])); f.close()\" && echo 'import os' > %s/modeling_planted.py"
                        % (SNAPSHOT, shard, SNAPSHOT))
    assert rc == 0, out + err
    try:
        rc, out = playbook("playbooks/serve.yml", "--limit", "pair_b", "-e", "serve_force_restart=true")
        assert rc != 0, out[-4000:]
        flat = " ".join(out.split())
        assert "serve refuses to start any rank" in flat, flat[-4000:]
        named = flat[flat.find("spark-b0: %s@" % FACTS["dspark_model"]):]
        assert "CHANGED SINCE ITS VERIFICATION" in named and shard in named and "modeling_planted.py" in named, \
            flat[-4000:]
        assert "spark-b1: %s@" % FACTS["dspark_model"] not in flat     # the source's own files are as verified
        # Never half a group: both ranks still run as they were, or neither does.
        assert len({container_id(host) is None for host in GROUPS["pair_b"]}) == 1
    finally:
        rc, out = playbook("playbooks/checkpoint.yml", "--limit", "pair_b")
        assert rc == 0, out[-4000:]
    rc, out = playbook("playbooks/serve.yml", "--limit", "pair_b", "-e", "serve_force_restart=true")
    assert rc == 0, out[-4000:]
    ok, text = chat("pair_b")
    assert ok, text


def test_plain_playbook_failure_stays_in_its_group(tmp_path):
    """Plain ansible-playbook over the whole fleet: trio_c fails to start, the other group is not touched."""
    before = ids(("pair_b",))
    inventory = faulty_inventory(tmp_path, "spark-c1", NCCL_ERROR)
    rc, out = playbook("playbooks/serve.yml", "-e", "serve_failure_logs_dir=%s" % (tmp_path / "logs"),
                       inventory=inventory)
    assert rc != 0, out[-4000:]
    assert "group trio_c did not start" in out and "spark-c1" in out[out.find("group trio_c did not start"):]
    assert "pair_b did not start" not in out
    assert ids(("pair_b",)) == before
    assert all(container_id(host) is None for host in GROUPS["trio_c"])
    for name in ("pair_b",):
        ok, text = chat(name)
        assert ok, text
    # Back to serving for the next suites.
    rc, out = playbook("playbooks/serve.yml", "--limit", "trio_c")
    assert rc == 0, out[-4000:]


def test_plan_changes_nothing(tmp_path):
    before = ids(("pair_b",))
    rc, out = fleet("plan", "-i", INVENTORY, "--groups", "pair_b", "--plain", "--artifacts", tmp_path)
    assert rc == 0, out[-4000:]
    group = report(tmp_path / "report.json")["groups"]["pair_b"]
    assert group["result"] == "ok"
    changed = [task for phase in group["phases"].values() for task in phase["changed_tasks"]]
    assert changed == [], changed
    assert ids(("pair_b",)) == before
