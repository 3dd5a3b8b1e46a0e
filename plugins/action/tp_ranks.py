# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: waits until a tensor-parallel serving group is up, or says which rank on which node broke it.

Every round it runs `docker inspect` and `docker logs` of each member's serving container through that member's
own Ansible connection (with the task's become, resolved per member as for a delegated host), and the module
dspark.cluster.tp_api_probe on the head (through a connection to the head without become) against the API on the
head's loopback. The parts live in plugin_utils: _tp_plan (members, ranks, expected world), _tp_connections (the
member connections), _tp_docker (commands and their parsing), _tp_logbuffer (logs merged across rounds),
_tp_loglines / _tp_signatures / _tp_assess (what the logs say), _tp_api (the probe's arguments and verdict) and
_tp_diagnosis (diagnoses, verdicts, result pieces). This file uses only ActionBase's interface for action plugins;
the ansible-core internals the member connections need (the action's play context, the task's id and keywords, a
connection's shell plugin, ActionBase's command and module execution) are read in _ansible_private alone.
"""

from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_api as tp_api
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_diagnosis as tp_diagnosis
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_docker as tp_docker
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_logbuffer as tp_logbuffer
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_plan as tp_plan
from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_connections import MemberConnections
from ansible_collections.dspark.cluster.plugins.plugin_utils.redact import redact

display = Display()

ARGUMENT_SPEC = {
    "group": {"type": "str"},
    "container": {"type": "str", "default": tp_plan.DEFAULT_CONTAINER},
    "containers": {"type": "dict"},
    "sidecars": {"type": "dict", "default": {}},
    "served_model_name": {"type": "str", "required": True},
    "api_port": {"type": "int"},
    "api_key": {"type": "str", "no_log": True},
    "redact": {"type": "list", "elements": "str", "no_log": True, "default": []},
    "timeout": {"type": "int", "default": 1800},
    "poll_interval": {"type": "float", "default": 1.0},
    "generation_timeout": {"type": "int", "default": 60},
    "log_lines": {"type": "int", "default": 400},
}

# Inventory variables of each member the plan reads (templated by HostVars on access).
PLAN_VARS = ("dspark_group", "dspark_rank", "dspark_tensor_parallel_size", "dspark_gpus_per_node", "dspark_api_port")


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
            result.update(self._poll(plan, args))
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
            plan = tp_plan.plan_group(group, groups, members, container=args["container"],
                                      containers=args["containers"])
        except tp_plan.PlanError as exc:
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

    def _collect(self, plan, args, state):
        """One look at every member's container: observations, unreachable nodes; updates the log buffers."""
        observations = {}
        unreachable = {}
        state["sidecars"] = {}
        for member in plan["members"]:
            node = member["node"]
            name = member["container"]
            rc, out, err = self._run_on(node, tp_docker.inspect_command(name))
            if rc is None:
                unreachable[node] = err
                state["streaks"][node] = state["streaks"].get(node, 0) + 1
                continue
            state["streaks"][node] = 0
            obs = tp_docker.parse_inspect(rc, out, err)
            observations[node] = obs
            sidecar = (args["sidecars"] or {}).get(node)
            if sidecar:
                rc, out, err = self._run_on(node, tp_docker.inspect_command(sidecar))
                if rc is not None:
                    state["sidecars"][node] = dict(tp_docker.parse_inspect(rc, out, err), name=sidecar)
            if not obs["exists"]:
                continue
            buf = state["buffers"].setdefault(node, tp_logbuffer.LogBuffer(secrets=self._secrets(args)))
            first_look = state["seen_ids"].get(node) != obs["id"]
            if first_look:
                # A new container (or the first look): start over.
                buf.reset()
                state["seen_ids"][node] = obs["id"]
                state["baselines"][node] = {"id": obs["id"], "started_at": obs["started_at"]}
            # Only what is new since the last line seen (the whole tail on a first look).
            rc, out, err = self._run_on(node, tp_docker.logs_command(name, args["log_lines"], buf.last_ts))
            if rc == 0:
                buf.add(out)
            elif rc is not None:
                display.vvv("tp_ranks: docker logs %s on %s failed: %s" % (name, node,
                                                                           redact((err or out)[-300:], self._secrets(args))))
            if first_look:
                # Registration lines older than the tail (a group that has been serving for a while).
                rc, out, err = self._run_on(node, tp_docker.key_lines_command(name))
                if rc == 0:
                    buf.add(out)
        return observations, unreachable

    @staticmethod
    def _secrets(args):
        """What the logs must never show: the probe's key and the redact list (the group's API keys)."""
        return [s for s in [args.get("api_key")] + list(args.get("redact") or []) if s]

    def _run_probe(self, host, params):
        """Run the tp_api_probe module on a member (the head): its result, {unreachable, msg} if it could not run."""
        return self._members.run_module(host, tp_api.PROBE_MODULE, params)

    def _probe(self, plan, args, state, head_obs):
        """Probe the API from the head; None when the head container is not running."""
        if not head_obs or not head_obs.get("running"):
            return None
        generate = state["generation"] is None
        result = self._run_probe(plan["head"], tp_api.probe_params(args["api_port"], args["served_model_name"], generate,
                                                                   args["generation_timeout"], args["api_key"]))
        return tp_api.probe_result(result)

    def _look(self, plan, args, state):
        """Collect every member and judge the logs: (observations, assessment, diagnoses outside the logs)."""
        observations, unreachable = self._collect(plan, args, state)
        assessment = tp_assess.assess_group(plan["world_size"],
                                            tp_logbuffer.logs_by_rank(plan, observations, state["buffers"]))
        extra = (tp_diagnosis.access_diagnoses(plan, observations, unreachable, state["streaks"])
                 + tp_diagnosis.sidecar_diagnoses(plan, state["sidecars"])
                 + tp_diagnosis.restart_diagnoses(plan, observations, state["baselines"], assessment))
        return observations, assessment, extra

    def _judge_api(self, plan, args, state, head_obs, assessment):
        if not tp_diagnosis.probe_due(plan, assessment, state["rounds_since_probe"]):
            # Not probed this round: the last probe's judgement stands (its failure, if any, was judged then).
            state["rounds_since_probe"] += 1
            return state["judgement"]
        state["rounds_since_probe"] = 0
        probe = self._probe(plan, args, state, head_obs)
        judgement = tp_api.judge_probe(probe, args["served_model_name"], plan["head"], args["api_port"],
                                       args["generation_timeout"])
        state["probe_failures"] = state["probe_failures"] + 1 if judgement["probe_broken"] else 0
        if judgement["generation"] is not None:
            state["generation"] = dict(judgement, ready_at=time.time())
        judgement = tp_api.merge_generation(judgement, state["generation"])
        if state["probe_failures"] >= tp_diagnosis.UNREACHABLE_ROUNDS and not judgement["failure"]:
            judgement["failure"] = tp_api.probe_broken_diagnosis(plan, judgement)
        state["judgement"] = judgement
        return judgement

    def _poll(self, plan, args):
        start = time.monotonic()
        state = {"buffers": {}, "seen_ids": {}, "baselines": {}, "streaks": {}, "generation": None,
                 "probe_failures": 0, "rounds_since_probe": None, "judgement": None}
        settle = 0
        last_note = None
        no_probe = tp_api.judge_probe(None, args["served_model_name"], plan["head"], args["api_port"],
                                      args["generation_timeout"])
        while True:
            observations, assessment, extra = self._look(plan, args, state)
            judgement = no_probe
            verdict, diagnoses = tp_diagnosis.evaluate_round(plan, assessment, judgement, extra, settle)
            if verdict != "failed":
                judgement = self._judge_api(plan, args, state, observations.get(plan["head"]), assessment)
                if judgement["failure"] and judgement["generation"] == "failed":
                    # The generation request may have waited a minute: judge the logs written meanwhile.
                    observations, assessment, extra = self._look(plan, args, state)
                verdict, diagnoses = tp_diagnosis.evaluate_round(plan, assessment, judgement, extra, settle)
            settle = settle + 1 if diagnoses and verdict == "waiting" else 0
            elapsed = time.monotonic() - start

            note = assessment["msg"] + "; " + judgement["state"]
            if note != last_note:
                display.vv("tp_ranks %s after %.0f s: %s" % (plan["group"], elapsed, note))
                last_note = note

            if verdict == "waiting" and elapsed >= args["timeout"]:
                verdict = "failed"
                sizes = dict((tp_plan.log_key(m), len(state["buffers"][m["node"]]) if m["node"] in state["buffers"]
                              else 0) for m in plan["members"])
                diagnoses = tp_diagnosis.timeout_diagnoses(plan, assessment, judgement, args["timeout"], sizes)
            if verdict != "waiting":
                return self._outcome(plan, args, state, observations, assessment, judgement, verdict, diagnoses,
                                     elapsed)
            time.sleep(max(0.01, min(args["poll_interval"], args["timeout"] - elapsed)))

    def _outcome(self, plan, args, state, observations, assessment, judgement, verdict, diagnoses, elapsed):
        gen = state["generation"] or {}
        out = {
            "registered_ranks": tp_diagnosis.registered_view(plan, assessment),
            "missing_ranks": tp_diagnosis.missing_view(plan, assessment),
            "world_size": assessment.get("world_size"),
            "init_method": assessment.get("init_method"),
            "api_ready": bool(judgement.get("models_ok")),
            "generation_ok": gen.get("generation") == "ok",
            "elapsed": round(elapsed, 3),
            "ready_at": gen.get("ready_at") if verdict == "ready" else None,
            "diagnosis": tp_diagnosis.public_diagnoses(diagnoses),
            "containers": dict((node, dict((k, obs.get(k)) for k in (
                "name", "state", "image", "exit_code", "restart_count", "started_at", "problem", "message")))
                for node, obs in observations.items()),
            "log_warnings": tp_diagnosis.warning_view(assessment),
            "api_state": judgement.get("state"),
        }
        if verdict == "ready":
            out["msg"] = tp_diagnosis.success_message(plan, assessment, judgement, args["served_model_name"], elapsed)
            out["logs"] = {}
        else:
            out["failed"] = True
            out["msg"] = tp_diagnosis.failure_message(plan, diagnoses, elapsed)
            out["logs"] = tp_logbuffer.log_excerpts(plan, state["buffers"])
        return out
