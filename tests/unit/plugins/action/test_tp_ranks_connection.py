"""Real member connections of the tp_ranks action: members on the `local` connection plugin, no SSH."""

import os

from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.template import Templar

from ansible_collections.dspark.cluster.plugins.action.tp_ranks import ActionModule, MemberConnections
from ansible_collections.dspark.cluster.plugins.module_utils import tp_probe


class OwnConnection:
    """The task's own connection (the delegated-to head): records what it was asked to run."""

    def __init__(self):
        self.commands = []

    def exec_command(self, cmd, in_data=None, sudoable=True):
        self.commands.append((cmd, in_data, sudoable))
        return 0, b"own\n", b""


def make_action(own):
    task = Task()
    task.args = {}
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


def test_probe_script_runs_through_a_member_connection():
    action = make_action(OwnConnection())
    action._members = MemberConnections(action, hostvars(), own_host="elsewhere")
    try:
        rc, out, err = action._run_on("m-head", tp_probe.probe_command("python3"),
                                      in_data=tp_probe.probe_input(1, "x", True, 1))
    finally:
        action._members.close()
    probe = tp_probe.parse_probe(rc, out, err)
    assert probe["health"]["status"] is None and probe["models"]["ids"] is None


def test_own_host_uses_the_task_connection_without_sudoable():
    own = OwnConnection()
    action = make_action(own)
    action._members = MemberConnections(action, hostvars(), own_host="m-head")
    assert action._run_on("m-head", "docker ps") == (0, "own\n", "")
    assert own.commands == [("docker ps", None, False)]


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
