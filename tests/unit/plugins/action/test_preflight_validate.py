"""The action shell: reads hostvars of the play and of whole serving groups, never connects."""

import json
import os
from unittest.mock import MagicMock

import pytest

from ansible import context
from ansible.module_utils.common.collections import ImmutableDict
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.task import Task
from ansible.template import Templar
from ansible.utils import vars as ansible_vars

from ansible_collections.dspark.cluster.plugins.action.preflight_validate import ActionModule

BASE = {
    "dspark_group": "pair_a", "dspark_fabric_cidr": "10.77.77.0/30", "dspark_fabric_interface": "enp1s0f1np1", "dspark_fabric_hca": "rocep1s0f1",
    "dspark_fabric_mtu": 9000, "dspark_gpus_per_node": 1, "dspark_tensor_parallel_size": 2,
    "dspark_api_port": 8888, "dspark_master_port": 25000,
    "dspark_image": "ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:" + "b" * 64,
    "dspark_model": "deepseek-ai/DeepSeek-V4-Flash-0731",
    "dspark_model_revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb", "dspark_checkpoint_mode": "scp",
    "dspark_hf_cache": "/var/lib/dspark/hf",
    "serve_api_key": "unit-test-key-4711",  # closed by default: an API on 0.0.0.0 needs a key
}


def make_action(args=None):
    task = MagicMock(Task)
    task.args = args or {}
    task.async_val = 0
    task.check_mode = False
    connection = MagicMock()
    connection._shell = MagicMock()
    return ActionModule(task, connection, MagicMock(), loader=DataLoader(), templar=Templar(loader=None), shared_loader_obj=None), connection


def task_vars(worker_address="10.77.77.2", play=("a-head", "a-worker")):
    hostvars = {
        "a-head": dict(BASE, dspark_rank=0, dspark_fabric_address="10.77.77.1", group_names=["dspark", "pair_a"]),
        "a-worker": dict(BASE, dspark_rank=1, dspark_fabric_address=worker_address, group_names=["dspark", "pair_a"]),
    }
    return {"hostvars": hostvars, "groups": {"all": list(hostvars), "pair_a": list(hostvars)},
            "ansible_play_hosts_all": list(play)}


def test_valid_inventory_passes_without_touching_the_connection():
    action, connection = make_action()
    result = action.run(task_vars=task_vars())
    assert not result.get("failed"), result
    assert result["changed"] is False
    assert result["groups"]["pair_a"]["members"] == ["a-head", "a-worker"]
    assert not connection.exec_command.called


def test_open_api_without_a_key_is_one_line_for_the_group():
    action, dummy = make_action()
    tv = task_vars()
    for values in tv["hostvars"].values():
        values["serve_api_key"] = ""
    result = action.run(task_vars=tv)
    assert result.get("failed"), result
    lines = [line for line in result["errors"] if "serve_host" in line]
    assert len(lines) == 1 and lines[0].startswith("group pair_a: serve_host='0.0.0.0' makes the API of group pair_a"), lines
    for values in tv["hostvars"].values():
        values["serve_allow_unauthenticated"] = True
    assert not action.run(task_vars=tv).get("failed")


def test_errors_fail_with_every_problem_listed():
    action, dummy = make_action({"mtu_max": 1500})
    result = action.run(task_vars=task_vars(worker_address="10.77.78.2"))
    assert result["failed"] is True
    assert "nothing was changed" in result["msg"]
    assert any(e.startswith("a-worker: dspark_fabric_address='10.77.78.2'") for e in result["errors"])
    assert any(e.startswith("group pair_a: dspark_fabric_mtu=9000") for e in result["errors"])


def test_fabric_only_problems_are_read_and_reported():
    """The fabric role's own rules run here too: its second-link variables are read from every member."""
    action, dummy = make_action()
    variables = task_vars()
    for host in variables["hostvars"].values():
        host.update(fabric_secondary_interface="enP2p1s0f1np1", fabric_secondary_cidr="10.77.78.1/30")
    del variables["hostvars"]["a-head"]["dspark_fabric_hca"]
    result = action.run(task_vars=variables)
    assert result["failed"] is True
    assert [e.split(" (")[0].split("=")[0] for e in result["errors"]] == [
        "a-head: dspark_fabric_hca is not set", "group pair_a: fabric_secondary_cidr"], result["errors"]


def test_members_outside_the_limit_are_read_and_reported():
    action, dummy = make_action()
    result = action.run(task_vars=task_vars(play=("a-head",)))
    assert result["failed"] is True
    assert any("leaves out a-worker" in e for e in result["errors"])


class FakeHostVars(dict):
    """Like Ansible's HostVars: host -> HostVarsVars (templates each variable on access, in that host's context), and
    raw_get (the host's variables as written)."""

    def __init__(self, hostvars):
        from ansible.vars.hostvars import HostVarsVars
        from ansible.template import trust_as_template
        self._raw = {h: {k: trust_as_template(x) if isinstance(x, str) else x for k, x in v.items()} for h, v in hostvars.items()}
        super().__init__({h: HostVarsVars(v, loader=None, host=h) for h, v in self._raw.items()})

    def raw_get(self, host):
        return self._raw[host]


@pytest.fixture(autouse=True)
def cli_args(monkeypatch):
    """The -e arguments of ansible-playbook's command line (ansible.context.CLIARGS), none unless a test sets them;
    load_extra_vars's parse of the run is not cached across tests."""
    def given(*extra_vars):
        monkeypatch.setattr(context, "CLIARGS", ImmutableDict(extra_vars=tuple(extra_vars)))
        monkeypatch.setattr(ansible_vars.load_extra_vars, "extra_vars", None, raising=False)
    given()
    return given


def real_task_vars(head=None, worker=None, extra_vars=None):
    """hostvars as Ansible gives them; extra_vars are in every host's variables, as -e puts them (the test gives the
    same ones to CLIARGS)."""
    tv = task_vars()
    tv["hostvars"]["a-head"].update(head or {})
    tv["hostvars"]["a-worker"].update(worker or {})
    for values in tv["hostvars"].values():
        values.update(extra_vars or {})
    tv["groups"]["dspark"] = list(tv["hostvars"])
    tv["hostvars"] = FakeHostVars(tv["hostvars"])
    return tv


def test_templated_values_are_read_in_their_host_context():
    action, dummy = make_action()
    result = action.run(task_vars=real_task_vars(worker={"_addr": "10.77.77.2", "dspark_fabric_address": "{{ _addr }}"}))
    assert not result.get("failed"), result


@pytest.mark.parametrize("head, worker, extra, expected", [
    # a templating error in one variable is reported as such, and every other problem still is
    ({"dspark_fabric_address": "{{ nothing_here }}"}, {"serve_extra_args": "--max-num-seqs"}, None, [
        "a-head: dspark_fabric_address='{{ nothing_here }}' cannot be templated",
        "a-worker: serve_extra_args='--max-num-seqs' is a string, not a list. Fix: write a YAML list",
    ]),
    ({"serve_max_num_seq": 3}, {"serve_max_num_seq": 3}, None, [
        "group pair_a: serve_max_num_seq=3 is not a variable of this collection (did you mean serve_max_num_seqs?). Fix: rename",
    ]),
    (None, None, {"serve_extra_args": "--max-num-seqs", "checkpoint_source_rank": 5}, [
        "extra vars (-e): checkpoint_source_rank=5 is not a rank of group pair_a (ranks 0..1)",
        "extra vars (-e): serve_extra_args='--max-num-seqs' is a string, not a list",
    ]),
    (None, {"ansible_host": "10.77.77.2"}, None, [
        "a-worker: dspark_fabric_address='10.77.77.2' equals the management address (ansible_host=10.77.77.2)",
    ]),
    ({"fabric_checks": "maybe", "serve_config_dir": "etc/serve"}, None, None, [
        "a-head: fabric_checks='maybe' is not a boolean",
        "a-head: serve_config_dir='etc/serve' is not an absolute path",
    ]),
])
def test_every_role_variable_problem_is_one_line(head, worker, extra, expected, cli_args):
    if extra:
        cli_args(json.dumps(extra))
    action, dummy = make_action()
    result = action.run(task_vars=real_task_vars(head, worker, extra))
    assert result["failed"] is True
    assert len(result["errors"]) == len(expected), result["errors"]
    for want, line in zip(expected, sorted(result["errors"])):
        assert line.startswith(want), (want, result["errors"])
        assert ". Fix: " in line


@pytest.mark.parametrize("form", ["inline JSON", "key=value", "0600 @file"])
def test_extra_vars_in_every_form_of_the_command_line_are_named_as_such(form, cli_args, tmp_path):
    """-e as JSON, as key=value and as a 0600 @file (dspark-fleet passes inline values that way): a problem with a value
    given there is reported once, for "extra vars (-e)", whatever the form; a host's own value still for the host."""
    extra = {"checkpoint_source_rank": 5}
    if form == "0600 @file":
        path = tmp_path / "extravars"
        descriptor = os.open(str(path), os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(json.dumps(extra))
        cli_args("@" + str(path))
    else:
        cli_args(json.dumps(extra) if form == "inline JSON" else "checkpoint_source_rank=5")
    action, dummy = make_action()
    result = action.run(task_vars=real_task_vars(worker={"fabric_checks": "maybe"}, extra_vars=extra))
    errors = sorted(result["errors"])
    assert len(errors) == 2, errors
    assert errors[0].startswith("a-worker: fabric_checks='maybe' is not a boolean"), errors
    assert errors[1].startswith("extra vars (-e): checkpoint_source_rank=5 is not a rank of group pair_a"), errors


def test_a_variable_that_failed_to_template_is_shown_as_written():
    from ansible_collections.dspark.cluster.plugins.action.preflight_validate import raw_value
    assert raw_value({"h": {"x": "{{ y }}"}}, "h", "x") == "{{ y }}"
    assert raw_value({}, "h", "x") is None
    assert raw_value(FakeHostVars({"h": {"x": "{{ y }}"}}), "h", "x") == "{{ y }}"


def test_a_wrong_preflight_variable_is_named_as_such_and_its_default_stands_in():
    # The role passes mtu_min="{{ preflight_mtu_min }}": the variable's name, not the argument's, is the message.
    action, dummy = make_action({"mtu_min": "abc"})
    tv = task_vars()
    for values in tv["hostvars"].values():
        values["preflight_mtu_min"] = "abc"
    result = action.run(task_vars=tv)
    assert result["failed"] is True
    assert len(result["errors"]) == 1 and "preflight_mtu_min='abc' is not an integer" in result["errors"][0], result["errors"]


def test_a_wrong_argument_given_literally_still_fails_on_the_argument():
    action, dummy = make_action({"mtu_min": "abc"})
    with pytest.raises(Exception, match="mtu_min"):
        action.run(task_vars=task_vars())
