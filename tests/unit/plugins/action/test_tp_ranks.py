"""The tp_ranks action: polls a fake cluster (docker CLI + API probe emulated per round) with a fake clock."""

import importlib.util
import json
import shlex
from datetime import datetime, timezone
from pathlib import Path
from unittest.mock import MagicMock

import pytest

from ansible.playbook.task import Task
from ansible.template import Templar

from ansible_collections.dspark.cluster.plugins.action import tp_ranks as tp_ranks_module
from ansible_collections.dspark.cluster.plugins.action.tp_ranks import ActionModule

FIXTURES = Path(__file__).resolve().parents[1] / "plugin_utils" / "fixtures" / "vllm"
SERVED = "deepseek-v4-flash-0731"
EPOCH = 1795000000.0
INIT = "tcp://10.0.0.1:25000"


def fixture_lines(name):
    origin, *lines = (FIXTURES / name).read_text().splitlines()
    assert origin.startswith("# origin: ")
    return lines


def docker_ts(seconds):
    whole = int(seconds)
    nanos = int(round((seconds - whole) * 1e9))
    return datetime.fromtimestamp(whole, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + ".%09dZ" % nanos


# --------------------------------------------------------------------------- fake cluster


class FakeContainer:
    """One node's serving container: a schedule of log lines and state changes by poll round."""

    def __init__(self, name="dspark-vllm", cid="a" * 64):
        self.name = name
        self.id = cid
        self.schedule = []          # (round, {"lines": [...], "state": ..., "exit_code": ..., "restart_count": ...})
        self.lines = []             # (epoch seconds, text)
        self.applied = 0
        self.state = "running"
        self.exit_code = 0
        self.restart_count = 0
        self.started_at = docker_ts(EPOCH - 30)
        self.exists = True
        self.finished_at = None     # docker_ts(EPOCH + 5) once it is not running, unless set
        self.oom_killed = False
        self.health = None          # a health check's status (healthy, unhealthy, starting), None without one

    def at(self, rnd, lines=(), **changes):
        self.schedule.append((rnd, dict(changes, lines=list(lines))))
        self.schedule.sort(key=lambda item: item[0])
        return self

    def advance(self, rnd, now):
        while self.applied < len(self.schedule) and self.schedule[self.applied][0] <= rnd:
            changes = self.schedule[self.applied][1]
            for i, line in enumerate(changes["lines"]):
                self.lines.append((now + i * 1e-6, line))
            for key in ("state", "exit_code", "restart_count", "started_at", "exists", "id", "finished_at",
                        "oom_killed", "health"):
                if key in changes:
                    setattr(self, key, changes[key])
            self.applied += 1

    def inspect(self):
        running = self.state == "running"
        health = {"Health": {"Status": self.health, "FailingStreak": 0}} if self.health else {}
        return json.dumps({
            "Id": self.id, "Name": "/" + self.name, "RestartCount": self.restart_count,
            "Image": "ghcr.io/anemll/dspark-vllm-gx10:0.1.1",
            "State": {"Status": self.state, "Running": running, "Paused": False,
                      "Restarting": self.state == "restarting", "OOMKilled": self.oom_killed, "Dead": False,
                      "Pid": 4242 if running else 0, "ExitCode": self.exit_code, "Error": "",
                      "StartedAt": self.started_at,
                      "FinishedAt": "0001-01-01T00:00:00Z" if running else (
                          self.finished_at or docker_ts(EPOCH + 5)), **health}})


class FakeApi:
    """The head's API per round: 'down' (refused), or up with models and a chat behaviour."""

    def __init__(self):
        self.schedule = [(0, {"mode": "down"})]

    def at(self, rnd, mode="up", models=(SERVED,), chat="ok", health=200, during_timeout=()):
        self.schedule.append((rnd, {"mode": mode, "models": list(models), "chat": chat, "health": health,
                                    "during_timeout": list(during_timeout)}))
        self.schedule.sort(key=lambda item: item[0])
        return self

    def current(self, rnd):
        return [cfg for at, cfg in self.schedule if at <= rnd][-1]


REFUSED = {"status": None, "error": "ConnectionRefusedError: [Errno 111] Connection refused", "timed_out": False,
           "seconds": 0.001}


class FakeCluster:
    """Answers the commands the plugin runs, like docker and the probe script would on each node."""

    def __init__(self, containers, api=None, head="a-head", unreachable=(), sidecars=None):
        self.containers = containers            # node -> FakeContainer
        self.sidecars = sidecars or {}          # node -> FakeContainer beside the engine (LMCache's server)
        self.api = api or FakeApi()
        self.head = head
        self.unreachable = set(unreachable)
        self.round = 0
        self.now = 0.0
        self.calls = []                         # (round, host, command, in_data)
        self.probes = []                        # (round, host, params)
        self.chats = []                         # rounds in which a chat completion was sent
        self.denied = set()

    # the fake clock (patched over the plugin module's `time`)
    def monotonic(self):
        return self.now

    def time(self):
        return EPOCH + self.now

    def sleep(self, seconds):
        self.now += seconds
        self.round += 1

    def run(self, host, command, in_data=None):
        self.calls.append((self.round, host, command, in_data))
        if host in self.unreachable:
            return None, "", "Failed to connect to the host via ssh: ssh: connect to host %s port 22: No route" % host
        for cont in list(self.containers.values()) + list(self.sidecars.values()):
            cont.advance(self.round, EPOCH + self.now)
        argv = shlex.split(command)
        if argv[0] == "docker":
            if host in self.denied:
                return 1, "", ("permission denied while trying to connect to the Docker daemon socket at "
                               "unix:///var/run/docker.sock: Get \"http://%2Fvar%2Frun%2Fdocker.sock/v1.47/\"")
            return self.docker(host, argv)
        if argv[1] == "-c":
            return self.probe(host, json.loads(in_data))
        raise AssertionError("unexpected command %r" % command)

    def docker(self, host, argv):
        cont = self.containers[host]
        name = argv[-1] if argv[1] == "inspect" else None
        sidecar = self.sidecars.get(host)
        if argv[1] == "inspect" and sidecar and name == sidecar.name:
            cont = sidecar
        if argv[1] == "inspect":
            if not cont.exists or name != cont.name:
                return 1, "", "Error: No such container: %s" % name
            return 0, cont.inspect() + "\n", ""
        assert argv[1] == "logs" and "--timestamps" in argv
        if "|" in argv:         # key lines: docker logs -t NAME 2>&1 | grep -a -F -e ... | tail -n N
            pipe = argv.index("|")
            name = argv[pipe - 2]
            needles = [argv[i + 1] for i in range(pipe, len(argv)) if argv[i] == "-e"]
            assert name == cont.name
            lines = ["%s %s" % (docker_ts(t), text) for t, text in cont.lines if any(n in text for n in needles)]
            return 0, "".join(line + "\n" for line in lines[-int(argv[-1]):]), ""
        name = argv[argv.index("2>&1") - 1]
        if not cont.exists or name != cont.name:
            return 1, "Error response from daemon: No such container: %s\n" % name, ""
        lines = cont.lines
        if "--since" in argv:
            since = argv[argv.index("--since") + 1]
            lines = [(t, text) for t, text in lines if docker_ts(t) >= since]
        tail = int(argv[argv.index("--tail") + 1])
        return 0, "".join("%s %s\n" % (docker_ts(t), text) for t, text in lines[-tail:]), ""

    def probe(self, host, params):
        self.probes.append((self.round, host, params))
        assert params["port"] == 8888
        cfg = self.api.current(self.round)
        if cfg["mode"] == "down":
            return 0, json.dumps({"health": dict(REFUSED), "models": dict(REFUSED, ids=None)}), ""
        res = {"health": {"status": cfg["health"], "error": None, "timed_out": False, "seconds": 0.002},
               "models": {"status": 200, "error": None, "timed_out": False, "seconds": 0.003,
                          "ids": cfg["models"]}}
        if params["generate"] and params["model"] in cfg["models"]:
            self.chats.append(self.round)
            if cfg["chat"] == "ok":
                res["chat"] = {"status": 200, "error": None, "timed_out": False, "seconds": 0.41, "choices": 1,
                               "content": "OK", "finish_reason": "stop"}
            elif cfg["chat"] == "timeout":
                self.now += params["generation_timeout"]
                # What the head logs while the request hangs.
                self.containers[host].lines.extend((EPOCH + self.now, line) for line in cfg["during_timeout"])
                res["chat"] = {"status": None, "error": "timeout: timed out", "timed_out": True,
                               "seconds": float(params["generation_timeout"]), "choices": None}
                res["health_after"] = {"status": 200, "error": None, "timed_out": False, "seconds": 0.002}
            else:
                error = {"error": {"message": "EngineCore encountered an issue.", "code": cfg["chat"]}}
                res["chat"] = {"status": cfg["chat"], "error": None, "timed_out": False, "seconds": 0.01,
                               "choices": None, "text": json.dumps(error)}
        return 0, json.dumps(res), ""

    def commands_on(self, host, word):
        return [c for _r, h, c, _d in self.calls if h == host and word in c]


# --------------------------------------------------------------------------- inventory and action

BASE = {"dspark_gpus_per_node": 1, "dspark_api_port": 8888, "dspark_master_port": 25000}


def task_vars(nodes=("a-head", "a-worker"), group="pair_a", host=None, **overrides):
    hostvars = {}
    for rank, node in enumerate(nodes):
        hostvars[node] = dict(BASE, dspark_group=group, dspark_rank=rank, dspark_tensor_parallel_size=len(nodes),
                              inventory_hostname=node, ansible_host="127.0.0.%d" % (rank + 1))
        hostvars[node].update(overrides.get(node, {}))
    host = host or nodes[0]
    out = dict(hostvars[host])
    out.update(hostvars=hostvars, groups={"all": list(nodes), "dspark": list(nodes), group: list(nodes)},
               inventory_hostname=host)
    return out


def make_action(args, check_mode=False, delegate_to="a-head"):
    task = MagicMock(Task)
    task.args = dict(args)
    task.async_val = 0
    task.check_mode = check_mode
    task.delegate_to = delegate_to
    task.connection = "ssh"
    task._uuid = "test-uuid"
    connection = MagicMock()
    connection._shell = MagicMock()
    return ActionModule(task, connection, MagicMock(), loader=None, templar=Templar(loader=None),
                        shared_loader_obj=None)


def run(cluster, monkeypatch, args=None, tvars=None, **kwargs):
    monkeypatch.setattr(tp_ranks_module, "time", cluster)
    full = {"served_model_name": SERVED, "timeout": 120}
    full.update(args or {})
    action = make_action(full, **kwargs)
    monkeypatch.setattr(action, "_run_on", cluster.run)
    monkeypatch.setattr(action, "_run_probe", lambda host, params: probe_module(cluster, host, params))
    return action.run(task_vars=tvars or task_vars())


def probe_module(cluster, host, params):
    """The tp_api_probe module on `host`, answered by the fake cluster like the probe script it replaced."""
    rc, out, err = cluster.run(host, "python3 -c tp_api_probe", in_data=json.dumps(params))
    if rc is None:
        return {"unreachable": True, "failed": True, "msg": err}
    return dict(json.loads(out), changed=False) if rc == 0 else {"failed": True, "rc": rc, "module_stderr": err}


def diag_tuples(result):
    return [(d["code"], d["rank"], d["node"]) for d in result["diagnosis"]]


# --------------------------------------------------------------------------- log builders

def head_lines(world, ready=True):
    lines = [
        "(APIServer pid=1) INFO 11-29 18:40:01 [api_utils.py:312] vLLM server version 0.25.1, serving model "
        "deepseek-ai/DeepSeek-V4-Flash-0731",
        "(APIServer pid=1) INFO 11-29 18:40:01 [arg_utils.py:1788] Inferred data_parallel_rank 0 from node_rank 0",
        "(Worker pid=287) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size=%d rank=0 local_rank=0 "
        "distributed_init_method=%s backend=nccl" % (world, INIT),
    ]
    if ready:
        lines += [
            "(Worker pid=287) INFO 11-29 18:40:33 [parallel_state.py:1711] rank 0 in world size %d is assigned as "
            "DP rank 0, PP rank 0, PCP rank 0, TP rank 0, EP rank 0, EPLB rank N/A" % world,
            "(Worker_TP0 pid=287) INFO 11-29 18:44:02 [gpu_worker.py:412] Available KV cache memory: 18.08 GiB",
            "(EngineCore pid=211) INFO 11-29 18:44:03 [kv_cache_utils.py:1306] GPU KV cache size: 2,493,464 tokens",
            "(APIServer pid=1) INFO 11-29 18:44:43 [api_server.py:2018] Starting vLLM server on http://0.0.0.0:8888",
            "(APIServer pid=1) INFO:     Application startup complete.",
        ]
    return lines


def worker_lines(rank, world, joined=True):
    lines = [
        "INFO 11-29 18:39:50 [arg_utils.py:1788] Inferred data_parallel_rank 0 from node_rank %d" % rank,
        "INFO 11-29 18:39:50 [serve.py:211] Launching vLLM (v0.25.1) headless multiproc executor, with head node "
        "address 10.0.0.1:25000 for torch.distributed process group.",
        "(Worker pid=94) INFO 11-29 18:39:58 [parallel_state.py:1402] world_size=%d rank=%d local_rank=0 "
        "distributed_init_method=%s backend=nccl" % (world, rank, INIT),
    ]
    if joined:
        lines += [
            "(Worker pid=94) INFO 11-29 18:40:33 [parallel_state.py:1711] rank %d in world size %d is assigned as "
            "DP rank 0, PP rank 0, PCP rank 0, TP rank %d, EP rank %d, EPLB rank N/A" % (rank, world, rank, rank),
            "(Worker_TP%d pid=94) INFO 11-29 18:44:02 [gpu_worker.py:412] Available KV cache memory: 18.1 GiB" % rank,
        ]
    return lines


def healthy_pair():
    head = fixture_lines("head_healthy_v0251.log")
    split = next(i for i, line in enumerate(head) if "is assigned as" in line)
    containers = {
        "a-head": FakeContainer(cid="1" * 64).at(0, head[:split]).at(2, head[split:]),
        "a-worker": FakeContainer(cid="2" * 64).at(0, fixture_lines("worker_healthy_v0251.log")),
    }
    return FakeCluster(containers, FakeApi().at(3))


# --------------------------------------------------------------------------- healthy groups

def test_healthy_pair_is_ready_with_evidence(monkeypatch):
    cluster = healthy_pair()
    result = run(cluster, monkeypatch)
    assert not result.get("failed"), result["msg"]
    assert result["changed"] is False
    assert [(r["rank"], r["node"]) for r in result["registered_ranks"]] == [(0, "a-head"), (1, "a-worker")]
    assert "rank 0 in world size 2 is assigned as" in result["registered_ranks"][0]["evidence"]
    assert result["registered_ranks"][1]["evidence"].endswith("TP rank 1, EP rank 1, EPLB rank N/A")
    assert result["registered_ranks"][1]["init_method"] == INIT
    assert result["missing_ranks"] == [] and result["diagnosis"] == [] and result["logs"] == {}
    assert result["expected_ranks"] == [0, 1] and result["world_size"] == 2
    assert result["api_ready"] is True and result["generation_ok"] is True
    # The API came up in round 3 (3 one-second sleeps); readiness is stamped on the controller's clock.
    assert result["elapsed"] == 3.0 and result["ready_at"] == EPOCH + 3.0
    assert result["msg"].startswith("TP group pair_a ready after 3.0 s: 2/2 ranks registered via " + INIT)
    # One generation request only, and every probe ran on the head.
    assert {h for _r, h, _p in cluster.probes} == {"a-head"}
    # Round 1 is not probed: the head had not registered yet (the probe waits for the registrations after round 0).
    assert [r for r, _h, p in cluster.probes if p["generate"]] == [0, 2, 3]
    assert cluster.chats == [3]
    assert result["containers"]["a-worker"]["state"] == "running"


def test_three_node_group(monkeypatch):
    nodes = ("n0", "n1", "n2")
    containers = {
        "n0": FakeContainer().at(0, head_lines(3, ready=False)).at(1, head_lines(3)[3:]),
        "n1": FakeContainer().at(0, worker_lines(1, 3)),
        "n2": FakeContainer().at(0, worker_lines(2, 3, joined=False)).at(1, worker_lines(2, 3)[3:]),
    }
    cluster = FakeCluster(containers, FakeApi().at(1), head="n0")
    result = run(cluster, monkeypatch, tvars=task_vars(nodes, group="trio"), delegate_to="n0")
    assert not result.get("failed"), result["msg"]
    assert [(r["rank"], r["node"]) for r in result["registered_ranks"]] == [(0, "n0"), (1, "n1"), (2, "n2")]
    assert result["expected_ranks"] == [0, 1, 2] and result["world_size"] == 3
    assert [m["node"] for m in result["members"]] == ["n0", "n1", "n2"]
    assert all(cluster.commands_on(node, "docker inspect") for node in nodes)


def test_registration_lines_older_than_the_tail_are_still_found(monkeypatch):
    # An already running group: 600 access lines since start-up, --tail 50.
    access = ['(APIServer pid=1) INFO:     10.0.0.5:%d - "POST /v1/chat/completions HTTP/1.1" 200 OK' % (40000 + i)
              for i in range(600)]
    containers = {"a-head": FakeContainer().at(0, head_lines(2) + access),
                  "a-worker": FakeContainer().at(0, worker_lines(1, 2))}
    cluster = FakeCluster(containers, FakeApi().at(0))
    result = run(cluster, monkeypatch, args={"log_lines": 50})
    assert not result.get("failed"), result["msg"]
    assert [r["rank"] for r in result["registered_ranks"]] == [0, 1]
    assert len(cluster.commands_on("a-head", "grep -a -F")) == 1


def test_generation_is_not_repeated_while_the_logs_catch_up(monkeypatch):
    # The API answers before the worker's rank line reached its log: wait for the log, no second chat.
    containers = {"a-head": FakeContainer().at(0, head_lines(2)),
                  "a-worker": FakeContainer().at(0, worker_lines(1, 2, joined=False)).at(2, worker_lines(1, 2)[3:])}
    cluster = FakeCluster(containers, FakeApi().at(0))
    result = run(cluster, monkeypatch)
    assert not result.get("failed"), result["msg"]
    assert cluster.chats == [0] and result["elapsed"] == 2.0 and result["ready_at"] == EPOCH
    # Round 1 (the worker's rank line not yet there) is not probed; round 2 lists the models again, no chat.
    assert [(r, p["generate"]) for r, _h, p in cluster.probes] == [(0, True), (2, False)]


def test_a_slow_start_probes_the_api_every_fifth_round_until_every_rank_registered(monkeypatch):
    # Real vLLM spends most of its start before the rank lines (41 of 49 s): the API is probed in rounds 0, 5 and 10,
    # then every round once both ranks registered (round 12), and the group is ready in the round its API answers.
    containers = {"a-head": FakeContainer().at(0, head_lines(2, ready=False)).at(12, head_lines(2)[3:]),
                  "a-worker": FakeContainer().at(0, worker_lines(1, 2, joined=False)).at(12, worker_lines(1, 2)[3:])}
    cluster = FakeCluster(containers, FakeApi().at(14))
    result = run(cluster, monkeypatch)
    assert not result.get("failed"), result["msg"]
    assert [r for r, _h, _p in cluster.probes] == [0, 5, 10, 12, 13, 14]
    assert cluster.chats == [14] and result["elapsed"] == 14.0
    # Every member's container was still looked at in every round.
    assert len(cluster.commands_on("a-worker", "docker inspect")) == 15


def test_an_api_answering_before_the_ranks_registered_is_not_ready(monkeypatch):
    # The API answers from round 0 (the probe sees it in rounds 0 and 5); ready only in round 6, when the worker's rank
    # line arrives and a fresh probe of that round lists the model.
    containers = {"a-head": FakeContainer().at(0, head_lines(2)),
                  "a-worker": FakeContainer().at(0, worker_lines(1, 2, joined=False)).at(6, worker_lines(1, 2)[3:])}
    cluster = FakeCluster(containers, FakeApi().at(0))
    result = run(cluster, monkeypatch)
    assert not result.get("failed"), result["msg"]
    assert [r for r, _h, _p in cluster.probes] == [0, 5, 6] and cluster.chats == [0]
    assert result["elapsed"] == 6.0


# --------------------------------------------------------------------------- failures

def test_worker_never_joins_times_out_naming_rank_1(monkeypatch):
    retry = ("(Worker pid=94) [W1129 19:02:28.013935026 TCPStore.cpp:125] [c10d] The server socket on "
             "[::ffff:10.0.0.1]:25000 has timed out, will retry.")
    containers = {"a-head": FakeContainer().at(0, head_lines(2, ready=False)),
                  "a-worker": FakeContainer().at(0, worker_lines(1, 2, joined=False)).at(5, [retry])}
    cluster = FakeCluster(containers)
    result = run(cluster, monkeypatch, args={"timeout": 30, "poll_interval": 2})
    assert result["failed"] is True
    assert diag_tuples(result) == [("rendezvous_timeout", 1, "a-worker"), ("rendezvous_timeout", 0, "a-head")]
    assert result["missing_ranks"] == [{"rank": 0, "node": "a-head"}, {"rank": 1, "node": "a-worker"}]
    assert result["msg"].startswith("TP group pair_a (2 ranks) is not serving after 30.0 s: rank 1 on a-worker: "
                                    "rendezvous_timeout: Rank 1 on a-worker did not join the rendezvous on " + INIT)
    assert result["diagnosis"][0]["evidence"].endswith("has timed out, will retry.")
    assert "--master-addr" in result["diagnosis"][0]["fix"]
    assert result["elapsed"] == 30.0 and result["ready_at"] is None
    assert result["logs"][1][-1].endswith("has timed out, will retry.")
    assert result["api_ready"] is False and result["generation_ok"] is False


def test_worker_dialled_silently_is_named_before_the_head(monkeypatch):
    containers = {"a-head": FakeContainer().at(0, head_lines(2, ready=False)),
                  "a-worker": FakeContainer().at(0, worker_lines(1, 2, joined=False))}
    result = run(FakeCluster(containers), monkeypatch, args={"timeout": 10})
    assert diag_tuples(result) == [("rendezvous_timeout", 1, "a-worker"), ("rendezvous_timeout", 0, "a-head")]
    assert "waited 10 s for rank(s) 1" in result["diagnosis"][1]["cause"]


def test_silent_worker_times_out_as_never_started(monkeypatch):
    containers = {"a-head": FakeContainer().at(0, head_lines(2, ready=False)), "a-worker": FakeContainer()}
    result = run(FakeCluster(containers), monkeypatch, args={"timeout": 10})
    assert diag_tuples(result)[0] == ("rendezvous_timeout", 1, "a-worker")
    assert "its container printed nothing" in result["diagnosis"][0]["cause"]


def test_nccl_error_on_worker_fails_fast(monkeypatch):
    remote = ["(Worker_TP0 pid=287) ERROR 11-29 20:10:41 [multiproc_executor.py:772] WorkerProc failed to start.",
              "(Worker_TP0 pid=287) ERROR 11-29 20:10:41 [multiproc_executor.py:772] RuntimeError: NCCL error: "
              "remote process exited or there was a network error"]
    containers = {
        "a-head": FakeContainer().at(0, head_lines(2, ready=False)).at(2, remote, state="exited", exit_code=1),
        # The head's symptom shows one round before the worker's root cause.
        "a-worker": FakeContainer().at(0, fixture_lines("worker_nccl_unhandled_system_error.log")[:3])
        .at(3, fixture_lines("worker_nccl_unhandled_system_error.log")[3:], state="exited", exit_code=1),
    }
    result = run(FakeCluster(containers), monkeypatch)
    assert result["failed"] is True
    assert result["elapsed"] == 3.0
    assert diag_tuples(result)[0] == ("wrong_gid_or_hca", 1, "a-worker")
    assert ("container_exited", 0, "a-head") in diag_tuples(result)
    assert ("nccl_remote_error", 0, "a-head") in diag_tuples(result)
    assert "rank 1 on a-worker: wrong_gid_or_hca: The RDMA queue pair on rocep1s0f1 port 1" in result["msg"]
    assert "NCCL_IB_GID_INDEX" in result["diagnosis"][0]["fix"]
    assert "local GID index 3" in result["diagnosis"][0]["evidence"]
    assert ("nccl_init_error", 1, "a-worker") in diag_tuples(result)
    assert any("NCCL error: unhandled system error" in line for line in result["logs"][1])
    assert result["containers"]["a-worker"]["exit_code"] == 1


def test_head_container_exited_with_oom(monkeypatch):
    containers = {"a-head": FakeContainer().at(0, fixture_lines("head_oom.log"), state="exited", exit_code=1),
                  "a-worker": FakeContainer().at(0, worker_lines(1, 2))}
    cluster = FakeCluster(containers)
    result = run(cluster, monkeypatch)
    assert result["failed"] is True and result["elapsed"] == 0.0
    assert diag_tuples(result)[0] == ("oom", 0, "a-head")
    assert ("container_exited", 0, "a-head") in diag_tuples(result)
    assert result["msg"].startswith("TP group pair_a (2 ranks) is not serving after 0.0 s: rank 0 on a-head: oom:")
    assert cluster.probes == []        # the head is not running: no API probe


def test_head_container_exited_without_a_known_signature(monkeypatch):
    containers = {"a-head": FakeContainer().at(0, head_lines(2, ready=False)).at(1, state="exited", exit_code=137),
                  "a-worker": FakeContainer().at(0, worker_lines(1, 2, joined=False))}
    result = run(FakeCluster(containers), monkeypatch)
    assert result["failed"] is True
    assert diag_tuples(result) == [("container_exited", 0, "a-head")]
    assert "The container of rank 0 on a-head exited with code 137" in result["diagnosis"][0]["cause"]
    # Waited a few rounds for a root cause in another rank's log before giving up.
    assert result["elapsed"] == 4.0


def test_wedged_group_is_diagnosed_at_the_head(monkeypatch):
    stall = ("(Worker_TP0 pid=287) INFO 11-29 18:46:10 [shm_broadcast.py:466] No available shared memory broadcast "
             "block found in 60 seconds. This typically happens when some processes are hanging.")
    containers = {"a-head": FakeContainer().at(0, head_lines(2)),
                  "a-worker": FakeContainer().at(0, worker_lines(1, 2))}
    cluster = FakeCluster(containers, FakeApi().at(1, chat="timeout", during_timeout=[stall]))
    result = run(cluster, monkeypatch, args={"generation_timeout": 45})
    assert result["failed"] is True
    assert diag_tuples(result) == [("wedged", 0, "a-head")]
    assert "no answer within 45 s" in result["diagnosis"][0]["cause"]
    assert result["diagnosis"][0]["evidence"].endswith("found in 60 seconds. This typically happens when some "
                                                       "processes are hanging.")
    assert result["api_ready"] is True and result["generation_ok"] is False and result["ready_at"] is None
    assert [r["rank"] for r in result["registered_ranks"]] == [0, 1]
    assert cluster.chats == [1]
    assert result["msg"].startswith("TP group pair_a (2 ranks) is not serving after 46.0 s: rank 0 on a-head: wedged:")


def test_api_without_the_served_model_name(monkeypatch):
    containers = {"a-head": FakeContainer().at(0, head_lines(2)), "a-worker": FakeContainer().at(0, worker_lines(1, 2))}
    cluster = FakeCluster(containers, FakeApi().at(0, models=["deepseek-ai/DeepSeek-V4-Flash-0731"]))
    result = run(cluster, monkeypatch)
    assert result["failed"] is True
    assert diag_tuples(result) == [("served_model_mismatch", 0, "a-head")]
    assert "/health HTTP 200" in result["diagnosis"][0]["cause"]
    assert "'deepseek-ai/DeepSeek-V4-Flash-0731'" in result["diagnosis"][0]["cause"]
    assert result["api_ready"] is False and result["generation_ok"] is False


def test_generation_error_fails(monkeypatch):
    containers = {"a-head": FakeContainer().at(0, head_lines(2)), "a-worker": FakeContainer().at(0, worker_lines(1, 2))}
    result = run(FakeCluster(containers, FakeApi().at(0, chat=500)), monkeypatch)
    assert diag_tuples(result) == [("generation_failed", 0, "a-head")]
    assert "HTTP 500" in result["diagnosis"][0]["cause"]


def test_api_not_ready_at_timeout(monkeypatch):
    containers = {"a-head": FakeContainer().at(0, head_lines(2)[:5]), "a-worker": FakeContainer().at(0, worker_lines(1, 2))}
    result = run(FakeCluster(containers), monkeypatch, args={"timeout": 5})
    assert diag_tuples(result) == [("api_not_ready", 0, "a-head")]
    assert "available_kv_cache" in result["diagnosis"][0]["cause"]
    assert "Connection refused" in result["diagnosis"][0]["cause"]


def test_restarted_worker_fails_with_previous_boot_cause(monkeypatch):
    boot1 = worker_lines(1, 2, joined=False) + [
        "(Worker pid=94) ERROR 11-29 18:41:10 [multiproc_executor.py:772] torch.OutOfMemoryError: CUDA out of memory."]
    containers = {"a-head": FakeContainer().at(0, head_lines(2, ready=False)),
                  "a-worker": FakeContainer().at(0, boot1 + worker_lines(1, 2, joined=False), restart_count=1)}
    result = run(FakeCluster(containers), monkeypatch)
    assert diag_tuples(result)[0] == ("container_restarted", 1, "a-worker")
    assert "previous boot failed with oom" in result["diagnosis"][0]["cause"]


def test_docker_permission_denied(monkeypatch):
    containers = {"a-head": FakeContainer(), "a-worker": FakeContainer()}
    cluster = FakeCluster(containers)
    cluster.denied.add("a-worker")
    result = run(cluster, monkeypatch)
    assert diag_tuples(result) == [("docker_unavailable", 1, "a-worker")]
    assert "docker group" in result["diagnosis"][0]["fix"]


def test_missing_container(monkeypatch):
    containers = {"a-head": FakeContainer().at(0, head_lines(2, ready=False)), "a-worker": FakeContainer(name="other")}
    result = run(FakeCluster(containers), monkeypatch)
    assert diag_tuples(result) == [("container_missing", 1, "a-worker")]


def lmcache_pair(**worker_changes):
    """A healthy pair with LMCache's server beside each rank (serve_lmcache); the worker's changes from round 1."""
    cluster = healthy_pair()
    cluster.sidecars = {node: FakeContainer(name="dspark-lmcache", cid=c * 64) for node, c in (("a-head", "3"), ("a-worker", "4"))}
    for sidecar in cluster.sidecars.values():
        sidecar.health = "healthy"
    if worker_changes:
        cluster.sidecars["a-worker"].at(1, **worker_changes)
    return cluster


SIDECARS = {"sidecars": {"a-head": "dspark-lmcache", "a-worker": "dspark-lmcache"}}


def test_a_pair_with_healthy_sidecars_is_ready(monkeypatch):
    cluster = lmcache_pair()
    result = run(cluster, monkeypatch, args=SIDECARS)
    assert not result.get("failed"), result["msg"]
    assert cluster.commands_on("a-worker", "dspark-lmcache")


@pytest.mark.parametrize("changes, code, text", [
    ({"state": "exited", "exit_code": 137, "oom_killed": True}, "sidecar_stopped",
     "The container dspark-lmcache beside rank 1 on a-worker is exited (exit code 137, killed for lack of memory)."),
    ({"health": "unhealthy"}, "sidecar_unhealthy", "The container dspark-lmcache beside rank 1 on a-worker fails its health check."),
    ({"exists": False}, "sidecar_missing", "The container dspark-lmcache beside rank 1 on a-worker is not there"),
])
def test_a_broken_sidecar_fails_the_group_by_name(monkeypatch, changes, code, text):
    """#45: vLLM's LMCache connector waits instead of failing; the proof names the server, its rank and node."""
    result = run(lmcache_pair(**changes), monkeypatch, args=SIDECARS)
    assert result.get("failed") and diag_tuples(result)[0] == (code, 1, "a-worker")
    assert result["diagnosis"][0]["cause"].startswith(text)
    assert "docker logs dspark-lmcache on a-worker" in result["diagnosis"][0]["fix"]


def test_a_starting_sidecar_is_waited_for_and_none_is_read_without_the_option(monkeypatch):
    assert not run(lmcache_pair(health="starting"), monkeypatch, args=SIDECARS).get("failed")
    cluster = lmcache_pair(state="exited")
    assert not run(cluster, monkeypatch).get("failed") and not cluster.commands_on("a-worker", "dspark-lmcache")


def test_unreachable_worker(monkeypatch):
    containers = {"a-head": FakeContainer().at(0, head_lines(2, ready=False)), "a-worker": FakeContainer()}
    result = run(FakeCluster(containers, unreachable=["a-worker"]), monkeypatch)
    assert diag_tuples(result) == [("node_unreachable", 1, "a-worker")]
    assert result["elapsed"] == 2.0


def test_container_overrides_and_api_key(monkeypatch):
    cluster = healthy_pair()
    cluster.containers["a-worker"].name = "vllm-w"
    result = run(cluster, monkeypatch, args={"containers": {"a-worker": "vllm-w"}, "api_key": "s3cret-key"})
    assert not result.get("failed"), result["msg"]
    docker_calls = [c for _r, _h, c, _d in cluster.calls if "docker" in c]
    # No sudo written by the plugin: become is the task's, applied by each member's connection.
    assert docker_calls and all(c.startswith("docker ") for c in docker_calls)
    assert all(c.endswith("vllm-w") for c in cluster.commands_on("a-worker", "docker inspect"))
    # The key travels on the probe's stdin only, never on a command line or in the result.
    assert all("s3cret-key" not in c for _r, _h, c, _d in cluster.calls)
    assert all(p["api_key"] == "s3cret-key" for _r, _h, p in cluster.probes)
    assert "s3cret-key" not in json.dumps(result, default=str)


def test_keys_and_tokens_never_leave_in_a_failed_result(monkeypatch):
    """The head's non-default args line (keys included, as real vLLM logs them) and a worker's token line."""
    keys = ["s3cret-key-one", "other-key-two"]
    args_line = ("(APIServer pid=1) INFO 11-29 18:40:01 [api_utils.py:273] non-default args: {'model_tag': 'm', "
                 "'api_key': ['%s', '%s'], 'port': 8000}" % tuple(keys))
    containers = {
        "a-head": FakeContainer().at(0, [args_line] + head_lines(2, ready=False) + [
            "(APIServer pid=1) INFO 11-29 18:40:02 [x.py:1] request with Authorization: Bearer %s" % keys[1]],
            state="exited", exit_code=1),
        "a-worker": FakeContainer().at(0, worker_lines(1, 2, joined=False) + [
            "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123 export"], state="exited", exit_code=1),
    }
    result = run(FakeCluster(containers), monkeypatch, args={"api_key": keys[0], "redact": keys})
    assert result["failed"] is True
    text = json.dumps(result, default=str)
    for secret in keys + ["hf_abcdefghijklmnopqrstuvwxyz0123"]:
        assert secret not in text
    head_log = result["logs"][0]
    assert any("non-default args: {'model_tag': 'm', 'api_key': ['[REDACTED]'], 'port': 8000}" in line
               for line in head_log), head_log


# --------------------------------------------------------------------------- check mode and arguments

def test_check_mode_predicts_without_polling(monkeypatch):
    cluster = healthy_pair()
    result = run(cluster, monkeypatch, check_mode=True)
    assert result["skipped"] is True and result["changed"] is False and not result.get("failed")
    assert result["expected_ranks"] == [0, 1]
    assert [(m["node"], m["ranks"], m["container"]) for m in result["members"]] == [
        ("a-head", [0], "dspark-vllm"), ("a-worker", [1], "dspark-vllm")]
    assert "Check mode" in result["msg"]
    assert cluster.calls == []


@pytest.mark.parametrize("args, tvars, expected", [
    ({"group": "nope"}, task_vars(), "Serving group 'nope' is not an inventory group"),
    ({}, task_vars(**{"a-worker": {"dspark_rank": None}}), "a-worker (member of pair_a) has no dspark_rank"),
    ({}, task_vars(**{"a-worker": {"dspark_rank": 0}}), "dspark_rank=0 is used by a-head, a-worker"),
    ({}, task_vars(**{"a-worker": {"dspark_rank": 2}}), "they must be 0..1"),
    ({}, task_vars(**{"a-head": {"dspark_api_port": None}}), "pass api_port or set dspark_api_port on the head a-head"),
    ({"containers": {"elsewhere": "x"}}, task_vars(), "containers names 'elsewhere'"),
    ({"timeout": -1}, task_vars(), "timeout=-1 must be at least 0"),
    ({"served_model_name": None}, task_vars(), "served_model_name"),
    ({"bogus": 1}, task_vars(), "Unsupported parameters"),
])
def test_argument_errors(monkeypatch, args, tvars, expected):
    for hv in tvars["hostvars"].values():
        for key in [k for k, v in hv.items() if v is None]:
            del hv[key]
    cluster = healthy_pair()
    result = run(cluster, monkeypatch, args=args, tvars=tvars)
    assert result["failed"] is True
    assert expected in result["msg"]
    assert result["diagnosis"] == [] and result["changed"] is False
    assert cluster.calls == []


def test_group_defaults_to_the_task_hosts_dspark_group(monkeypatch):
    tvars = task_vars(("b-head", "b-worker"), group="pair_b", host="b-worker")
    tvars["groups"]["pair_a"] = ["x"]
    containers = {"b-head": FakeContainer().at(0, head_lines(2)), "b-worker": FakeContainer().at(0, worker_lines(1, 2))}
    result = run(FakeCluster(containers, FakeApi().at(0), head="b-head"), monkeypatch, tvars=tvars, delegate_to=None)
    assert not result.get("failed"), result["msg"]
    assert result["group"] == "pair_b" and result["head"] == "b-head" and result["api_port"] == 8888


# --------------------------------------------------------------------------- several GPUs per node

def _real_output_helpers():
    """The wheel-statement renderer of plugin_utils/test_tp_real_output.py (vLLM 0.25.1 / 0.33.0 line layouts)."""
    path = Path(__file__).resolve().parents[1] / "plugin_utils" / "test_tp_real_output.py"
    spec = importlib.util.spec_from_file_location("dspark_tp_ranks_real_output", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("version", ["0.25.1", "0.33.0"])
def test_tp4_over_two_nodes_with_two_gpus_each_is_ready(monkeypatch, version):
    real = _real_output_helpers()
    head = real.node_log(version, 0, 2, 4, head=True).splitlines()
    worker = real.node_log(version, 2, 2, 4, head=False).splitlines()
    containers = {"a-head": FakeContainer(cid="1" * 64).at(0, head),
                  "a-worker": FakeContainer(cid="2" * 64).at(0, worker)}
    four = {"dspark_gpus_per_node": 2, "dspark_tensor_parallel_size": 4}
    result = run(FakeCluster(containers, FakeApi().at(1)), monkeypatch,
                 tvars=task_vars(**{"a-head": four, "a-worker": four}))
    assert not result.get("failed"), result["msg"]
    assert result["expected_ranks"] == [0, 1, 2, 3] and result["missing_ranks"] == []
    assert [(r["rank"], r["node"], r["via"]) for r in result["registered_ranks"]] == [
        (0, "a-head", None), (1, "a-head", "local_rank0"), (2, "a-worker", None), (3, "a-worker", "local_rank0")]
    assert result["world_size"] == 4 and result["generation_ok"] is True
    assert "TP group pair_a ready" in result["msg"] and "rank 3 on a-worker" in result["msg"]


def _wrong_port_helpers():
    path = Path(__file__).resolve().parents[1] / "plugin_utils" / "test_tp_wrong_master_port.py"
    spec = importlib.util.spec_from_file_location("dspark_tp_ranks_wrong_port", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_worker_on_a_wrong_master_port_is_named_within_the_bound(monkeypatch):
    """The real engine's silent case (issue #24): a worker dialling another --master-port prints its world_size line
    and nothing more for 30 minutes. The poll fails in the round both ranks' lines are seen, long before its timeout,
    naming the rank, its node and both endpoints."""
    wrong = _wrong_port_helpers()
    head = wrong.up_to_world_line("vllm_cpu_pair.head.log", 0).splitlines()
    worker = wrong.up_to_world_line("vllm_cpu_pair.worker.log", 1, wrong.WRONG).splitlines()
    containers = {"a-head": FakeContainer(cid="1" * 64).at(0, head),
                  # The worker starts late: its line shows in the third round.
                  "a-worker": FakeContainer(cid="2" * 64).at(2, worker)}
    result = run(FakeCluster(containers), monkeypatch, args={"timeout": 1800, "poll_interval": 2})
    assert result["failed"] is True and result["elapsed"] == 4.0
    assert diag_tuples(result) == [("init_method_mismatch", 1, "a-worker")]
    assert result["msg"].startswith("TP group pair_a (2 ranks) is not serving after 4.0 s: rank 1 on a-worker: "
                                    "init_method_mismatch: The ranks dial different rendezvous endpoints: rank 1 on "
                                    "a-worker dials tcp://127.0.0.1:29599 (--master-port 29599, not 29511), but rank 0 "
                                    "on a-head hosts the rendezvous store on tcp://127.0.0.1:29511.")
    assert result["diagnosis"][0]["evidence"].endswith("distributed_init_method=tcp://127.0.0.1:29599 backend=gloo")


# --------------------------------------------------------------------------- the rank that failed first (issue #29)


KILLED_HEAD_LINES = [
    "(Worker_TP0 pid=287) ERROR 11-29 18:50:02 [multiproc_executor.py:1063] RuntimeError: [/__w/pytorch/pytorch/"
    "third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:16079",
    "(EngineCore pid=300) ERROR 11-29 18:50:02 [core.py:1510] EngineCore encountered a fatal error.",
    "(APIServer pid=1) ERROR 11-29 18:50:03 [async_llm.py:693] vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
    "encountered an issue. See stack trace (above) for the root cause.",
]


def test_a_killed_worker_leads_and_the_heads_errors_are_its_consequences(monkeypatch):
    """The worker's container is SIGKILLed (exit 137) while the group serves; the head logs Gloo's lost peer and the
    engine's death, and the probe's chat completion gets HTTP 500: the worker leads, the head's errors follow."""
    containers = {"a-head": FakeContainer().at(0, head_lines(2) + KILLED_HEAD_LINES),
                  "a-worker": FakeContainer().at(0, worker_lines(1, 2), state="exited", exit_code=137,
                                                 finished_at=docker_ts(EPOCH - 2))}
    result = run(FakeCluster(containers, FakeApi().at(0, chat=500)), monkeypatch)
    assert result["failed"] is True
    first = result["diagnosis"][0]
    assert (first["code"], first["rank"], first["node"], first["first_failure"]) == (
        "container_exited", 1, "a-worker", True)
    assert first["cause"].startswith("The container of rank 1 on a-worker exited with code 137 (state exited): killed")
    assert "this rank failed first at %s while rank 0 on a-head still ran" % docker_ts(EPOCH - 2) in first["cause"]
    rest = result["diagnosis"][1:]
    assert rest and all(d["consequence_of"] == 1 and d["rank"] == 0 for d in rest), rest
    assert {"peer_lost", "generation_failed"} <= set(d["code"] for d in rest)
    assert result["msg"].startswith("TP group pair_a (2 ranks) is not serving after 0.0 s: rank 1 on a-worker: "
                                    "container_exited: The container of rank 1 on a-worker exited with code 137")
    assert " | rank 0 on a-head: lost its peer rank 1 (consequence: " in result["msg"]
    assert "more in diagnosis" not in result["msg"]


def test_the_container_that_ended_first_leads_when_both_ended(monkeypatch):
    """Both containers exited (the head after its engine died): docker's FinishedAt says which one went first."""
    containers = {"a-head": FakeContainer().at(0, head_lines(2) + KILLED_HEAD_LINES, state="exited", exit_code=1,
                                               finished_at=docker_ts(EPOCH + 3)),
                  "a-worker": FakeContainer().at(0, worker_lines(1, 2), state="exited", exit_code=143,
                                                 finished_at=docker_ts(EPOCH + 1.5))}
    result = run(FakeCluster(containers), monkeypatch)
    assert diag_tuples(result)[0] == ("container_exited", 1, "a-worker")
    assert result["diagnosis"][0]["first_failure"] is True and "killed" not in result["diagnosis"][0]["cause"]
    assert all(d.get("consequence_of") == 1 for d in result["diagnosis"][1:])
    assert ("container_exited", 0, "a-head") in diag_tuples(result)


def test_an_oom_killed_rank_is_named_so(monkeypatch):
    containers = {"a-head": FakeContainer().at(0, head_lines(2) + KILLED_HEAD_LINES),
                  "a-worker": FakeContainer().at(0, worker_lines(1, 2), state="exited", exit_code=137,
                                                 oom_killed=True)}
    result = run(FakeCluster(containers, FakeApi().at(0, chat=500)), monkeypatch)
    assert diag_tuples(result)[0] == ("container_exited", 1, "a-worker")
    assert "killed by the kernel's OOM killer (OOMKilled)" in result["diagnosis"][0]["cause"]
