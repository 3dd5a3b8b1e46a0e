"""A component playbook run alone (no preflight before it) still refuses bad role inputs before anything changes.

The collection's playbooks import their roles with `rolespec_validate: false` (issue #40: one task per role and node
less); each role's first task, dspark.cluster.role_inputs, then checks this host's variables against the argument specs
as preflight does (types, choices, typos) and runs the role's own rules. These cases run the real playbooks/fabric.yml
and playbooks/checkpoint.yml (and preflight's own variables through playbooks/qualify.yml) against the bad-inputs pair
(nodes that do not exist: the check runs on the controller).
"""

import os

import pytest

from test_site_badinputs import BASE, ROOT, problem_lines, run_site


# (playbook, extra vars, the line expected, the task that must refuse it)
CASES = [
    ("fabric.yml", '{"fabric_ring_rx": "big"}', "fabric_ring_rx='big' is not an integer", "Check the fabric inputs"),
    ("fabric.yml", '{"fabric_ping_cout": 3}', "fabric_ping_cout=3 is not a variable of this collection (did you mean "
     "fabric_ping_count?)", "Check the fabric inputs"),
    ("checkpoint.yml", '{"checkpoint_source_rank": [1]}', "checkpoint_source_rank=[1] is", "Check the checkpoint inputs"),
    # Preflight has no argument check of its own either: its validation names its own variables.
    ("qualify.yml", '{"preflight_mtu_min": "abc"}', "preflight_mtu_min='abc' is not an integer",
     "Validate the serving groups"),
]


@pytest.mark.parametrize("playbook, extra, expected, task", CASES, ids=[c[1] for c in CASES])
def test_the_role_alone_refuses_a_bad_input(playbook, extra, expected, task):
    run, report = run_site(BASE, args=("-e", extra), playbook=os.path.join(ROOT, "playbooks", playbook))
    output = run.stdout + run.stderr
    assert run.returncode != 0, output
    lines = problem_lines(report)
    assert any(expected in line for line in lines), (expected, lines)
    failed = [t["task"]["name"] for play in report["plays"] for t in play["tasks"]
              if any(r.get("failed") for r in t["hosts"].values())]
    assert failed and all(task in name for name in failed), failed
    # Ansible's own argument-spec task is not in the run: the role's first task is the check.
    names = [t["task"]["name"] for play in report["plays"] for t in play["tasks"]]
    assert not any(name.startswith("Validating arguments") for name in names), names
    for host, stats in report.get("stats", {}).items():
        assert stats.get("changed", 0) == 0, (host, stats)


def test_valid_inputs_pass_the_check():
    """The pair's own values (and every role default) pass: only the unreachable nodes stop the run, after the check."""
    run, report = run_site(BASE, playbook=os.path.join(ROOT, "playbooks", "fabric.yml"))
    checks = [r for play in report["plays"] for t in play["tasks"] if "Check the fabric inputs" in t["task"]["name"]
              for r in t["hosts"].values()]
    assert checks and not any(r.get("failed") for r in checks), (run.stdout[-3000:], checks)


def test_an_nccl_env_dict_passes_preflight():
    """serve_nccl_env is a dict (NAME: value), as the fabric role renders it; its spec once said str."""
    run, report = run_site(BASE, args=("-e", '{"serve_nccl_env": {"NCCL_DEBUG": "INFO"}}'))
    lines = problem_lines(report)
    assert lines and not any("serve_nccl_env" in line for line in lines), lines   # the nodes do not exist: it stops there
