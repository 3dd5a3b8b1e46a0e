"""plugins/plugin_utils/_tp_connections.py: real member connections on the `local` connection plugin, no SSH.

Run on the oldest and the newest ansible-core the collection supports (2.19 and 2.21), since the unit builds
connections and runs modules the way TaskExecutor and ActionBase do.
"""

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible import constants as C
from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.plugins.loader import become_loader, connection_loader
from ansible.template import Templar

from ansible_collections.dspark.cluster.plugins.action.tp_ranks import ActionModule
from ansible_collections.dspark.cluster.plugins.plugin_utils import _ansible_private as core_private
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_api as tp_api
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_connections
from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_connections import MemberConnections

HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tp_connections_run_module.py")


# A become plugin of the tests (tests/unit/plugins/become_plugins/fake_root.py), loaded through become_loader like any
# other: it marks the command with its become user instead of changing user.
BECOME_PLUGINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "become_plugins")


@pytest.fixture(scope="module")
def fake_become():
    become_loader.add_directory(os.path.abspath(BECOME_PLUGINS))
    return "fake_root"


def OwnConnection(become=None):
    """The task's own connection (the delegated-to head): a real `local` connection that records what it was asked
    to run and answers "own"."""
    conn = connection_loader.get("local", PlayContext())
    conn.set_become_plugin(become)
    conn.commands = []

    def exec_command(cmd, in_data=None, sudoable=True):
        conn.commands.append((cmd, in_data, sudoable))
        return 0, b"own\n", b""

    conn.exec_command = exec_command
    return conn


def make_action(own, become=False, become_method="sudo"):
    task = Task()
    task.args = {}
    task.become = become
    task.become_method = become_method
    return ActionModule(task, own, PlayContext(), loader=DataLoader(), templar=Templar(loader=DataLoader()),
                        shared_loader_obj=None)


def hostvars():
    return {
        "m-head": {"inventory_hostname": "m-head", "ansible_connection": "local", "dspark_rank": 0},
        "m-worker": {"inventory_hostname": "m-worker", "ansible_connection": "local", "dspark_rank": 1,
                     "ansible_host": "127.0.0.1"},
        "m-smart": {"inventory_hostname": "m-smart", "ansible_connection": "smart", "ansible_host": "192.0.2.7",
                    "ansible_port": 2222, "ansible_user": "spark"},
    }


def test_run_on_members_through_the_local_connection_plugin():
    own = OwnConnection()
    action = make_action(own)
    action._members = MemberConnections(action, hostvars(), own_host="elsewhere")
    try:
        assert action._run_on("m-head", "echo hi") == (0, "hi\n", "")
        rc, out, err = action._run_on("m-worker", "echo out; echo err >&2; exit 3")
        assert (rc, out, err) == (3, "out\n", "err\n")
        # One connection per member, reused for every command.
        first = action._members.get("m-worker")
        assert action._members.get("m-worker") is first and first.ansible_name == "ansible.builtin.local"
        assert first.become is None
        # stdin reaches the command (the probe's parameters travel this way).
        assert action._run_on("m-head", "cat", in_data='{"port": 1}') == (0, '{"port": 1}', "")
    finally:
        action._members.close()
    assert own.commands == []


def run_modules(calls, hostvars_=None, own_host="elsewhere", delegate_to=None):
    """MemberConnections.run_module in a process with Ansible's collection loader (see the helper's docstring)."""
    spec = {"hostvars": hostvars_ or module_hostvars(), "own_host": own_host, "delegate_to": delegate_to,
            "calls": calls}
    proc = subprocess.run([sys.executable, HELPER], input=json.dumps(spec), capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def module_hostvars(**extra):
    head = {"inventory_hostname": "m-head", "ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    head.update(extra)
    return {"m-head": head}


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        return

    def do_GET(self):
        if self.path == "/v1/models" and self.headers.get("Authorization") != "Bearer k1":
            body = b'{"error": "Unauthorized"}'
            self.send_response(401)
        else:
            body = json.dumps({"data": [{"id": "served"}]} if self.path == "/v1/models" else {}).encode()
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def api_port():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_probe_module_runs_on_a_member_through_its_connection(api_port):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    out = run_modules([["m-head", tp_api.PROBE_MODULE, tp_api.probe_params(api_port, "served", False, 5, "k1")],
                       ["m-head", tp_api.PROBE_MODULE, tp_api.probe_params(closed, "served", False, 5)]],
                      delegate_to="m-head")
    ok, refused = out["results"]
    assert ok["changed"] is False and not ok.get("failed")
    assert ok["health"]["status"] == 200 and ok["models"]["ids"] == ["served"]
    # The API key is a no_log argument: never in the result.
    assert "k1" not in json.dumps(ok)
    probe = tp_api.probe_result(ok)
    assert sorted(probe) == ["health", "models"]
    assert tp_api.judge_probe(probe, "served", "m-head", api_port, 5)["models_ok"] is True
    assert refused["health"]["status"] is None and "refused" in refused["health"]["error"].lower()


def test_probe_module_without_an_interpreter_is_a_broken_probe():
    out = run_modules([["m-head", tp_api.PROBE_MODULE, tp_api.probe_params(1, "served", False, 5)]],
                      hostvars_=module_hostvars(ansible_python_interpreter="/nonexistent/python3"))
    result = out["results"][0]
    assert result["failed"] is True and result["rc"] == 127
    probe = tp_api.probe_result(result)
    assert probe["rc"] == 127 and "/nonexistent/python3" in probe["probe_error"]
    assert tp_api.judge_probe(probe, "served", "m-head", 1, 5)["failure"]["code"] == "probe_failed"


def test_run_module_on_an_unknown_member_is_unreachable():
    out = run_modules([["nowhere", "ansible.legacy.ping", {}]])
    assert out["results"] == [{"unreachable": True, "failed": True, "msg": "nowhere is not in the inventory"}]


def test_module_vars_are_kept_per_member_for_a_delegated_task():
    task = Task()
    task.args = {}
    task.delegate_to = "m-head"
    action = ActionModule(task, OwnConnection(), PlayContext(), loader=DataLoader(),
                          templar=Templar(loader=DataLoader()), shared_loader_obj=None)
    hvars = module_hostvars(ansible_facts={"discovered_interpreter_python": "/usr/bin/python3", "os_family": "Debian"},
                            ansible_user="spark")
    members = MemberConnections(action, hvars, own_host="m-head")
    found = members._vars_for_module("m-head")
    assert found["ansible_facts"] == {"discovered_interpreter_python": "/usr/bin/python3"}
    assert found["ansible_python_interpreter"] == sys.executable and "ansible_user" not in found
    # ActionBase reads a delegated task's interpreter (and stores what it discovers) in the delegated vars.
    assert found["ansible_delegated_vars"]["m-head"] is found
    assert members._vars_for_module("m-head") is found


def test_run_module_never_becomes(monkeypatch, fake_become):
    seen = []

    def execute(runner, module_name, module_args, task_vars):
        parts = core_private.action_parts(runner)
        seen.append((parts.connection, parts.play_context.become, module_name, module_args))
        return {"changed": False, "ping": "pong", "ansible_facts": {"discovered_interpreter_python": "/x"}}

    monkeypatch.setattr(core_private, "execute_module", execute)
    own = OwnConnection()
    action = make_action(own, become=True, become_method=fake_become)
    hvars = dict(module_hostvars(), **{"m-worker": {"inventory_hostname": "m-worker", "ansible_connection": "local",
                                                    "ansible_become_user": "op2"}})
    members = MemberConnections(action, hvars, own_host="m-head")
    try:
        # A no_log task's own connection without become is used as it is; the interpreter fact is not the task host's.
        action._play_context.no_log = True
        assert members.run_module("m-head", "ansible.legacy.ping", {}) == {"changed": False, "ping": "pong"}
        # Another member: its commands become, its modules run on a connection of their own without become.
        assert members.get("m-worker").become.get_option("become_user") == "op2"
        members.run_module("m-worker", "ansible.legacy.ping", {"data": "x"})
    finally:
        members.close()
    # A task's own connection that becomes: the module gets a connection of its own, without become.
    own.set_become_plugin(become_loader.get(fake_become))
    members = MemberConnections(action, hvars, own_host="m-head")
    try:
        members.run_module("m-head", "ansible.legacy.ping", {})
    finally:
        members.close()
    assert seen[0][0] is own and seen[0][1] is False
    assert seen[1][0] is not members.get("m-worker") and seen[1][0].become is None and seen[1][1] is False
    assert seen[1][2:] == ("ansible.legacy.ping", {"data": "x"})
    assert seen[2][0] is not own and seen[2][0].become is None and seen[2][1] is False
    assert own.commands == []


def test_each_member_gets_the_tasks_become_with_its_own_settings(fake_become):
    action = make_action(OwnConnection(), become=True, become_method="sudo")
    hvars = hostvars()
    hvars["m-worker"].update(ansible_become_user="op2", ansible_become_method=fake_become)
    hvars["m-smart"]["ansible_become"] = False
    members = MemberConnections(action, hvars, own_host="elsewhere")
    try:
        head = members.get("m-head").become
        assert head.name == "sudo" and head.get_option("become_user") == "root"
        worker = members.get("m-worker").become
        assert worker.name == fake_become and worker.get_option("become_user") == "op2"
        # A member's ansible_become wins over the task's keyword, as for a delegated host.
        assert members.get("m-smart").become is None
    finally:
        members.close()
    # A task without become leaves every member without, unless the member's ansible_become asks for it.
    action = make_action(OwnConnection())
    hvars = hostvars()
    hvars["m-worker"]["ansible_become"] = "yes"
    members = MemberConnections(action, hvars, own_host="elsewhere")
    try:
        assert members.get("m-head").become is None and members.get("m-worker").become.name == "sudo"
    finally:
        members.close()


def test_commands_run_under_the_members_become(fake_become):
    action = make_action(OwnConnection(), become=True, become_method=fake_become)
    hvars = hostvars()
    hvars["m-head"]["ansible_become_user"] = "op1"      # not root: ActionBase skips become to the connection's user
    hvars["m-worker"]["ansible_become_user"] = "op2"
    action._members = MemberConnections(action, hvars, own_host="elsewhere")
    try:
        # The success marker the become plugin prints is gone from what the caller reads.
        assert action._run_on("m-head", "echo \"$DSPARK_FAKE_BECAME\"") == (0, "op1\n", "")
        assert action._run_on("m-worker", "echo \"$DSPARK_FAKE_BECAME\" | tr a-z A-Z") == (0, "OP2\n", "")
        assert action._run_on("m-worker", "cat", in_data="stdin") == (0, "stdin", "")
    finally:
        action._members.close()


def test_a_failed_become_is_a_command_failure_and_a_lost_connection_unreachable(monkeypatch):
    action = make_action(OwnConnection())
    action._members = MemberConnections(action, hostvars(), own_host="elsewhere")
    raised = []

    def execute(runner, command, in_data):
        raise raised[-1]

    monkeypatch.setattr(core_private, "execute_command", execute)
    # What the ssh plugin raises when sudo asks for a password nobody gave: docker unusable there (rc 1), and the
    # diagnosis asks for passwordless sudo or the become password.
    raised.append(AnsibleError("Missing sudo password"))
    assert action._run_on("m-worker", "docker ps") == (1, "", "Missing sudo password")
    raised.append(AnsibleConnectionFailure("Failed to connect to the host via ssh: No route to host"))
    rc, dummy, err = action._run_on("m-worker", "docker ps")
    assert rc is None and "No route to host" in err
    action._members.close()


def test_connections_built_here_censor_their_vvv_trace():
    """The ssh plugin prints each command's raw output at -vvv unless its play context is no_log: the ranks' logs
    (vLLM logs keys given by --config) must not reach the screen before tp_ranks redacts them."""
    own = OwnConnection()
    action = make_action(own)
    assert action._play_context.no_log is False
    members = MemberConnections(action, hostvars(), own_host="m-head")
    try:
        for host in ("m-head", "m-worker", "m-smart"):
            conn = members.get(host)
            assert conn is not own and conn._play_context.no_log is True, host
    finally:
        members.close()
    assert action._play_context.no_log is False     # the task's own context is left as it was


def test_own_host_uses_a_no_log_task_connection_with_its_become(fake_become):
    become = become_loader.get(fake_become)
    become.set_options(var_options={"ansible_become_user": "op3"})
    own = OwnConnection(become)
    action = make_action(own, become=True, become_method=fake_become)
    action._play_context.no_log = True
    action._members = MemberConnections(action, hostvars(), own_host="m-head")
    assert action._run_on("m-head", "docker ps") == (0, "own\n", "")
    [(cmd, in_data, sudoable)] = own.commands
    # The command TaskExecutor's connection ran: wrapped by the task's become plugin, marked sudoable.
    assert "DSPARK_FAKE_BECAME=op3" in cmd and "docker ps" in cmd and in_data is None and sudoable is True


def test_smart_member_gets_an_ssh_connection_with_its_own_variables():
    action = make_action(OwnConnection())
    members = MemberConnections(action, hostvars(), own_host="m-head")
    conn = members.get("m-smart")
    try:
        assert conn.ansible_name == "ansible.builtin.ssh"
        assert conn.get_option("host") == "192.0.2.7"
        assert conn.get_option("port") == 2222
        assert conn.get_option("remote_user") == "spark"
    finally:
        members.close()


def test_unknown_or_unreachable_member_gives_rc_none():
    action = make_action(OwnConnection())
    action._members = MemberConnections(action, hostvars(), own_host="m-head")
    rc, out, err = action._run_on("nowhere", "true")
    assert rc is None and "nowhere is not in the inventory" in err


def test_local_member_sees_the_environment():
    # Sanity of the local plugin itself: the command runs in a shell on this machine.
    action = make_action(OwnConnection())
    action._members = MemberConnections(action, hostvars(), own_host="x")
    rc, out, dummy = action._run_on("m-worker", "echo $$")
    action._members.close()
    assert rc == 0 and int(out) != os.getpid()


def test_option_vars_are_the_variables_core_lists_for_the_plugin(fake_become):
    """option_vars reads a plugin's option definitions: the same names as TaskExecutor's C.config.get_plugin_vars."""
    ssh = connection_loader.get("ssh", PlayContext())
    for kind, plugin, load_name in (("connection", ssh, "ssh"), ("become", become_loader.get(fake_become), fake_become),
                                    ("shell", core_private.connection_shell(ssh), "sh")):
        found = _tp_connections.option_vars(plugin)
        assert found == set(C.config.get_plugin_vars(kind, load_name)), kind
    assert {"ansible_host", "ansible_port", "ansible_user", "ansible_ssh_common_args"} <= _tp_connections.option_vars(ssh)


def test_plugin_var_options_takes_the_plugins_own_variables_and_its_extras():
    class Extras:
        allow_extras = True
        extras_prefix = "ssh"

    member = {"ansible_host": "192.0.2.7", "ansible_port": 2222, "dspark_rank": 1, "ansible_ssh_custom": "x",
              "ansible_ssh_port": 22}
    options = _tp_connections.plugin_var_options(Extras(), {"ansible_host", "ansible_port", "ansible_ssh_port"},
                                                 member)
    assert options == {"_extras": {"ansible_ssh_custom": "x"}, "ansible_host": "192.0.2.7", "ansible_port": 2222,
                       "ansible_ssh_port": 22}
    # A plugin without extras gets none, and nothing of the member's other variables.
    assert _tp_connections.plugin_var_options(object(), {"ansible_host"}, member) == {
        "_extras": {}, "ansible_host": "192.0.2.7"}
