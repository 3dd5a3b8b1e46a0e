# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: waits until a tensor-parallel serving group is up, or says which rank on which node broke it.

Every round it runs `docker inspect` and `docker logs` of each member's serving container through that member's
own Ansible connection, and a small HTTP client on the head (through the head's connection) against the API on the
head's loopback. All parsing and every decision is in module_utils/tp_probe.py and module_utils/vllm_log.py.
"""

from __future__ import annotations

import os
import time

from ansible import constants as C
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import connection_loader
from ansible.utils.display import Display

from ansible_collections.dspark.cluster.plugins.module_utils import tp_probe, vllm_log

display = Display()

ARGUMENT_SPEC = {
    "group": {"type": "str"},
    "container": {"type": "str", "default": tp_probe.DEFAULT_CONTAINER},
    "containers": {"type": "dict"},
    "served_model_name": {"type": "str", "required": True},
    "api_port": {"type": "int"},
    "api_key": {"type": "str", "no_log": True},
    "timeout": {"type": "int", "default": 1800},
    "poll_interval": {"type": "float", "default": 1.0},
    "generation_timeout": {"type": "int", "default": 60},
    "log_lines": {"type": "int", "default": 400},
    "become": {"type": "bool", "default": False},
}

# Inventory variables of each member the plan reads (templated by HostVars on access).
PLAN_VARS = ("dspark_group", "dspark_rank", "dspark_tensor_parallel_size", "dspark_gpus_per_node", "dspark_api_port")
# Always copied for a member connection, next to the connection and shell plugins' own variables.
BASE_CONNECTION_VARS = ("inventory_hostname", "ansible_host", "ansible_connection", "ansible_python_interpreter")


class MemberConnections:
    """One Ansible connection per member, built like TaskExecutor builds the connection of a delegated host.

    The host the task runs on (or is delegated to) uses the task's own connection; every other member gets its
    connection plugin (``ansible_connection``, ``smart`` = ssh) configured from its own inventory variables. The
    connections are kept for the whole poll (ssh ControlPersist makes each command cheap) and closed at the end.
    """

    def __init__(self, action, hostvars, own_host):
        self._action = action
        self._hostvars = hostvars
        self._own_host = own_host
        self._built = {}

    def _member_vars(self, host, names):
        """Plain dict of the member's variables that the plugins read (HostVars templates each on access)."""
        raw = self._hostvars[host]
        found = {}
        for name in names:
            if name in raw:
                found[name] = raw[name]
        found.setdefault("inventory_hostname", host)
        return found

    def _build(self, host):
        action = self._action
        if host not in self._hostvars:
            raise AnsibleError("%s is not in the inventory" % host)
        first = self._member_vars(host, BASE_CONNECTION_VARS)
        name = first.get("ansible_connection") or action._task.connection or C.DEFAULT_TRANSPORT
        if name == "smart":
            name = "ssh"
        play_context = action._play_context.copy()
        play_context.connection = name
        play_context.remote_addr = first.get("ansible_host") or host
        play_context.become = False
        conn = connection_loader.get(name, play_context, new_stdin=None, task_uuid=action._task._uuid,
                                     ansible_playbook_pid=to_text(os.getppid()))
        if not conn:
            raise AnsibleError("the connection plugin '%s' (for %s) was not found" % (name, host))
        try:
            conn.set_become_plugin(None)    # become is our own `sudo -n` prefix, never the connection's
        except AttributeError:
            pass
        conn_vars = set(C.config.get_plugin_vars("connection", conn._load_name))
        shell_vars = set(C.config.get_plugin_vars("shell", conn._shell._load_name))
        names = set(BASE_CONNECTION_VARS) | conn_vars | shell_vars
        if getattr(conn, "allow_extras", False):
            prefix = "ansible_%s_" % conn.extras_prefix
            names.update(n for n in self._hostvars[host] if n.startswith(prefix))
        member_vars = self._member_vars(host, sorted(names))
        task_keys = action._task.dump_attrs()
        task_keys = dict(task_keys) if isinstance(task_keys, dict) else {}
        # As TaskExecutor: 'timeout' is the connection timeout, the password comes via the play context.
        task_keys["timeout"] = action._play_context.timeout
        if action._play_context.password:
            task_keys["password"] = action._play_context.password
        task_keys.pop("retries", None)
        conn.set_options(task_keys=task_keys, var_options=conn._resolve_option_variables(member_vars, action._templar))
        conn._shell.set_options(task_keys=task_keys,
                                var_options=dict((k, v) for k, v in member_vars.items() if k in shell_vars))
        return conn

    def get(self, host):
        if host == self._own_host and self._action._connection is not None:
            return self._action._connection
        if host not in self._built:
            self._built[host] = self._build(host)
        return self._built[host]

    def run(self, host, command, in_data=None):
        """(rc, stdout, stderr); rc None when the host could not be reached or the command not started."""
        data = to_bytes(in_data, errors="surrogate_or_strict") if in_data is not None else None
        try:
            conn = self.get(host)
            rc, out, err = conn.exec_command(command, in_data=data, sudoable=False)
        except AnsibleError as exc:
            return None, "", to_text(exc)
        return rc, to_text(out, errors="surrogate_or_replace"), to_text(err, errors="surrogate_or_replace")

    def close(self):
        for host, conn in self._built.items():
            try:
                conn.close()
            except Exception as exc:  # pylint: disable=broad-except
                display.vvv("tp_ranks: closing the connection to %s failed: %s" % (host, exc))
        self._built = {}


def empty_result():
    return {
        "changed": False, "expected_ranks": [], "registered_ranks": [], "missing_ranks": [], "world_size": None,
        "expected_world_size": None, "api_ready": False, "generation_ok": False, "elapsed": 0.0, "ready_at": None,
        "diagnosis": [], "logs": {}, "members": [], "containers": {}, "log_warnings": [],
    }


class ActionModule(ActionBase):
    """Polls one serving group from the controller; members are reached through their own connections."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    _members = None

    def _run_on(self, host, command, in_data=None):
        """Run a shell command on a member: (rc, stdout, stderr), rc None if it could not run (unreachable)."""
        return self._members.run(host, command, in_data=in_data)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result.update(empty_result())
        try:
            dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
            plan = self._plan(args, task_vars)
        except AnsibleActionFail as exc:
            result.update(failed=True, msg=exc.message)
            return result

        result.update(expected_ranks=plan["expected_ranks"], expected_world_size=plan["world_size"],
                      members=[dict(m) for m in plan["members"]], group=plan["group"], head=plan["head"],
                      api_port=args["api_port"])
        if self._task.check_mode:
            result.update(skipped=True, msg="Check mode: not polling. Would wait for ranks %s of %s (%s)." % (
                ", ".join(str(r) for r in plan["expected_ranks"]), plan["group"],
                ", ".join("%s: ranks %s" % (m["node"], m["ranks"]) for m in plan["members"])))
            return result

        own_host = self._task.delegate_to or task_vars.get("inventory_hostname")
        self._members = MemberConnections(self, task_vars.get("hostvars") or {}, own_host)
        try:
            result.update(self._poll(plan, args, task_vars))
        finally:
            self._members.close()
        return result

    # ------------------------------------------------------------------ argument checks

    def _plan(self, args, task_vars):
        hostvars = task_vars.get("hostvars") or {}
        groups = task_vars.get("groups") or {}
        group = args["group"] or task_vars.get("dspark_group")
        members = {}
        for host in (groups.get(group) or []) if isinstance(group, str) else []:
            raw = hostvars[host] if host in hostvars else {}
            members[host] = dict((name, raw[name]) for name in PLAN_VARS if name in raw)
        try:
            plan = tp_probe.plan_group(group, groups, members, container=args["container"],
                                       containers=args["containers"])
        except tp_probe.PlanError as exc:
            raise AnsibleActionFail("tp_ranks cannot check this group: %s" % exc) from None
        problems = []
        if args["api_port"] is None:
            args["api_port"] = plan["api_port"]
        if args["api_port"] is None or not 0 < args["api_port"] < 65536:
            problems.append("api_port=%r: pass api_port or set dspark_api_port on the head %s"
                            % (args["api_port"], plan["head"]))
        for name, low in (("timeout", 0), ("generation_timeout", 1), ("log_lines", 1)):
            if args[name] < low:
                problems.append("%s=%s must be at least %d" % (name, args[name], low))
        if not args["poll_interval"] > 0:
            problems.append("poll_interval=%s must be positive" % args["poll_interval"])
        if not args["served_model_name"].strip():
            problems.append("served_model_name must not be empty")
        if problems:
            raise AnsibleActionFail("tp_ranks: " + "; ".join(problems))
        return plan

    # ------------------------------------------------------------------ polling

    def _probe_python(self, task_vars, head):
        hostvars = task_vars.get("hostvars") or {}
        raw = hostvars[head] if head in hostvars else {}
        python = raw["ansible_python_interpreter"] if "ansible_python_interpreter" in raw else None
        if isinstance(python, str) and python and not python.startswith("auto"):
            return python
        return "python3"

    def _collect(self, plan, args, state):
        """One look at every member's container: observations, unreachable nodes; updates the log buffers."""
        observations = {}
        unreachable = {}
        become = args["become"]
        for member in plan["members"]:
            node = member["node"]
            name = member["container"]
            rc, out, err = self._run_on(node, tp_probe.inspect_command(name, become))
            if rc is None:
                unreachable[node] = err
                state["streaks"][node] = state["streaks"].get(node, 0) + 1
                continue
            state["streaks"][node] = 0
            obs = tp_probe.parse_inspect(rc, out, err)
            observations[node] = obs
            if not obs["exists"]:
                continue
            buf = state["buffers"].setdefault(node, tp_probe.LogBuffer())
            first_look = state["seen_ids"].get(node) != obs["id"]
            if first_look:
                # A new container (or the first look): start over.
                buf.reset()
                state["seen_ids"][node] = obs["id"]
                state["baselines"][node] = {"id": obs["id"], "started_at": obs["started_at"]}
            # Only what is new since the last line seen (the whole tail on a first look).
            rc, out, err = self._run_on(node, tp_probe.logs_command(name, args["log_lines"], buf.last_ts, become))
            if rc == 0:
                buf.add(out)
            elif rc is not None:
                display.vvv("tp_ranks: docker logs %s on %s failed: %s" % (name, node, (err or out)[-300:]))
            if first_look:
                # Registration lines older than the tail (a group that has been serving for a while).
                rc, out, err = self._run_on(node, tp_probe.key_lines_command(name, become))
                if rc == 0:
                    buf.add(out)
        return observations, unreachable

    def _probe(self, plan, args, state, head_obs):
        """Probe the API from the head; None when the head container is not running."""
        if not head_obs or not head_obs.get("running"):
            return None
        generate = state["generation"] is None
        rc, out, err = self._run_on(plan["head"], tp_probe.probe_command(state["python"]),
                                    in_data=tp_probe.probe_input(args["api_port"], args["served_model_name"], generate,
                                                                 args["generation_timeout"], args["api_key"]))
        if rc is None:
            return {"probe_error": err, "rc": None}
        return tp_probe.parse_probe(rc, out, err)

    def _look(self, plan, args, state):
        """Collect every member and judge the logs: (observations, assessment, diagnoses outside the logs)."""
        observations, unreachable = self._collect(plan, args, state)
        assessment = vllm_log.assess_group(plan["world_size"],
                                           tp_probe.logs_by_rank(plan, observations, state["buffers"]))
        extra = (tp_probe.access_diagnoses(plan, observations, unreachable, state["streaks"])
                 + tp_probe.restart_diagnoses(plan, observations, state["baselines"], assessment))
        return observations, assessment, extra

    def _judge_api(self, plan, args, state, head_obs):
        probe = self._probe(plan, args, state, head_obs)
        judgement = tp_probe.judge_probe(probe, args["served_model_name"], plan["head"], args["api_port"],
                                         args["generation_timeout"])
        state["probe_failures"] = state["probe_failures"] + 1 if judgement["probe_broken"] else 0
        if judgement["generation"] is not None:
            state["generation"] = dict(judgement, ready_at=time.time())
        judgement = tp_probe.merge_generation(judgement, state["generation"])
        if state["probe_failures"] >= tp_probe.UNREACHABLE_ROUNDS and not judgement["failure"]:
            judgement["failure"] = tp_probe.probe_broken_diagnosis(plan, judgement)
        return judgement

    def _poll(self, plan, args, task_vars):
        start = time.monotonic()
        state = {"buffers": {}, "seen_ids": {}, "baselines": {}, "streaks": {}, "generation": None,
                 "python": self._probe_python(task_vars, plan["head"]), "probe_failures": 0}
        settle = 0
        last_note = None
        no_probe = tp_probe.judge_probe(None, args["served_model_name"], plan["head"], args["api_port"],
                                        args["generation_timeout"])
        while True:
            observations, assessment, extra = self._look(plan, args, state)
            judgement = no_probe
            verdict, diagnoses = tp_probe.evaluate_round(plan, assessment, judgement, extra, settle)
            if verdict != "failed":
                judgement = self._judge_api(plan, args, state, observations.get(plan["head"]))
                if judgement["failure"] and judgement["generation"] == "failed":
                    # The generation request may have waited a minute: judge the logs written meanwhile.
                    observations, assessment, extra = self._look(plan, args, state)
                verdict, diagnoses = tp_probe.evaluate_round(plan, assessment, judgement, extra, settle)
            settle = settle + 1 if diagnoses and verdict == "waiting" else 0
            elapsed = time.monotonic() - start

            note = assessment["msg"] + "; " + judgement["state"]
            if note != last_note:
                display.vv("tp_ranks %s after %.0f s: %s" % (plan["group"], elapsed, note))
                last_note = note

            if verdict == "waiting" and elapsed >= args["timeout"]:
                verdict = "failed"
                sizes = dict((tp_probe.log_key(m), len(state["buffers"][m["node"]]) if m["node"] in state["buffers"]
                              else 0) for m in plan["members"])
                diagnoses = tp_probe.timeout_diagnoses(plan, assessment, judgement, args["timeout"], sizes)
            if verdict != "waiting":
                return self._outcome(plan, args, state, observations, assessment, judgement, verdict, diagnoses,
                                     elapsed)
            time.sleep(max(0.01, min(args["poll_interval"], args["timeout"] - elapsed)))

    def _outcome(self, plan, args, state, observations, assessment, judgement, verdict, diagnoses, elapsed):
        gen = state["generation"] or {}
        out = {
            "registered_ranks": tp_probe.registered_view(plan, assessment),
            "missing_ranks": tp_probe.missing_view(plan, assessment),
            "world_size": assessment.get("world_size"),
            "init_method": assessment.get("init_method"),
            "api_ready": bool(judgement.get("models_ok")),
            "generation_ok": gen.get("generation") == "ok",
            "elapsed": round(elapsed, 3),
            "ready_at": gen.get("ready_at") if verdict == "ready" else None,
            "diagnosis": tp_probe.public_diagnoses(diagnoses),
            "containers": dict((node, dict((k, obs.get(k)) for k in (
                "name", "state", "image", "exit_code", "restart_count", "started_at", "problem", "message")))
                for node, obs in observations.items()),
            "log_warnings": tp_probe.warning_view(assessment),
            "api_state": judgement.get("state"),
        }
        if verdict == "ready":
            out["msg"] = tp_probe.success_message(plan, assessment, judgement, args["served_model_name"], elapsed)
            out["logs"] = {}
        else:
            out["failed"] = True
            out["msg"] = tp_probe.failure_message(plan, diagnoses, elapsed)
            out["logs"] = tp_probe.log_excerpts(plan, state["buffers"])
        return out
