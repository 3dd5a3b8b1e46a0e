"""The SIMULATOR authenticates as REAL vLLM does (issue #41 item 4): one list of requests (auth_requests of
tests/unit/simulator/test_sim_auth.py: no key, a wrong key, the scheme in four cases, two spaces or a tab after it, no
scheme, ... on the guarded /v1-style paths and on the open ones: /invocations, /metrics, /version, /health, ...) sent
on real_pair's head to real vLLM (the CPU build) and to the simulator, each with curl to 127.0.0.1 on its own port
(past the API edge in front of the engine), and the status codes compared request by request.

The simulator runs for this test only, on the same head node beside the engine: the node's python3 runs
lab/simulator/dspark_vllm_sim.py (standard library only) on a loopback port, with the group's keys from the same
api-keys.yaml the engine reads (`--config`), so no key is on a command line. Part of `make realtest` (before
test_real_engine.py, whose last test stops the group). The unit test sends the same list to a simulator started on
this machine, against the statuses listed there.
"""

import importlib.util
import json
import os
import shlex
import subprocess
import time

import pytest

from reallab import CONTAINER, HEAD, KEYS, MODEL_NAME, ROOT, node, rank_state

_SPEC = importlib.util.spec_from_file_location("sim_auth", ROOT / "tests" / "unit" / "simulator" / "test_sim_auth.py")
SIM_AUTH = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(SIM_AUTH)

SIM_PORT, SIM_STORE_PORT = 18997, 18998
SIM_PATH = "/var/tmp/dspark_vllm_sim.py"   # not /tmp: a tmpfs on the node that hides what docker cp writes
KEYS_FILE = "/etc/dspark/serve/api-keys.yaml"   # the serve role's file of several keys (lab-real has two)
# The real engine's first answer on a cold pair took 51 s (lab/engine/recordings/tp2-cpu-0.32.0); later ones are fast.
CURL_TIMEOUT_S = 120


def serving(host):
    """Skip (fail under DSPARK_LAB_REQUIRED=1) unless host's engine container runs."""
    state = rank_state(host)
    if state != "running":
        reason = "the engine container on %s is %s: converge the whole lab-real inventory (make site-real)" % (
            host, state)
        if os.environ.get("DSPARK_LAB_REQUIRED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


def engine_port(host):
    """The port the engine itself listens on: `--port` of its container's command line (the serve role always writes
    it). Not GROUP_VARS.get("serve_engine_port", GROUP_VARS["dspark_api_port"]): behind the head's API edge the engine
    takes serve_engine_port, whose value is the serve role's default and not in the lab's group vars, and
    dspark_api_port is the edge's; before the edge the engine took dspark_api_port. The container says which."""
    rc, out = node(host, "docker inspect --format '{{json .Config.Cmd}}' %s" % CONTAINER)
    assert rc == 0, out
    argv = json.loads(out.strip().splitlines()[-1])
    ports = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--port"]
    ports += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--port=")]
    assert len(ports) == 1, "no single --port on the engine's command line on %s: %s" % (host, argv)
    return int(ports[0])


def curl_script(port, requests):
    """A shell script that sends each request with curl to 127.0.0.1:port and prints `<index> <status>`. It is fed on
    stdin and writes the headers to 0700 temporary files with printf (a shell builtin): no key is on a command line,
    here or on the node (the leak sweep of test_real_engine.py looks there). --path-as-is: paths go out as listed."""
    lines = ["set -u", "d=$(mktemp -d)", "trap 'rm -rf \"$d\"' EXIT"]
    for i, request in enumerate(requests):
        argv = ["-s", "-o", "/dev/null", "-w", "'%{http_code}'", "--path-as-is", "-m", str(CURL_TIMEOUT_S)]
        argv += ["-I"] if request["method"] == "HEAD" else ["-X", shlex.quote(request["method"])]
        if request["headers"]:
            lines.append("printf '%%s\\n' %s >\"$d/h%d\"" % (
                " ".join(shlex.quote("%s: %s" % pair) for pair in request["headers"]), i))
            argv += ["-H", "\"@$d/h%d\"" % i]
        if request["body"] is not None:
            lines.append("printf '%%s' %s >\"$d/b%d\"" % (shlex.quote(request["body"].decode()), i))
            argv += ["--data-binary", "\"@$d/b%d\"" % i]
        argv.append(shlex.quote("http://127.0.0.1:%d%s" % (port, request["path"])))
        lines.append("c=$(curl %s </dev/null); echo \"%d ${c:-000}\"" % (" ".join(argv), i))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def simulator():
    """The simulator on HEAD's loopback, SIM_PORT, with the group's keys; stopped afterwards."""
    serving(HEAD)
    rc, out = node(HEAD, "test -f %s" % KEYS_FILE)
    assert rc == 0, "no %s on %s: lab-real sets two keys (serve_api_keys)" % (KEYS_FILE, HEAD)
    copied = subprocess.run(["docker", "exec", "-i", HEAD, "sh", "-c", "cat > %s" % SIM_PATH],
                            input=(ROOT / "lab" / "simulator" / "dspark_vllm_sim.py").read_text(), capture_output=True,
                            text=True, check=False)
    assert copied.returncode == 0, copied.stderr
    command = ("DSPARK_SIM_LOAD_SECONDS=0.3 DSPARK_SIM_DEVICE=cpu DSPARK_SIM_STORE_BIND=127.0.0.1 PYTHONUNBUFFERED=1 "
               "python3 %s serve %s --served-model-name %s --host 127.0.0.1 --port %d --tensor-parallel-size 1 "
               "--nnodes 1 --node-rank 0 --master-addr 127.0.0.1 --master-port %d --distributed-executor-backend mp "
               "--config %s >/var/tmp/dspark-sim.log 2>&1"
               % (SIM_PATH, shlex.quote(MODEL_NAME), shlex.quote(MODEL_NAME), SIM_PORT, SIM_STORE_PORT, KEYS_FILE))
    started = subprocess.run(["docker", "exec", "-d", HEAD, "sh", "-c", command], capture_output=True, text=True,
                             check=False)
    assert started.returncode == 0, started.stderr
    try:
        for dummy in range(100):
            rc, log = node(HEAD, "cat /var/tmp/dspark-sim.log")
            if "Application startup complete." in log:
                break
            time.sleep(0.3)
        else:
            raise AssertionError("the simulator did not start on %s:\n%s" % (HEAD, log[-3000:]))
        yield SIM_PORT
    finally:
        node(HEAD, "pkill -f %s; rm -f %s /var/tmp/dspark-sim.log" % (SIM_PATH, SIM_PATH))


def statuses(host, requests, port=None):
    """The status of every request, sent on host to a port (by default its engine's own)."""
    script = curl_script(port or engine_port(host), requests)
    proc = subprocess.run(["docker", "exec", "-i", host, "sh", "-s"], input=script, capture_output=True, text=True,
                          timeout=len(requests) * 3 + CURL_TIMEOUT_S * 2, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.strip())
    assert len(got) == len(requests), proc.stdout[-2000:] + proc.stderr[-2000:]
    return [int(got[str(i)]) for i in range(len(requests))]


def test_the_simulator_answers_every_request_as_the_real_engine(simulator):
    requests = SIM_AUTH.auth_requests(KEYS[0], KEYS[-1], MODEL_NAME)
    real = statuses(HEAD, requests)
    sim = statuses(HEAD, requests, simulator)
    rows = ["%-70s real %d  simulator %d  listed %d" % (r["name"], a, b, r["status"])
            for r, a, b in zip(requests, real, sim)]
    print("\n%d requests on %s to each engine's own port:\n%s" % (len(requests), HEAD, "\n".join(rows)))
    differ = [row for row, a, b in zip(rows, real, sim) if a != b]
    assert not differ, "the simulator and real vLLM answer differently:\n" + "\n".join(differ)
    # Both agree; also with the list: a request that both answer otherwise (a wrong model name, a stale simulator
    # image) would prove nothing about the keys.
    unlisted = [row for row, a, r in zip(rows, real, requests) if a != r["status"]]
    assert not unlisted, "real vLLM and the simulator agree, but not with the list:\n" + "\n".join(unlisted)
