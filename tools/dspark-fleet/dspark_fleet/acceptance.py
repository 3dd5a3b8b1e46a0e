"""`dspark-fleet acceptance`: one command that proves a new installation end to end, and one report to send back.

Steps, each recorded with its start, duration, result and evidence (artifact paths) in <output>/acceptance.json and
acceptance.md (docs/hardware-acceptance.md says what each proves and how to read a failure):

1. qualify: ``dspark-fleet qualify`` with ``qualify_fast: false`` (every check, the RoCE GID read twice and
   ``ib_write_bw`` between the members of each group). What the nodes cannot measure (no RDMA device, a container) is
   recorded as not applicable with the reason the qualify role gave, never as a pass;
2. site: ``dspark-fleet reprovision`` (the global validation, then ``site.yml --limit <group>`` per group through
   runner_exec, ending with the tp_ranks proof). A failure stops the run: the load test and the kill are skipped,
   the bundle still runs (it is what diagnoses the failure from afar);
3. load: `loadtest` through the endpoint: the router when the inventory has one and the run covers every group,
   else each group's head API; the key read from the inventory (vault included, hostvars.py), never on a command
   line or in a log. N streamed requests at concurrency C: TTFT and decode tokens/s at p50 and p99, failures (goal 0);
4. kill_rank (``--kill-rank``): the last rank of the first group has its container killed (``docker kill`` through
   ``ansible``), then ``dspark-fleet watch --once`` (the supervisor's own restart path: the check, the logs, serve.yml
   with serve_force_restart) and one completion: the time from the kill until the group answers again;
5. bundle: ``dspark-fleet bundle -i INV --groups G --output <output>/bundle --qualification
   <output>/qualify/report.json --json`` (step 1's full qualification goes into the bundle); a dspark-fleet without
   that subcommand fails this step ("not available (subcommand missing)").

Every number is put beside what DGX Spark should reach according to public reports (EXPECTATIONS, SOURCES; cited in
docs/hardware-acceptance.md): ``judge()`` gives pass, fail, not applicable (the lab: no GPU or no RDMA; the
measured value is still recorded), not measured, or no public number. Exit code 0 when every step passed (a step
that is not applicable or skipped by option is not a failure), 1 otherwise, 2 bad usage.

The steps run the same dspark-fleet as child processes (``python -m dspark_fleet``, this package first on
PYTHONPATH): each keeps its own artifacts and report under <output>/<step>/, and a fake `Tools` drives the sequence in
the unit tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone

from . import hostvars, loadtest
from .selection import PLAYBOOKS

SCHEMA = "dspark-fleet-acceptance/1"
PASSED, FAILED, NOT_APPLICABLE, SKIPPED = "passed", "failed", "not applicable", "skipped"
PASS, FAIL, NA, NOT_MEASURED, NO_PUBLIC = "pass", "fail", "not applicable", "not measured", "no public number"
LAB_NA = "not applicable (lab: no GPU/RDMA)"
STEPS = ("qualify", "site", "load", "kill_rank", "bundle")
TITLES = {"qualify": "Full qualification (every check, bandwidth between every pair of nodes)",
          "site": "site.yml with its tp_ranks proof", "load": "Load test through the endpoint",
          "kill_rank": "One rank killed, time until the group serves again", "bundle": "Support bundle"}
QUALIFY_FULL = '{"qualify_fast": false}'
MISSING_BUNDLE = "bundle: not available (subcommand missing)"
HEAD_API_DEFAULTS = {"serve_served_model_name": "deepseek-v4-flash", "serve_container_name": "dspark-vllm"}

# Public reports (searched for issue #43; docs/hardware-acceptance.md cites them and says how far each applies).
SOURCES = {
    "geerling-gb10": {"title": "geerlingguy/sbc-reviews#92: Dell Pro Max with GB10 (ibstat: ConnectX-7, Rate 200)",
                      "url": "https://github.com/geerlingguy/sbc-reviews/issues/92"},
    "warehack-nccl": {"title": "DGX Spark notes: building NCCL for Spark clusters (each 200G port is two PCIe Gen5 x4 "
                               "halves of about 100G; 190-198G per pair only across both)",
                      "url": "https://dgx-spark.warehack.ing/reference/nccl-build/"},
    "nvidia-rdma-playbook": {"title": "dgx-spark-playbooks (a copy), heterogeneous distributed inference over RDMA "
                                      "(93+ Gb/s validated over a 100 Gb/s link)",
                             "url": "https://gogs.tftsr.com/sarman/dgx-spark-playbooks/src/commit/"
                                    "b254e6f6328aa05e9f0a4f5e94268dd47bb45655/nvidia/"
                                    "heterogeneous-distributed-inference-rdma"},
    "playbooks-pr103": {"title": "NVIDIA/dgx-spark-playbooks#103: NCCL on two Sparks over one QSFP cable "
                                 "(all_gather busbw 23.74 GB/s with both halves and MTU 9000)",
                        "url": "https://github.com/NVIDIA/dgx-spark-playbooks/pull/103"},
    "playbooks-issue25": {"title": "NVIDIA/dgx-spark-playbooks#25: all_gather_perf on two Sparks before MTU 9000 "
                                   "(busbw 18.94-20.95 GB/s)",
                          "url": "https://github.com/NVIDIA/dgx-spark-playbooks/issues/25"},
    "weiss-dsv4": {"title": "2-Node DGX Spark Cluster: Running DeepSeek V4 Flash at 16 TPS (vLLM, TP=2; 5.5 tok/s "
                            "before tuning)",
                   "url": "https://tobias-weiss.org/articles/ai/2-node-dgx-spark-deepseek-v4-cluster"},
}

# What each number should reach. `hardware`: only real DGX Spark hardware can reach it (the lab: not applicable).
# `min`: the floor a pass needs (None: no public number to judge by, the value is only recorded).
EXPECTATIONS = [
    {"id": "fabric_link_speed_gbits", "what": "fabric link speed (qualify's link_speed of dspark_fabric_interface)",
     "unit": "Gb/s", "min": 200.0, "hardware": True, "sources": ["geerling-gb10"],
     "expected": "200 Gb/s (ConnectX-7 port, ibstat Rate 200)"},
    {"id": "rdma_write_gbits_min", "what": "ib_write_bw between every ordered pair, the lowest (one RoCE device)",
     "unit": "Gb/s", "min": 90.0, "hardware": True, "sources": ["nvidia-rdma-playbook", "warehack-nccl"],
     "expected": ">= 90 Gb/s per RoCE device (one PCIe Gen5 x4 half, ~100 Gb/s line rate; 93+ Gb/s published)"},
    {"id": "nccl_all_reduce_busbw_gbytes", "what": "NCCL all_reduce bus bandwidth over the ConnectX-7 link",
     "unit": "GB/s", "min": None, "hardware": True, "sources": ["playbooks-pr103", "playbooks-issue25"],
     "expected": "no all_reduce figure found; all_gather busbw 23.74 GB/s (about 190 Gb/s) published"},
    {"id": "decode_tokens_per_s_p50", "what": "decode tokens/s per request, p50 (DeepSeek-class model, TP=2 pair)",
     "unit": "tok/s", "min": 5.5, "hardware": True, "sources": ["weiss-dsv4"],
     "expected": ">= 5.5 tok/s (DeepSeek-V4-Flash, TP=2 on two Sparks: 5.5 untuned, 16 tuned)"},
    {"id": "ttft_p50_s", "what": "time to first token, p50", "unit": "s", "min": None, "hardware": True,
     "sources": [], "expected": "no public number for a DeepSeek-class model on a Spark pair"},
    {"id": "failed_requests", "what": "failed requests of the load test", "unit": "requests", "max": 0,
     "hardware": False, "sources": [], "expected": "0 (the collection's own goal)"},
    {"id": "recovery_s", "what": "a killed rank: time until the group serves again", "unit": "s", "min": None,
     "hardware": False, "sources": [], "expected": "no public number (the lab's own bound: 600 s on 2 cores)"},
]


def now():
    return time.time()


def iso(stamp):
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if stamp else None


# --------------------------------------------------------------------------- judging (pure)


def judge(expectation, measured, applicable=True, reason=None):
    """(verdict, reason) of one measured value against its expectation.

    Not applicable when the expectation needs hardware the run does not have (`applicable` False; the reason says
    what is missing); not measured when there is no value; no public number when there is no floor; else pass/fail.
    """
    if expectation.get("hardware") and not applicable:
        return NA, reason or LAB_NA
    if measured is None:
        return NOT_MEASURED, reason or "this run has no value for it"
    if expectation.get("max") is not None:
        ok = measured <= expectation["max"]
        return (PASS if ok else FAIL), "%s %s %s" % (measured, "<=" if ok else ">", expectation["max"])
    if expectation.get("min") is None:
        return NO_PUBLIC, "recorded only: %s" % expectation["expected"]
    ok = measured >= expectation["min"]
    return (PASS if ok else FAIL), "%s %s %s" % (measured, ">=" if ok else "<", expectation["min"])


def numbers_table(measured, hardware):
    """One row per expectation: the measured value beside the expected one, with the verdict.

    `measured`: {id: value or None}; `hardware`: {"gpu": bool, "rdma": bool, "reason": str}: a hardware expectation
    is not applicable without GPU and RDMA (the lab), the measured value still recorded.
    """
    rows = []
    applicable = bool(hardware.get("gpu")) and bool(hardware.get("rdma"))
    for exp in EXPECTATIONS:
        value = measured.get(exp["id"])
        reason = None
        if exp["hardware"] and not applicable:
            reason = LAB_NA if hardware.get("lab", True) else "not applicable: %s" % hardware.get("reason")
        elif exp["id"] == "nccl_all_reduce_busbw_gbytes":
            reason = "no NCCL test in the acceptance run (the engine's own collectives are proven by the load test)"
        verdict, why = judge(exp, value, applicable, reason)
        rows.append({"id": exp["id"], "what": exp["what"], "unit": exp["unit"], "measured": value,
                     "expected": exp["expected"], "verdict": verdict, "reason": why, "sources": list(exp["sources"])})
    return rows


def hardware_of(gpu_flags, qualify_doc):
    """What the run's nodes can measure: {"gpu", "rdma", "lab", "reason"}.

    `gpu_flags`: each head's dspark_has_gpu (None: not set, the roles' default true); `qualify_doc`: the qualify
    step's report (None when it did not run). RDMA counts as present when some rdma_bandwidth check ran.
    """
    gpu = bool(gpu_flags) and all(flag is None or bool(flag) for flag in gpu_flags)
    skips, measured = [], False
    for group in ((qualify_doc or {}).get("groups") or {}).values():
        for host, view in (((group.get("qualify") or {}).get("hosts")) or {}).items():
            for check in view.get("checks") or []:
                if check.get("check") == "rdma_bandwidth" and check.get("value") is not None:
                    measured = True
                elif check.get("check") == "gid" and check.get("verdict") == "skip":
                    skips.append("%s: %s" % (host, check.get("message")))
    reasons = []
    if not gpu:
        reasons.append("dspark_has_gpu is false")
    if not measured:
        reasons.append(skips[0] if skips else "no ib_write_bw result")
    return {"gpu": gpu, "rdma": measured, "lab": not gpu, "reason": "; ".join(reasons) or None,
            "rdma_skips": skips}


def qualify_numbers(qualify_doc, interface_of):
    """(lowest link speed of the fabric interfaces in Gb/s, lowest ib_write_bw in Gb/s, bandwidth checks) from the
    qualify report; `interface_of(host)`: its dspark_fabric_interface."""
    speeds, bandwidths, rows = [], [], []
    for group in ((qualify_doc or {}).get("groups") or {}).values():
        for host, view in (((group.get("qualify") or {}).get("hosts")) or {}).items():
            for check in view.get("checks") or []:
                if check.get("check") == "link_speed" and check.get("subject") == interface_of(host):
                    if isinstance(check.get("value"), (int, float)) and check["value"] > 0:
                        speeds.append(check["value"] / 1000.0)
                elif check.get("check") == "rdma_bandwidth":
                    rows.append({"host": host, "subject": check.get("subject"), "gbits": check.get("value"),
                                 "floor": check.get("threshold"), "verdict": check.get("verdict")})
                    if isinstance(check.get("value"), (int, float)):
                        bandwidths.append(float(check["value"]))
    return (min(speeds) if speeds else None), (min(bandwidths) if bandwidths else None), rows


def overall(steps):
    """passed when no step failed (not applicable and skipped-by-option steps do not fail a run)."""
    return FAILED if any(s["result"] == FAILED for s in steps) else PASSED


# --------------------------------------------------------------------------- Markdown (pure)


def _cell(value):
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def markdown(doc):
    """acceptance.md: the verdict, the steps with their evidence, the numbers beside the expectations, the sources."""
    hw = doc.get("hardware") or {}
    out = ["# DSpark hardware acceptance: %s" % doc["result"].upper(), "",
           "Inventory `%s`, groups %s; started %s, %s s; exit code %s." % (
               doc["inventory"], ", ".join("`%s`" % g for g in doc["groups"]), doc["started_iso"],
               doc.get("duration_s"), doc["exit_code"]), ""]
    if hw.get("lab"):
        out += ["Hardware: no GPU/RDMA (%s): every hardware expectation is not applicable; this run's own numbers "
                "are recorded." % (hw.get("reason") or "lab"), ""]
    out += ["## Steps", ""]
    out += _table(["step", "result", "duration (s)", "summary"],
                  [[s["name"], s["result"], s.get("duration_s"), s.get("summary")] for s in doc["steps"]])
    for step in doc["steps"]:
        out += ["", "### %s: %s" % (step["name"], step["title"]), "", "Result: **%s**. %s" % (
            step["result"], step.get("summary") or "")]
        for item in step.get("not_applicable") or []:
            out.append("- not applicable: %s (%s)" % (item["what"], item["reason"]))
        if step.get("evidence"):
            out += ["", "Evidence:"] + ["- %s: `%s`" % (k, v) for k, v in step["evidence"].items()]
    out += ["", "## Numbers beside what DGX Spark should reach", ""]
    out += _table(["number", "measured", "unit", "expected (public reports)", "verdict", "why", "sources"],
                  [[r["what"], r["measured"], r["unit"], r["expected"], r["verdict"], r["reason"],
                    ", ".join(r["sources"]) or "-"] for r in doc["numbers"]])
    load = doc.get("load")
    if load:
        out += ["", "## Load test", ""]
        out += _table(["target", "requests", "ok", "failed", "TTFT p50 / p99 (s)", "decode tok/s p50 / p99",
                       "aggregate tok/s"],
                      [[t["target"], t["summary"]["requests"], t["summary"]["ok"], t["summary"]["failed"],
                        "%s / %s" % (t["summary"]["ttft_s"]["p50"], t["summary"]["ttft_s"]["p99"]),
                        "%s / %s" % (t["summary"]["decode_tokens_per_s"]["p50"],
                                     t["summary"]["decode_tokens_per_s"]["p99"]),
                        t["summary"]["aggregate_tokens_per_s"]] for t in load["targets"]])
    out += ["", "## Sources", ""]
    out += ["- %s: [%s](%s)" % (key, src["title"], src["url"]) for key, src in doc["sources"].items()]
    out += ["", "Send back: this report (acceptance.json and acceptance.md) and the bundle named in the bundle step "
                "(docs/hardware-acceptance.md)."]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the tools (I/O)


class Tools:
    """What the steps call: dspark-fleet's own subcommands (a child process of this package), ansible ad-hoc, the
    inventory's hidden variables, the load test. The unit tests replace it."""

    def __init__(self, sel):
        self.sel = sel

    def has_subcommand(self, name):
        return name in PLAYBOOKS          # every subcommand is named there

    def fleet(self, argv, log_path, timeout=None):
        """rc of `dspark-fleet <argv>` (this package's code), its stdout (JSON answers) and stderr to `log_path`."""
        env = dict(os.environ)
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [env.get("PYTHONPATH")] if p])
        os.makedirs(os.path.dirname(log_path), mode=0o700, exist_ok=True)
        with open(log_path, "w", encoding="utf-8") as log:
            proc = subprocess.run([sys.executable, "-m", "dspark_fleet"] + argv, cwd=self.sel.project_dir, env=env,
                                  stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout, check=False)
            log.write("\n--- stdout ---\n" + proc.stdout)
        return proc.returncode, proc.stdout

    def adhoc(self, host, command, log_path, timeout=300):
        """rc of `ansible HOST -b -m command -a COMMAND` with the project's ansible.cfg (no secret in COMMAND)."""
        from . import runner_exec  # pylint: disable=import-outside-toplevel
        env = dict(os.environ, **self.sel.env_add)
        argv = [runner_exec.tool("ansible"), "-i", self.sel.inventory, host, "-b", "-m", "ansible.builtin.command",
                "-a", command]
        with open(log_path, "w", encoding="utf-8") as log:
            proc = subprocess.run(argv, cwd=self.sel.project_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False)
        return proc.returncode

    def host_values(self, host, names):
        return hostvars.resolve(self.sel.inventory, host, names, self.sel.project_dir, self.sel.env_add)

    def load(self, url, requests, concurrency, model, api_key, max_tokens):
        return loadtest.run(url, requests, concurrency, model, api_key=api_key, max_tokens=max_tokens)

    def sleep(self, seconds):
        time.sleep(seconds)


# --------------------------------------------------------------------------- the run


def text_of(runs):
    """One line per load target: ok/requests, TTFT and decode rate at p50 and p99."""
    return "; ".join("%s: %d/%d ok, TTFT p50 %s s p99 %s s, decode p50 %s tok/s p99 %s tok/s" % (
        r["target"], r["summary"]["ok"], r["summary"]["requests"], r["summary"]["ttft_s"]["p50"],
        r["summary"]["ttft_s"]["p99"], r["summary"]["decode_tokens_per_s"]["p50"],
        r["summary"]["decode_tokens_per_s"]["p99"]) for r in runs)


def json_answer(stdout):
    """The JSON object a child printed on stdout (indented or on one line), None when there is none."""
    text = (stdout or "").strip()
    if "{" not in text:
        return None
    try:
        answer = json.loads(text[text.index("{"):])
    except ValueError:
        try:
            answer = json.loads(text.splitlines()[-1])
        except ValueError:
            return None
    return answer if isinstance(answer, dict) else None


def redacted_count(value):
    """How many values a bundle redacted: a count, or the sum of its counts per kind."""
    if isinstance(value, dict):
        return sum(v for v in value.values() if isinstance(v, int))
    return value


def read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


class Run:
    """One acceptance run: the steps in order, then the report."""

    def __init__(self, sel, args, tools=None, prog=None, clock=now):
        self.sel, self.args = sel, args
        self.tools = tools or Tools(sel)
        self.prog = prog
        self.clock = clock
        self.out = sel.artifacts
        self.steps = []
        self.data = {}

    def say(self, text):
        if self.prog is not None:
            self.prog.message(text)

    def common(self):
        """The options every child dspark-fleet gets: the inventory, the groups asked, -e, the project, state, vault."""
        argv = ["-i", self.sel.inventory, "--plain", "--project-dir", self.sel.project_dir]
        for pattern in self.sel.patterns:
            argv += ["--groups", pattern]
        for value in self.args.extra_vars:
            argv += ["-e", value]
        if self.args.state_dir:
            argv += ["--state-dir", self.args.state_dir]
        if self.args.vault_password_file:
            argv += ["--vault-password-file", os.path.abspath(self.args.vault_password_file)]
        return argv

    def step(self, name, func):
        started = self.clock()
        self.say("acceptance: %s: %s" % (name, TITLES[name]))
        try:
            result, summary, evidence, extra = func()
        except Exception as exc:  # pylint: disable=broad-except  # a step's crash is its failure, the run goes on
            result, summary, evidence, extra = FAILED, "the step crashed: %s: %s" % (type(exc).__name__, exc), {}, {}
        finished = self.clock()
        record = {"name": name, "title": TITLES[name], "result": result, "summary": summary, "started": started,
                  "started_iso": iso(started), "finished": finished, "duration_s": round(finished - started, 3),
                  "evidence": evidence}
        record.update(extra)
        self.steps.append(record)
        self.say("acceptance: %s %s: %s" % (name, result, summary))
        return record

    def skip(self, name, why):
        stamp = self.clock()
        self.steps.append({"name": name, "title": TITLES[name], "result": SKIPPED, "summary": why, "started": stamp,
                           "started_iso": iso(stamp), "finished": stamp, "duration_s": 0.0, "evidence": {}})

    # ---- step 1
    def do_qualify(self):
        folder = os.path.join(self.out, "qualify")
        rc = self.tools.fleet(["qualify"] + self.common() + ["-e", QUALIFY_FULL, "--artifacts", folder],
                              os.path.join(self.out, "qualify.log"))[0]
        doc = read_json(os.path.join(folder, "report.json"))
        self.data["qualify"] = doc
        evidence = {"report": os.path.join(folder, "report.md"), "console": os.path.join(self.out, "qualify.log")}
        if doc is None:
            return FAILED, "dspark-fleet qualify wrote no report (rc %s)" % rc, evidence, {}
        verdicts = dict((g, (e.get("qualify") or {}).get("verdict", e.get("result")))
                        for g, e in (doc.get("groups") or {}).items())
        hardware = hardware_of(self.gpu_flags(), doc)
        self.data["hardware"] = hardware
        speed, lowest, rows = qualify_numbers(doc, self.interface_of)
        self.data["link_speed"], self.data["rdma_min"] = speed, lowest
        not_applicable = []
        if not hardware["rdma"]:
            not_applicable.append({"what": "ib_write_bw between every pair of nodes", "reason": (
                hardware["rdma_skips"][0] if hardware["rdma_skips"] else "no RDMA measurement ran")})
        if not hardware["gpu"]:
            not_applicable.append({"what": "the GPU inside the serving image", "reason": "dspark_has_gpu is false"})
        extra = {"verdicts": verdicts, "bandwidth": rows, "not_applicable": not_applicable}
        failing = [g for g, v in verdicts.items() if v != "qualified"]
        if rc != 0 or failing:
            summary = "; ".join("%s %s: %s" % (g, verdicts[g], (doc["groups"][g].get("qualify") or {}).get("summary"))
                                for g in failing) or "dspark-fleet qualify exited %s" % rc
            return FAILED, summary, evidence, extra
        parts = ["%d group(s) qualified" % len(verdicts)]
        if rows:
            parts.append("ib_write_bw: %d pair(s) without a result" % len(rows) if lowest is None
                         else "ib_write_bw lowest %s Gb/s over %d pair(s)" % (round(lowest, 2), len(rows)))
        if not_applicable:
            parts.append("not applicable: " + "; ".join(i["what"] for i in not_applicable))
        return PASSED, ", ".join(parts), evidence, extra

    # ---- step 2
    def do_site(self):
        folder = os.path.join(self.out, "site")
        rc = self.tools.fleet(["reprovision"] + self.common() + ["--artifacts", folder],
                              os.path.join(self.out, "site.log"))[0]
        doc = read_json(os.path.join(folder, "report.json"))
        evidence = {"report": os.path.join(folder, "report.md"), "console": os.path.join(self.out, "site.log")}
        if doc is None:
            return FAILED, "dspark-fleet reprovision wrote no report (rc %s)" % rc, evidence, {}
        proofs, failures = {}, []
        for group, entry in (doc.get("groups") or {}).items():
            proof = entry.get("tp_ranks") or {}
            proofs[group] = {"result": entry.get("result"), "world_size": proof.get("world_size"),
                             "elapsed_s": proof.get("elapsed_s"), "image_id": entry.get("image_id"),
                             "ranks": ["%s on %s" % (r.get("rank"), r.get("node"))
                                       for r in proof.get("registered_ranks") or []]}
            if entry.get("result") != "converged":
                failures.append("%s %s: %s" % (group, entry.get("result"),
                                               (entry.get("failure") or {}).get("summary") or "-"))
                if (entry.get("logs") or {}).get("stdout"):
                    evidence["log of " + group] = entry["logs"]["stdout"]
        extra = {"proofs": proofs}
        if rc != 0 or failures:
            preflight = doc.get("preflight") or {}
            summary = "; ".join(failures) or preflight.get("msg") or doc.get("stop_reason") or "exit %s" % rc
            return FAILED, summary, evidence, extra
        return PASSED, "; ".join("%s proven: ranks %s (world size %s, ready in %s s)" % (
            g, ", ".join(p["ranks"]), p["world_size"], p["elapsed_s"]) for g, p in proofs.items()), evidence, extra

    # ---- step 3
    def targets(self):
        """[(label, url, model, key)] of the load test: the router when it serves every group of the run."""
        groups = self.sel.groups
        routers = self.sel.inv.hosts_of("dspark_router")
        heads = [(g, self.sel.inv.head(g)) for g in groups]
        names = ["serve_api_keys", "serve_api_key", "serve_served_model_name", "dspark_api_port",
                 "dspark_mgmt_address", "ansible_host"]
        values = dict((g, self.tools.host_values(h, names)) for g, h in heads if h)
        if routers and list(groups) == list(self.sel.inv.groups):
            router = routers[0]
            rv = self.tools.host_values(router, ["router_port", "router_tls_port", "router_tls_certificate",
                                                 "dspark_mgmt_address", "ansible_host"])
            first = values[groups[0]]
            tls = bool(rv.get("router_tls_certificate"))
            url = "%s://%s:%s" % ("https" if tls else "http", rv.get("dspark_mgmt_address") or rv.get("ansible_host"),
                                  rv.get("router_tls_port", 8443) if tls else rv.get("router_port", 8080))
            return [("router %s" % router, url, first.get("serve_served_model_name",
                                                          HEAD_API_DEFAULTS["serve_served_model_name"]),
                     hostvars.api_key(first))]
        out = []
        for group, head in heads:
            v = values.get(group) or {}
            url = "http://%s:%s" % (v.get("dspark_mgmt_address") or v.get("ansible_host"), v.get("dspark_api_port"))
            out.append(("%s head %s" % (group, head), url,
                        v.get("serve_served_model_name", HEAD_API_DEFAULTS["serve_served_model_name"]),
                        hostvars.api_key(v)))
        return out

    def do_load(self):
        a = self.args
        runs, evidence = [], {"records": os.path.join(self.out, "load.json")}
        problems = []
        for label, url, model, key in self.targets():
            try:
                loadtest.check_url(url)
            except ValueError as exc:
                problems.append("%s: no usable API address (%s): set dspark_mgmt_address and dspark_api_port" % (
                    label, exc))
                continue
            self.say("acceptance: load: %d request(s), %d at once, to %s (%s)" % (
                a.requests, a.concurrency, label, url))
            records, wall = self.tools.load(url, a.requests, a.concurrency, model, key, a.max_tokens)
            if len(records) != a.requests:
                problems.append("%s: %d of %d request(s) came back" % (label, len(records), a.requests))
            runs.append({"target": label, "url": url, "model": model, "key": "set" if key else "none",
                         "summary": loadtest.summarize(records, wall), "records": records})
        with open(evidence["records"], "w", encoding="utf-8") as handle:
            json.dump(runs, handle, indent=1)
        self.data["load"] = {"requests": a.requests, "concurrency": a.concurrency, "max_tokens": a.max_tokens,
                             "targets": [dict((k, v) for k, v in r.items() if k != "records") for r in runs]}
        failed = sum(r["summary"]["failed"] for r in runs)
        if problems:
            return FAILED, "; ".join(problems + ([text_of(runs)] if runs else [])), evidence, {}
        text = text_of(runs)
        if failed:
            first = next(f for r in runs for f in r["summary"]["failures"])
            return FAILED, "%d request(s) failed (first: %s); %s" % (failed, first["error"], text), evidence, {}
        return PASSED, text, evidence, {}

    # ---- step 4
    def do_kill_rank(self):
        group = self.sel.groups[0]
        members = self.sel.inv.ordered_members(group)
        victim = members[-1]
        container = self.tools.host_values(victim, ["serve_container_name"]).get(
            "serve_container_name", HEAD_API_DEFAULTS["serve_container_name"])
        log = os.path.join(self.out, "kill_rank.log")
        evidence = {"kill": log, "watch": os.path.join(self.out, "kill_rank-watch.log")}
        killed = self.clock()
        rc = self.tools.adhoc(victim, "docker kill %s" % container, log)
        if rc != 0:
            return FAILED, "docker kill %s on %s failed (rc %s)" % (container, victim, rc), evidence, {}
        folder = os.path.join(self.out, "kill_rank-watch")
        argv = ["watch", "-i", self.sel.inventory, "--plain", "--project-dir", self.sel.project_dir, "--groups", group,
                "--once", "--artifacts", folder] + sum((["-e", v] for v in self.args.extra_vars), [])
        argv += ["--state-dir", self.args.state_dir or os.path.join(self.out, "state")]
        rc = self.tools.fleet(argv, evidence["watch"])[0]
        if rc != 0:
            return FAILED, "dspark-fleet watch --once did not bring %s back (rc %s)" % (group, rc), evidence, {}
        label, url, model, key = [t for t in self.targets() if t[0].startswith(group) or t[0].startswith("router")][0]
        records = self.tools.load(url, 1, 1, model, key, 4)[0]
        recovered = self.clock()
        seconds = round(recovered - killed, 1)
        self.data["recovery_s"] = seconds
        extra = {"victim": victim, "container": container, "recovery_s": seconds}
        if not records or not records[0]["ok"]:
            return FAILED, "%s restarted but a completion through %s failed: %s" % (
                group, label, records[0]["error"] if records else "none sent"), evidence, extra
        return PASSED, "rank on %s killed; %s served again after %.1f s (watch --once)" % (victim, group, seconds), \
            evidence, extra

    # ---- step 5
    def do_bundle(self):
        log = os.path.join(self.out, "bundle.log")
        if not self.tools.has_subcommand("bundle"):
            return FAILED, MISSING_BUNDLE, {}, {}
        folder = os.path.join(self.out, "bundle")
        argv = ["bundle"] + self.common() + ["--artifacts", os.path.join(self.out, "bundle-run"), "--output", folder]
        # The full qualification of step 1 is this run's own report, not in the state dir where bundle looks.
        qualified = os.path.join(self.out, "qualify", "report.json")
        if os.path.isfile(qualified):
            argv += ["--qualification", qualified]
        argv.append("--json")
        rc, stdout = self.tools.fleet(argv, log)
        evidence = {"console": log, "artifacts": os.path.join(self.out, "bundle-run")}
        answer = json_answer(stdout)
        if rc == 2 and answer is None:
            return FAILED, "dspark-fleet bundle refused its arguments (rc 2): see %s" % log, evidence, {}
        bundles = (answer or {}).get("bundles") or []
        for item in bundles:
            evidence["bundle of %s" % item.get("group")] = item.get("path")
        extra = {"bundles": bundles, "rc": rc}
        if rc != 0 or not bundles:
            return FAILED, "dspark-fleet bundle exited %s with %d bundle(s)%s" % (
                rc, len(bundles), "" if answer else " and no JSON answer"), evidence, extra
        return PASSED, "%d bundle(s): %s" % (len(bundles), ", ".join(
            "%s (%s bytes, %s redacted)" % (b.get("path"), b.get("bytes"), redacted_count(b.get("redacted")))
            for b in bundles)), evidence, extra

    # ---- helpers
    def gpu_flags(self):
        return [self.sel.inv.vars_of(self.sel.inv.head(g)).get("dspark_has_gpu") for g in self.sel.groups
                if self.sel.inv.head(g)]

    def interface_of(self, host):
        return self.sel.inv.vars_of(host).get("dspark_fabric_interface")

    def run(self):
        started = self.clock()
        self.step("qualify", self.do_qualify)
        site = self.step("site", self.do_site)
        if site["result"] == FAILED:
            self.skip("load", "site.yml failed: nothing to load (see the site step's diagnosis)")
            self.skip("kill_rank", "site.yml failed")
        else:
            self.step("load", self.do_load)
            if self.args.kill_rank:
                self.step("kill_rank", self.do_kill_rank)
            else:
                self.skip("kill_rank", "not asked (--kill-rank)")
        self.step("bundle", self.do_bundle)
        return self.report(started)

    def measured(self):
        load = self.data.get("load") or {}
        summaries = [t["summary"] for t in load.get("targets") or []]

        def worst(key, pick):
            values = [s[key]["p50"] for s in summaries if s[key]["p50"] is not None]
            return pick(values) if values else None
        return {"fabric_link_speed_gbits": self.data.get("link_speed"),
                "rdma_write_gbits_min": self.data.get("rdma_min"),
                "nccl_all_reduce_busbw_gbytes": None,
                "decode_tokens_per_s_p50": worst("decode_tokens_per_s", min),
                "ttft_p50_s": worst("ttft_s", max),
                "failed_requests": sum(s["failed"] for s in summaries) if summaries else None,
                "recovery_s": self.data.get("recovery_s")}

    def report(self, started):
        finished = self.clock()
        hardware = self.data.get("hardware") or hardware_of(self.gpu_flags(), None)
        result = overall(self.steps)
        code = 0 if result == PASSED else 1
        doc = {"schema": SCHEMA, "result": result, "exit_code": code, "inventory": self.sel.inventory,
               "groups": list(self.sel.groups), "started": started, "started_iso": iso(started), "finished": finished,
               "duration_s": round(finished - started, 1), "output_dir": self.out,
               "options": {"requests": self.args.requests, "concurrency": self.args.concurrency,
                           "max_tokens": self.args.max_tokens, "kill_rank": bool(self.args.kill_rank),
                           "extra_vars": len(self.args.extra_vars)},
               "hardware": dict((k, v) for k, v in hardware.items() if k != "rdma_skips"),
               "steps": self.steps, "numbers": numbers_table(self.measured(), hardware),
               "load": self.data.get("load"), "sources": SOURCES}
        write(doc, self.out)
        return doc


def write(doc, folder):
    """acceptance.json and acceptance.md in `folder` (each through a temporary file and a rename)."""
    for name, text in (("acceptance.json", json.dumps(doc, indent=1, sort_keys=False) + "\n"),
                       ("acceptance.md", markdown(doc))):
        path = os.path.join(folder, name)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(path + ".tmp", path)


# --------------------------------------------------------------------------- CLI


def add_parser(sub, common, int_at_least):
    acc = sub.add_parser(
        "acceptance", parents=[common], allow_abbrev=False,
        help="prove an installation end to end: full qualification, site.yml with its proof, a load test, "
             "optionally a killed rank's recovery, the bundle; one report beside public DGX Spark numbers",
        description="Run the hardware acceptance (docs/hardware-acceptance.md): qualify (full), reprovision, a load "
                    "test through the router or each head, --kill-rank's recovery, dspark-fleet bundle; "
                    "<output>/acceptance.json and acceptance.md.",
        epilog="Exit codes: 0 every step passed (or was not applicable / not asked), 1 a step failed, 2 bad usage.")
    acc.add_argument("--output", dest="artifacts", metavar="DIR",
                     help="the report and every step's artifacts (as --artifacts; default <state dir>/<UTC "
                          "timestamp>/; must be empty or new)")
    acc.add_argument("--requests", type=int_at_least(1), default=32, metavar="N", help="load test requests (32)")
    acc.add_argument("--concurrency", type=int_at_least(1), default=4, metavar="C",
                     help="load test requests at once (4)")
    acc.add_argument("--max-tokens", type=int_at_least(2), default=128, metavar="T",
                     help="output tokens per load test request (128; ignore_eos, so each generates T)")
    acc.add_argument("--kill-rank", action="store_true",
                     help="kill the last rank of the first group and time its recovery by watch --once")
    acc.add_argument("--json", action="store_true", help="print acceptance.json on stdout at the end")


def command(sel, args, interrupts, prog, tools=None):  # pylint: disable=unused-argument
    """The subcommand over the Selection `sel` with acceptance's options `args`: the exit code."""
    doc = Run(sel, args, tools=tools, prog=prog).run()
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print("")
        print("acceptance: %s" % doc["result"].upper())
        for step in doc["steps"]:
            print("  %-10s %-15s %s" % (step["name"], step["result"], step["summary"] or ""))
        for row in doc["numbers"]:
            print("  %-58s %-10s %s" % (row["what"][:58], _cell(row["measured"]), row["verdict"]))
        print("Report: %s (Markdown: %s)" % (os.path.join(sel.artifacts, "acceptance.json"),
                                             os.path.join(sel.artifacts, "acceptance.md")))
    return doc["exit_code"]
