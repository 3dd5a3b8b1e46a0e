"""The router (roles/router, playbooks/router*.yml) on the SIMULATED fleet lab, through its published port.

Needs the fleet lab up and converged with its router (make lab-fleet; ansible-playbook -i
inventories/lab-fleet/hosts.yml site.yml). Skipped otherwise with the reason, unless DSPARK_LAB_REQUIRED=1
makes that a failure. Every test leaves every group in rotation. Run: make routertest (about 10-15 min on 2 cores).

- the role converges idempotently and check mode changes nothing; the health check asks /health without a key, the
  router answers other paths itself (404), and a retired router_api_key stops the run without showing it;
- the fleet's API closed (issue #26): 401 through the router without the key or with a wrong one, the heads' API
  port closed to this machine and open to the router, 429 with Retry-After past a key's rate, a tcpdump of the
  health checks on the management bridge holds no key (and would see one), no key in the router's journal, files
  or stick table, nor in the engines' logs;
- optional TLS from a certificate and key (key file 0600, never shown), then removed again;
- the drain refuses to take out the last group in rotation, says so when its bound is hit, and rejects
  unknown groups; status reads every server;
- Test A: while a bounded load runs, `dspark-fleet reprovision --rolling` takes every group in turn out of rotation,
  reprovisions it (site.yml, restart forced), proves it and puts it back: zero failed requests, every answer
  complete, no request sent to a group while it was out, the time out of rotation of each group in the report;
- Rollback: a roll to an image whose workers never join puts pair_b back on its last proven image, proven and in
  rotation, and stops before trio_c;
- a generation longer than the drain bound during a roll: with --on-drain-timeout fail the group goes back untouched
  and the generation still streams; a second roll with continue reprovisions it, cuts the same generation and counts
  it in the report;
- a head whose packets are dropped is taken out by the health check and reported unreachable by status;
- Test B: a group killed outright is taken out by the health check within a stated bound, requests sent after
  the kill succeed, and it comes back into rotation once served again.
"""

import http.client
import json
import math
import os
import socket
import subprocess
import tempfile
import threading
import time

import pytest

import fleetlab
import loadclient
import rollcheck
import routerlab as lab

# Health check: inter 2s, fastinter 1s, fall 2, timeout 2s -> a dead group is out after at most
# 2 + 1 + 2 = 5 s (plus the poll): this is the bound Test B holds it to.
REMOVAL_BOUND_SECONDS = 8.0
# A head whose packets are dropped fails each check by its timeout instead: 2 + 2 (timeout) + 1 + 2 (timeout) = 7 s.
VANISH_BOUND_SECONDS = 10.0
RATE = 4.0
SECRET = "sk-dspark-router-test-do-not-print-3c1f"
FRONTEND = "dspark_api"                                                # router_frontend_name: its stick table
FIRST_RUN = []                                                         # fleet_ready's router.yml run


@pytest.fixture(scope="module", autouse=True)
def fleet_ready():
    # dspark-fleet reprovision converged the router already (test_fleet checks it): again here, so that this suite
    # also stands alone (a no-op when the fleet suite ran first). The idempotence test takes this run as its first.
    FIRST_RUN.append(lab.playbook("router.yml"))
    problem = lab.fleet_problem()
    if problem is None:
        # The suites before may have left the service address on spark-router2: when every group was down at once
        # (a fleet restart) neither router held it, and the first whose check passed again took it (no preemption).
        # These tests read spark-router's log, sessions and tables: it holds the address again first.
        assert lab.restore_first_router(), lab.holders()
        return
    if os.environ.get("DSPARK_LAB_REQUIRED") == "1":
        pytest.fail(problem, pytrace=False)
    pytest.skip(problem)


@pytest.fixture
def all_back():
    """Whatever a test did, every group is back in rotation afterwards."""
    yield
    for group in lab.serving_groups():
        if not lab.router_servers().get(group, {}).get("in_rotation"):
            lab.playbook("router_enable.yml", "-e", "router_target_group=" + group)
    servers, dummy = lab.wait_router(lambda s: all(s.get(g, {}).get("in_rotation") for g in lab.serving_groups()), 60)
    assert all(servers.get(g, {}).get("in_rotation") for g in lab.serving_groups()), servers


def assert_ok(run, what):
    assert run.rc == 0, "%s: exit %d\n%s" % (what, run.rc, run.tail())


# --------------------------------------------------------------------------- the role

def test_role_is_idempotent_and_check_mode_changes_nothing():
    first = FIRST_RUN[0]                                                # the module fixture's run
    assert_ok(first, "router.yml")
    second = lab.playbook("router.yml")
    assert_ok(second, "router.yml (second run)")
    assert all(second.changed(router) == 0 for router in lab.ROUTERS), second.tail()
    check = lab.playbook("router.yml", "--check", "--diff")
    assert_ok(check, "router.yml --check")
    assert all(check.changed(router) == 0 for router in lab.ROUTERS), check.tail()
    # Converged routers stop at the reads (issue #40): no apply file is included on either.
    for run in (second, check):
        assert not [name for name in ("haproxy_apply.yml", "vrrp_apply.yml", "firewall_apply.yml") if name in run.out], \
            run.tail()
    # keepalived's configuration holds the VRRP password: never shown, root's alone.
    assert "lab-vrrp" not in first.out + second.out + check.out


def test_config_holds_no_secret_and_the_socket_is_local():
    out = subprocess.run(["docker", "exec", lab.ROUTER, "sh", "-c",
                          "stat -c '%a %U %G' /etc/haproxy/haproxy.cfg /run/haproxy/admin.sock; "
                          "haproxy -c -q -f /etc/haproxy/haproxy.cfg && echo valid; "
                          "grep -E '^ *(stats socket|bind|retry-on|option redispatch|timeout (client|server))' "
                          "/etc/haproxy/haproxy.cfg"],
                         capture_output=True, text=True, timeout=30, check=True).stdout.splitlines()
    assert out[0] == "644 root root" and out[1].startswith("600 root ")
    assert out[2] == "valid"
    config = "\n".join(out[3:])
    assert "stats socket /run/haproxy/admin.sock mode 600 level admin" in config
    # The API on the service address only (present or not: transparent), HAProxy's exporter on loopback
    # (router_metrics_port); no stats page or TCP admin listener.
    binds = sorted(line.strip() for line in config.splitlines() if line.strip().startswith("bind "))
    assert binds == ["bind %s:8080 transparent" % lab.VIP, "bind 127.0.0.1:8405"], binds
    assert "retry-on conn-failure" in config and "option redispatch 1" in config
    assert "timeout client 1800s" in config and "timeout server 1800s" in config


def test_the_health_check_sends_no_key_and_other_paths_stay_at_the_router():
    """Issue #26: GET /health without Authorization; every path outside the OpenAI API is answered 404 by the router,
    even with the key; router_api_key is retired."""
    on_disk = subprocess.run(["docker", "exec", lab.ROUTER, "grep", "-c", "-e", "Authorization '", "-e", "uri /health ",
                              "/etc/haproxy/haproxy.cfg"], capture_output=True, text=True, timeout=30, check=False)
    assert on_disk.stdout.strip() == "1"                                # the check line, without a key
    servers, waited = lab.wait_router(lambda s: all(x["check_status"] == "L7OK" and x["in_rotation"]
                                                    for x in s.values()), 30)
    assert waited is not None, servers
    for path in ("/metrics", "/load", "/tokenize", "/detokenize", "/invocations", "/docs", "/openapi.json", "/version",
                 "/v1/models/../metrics", "/health"):
        for headers in ({}, lab.bearer()):
            status, dummy, dummy = call("GET", path, headers)
            assert status == 404, (path, bool(headers), status)
    run = lab.playbook("router.yml", "-v", "-e", "router_api_key=" + SECRET)
    assert run.rc != 0 and "router_api_key=<not shown: secret> is set, but the router no longer uses it" in run.out
    assert SECRET not in run.out


def call(method, path, headers, body=None, conn=None):
    """(status, headers, body) of one request to the router's published port; `conn` reuses a connection."""
    own = conn is None
    conn = conn or http.client.HTTPConnection(lab.VIP, lab.PORT, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()                   # headers: case-insensitive
    finally:
        if own:
            conn.close()


def test_the_api_is_closed_without_the_fleets_key():
    """Issue #26 on the fleet lab: every head holds the key and its firewall lets only the router in; the router
    passes the client's header through, so no key or a wrong one is refused by the group (401) through the router."""
    key = lab.api_key()
    assert key, "the fleet lab runs without an API key (inventories/lab-fleet/group_vars/dspark.yml: serve_api_key)"
    assert call("GET", "/v1/models", {})[0] == 401
    assert call("GET", "/v1/models", lab.bearer("x" + key))[0] == 401
    body = json.dumps({"model": lab.MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "Say OK"}]})
    assert call("POST", "/v1/chat/completions", {"Content-Type": "application/json"}, body)[0] == 401
    status, dummy, answer = call("POST", "/v1/chat/completions", dict(lab.bearer(), **{"Content-Type": "application/json"}),
                                 body)
    assert status == 200 and json.loads(answer)["choices"][0]["message"]["content"], answer[:300]
    # The head's API is not reachable from this machine (the lab's management gateway, not the router) ...
    head = lab.heads()["pair_b"]
    address = {n["name"]: n["mgmt_ip"] for n in lab.labspec.spec_for(lab.INVENTORY)["nodes"]}[head]
    try:
        socket.create_connection((address, 8888), timeout=3).close()
        reached = True
    except OSError:
        reached = False
    assert not reached, "%s:8888 answered this machine past the serve firewall" % address
    # ... but the router is (the rule that lets it in is the router's own management address).
    probe = subprocess.run(["docker", "exec", lab.ROUTER, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                            "--max-time", "5", "http://%s:8888/health" % address], capture_output=True, text=True,
                           timeout=30, check=False)
    assert probe.stdout == "200", probe


def test_a_key_past_its_rate_gets_429_and_other_clients_do_not():
    """router_key_rate_limit (50 per second): a burst of one key's requests, spread over four spellings of the scheme
    (#41: the heads take any case), meets 429 with Retry-After as one key; a request without the key is counted apart
    (by address) and gets the group's 401, not 429; a second later the key works."""
    results = []
    spellings = ["Bearer", "BEARER", "bearer", "BeArEr"]

    def burst():
        for turn in range(40):
            try:
                header = {"Authorization": "%s %s" % (spellings[turn % 4], lab.api_key())}
                status, headers, dummy = call("GET", "/v1/models", header)
                results.append((status, headers.get("Retry-After")))
            except (OSError, http.client.HTTPException) as err:
                results.append((repr(err), None))

    threads = [threading.Thread(target=burst) for dummy in range(6)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    seconds = time.monotonic() - started
    statuses = [s for s, dummy in results]
    assert len(results) == 240 and set(statuses) <= {200, 429}, sorted(set(map(str, statuses)))
    # At most 50 pass in any one second (a rate over 1 s): the burst's seconds, begun and ended, bound them.
    passed = statuses.count(200)
    assert statuses.count(429) > 0 and 0 < passed <= 50 * (math.ceil(seconds) + 1), (passed, seconds)
    assert all(retry == "1" for s, retry in results if s == 429)
    assert call("GET", "/v1/models", {})[0] == 401                     # another client: not limited by this key
    # The key works again once its last second's rate has passed (polled at 2 requests per second, far below it).
    assert fleetlab.wait_for(lambda: call("GET", "/v1/models", lab.bearer())[0] == 200, 10, 0.5)


def mgmt_bridge():
    """The host's end of the fleet lab's management network (a Docker bridge)."""
    rc, out = fleetlab.docker("network", "inspect", "-f", "{{.Id}}", "dspark-lab-fleet-mgmt")
    assert rc == 0, out
    return "br-" + out[:12]


def capture(seconds, during=None):
    """What tcpdump sees of the heads' API port on the management bridge for `seconds` (ASCII payloads)."""
    with tempfile.TemporaryDirectory() as tmp:
        pcap = os.path.join(tmp, "api.pcap")
        dump = subprocess.Popen(["tcpdump", "-i", mgmt_bridge(), "-s", "0", "-U", "-w", pcap,  # pylint: disable=consider-using-with
                                 "tcp port 8888"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started = dump.stderr.readline()                                # "listening on ...": the capture is on
        assert "listening on" in started, started
        if during:
            during()
        time.sleep(seconds)
        dump.terminate()
        dump.wait(timeout=30)
        return subprocess.run(["tcpdump", "-r", pcap, "-A", "-nn"], capture_output=True, text=True, timeout=60,
                              check=True).stdout


def test_the_health_checks_on_the_wire_carry_no_key():
    """Issue #26: a capture of the router's health checks on the lab's management bridge holds no key. Its
    control: the same capture holds a client's key once a client sends one (between the router and a head the
    client's header crosses the management network in clear: docs/design-router-edge.md, the limit)."""
    key = lab.api_key()
    quiet = capture(5)
    assert quiet.count("GET /health HTTP/1.1") >= 4, quiet[-2000:]     # both heads checked, at least twice each
    assert "authorization" not in quiet.lower() and key not in quiet    # (HAProxy writes header names in lower case)
    busy = capture(1, during=lambda: call("GET", "/v1/models", lab.bearer()))
    assert "authorization: bearer " + key.lower() in busy.lower()       # the capture would have seen one


def test_no_key_is_left_in_the_routers_logs_files_or_tables():
    """The leak sweep of the router: after the key passed through it (the tests above), neither its journal, its
    files nor its stick table (keyed by a hash) hold the key; the heads' engine logs neither."""
    key = lab.api_key()
    assert call("GET", "/v1/models", lab.bearer())[0] == 200
    sweep = subprocess.run(["docker", "exec", lab.ROUTER, "sh", "-c",
                            "journalctl --no-pager -o cat; cat /var/log/haproxy* 2>/dev/null; "
                            "grep -r . /etc/haproxy /var/lib/haproxy 2>/dev/null; "
                            "echo 'show table %s' | socat -t 2 stdio unix-connect:%s" % (FRONTEND, lab.SOCKET)],
                           capture_output=True, text=True, timeout=120, check=False)
    seen = sweep.stdout + sweep.stderr
    assert "GET /v1/models" in seen and "key=" in seen, seen[-2000:]  # the log and the table were read
    assert key not in seen
    for head in lab.heads().values():
        logs = subprocess.run(["docker", "exec", head, "docker", "logs", fleetlab.CONTAINER], capture_output=True,
                              text=True, timeout=60, check=False)
        assert logs.returncode == 0 and key not in logs.stdout + logs.stderr, head


def test_tls_from_certificate_and_key(tmp_path, all_back):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=spark-router"], capture_output=True, check=True, timeout=60)
    key_text = key.read_text()
    key_marker = key_text.splitlines()[1]                               # a line of the key's base64
    extra = tmp_path / "tls.json"
    extra.write_text(json.dumps({"router_tls_certificate": cert.read_text(), "router_tls_key": key_text}))
    try:
        run = lab.playbook("router.yml", "--diff", "-v", "-e", "@" + str(extra))
        assert_ok(run, "router.yml with TLS")
        assert key_marker not in run.out
        probe = subprocess.run(                                         # the key's header from stdin, not argv
            ["docker", "exec", "-i", lab.ROUTER, "sh", "-c",
             ("head -n1 > /tmp/h; stat -c '%a %U' /etc/haproxy/dspark-tls/router.pem /etc/haproxy/dspark-tls; "
              "curl -sk --max-time 10 -H @/tmp/h https://VIP:8443/v1/models; echo; "
              "curl -s --max-time 10 -H @/tmp/h -o /dev/null -w '%{http_code}' http://VIP:8080/v1/models; echo; "
              "curl -s --max-time 10 -o /dev/null -w '%{http_code}' http://VIP:8080/v1/models; "
              "rm -f /tmp/h").replace("VIP", lab.VIP)],
            input="Authorization: Bearer %s\n" % lab.api_key(), capture_output=True, text=True, timeout=60,
            check=False).stdout.splitlines()
        assert probe[0] == "600 root" and probe[1] == "700 root"
        assert json.loads(probe[2])["data"][0]["id"] == lab.MODEL
        # Plain HTTP stays (router_port), but takes no key under TLS (#41): 403 from the router; without a key the
        # request is forwarded and the head's edge answers 401.
        assert probe[3:5] == ["403", "401"], probe
        again = lab.playbook("router.yml", "-e", "@" + str(extra))
        assert again.rc == 0 and again.changed(lab.ROUTER) == 0, again.tail()
    finally:
        back = lab.playbook("router.yml")
        assert_ok(back, "router.yml without TLS")
    gone = subprocess.run(["docker", "exec", lab.ROUTER, "test", "-e", "/etc/haproxy/dspark-tls/router.pem"],
                          timeout=30, check=False)
    assert gone.returncode == 1


# --------------------------------------------------------------------------- the playbooks

def test_status_reads_every_server(tmp_path):
    report = tmp_path / "status.json"
    run = lab.playbook("router_status.yml", "-e", "router_report_file=" + str(report))
    assert_ok(run, "router_status.yml")
    servers = {s["name"]: s for s in json.loads(report.read_text())[lab.ROUTER]["servers"]}
    assert sorted(servers) == lab.serving_groups()
    assert all(s["in_rotation"] and s["healthy"] and s["admin"] == "ready" for s in servers.values()), servers
    heads = lab.heads()
    spec = {n["name"]: n for n in lab.labspec.spec_for(lab.INVENTORY)["nodes"]}
    assert {g: (s["address"], s["port"]) for g, s in servers.items()} == \
        {g: (spec[heads[g]]["mgmt_ip"], 8888) for g in servers}


def test_unknown_group_and_missing_group_are_refused():
    run = lab.playbook("router_drain.yml", "-e", "router_target_group=pair_z")
    assert run.rc != 0 and "router_target_group=\"pair_z\" is not a serving group behind spark-router" in run.out
    run = lab.playbook("router_enable.yml")
    assert run.rc != 0 and "Name the group: -e router_target_group=<group>" in run.out


def test_refuses_to_drain_the_last_group_in_rotation(all_back):
    groups = lab.serving_groups()
    for group in groups[:-1]:
        assert_ok(lab.playbook("router_drain.yml", "-e", "router_target_group=" + group), "drain " + group)
    last = groups[-1]
    run = lab.playbook("router_drain.yml", "-e", "router_target_group=" + last)
    assert run.rc != 0
    assert "Refusing to drain %s on spark-router: it is the last group in rotation" % last in run.out
    assert lab.router_servers()[last]["in_rotation"]                    # nothing changed
    for group in groups[:-1]:
        assert_ok(lab.playbook("router_enable.yml", "-e", "router_target_group=" + group), "enable " + group)


def test_drain_says_when_its_bound_is_hit(all_back):
    """A request whose body never finishes keeps a session open: the drain waits 2 s, then fails and says so."""
    held = socket.create_connection((lab.VIP, lab.PORT), timeout=10)
    try:
        # More than the router's buffer (16 KiB, option http-buffer-request): it reaches a group before it is whole.
        held.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 40000\r\n\r\n{\"model\": \"" + b"x" * 20000)
        servers, dummy = lab.wait_router(lambda s: any(x["sessions"] > 0 for x in s.values()), 10)
        busy = [g for g, s in servers.items() if s["sessions"] > 0]
        assert busy, servers
        run, report = lab.with_report("router_drain.yml", busy[0], "-e", "router_drain_timeout=2")
        assert run.rc != 0
        assert "Drain bound hit: %s still has 1 open session(s) on spark-router after 2 s" % busy[0] in run.out
        assert report["bound_hit"] is True and report["sessions_left"] == 1
        assert lab.router_servers()[busy[0]]["admin"] == "drain"        # it stays drained
        run = lab.playbook("router_drain.yml", "-e", "router_target_group=" + busy[0], "-e", "router_drain_timeout=1",
                           "-e", "router_drain_on_timeout=continue")
        assert run.rc == 0 and "DRAIN BOUND HIT" in run.out
    finally:
        held.close()
    assert_ok(lab.playbook("router_enable.yml", "-e", "router_target_group=" + busy[0]), "enable " + busy[0])


# --------------------------------------------------------------------------- Test A: rolling reprovision

@pytest.fixture(scope="module")
def fleet_state(tmp_path_factory):
    """One dspark-fleet state dir for the rolling tests: the roll records each group's proven image and revision
    there (proven/), the rollback test reads them."""
    return tmp_path_factory.mktemp("fleet-state")


def test_rolling_reprovision_loses_no_request(all_back, tmp_path, fleet_state):
    # --no-qualify: the qualification before each drain is proven by the unit tests of rolling_qualify (and by
    # `make realtest`'s roll of the real group); here it would add a qualify run per group to the CI's longest lane.
    groups = lab.serving_groups()
    # The bound: RATE per second for at most 25 minutes; the load is stopped a few seconds after the roll.
    load = loadclient.Load(lab.ROUTER_URL, allowed_networks=lab.LOAD_NETWORKS, count=int(RATE * 1500), rate=RATE, api_key=lab.api_key())
    (rc, out), records = rollcheck.under_load(load, lambda: fleetlab.fleet(
        "reprovision", "-i", lab.INVENTORY, "--rolling", "--no-qualify", "--plain", "--artifacts", tmp_path / "roll",
        "--state-dir", fleet_state, "-e", '{"serve_force_restart": true}'))
    assert rc == 0, out[-4000:]
    summary, out_of_rotation = rollcheck.assert_rolled(fleetlab.report(tmp_path / "roll" / "report.json"), records,
                                                       groups, min_sent=60)
    print(json.dumps({"summary": summary, "out_of_rotation_s": out_of_rotation}, indent=1))


def test_an_image_that_never_becomes_ready_is_rolled_back_and_the_roll_stops(all_back, tmp_path, fleet_state):
    """#29 item 6 on the fleet lab: a roll to a new image tag whose workers never join (the SIMULATOR's
    DSPARK_SIM_NEVER_JOIN, tied to the tag by a template: every tag names the one simulator image here) fails pair_b's
    proof; pair_b goes back to its last proven image (recorded by the roll above, or by a plain reprovision here),
    is proven again and put back in rotation, and the roll stops before trio_c. The report says so."""
    head = lab.heads()["pair_b"]
    if not (fleet_state / "proven").is_dir() or not any((fleet_state / "proven").iterdir()):
        rc, out = fleetlab.fleet("reprovision", "-i", lab.INVENTORY, "--groups", "pair_b", "--plain", "--artifacts",
                                 tmp_path / "record", "--state-dir", fleet_state)
        assert rc == 0, out[-4000:]
    facts = fleetlab.FLEET_VARS
    image = facts["dspark_image"]                                       # the tag the inventory names
    image_id = fleetlab.docker("exec", head, "docker", "inspect", "--format", "{{.Image}}", fleetlab.CONTAINER)[1]
    trio_before = fleetlab.container_id(lab.heads()["trio_c"])
    broken = image.rsplit(":", 1)[0] + ":broken"
    env = dict(facts["serve_extra_env"])
    env.update({"DSPARK_SIM_NEVER_JOIN": "{{ '1' if dspark_image.endswith(':broken') else '0' }}",
                "DSPARK_SIM_RENDEZVOUS_TIMEOUT": "{{ '10' if dspark_image.endswith(':broken') else '%s' }}"
                                                 % env["DSPARK_SIM_RENDEZVOUS_TIMEOUT"]})
    rc, out = fleetlab.fleet("reprovision", "-i", lab.INVENTORY, "--rolling", "--no-qualify", "--plain", "--artifacts",
                             tmp_path / "roll", "--state-dir", fleet_state, "-e", json.dumps({
                                 "dspark_image": broken, "serve_extra_env": env}))
    assert rc != 0, out[-4000:]
    result = fleetlab.report(tmp_path / "roll" / "report.json")
    pair, trio = result["groups"]["pair_b"], result["groups"]["trio_c"]
    assert pair["result"] == "failed" and "rendezvous_timeout" in pair["failure"]["summary"], pair
    rollback = pair["rollback"]
    assert rollback["attempted"] and rollback["result"] == "rolled_back", rollback
    assert rollback["from"]["image"] == broken and rollback["to"]["image"] == image, rollback
    assert trio["result"] == "not_started", trio                      # the roll stopped
    assert "rolled back" in out and "the roll stops" in out, out[-4000:]
    # pair_b serves its last proven image again, in rotation; trio_c was never touched.
    running = fleetlab.docker("exec", head, "docker", "inspect", "--format", "{{.Image}}", fleetlab.CONTAINER)[1]
    assert running == image_id and image_id.startswith("sha256:")
    assert lab.router_servers()["pair_b"]["in_rotation"]
    assert fleetlab.container_id(lab.heads()["trio_c"]) == trio_before
    ok, text = fleetlab.chat("pair_b")
    assert ok, text


# Far more than any roll takes: the generation must still be streaming when the roll restarts its group.
LONG_TOKENS = 60000


def long_generation(stream, tokens_wanted):
    """One streamed completion of `tokens_wanted` tokens (ignore_eos; 0.05 s each in the lab) through the router,
    recorded as it goes in `stream` (conn, group, tokens received, complete)."""
    conn = stream["conn"] = http.client.HTTPConnection(lab.VIP, lab.PORT, timeout=tokens_wanted * 0.05 + 120)
    try:
        body = json.dumps({"model": lab.MODEL, "messages": [{"role": "user", "content": "a long answer"}],
                           "max_tokens": tokens_wanted, "ignore_eos": True, "stream": True})
        conn.request("POST", "/v1/chat/completions", body, dict(lab.bearer(), **{"Content-Type": "application/json"}))
        resp = conn.getresponse()
        stream["group"] = resp.getheader("X-Dspark-Group")
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: [DONE]"):
                stream["complete"] = True
            elif line.startswith(b"data: ") and b'"content"' in line:
                stream["tokens"] += 1
    except (OSError, ValueError, http.client.HTTPException):
        pass
    finally:
        conn.close()


def roll_pair_b(tmp_path, fleet_state, on_timeout, *extra):
    """A roll of pair_b with a 3 s drain bound: (exit code, output, pair_b's rotation in the report)."""
    rc, out = fleetlab.fleet("reprovision", "-i", lab.INVENTORY, "--rolling", "--groups", "pair_b", "--no-qualify",
                             "--plain", "--artifacts", tmp_path / on_timeout, "--state-dir", fleet_state,
                             "--drain-timeout", 3, "--on-drain-timeout", on_timeout, *extra)
    return rc, out, fleetlab.report(tmp_path / on_timeout / "report.json")["groups"]["pair_b"]["rotation"]


def test_a_generation_longer_than_the_drain_bound_ends_as_the_options_say(all_back, tmp_path, fleet_state):
    """#29 item 7: a long generation on each group (60000 tokens, about 50 min: it never ends by itself during the
    test; 6000, 5 min, ended before a loaded CI machine's second roll reached its restart; leastconn puts one on each
    group) while pair_b is rolled with a 3 s drain bound, twice.
    --on-drain-timeout fail: pair_b goes back into rotation untouched, the roll fails saying why, and its generation
    still streams. Then continue: pair_b is reprovisioned anyway (restart forced), the same generation is cut, and the
    report counts the request left open at the bound. The client closes trio_c's stream at the end."""
    streams = [{"conn": None, "group": None, "tokens": 0, "complete": False} for dummy in range(2)]
    threads = [threading.Thread(target=long_generation, args=(s, LONG_TOKENS), daemon=True) for s in streams]
    try:
        # One after the other: leastconn puts the second on the other group once the first is counted (two started
        # together both went to trio_c once, on a loaded CI machine; the router's view is in the message).
        threads[0].start()
        assert fleetlab.wait_for(lambda: streams[0]["group"], 20, 0.2), (streams[0], lab.router_servers())
        threads[1].start()
        placed = fleetlab.wait_for(lambda: sorted(str(s["group"]) for s in streams) == ["pair_b", "trio_c"], 20, 0.2)
        assert placed, ([s["group"] for s in streams], lab.router_servers())
        ours = {s["group"]: (s, th) for s, th in zip(streams, threads)}
        stream, thread = ours["pair_b"]
        rc, out, rotation = roll_pair_b(tmp_path, fleet_state, "fail")
        assert rc != 0 and "drain bound hit: 1 open session(s) still on pair_b" in out, out[-4000:]
        assert rotation["drain"]["bound_hit"] and rotation["back_in_rotation"] and "cut_sessions" not in rotation, \
            rotation
        before = stream["tokens"]
        thread.join(timeout=5)
        assert thread.is_alive() and stream["tokens"] > before, stream  # untouched: it still streams
        started = time.monotonic()
        rc, out, rotation = roll_pair_b(tmp_path, fleet_state, "continue", "-e", '{"serve_force_restart": true}')
        assert rc == 0, out[-4000:]
        assert rotation["drain"]["bound_hit"] and rotation["cut_sessions"] == 1 and rotation["back_in_rotation"], \
            rotation
        assert "1 request(s) still open at the drain bound" in out, out[-3000:]
        thread.join(timeout=30)
        assert not thread.is_alive() and not stream["complete"] and 0 < stream["tokens"] < LONG_TOKENS, stream
        took = time.monotonic() - started
        print("cut after %d of %d tokens; the second roll took %.0f s" % (stream["tokens"], LONG_TOKENS, took))
        assert ours["trio_c"][1].is_alive()                             # trio_c's was never touched
    finally:
        for stream in streams:
            if stream["conn"] is not None and stream["conn"].sock:
                stream["conn"].sock.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(timeout=60)


# --------------------------------------------------------------------------- Test B: a group killed outright

def test_killed_group_is_taken_out_by_the_health_check(all_back):
    victim = "pair_b"
    head = lab.heads()[victim]
    load = loadclient.Load(lab.ROUTER_URL, allowed_networks=lab.LOAD_NETWORKS, count=int(RATE * 600), rate=RATE, api_key=lab.api_key()).start()
    try:
        time.sleep(5)
        killed_at = time.time()
        subprocess.run(["docker", "exec", head, "docker", "stop", "dspark-vllm"], capture_output=True, check=True,
                       timeout=60)
        stopped_at = time.time()
        servers, removal = lab.wait_router(lambda s: not s[victim]["in_rotation"], 30, interval=0.1)
        removed_at = time.time()
        assert removal is not None, servers
        print("%s killed: out of rotation %.2f s after `docker stop` was issued (%.2f s after it returned); "
              "last check %s" % (victim, removed_at - killed_at, removed_at - stopped_at, servers[victim]["check_status"]))
        assert removed_at - killed_at <= REMOVAL_BOUND_SECONDS
        time.sleep(10)                                                  # requests keep flowing without it
        restore = lab.playbook("serve.yml", "--limit", victim)
        assert_ok(restore, "serve.yml --limit " + victim)
        served_at = time.time()
        servers, back = lab.wait_router(lambda s: s[victim]["in_rotation"], 60, interval=0.2)
        assert back is not None, servers
        print("%s back in rotation %.2f s after serve.yml returned" % (victim, time.time() - served_at))
        time.sleep(5)
    finally:
        load.stop()
        records = load.wait(timeout=180)
    summary = loadclient.summarize(records)
    # Requests open on the victim when its process died are cut: no router can finish them, and they are not
    # retried (it may have generated part of them). The process dies somewhere between `docker stop` being issued
    # and returning. Every request sent after that succeeds: the head's edge answers the router 425 while nothing
    # listens behind it, and the router retries those on another group (tests/unit/playbooks/test_router_edge_retry.py).
    cut = [r for r in records if not r["ok"] and r["started"] < stopped_at]
    after = [r for r in records if r["started"] >= stopped_at]
    failed_after = [r for r in after if not r["ok"]]
    print(json.dumps({"summary": {k: v for k, v in summary.items() if k != "failures"}, "cut_at_kill": len(cut),
                      "cut": [{k: r[k] for k in ("index", "stream", "group", "error")} for r in cut],
                      "sent_after_kill": len(after)}, indent=1))
    assert failed_after == [], [{k: r.get(k) for k in ("index", "stream", "group", "error", "started")}
                                for r in failed_after[:5]] + [{"stopped_at": stopped_at, "removed_at": removed_at}]
    assert all(r["group"] in (victim, None) for r in cut), cut
    assert len(after) > 40
    assert any(r["group"] == victim and r["started"] > served_at for r in records), "no request reached it again"


# --------------------------------------------------------------------------- a head that vanishes from the network

VANISH = ("nft add table inet dspark_vanish && "
          "nft 'add chain inet dspark_vanish in { type filter hook input priority -400; policy drop; }' && "
          "nft 'add chain inet dspark_vanish out { type filter hook output priority -400; policy drop; }' && "
          "nft add rule inet dspark_vanish in iif lo accept && nft add rule inet dspark_vanish out oif lo accept")


def test_a_head_that_vanishes_from_the_network_is_taken_out_and_reported(all_back, tmp_path):
    """#29 item 7: every packet to and from pair_b's head dropped (not refused: an nftables table of the lab's,
    policy drop, loopback only), its processes alive. The health check takes pair_b out within the same bound as a
    killed group; requests sent after that all succeed on trio_c; `dspark-fleet status` reports the head unreachable;
    once its packets flow again the group comes back into rotation (or is restarted, when its ranks lost each other)."""
    victim = "pair_b"
    head = lab.heads()[victim]
    # A short client timeout: requests the head held when it vanished never end (the router cannot know).
    load = loadclient.Load(lab.ROUTER_URL, allowed_networks=lab.LOAD_NETWORKS, count=int(RATE * 600), rate=RATE, api_key=lab.api_key(), timeout=15).start()
    try:
        time.sleep(5)
        vanished_at = time.time()
        rc, out = fleetlab.docker("exec", head, "sh", "-c", VANISH)
        assert rc == 0, out
        servers, removal = lab.wait_router(lambda s: not s[victim]["in_rotation"], 30, interval=0.1)
        removed_at = time.time()
        assert removal is not None, servers
        print("%s vanished: out of rotation %.2f s later (last check %s)"
              % (victim, removed_at - vanished_at, servers[victim]["check_status"]))
        assert removed_at - vanished_at <= VANISH_BOUND_SECONDS
        rc, out = fleetlab.fleet("status", "-i", lab.INVENTORY, "--groups", victim, "--plain", "--artifacts",
                                 tmp_path / "status", timeout=600)
        assert rc != 0, out[-3000:]
        status = fleetlab.report(tmp_path / "status" / "report.json")["groups"][victim]
        text = json.dumps(status)
        assert status["result"] != "ok" and head in text and "unreachable" in text.lower(), text[:3000]
        time.sleep(5)                                                   # requests keep flowing without it
    finally:
        fleetlab.docker("exec", head, "nft", "delete", "table", "inet", "dspark_vanish")
        load.stop()
        records = load.wait(timeout=180)
    back_at = time.time()
    servers, back = lab.wait_router(lambda s: s[victim]["in_rotation"], 30, interval=0.2)
    if back is None or not fleetlab.chat(victim)[0]:
        restore = lab.playbook("serve.yml", "--limit", victim)          # its ranks lost each other meanwhile
        assert_ok(restore, "serve.yml --limit " + victim)
        servers, back = lab.wait_router(lambda s: s[victim]["in_rotation"], 60, interval=0.2)
    assert back is not None, servers
    print("%s back in rotation %.1f s after its packets flowed again" % (victim, time.time() - back_at))
    summary = loadclient.summarize(records)
    cut = [r for r in records if not r["ok"] and r["started"] < vanished_at]
    after = [r for r in records if r["started"] >= removed_at]
    print(json.dumps({"summary": {k: v for k, v in summary.items() if k != "failures"}, "cut_at_vanish": len(cut),
                      "sent_after_removal": len(after)}, indent=1))
    assert [r for r in after if not r["ok"]] == []
    assert all(r["group"] in (victim, None) for r in cut), cut
    assert len(after) > 10
