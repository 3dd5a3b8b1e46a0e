"""site.yml against bad inventories (tests/badinputs/): it must stop in preflight, before any node is touched.

Each case runs the real `ansible-playbook site.yml` of this venv (the project's ansible.cfg, the json callback)
against nodes that do not exist (SSH to a closed port), and asserts: a non-zero exit, no task outside the
preflight plays, nothing changed, and exactly one line per problem naming the host or group, the variable, the
value and the fix. About 2-3 s per case.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BAD = os.path.join(ROOT, "tests", "badinputs")
PLAYBOOK = os.path.join(ROOT, "site.yml")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
BASE = ("base.yml",)
# Its failure is ignored on purpose (the next task explains it); the json callback does not mark ignored results.
IGNORED_TASKS = ("dspark.cluster.preflight : Contact every node over SSH",)


def run_site(inventories, args=(), env=None, playbook=PLAYBOOK):
    command = [ANSIBLE_PLAYBOOK]
    for name in inventories:
        command += ["-i", os.path.join(BAD, name)]
    command += list(args) + [playbook]
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
                   ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", **(env or {}))
    run = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120, check=False)
    try:
        report = json.loads(run.stdout) if run.stdout.strip() else {"plays": [], "stats": {}}
    except ValueError:
        report = {"plays": [], "stats": {}}
    return run, report


def problem_lines(report):
    """One entry per problem: the action's `errors`, or the lines of a failed task's message."""
    lines = []
    for play in report["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] in IGNORED_TASKS:
                continue
            for result in task["hosts"].values():
                if not result.get("failed"):
                    continue
                if result.get("errors"):
                    lines.extend(result["errors"])
                else:
                    lines.extend(line for line in str(result.get("msg", "")).splitlines() if line.strip())
    return sorted(set(lines))


def assert_stopped_in_preflight(run, report):
    output = run.stdout + run.stderr
    assert run.returncode != 0, output
    for play in report["plays"]:
        ran = [t["task"]["name"] for t in play["tasks"] if t["hosts"]]
        assert play["play"]["name"].startswith("Preflight") or not ran, "a task after preflight ran: %s %s" % (play["play"]["name"], ran)
    for host, stats in report.get("stats", {}).items():
        assert stats.get("changed", 0) == 0, (host, stats)


# (id, inventories, extra arguments, environment, expected lines as (where, variable, value text))
CASES = [
    ("no dspark group", ("no_dspark_group.yml",), (), None,
     [("inventory", "groups", "['pair_a', 'pairs']")]),
    ("empty dspark group", ("empty_dspark_group.yml",), (), None,
     [("group dspark", "hosts", "[]")]),
    ("limit outside dspark", BASE + ("router_host.yml",), ("--limit", "rt"), None,
     [("limit", "--limit rt", "")]),
    # The router's rules (plugin_utils._role_rules, role router) for the hosts of group dspark_router, outside dspark.
    ("router settings", BASE + ("router_host.yml",), ("-e", '{"router_port": 0, "router_groups": ["pair_a", "pair_z"]}'), None, [
        ("extra vars (-e)", "router_port", "0 turns plain HTTP off, and TLS is not configured"),
        ("extra vars (-e)", "router_groups", "['pair_a', 'pair_z'] names pair_z, which is not a group of the inventory"),
        ("rt", "dspark_mgmt_address", "'127.0.0.1' of a-head (head of pair_a) is not reachable from a router"),
    ]),
    ("misspelt variables", BASE + ("misspelt.yml",), (), None, [
        ("group pair_a", "serve_max_num_seq", "8 is not a variable of this collection (did you mean serve_max_num_seqs?)"),
        ("a-worker", "dspark_fabric_addres", "'10.77.77.2' is not a variable of this collection (did you mean dspark_fabric_address?)"),
    ]),
    ("string for a list", BASE, ("-e", "serve_extra_args=--max-num-seqs"), None, [
        ("extra vars (-e)", "serve_extra_args", "'--max-num-seqs' is a string, not a list"),
    ]),
    ("template error beside another problem", BASE + ("template_error.yml",), (), None, [
        ("group pair_a", "nfs_export_clients", "'10.77.77.2' is a string, not a list"),
        ("group pair_a", "serve_max_model_len", "'{{ nothing_defines_this }}' cannot be templated"),
    ]),
    ("cross-role contradictions", BASE + ("cross_role.yml",), (), None, [
        ("group pair_a", "dspark_fabric_hca", "'rocep1s0f1 roceP2p1s0f1' is not in NCCL_IB_HCA syntax"),
        ("a-worker", "dspark_fabric_address", "'10.77.77.2' equals the management address"),
        ("group pair_a", "checkpoint_source_rank", "2 is not a rank of group pair_a"),
    ]),
    # The fabric role's own rules (plugin_utils._fabric_plan), which preflight runs too.
    ("fabric-only problems", BASE + ("fabric_only.yml",), ("-e", "dspark_fabric_mtu=1400"), None, [
        ("a-head", "dspark_fabric_hca", "is not set (NCCL needs the RDMA device(s) of the fabric port)"),
        ("a-worker", "dspark_fabric_interface", "'enp1s0f1np1:1' is not a Linux interface name"),
        ("group pair_a", "fabric_secondary_cidr", "'10.77.78.1/30' is not an IPv4 network in CIDR form without host bits"),
        ("group pair_a", "dspark_fabric_mtu", "'1400' is outside 1500-9216"),
    ]),
    # The rank's NCCL/Gloo environment is a dict (its spec said str: a dict from the inventory was refused).
    ("nccl env as a string", BASE, ("-e", "serve_nccl_env=NCCL_DEBUG=INFO"), None, [
        ("extra vars (-e)", "serve_nccl_env", "'NCCL_DEBUG=INFO' is a string, not a dict"),
    ]),
    ("operator slips", BASE + ("operator_slips.yml",), ("-e", "fabric_checks=maybe"), None, [
        ("extra vars (-e)", "fabric_checks", "'maybe' is not a boolean"),
        ("group pair_a", "dspark_tensor_parallel_size", "4 does not equal nodes x GPUs per node"),
        ("group pair_a", "fabric_bandwidth_on_low", "'abort' is not one of the choices"),
        ("group pair_a", "serve_config_dir", "'etc/dspark/serve' is not an absolute path"),
        ("group pair_a", "serve_env", "'NCCL_DEBUG=INFO' is a string, not a dict"),
        ("group pair_a", "serve_max_num_seqs", "'eight' is not an integer"),
    ]),
    ("LMCache slips", BASE + ("lmcache_slips.yml",), (), None, [
        ("group pair_a", "serve_extra_args", "'<holds --kv-transfer-config>' sets a KV connector while serve_lmcache"),
        ("group pair_a", "serve_lmcache_chunk_size", "8192 is longer than serve_max_model_len=4096"),
        ("group pair_a", "serve_lmcache_disk_dir", "'/var/lib/dspark/hf/lmcache' is inside dspark_hf_cache"),
        ("group pair_a", "serve_lmcache_eviction_policy", "'LFU' is not one of the choices"),
        ("group pair_a", "serve_lmcache_l1_size_gb", "'eight' is not a number"),
        ("group pair_a", "serve_lmcache_http_port", "8888 equals dspark_api_port"),
    ]),
    # Sidecar engines (issue #46, serve.sidecars): a port clash, a missing revision, a misspelt key, shares over the node.
    ("sidecar engines", BASE + ("sidecars.yml",), (), None, [
        ("group pair_a", "dspark_sidecars[0].api_port", "8888 is also dspark_api_port"),
        ("group pair_a", "dspark_sidecars[1]", "['api_port', 'gpu_memory_utilization', 'master_port', 'max_num_seq', 'model', 'name'] lacks revision"),
        ("group pair_a", "dspark_sidecars[1]", "['max_num_seq'] names keys a sidecar does not have"),
        ("group pair_a", "serve_gpu_memory_utilization", "'main 0.835 + vl 0.12 + ocr 0.1 = 1.055' with the sidecars'"),
    ]),
    ("open API without a key", BASE + ("open_api.yml",), ("-e", "serve_allow_unauthenticated=false"), None, [
        ("group pair_a", "serve_host", "'0.0.0.0' makes the API of group pair_a listen beyond loopback"),
    ]),
    ("open API on an address given with -e", BASE + ("open_api.yml",), ("-e", "serve_host=10.77.77.1"), None, [
        ("extra vars (-e)", "serve_host", "'10.77.77.1' makes the API of group pair_a listen beyond loopback"),
    ]),
    # The nfs_export role's client rule (plugin_utils._nfs_plan), asked on the exporting node (rank 1).
    ("NFS clients beyond the fabric network", BASE + ("nfs_clients.yml",), (), None, [
        ("a-worker", "nfs_export_clients", "['0.0.0.0/0', 'a-head', '10.77.0.0/16'] holds '0.0.0.0/0', which opens the export"),
        ("a-worker", "nfs_export_clients", "['0.0.0.0/0', 'a-head', '10.77.0.0/16'] holds 'a-head', a host name"),
        ("a-worker", "nfs_export_clients", "['0.0.0.0/0', 'a-head', '10.77.0.0/16'] holds '10.77.0.0/16', wider than"),
    ]),
    # Input classes (issue #25): a range, a secret with a line break (never shown), a relative path, a count, a branch.
    ("input classes", BASE + ("input_classes.yml",), (), None, [
        ("group pair_a", "serve_gpu_memory_utilization", "1.5 is outside its range (0 < x <= 1)"),
        ("group pair_a", "checkpoint_hf_token", "<not shown: secret> contains a control character"),
        ("group pair_a", "dspark_hf_cache", "'var/lib/dspark/hf' is not an absolute path"),
        ("group pair_a", "checkpoint_scp_streams", "0 is outside its range (1 to 10)"),
        ("group pair_a", "dspark_model_revision", "'main' is a branch, tag or short id, not a 40-hex commit"),
    ]),
    ("revision given as a branch with -e", BASE, ("-e", "dspark_model_revision=v1.0"), None, [
        ("extra vars (-e)", "dspark_model_revision", "'v1.0' is a branch, tag or short id"),
    ]),
    ("dspark_group set for the parent group", ("parent_group_var.yml",), (), None, [
        ("group dspark", "dspark_group", "'pair_a' is the same on every host of dspark, also on b-head, b-worker outside group pair_a"),
    ]),
    ("a member's fact set for the parent group", ("parent_member_facts.yml",), (), None, [
        ("group dspark", "dspark_rank", "0 is the same on all 4 hosts of dspark, but each member of a serving group has its own"),
    ]),
    # docker_runtime's own rules (plugin_utils._role_rules docker_runtime.*), which the role runs at its start too.
    ("docker_runtime inputs", BASE + ("docker_runtime_inputs.yml",), (), None, [
        ("group pair_a", "docker_runtime_proxy", "<not shown: secret> has http_proxy with a single quote"),
        ("group pair_a", "docker_runtime_insecure_registries",
         "['http://registry.lab:5000', 'registry.lab:5000'] holds 'http://registry.lab:5000'"),
        ("group pair_a", "docker_runtime_image_tarball", "'/nonexistent/dspark-image.tar' is not a readable `docker save` archive"),
    ]),
    ("unparseable inventory without ansible.cfg's setting", ("unparseable.yml",), (),
     {"ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "false", "ANSIBLE_INVENTORY_UNPARSED_FAILED": "false"},
     [("inventory", "hosts", "[] has no host: it did not parse")]),
    ("unreachable nodes", BASE, (), None, [
        ("a-head", "cannot be reached", ""),
        ("a-worker", "cannot be reached", ""),
    ]),
]


@pytest.mark.parametrize("inventories, args, env, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_site_stops_in_preflight_with_one_line_per_problem(inventories, args, env, expected):
    run, report = run_site(inventories, args, env)
    assert_stopped_in_preflight(run, report)
    assert "hf_badinputs_sentinel" not in run.stdout + run.stderr  # a secret's value is never shown
    lines = problem_lines(report)
    assert len(lines) == len(expected), "expected %d problem lines, got:\n%s\n%s" % (len(expected), "\n".join(lines), run.stderr)
    for where, var, value in expected:
        if var == "cannot be reached":
            head = "%s cannot be reached" % where
        elif where == "limit":
            head = "limit: %s" % var
        elif where == "inventory":
            head = "inventory "
        elif value.startswith("is not set"):
            head = "%s: %s %s" % (where, var, value)
        else:
            head = "%s: %s=%s" % (where, var, value)
        match = [line for line in lines if line.startswith(head) and (var in line) and value in line]
        assert match, "no line starts with %r (and names %r, %r):\n%s" % (head, var, value, "\n".join(lines))
        assert "Fix: " in match[0], match[0]


def test_fabric_role_alone_validates_itself():
    """playbooks/fabric.yml (no preflight) stops on the same rules, one line per problem, before reading a node."""
    command = [ANSIBLE_PLAYBOOK, "-i", os.path.join(BAD, "base.yml"), "-i", os.path.join(BAD, "fabric_only.yml"),
               os.path.join(ROOT, "playbooks", "fabric.yml")]
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
                   ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode != 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    failed = {}
    for play in report["plays"]:
        for task in play["tasks"]:
            ran = {host: result for host, result in task["hosts"].items() if not result.get("skipped")}
            assert not ran or "Read the node" not in task["task"]["name"], task["task"]["name"]
            for host, result in ran.items():
                if result.get("failed"):
                    failed[host] = result["msg"].splitlines()
    assert failed["a-head"] == [
        "a-head: invalid fabric input, nothing was changed:",
        "- a-head: dspark_fabric_hca is not set (NCCL needs the RDMA device(s) of the fabric port). Fix: set them in NCCL_IB_HCA syntax,"
        " e.g. rocep1s0f1 (ibdev2netdev prints the pairs)",
        "- a-head: fabric_secondary_cidr='10.77.78.1/30' is not an IPv4 network in CIDR form without host bits. Fix: give the second"
        " interface its own network, e.g. 192.168.101.0/30"], failed["a-head"]
    assert failed["a-worker"][1].startswith("- a-worker: dspark_fabric_interface='enp1s0f1np1:1' is not a Linux interface name. Fix: ")
    assert len(failed["a-worker"]) == 3
    assert all(stats.get("changed", 0) == 0 for stats in report["stats"].values())


def test_docker_runtime_role_alone_validates_itself():
    """playbooks/docker_runtime.yml (no preflight; --tags docker_runtime_validate) stops on the same rules at its start,
    one line per problem, the proxy's value never shown. The nodes are this machine (connection local, no become): the
    play gathers its facts, which the platform rule reads."""
    command = [ANSIBLE_PLAYBOOK, "-i", os.path.join(BAD, "base.yml"), "-i", os.path.join(BAD, "docker_runtime_inputs.yml"),
               "-e", "ansible_connection=local", "-e", "ansible_become=false", "-e", "ansible_python_interpreter=%s" % sys.executable,
               "--tags", "docker_runtime_validate", os.path.join(ROOT, "playbooks", "docker_runtime.yml")]
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
                   ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode != 0, run.stdout + run.stderr
    assert "hf_badinputs_sentinel" not in run.stdout + run.stderr
    report = json.loads(run.stdout)
    failed = {}
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                if result.get("failed"):
                    failed[host] = (task["task"]["name"], result["msg"].splitlines())
    assert sorted(failed) == ["a-head", "a-worker"], failed
    name, lines = failed["a-worker"]
    assert name.endswith(": Check the docker_runtime inputs (the rules preflight runs)"), name
    assert lines[0] == "a-worker: invalid docker_runtime input, nothing was changed:", lines
    assert [line.split("=")[0] for line in lines[1:]] == ["- a-worker: docker_runtime_proxy", "- a-worker: docker_runtime_insecure_registries",
                                                          "- a-worker: docker_runtime_image_tarball"], lines
    assert all(". Fix: " in line for line in lines[1:])
    assert all(stats.get("changed", 0) == 0 for stats in report["stats"].values())


@pytest.mark.parametrize("inventories, args, message", [
    (("unparseable.yml",), (), "unparseable.yml"),
    (BASE, ("--limit", "no-such-host"), "no hosts to target"),
], ids=["unparseable inventory (ansible.cfg)", "limit matching no host"])
def test_ansible_itself_refuses(inventories, args, message):
    """The project's ansible.cfg makes an unparsed source an error; a limit matching nothing is one already."""
    run, report = run_site(inventories, args)
    assert run.returncode != 0, run.stdout + run.stderr
    assert message in run.stderr, run.stderr
    assert not any(t["hosts"] for p in report["plays"] for t in p["tasks"])
