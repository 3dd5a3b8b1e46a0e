"""Generate docs/benchmarks.md from the benchmark results in bench/results/*.json.

Every number, goal, verdict, date and commit in docs/benchmarks.md comes from a result file; the hand-written
part (what a benchmark measures, which script in bench/ produced it, which result fields are its key numbers) is
the table BENCHMARKS below, one entry per result file. `python tests/ci/bench_docs.py` writes the page;
`--check` (`make lint`) exits 1 with a unified diff when the page differs from what the results give, and 2 when
a result file is unreadable, not JSON, lacks a field named here or has no entry in BENCHMARKS. Stdlib only.
"""

import argparse
import difflib
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = "bench/results"
PAGE = "docs/benchmarks.md"
FIX = "run python tests/ci/bench_docs.py"

# One entry per result file: title, script (in bench/), what it measures (prose, no numbers), and its key numbers
# as (label, path into the JSON). A path is dotted; "*" takes every item of a list or every value of a mapping.
# Key numbers shared by the results of one script (the same labels and paths).
COPY_NUMBERS = [
    ("streams", "streams"), ("plain rsync -a (MB/s)", "plain_rsync_mb_s"),
    ("one stream (MB/s)", "single_stream_mb_s"), ("parallel streams (MB/s)", "parallel_mb_s"),
    ("one stream / plain", "ratio_single"), ("parallel / plain", "throughput_ratio"),
    ("parallel / plain, each round", "rounds.*.ratio_parallel")]
ROLL_NUMBERS = [
    ("load (requests/s)", "load.rate_per_s"),
    ("during the roll: sent", "during_roll.requests_sent"),
    ("during the roll: failed", "during_roll.requests_failed"),
    ("during the roll: incomplete streams", "during_roll.incomplete"),
    ("p50 latency during the roll (s)", "during_roll.latency_p50_s"),
    ("p99 latency during the roll (s)", "during_roll.latency_p99_s"),
    ("p50 latency, steady (s)", "steady_state.latency_p50_s"),
    ("p99 latency, steady (s)", "steady_state.latency_p99_s"),
    ("out of rotation per group (s)", "groups.*.out_of_rotation_s")]

COST_NUMBERS = [("pair: no-op CPU (s)", "pair.noop.cpu_s"), ("pair: no-op wall (s)", "pair.noop.wall_s"),
                ("pair: CPU per host (s)", "pair.noop.cpu_s_per_host"),
                ("pair: CPU per host-task (ms)", "pair.noop.cpu_ms_per_host_task"),
                ("pair: forced CPU (s)", "pair.forced.cpu_s"),
                ("pair: no-op, whole machine's CPU (s)", "pair.noop.machine_cpu_s"),
                ("pair: no-op, share of the cores busy", "pair.noop.machine_cpu_use"),
                ("fleet: hosts", "fleet.noop.hosts"), ("fleet: no-op CPU (s)", "fleet.noop.cpu_s"),
                ("fleet: no-op wall (s)", "fleet.noop.wall_s"),
                ("fleet: CPU per host (s)", "fleet.noop.cpu_s_per_host"),
                ("fleet: forced CPU (s)", "fleet.forced.cpu_s"),
                ("fleet: no-op, whole machine's CPU (s)", "fleet.noop.machine_cpu_s"),
                ("no-op wall: fleet / pair", "noop_wall_ratio_fleet_over_pair"),
                ("100 groups: CPU per extra host (s)", "projection.cpu_s_per_extra_host"),
                ("100 groups, one playbook: CPU (s)", "projection.one_playbook_cpu_s"),
                ("100 groups, one playbook: least wall on 16 cores (s)",
                 "projection.one_playbook_wall_s_min.16_cores")]
FLEET_NUMBERS = [("groups", "fleet.groups"), ("nodes", "fleet.nodes"),
                 ("reprovision: fleet / one group (s)", "reprovision.fleet_seconds"),
                 ("reprovision: one group alone (s)", "reprovision.one_group_seconds"),
                 ("reprovision ratio", "reprovision.ratio"),
                 ("no-op site.yml: fleet (s)", "noop_site.fleet_seconds"),
                 ("no-op site.yml: one pair (s)", "noop_site.one_pair_seconds"),
                 ("no-op ratio", "noop_site.ratio"),
                 ("controller memory peak per group (MiB)", "reprovision.groups.*.controller_memory_peak_mib")]

BENCHMARKS = {
    "ansiballz_cache.json": {
        "title": "The labs' module bytecode cache",
        "script": "bench/bench_ansiballz_cache.py",
        "measures": "A no-op `site.yml` on the converged lab pair, alternately with the labs' module bytecode cache "
                    "(lab nodes and test venv only, never a real node: docs/design-lab.md) and without it: the "
                    "machine's CPU (controller, nodes, their sshd and dockerd) and wall time.",
        "numbers": [("machine CPU with the cache (s)", "with_cache.machine_cpu_s"),
                    ("machine CPU without it (s)", "without_cache.machine_cpu_s"),
                    ("ratio", "machine_cpu_ratio"),
                    ("wall with the cache (s)", "with_cache.wall_s"), ("wall without it (s)", "without_cache.wall_s"),
                    ("machine CPU of each run with the cache (s)", "with_cache.machine_cpu_s_each"),
                    ("machine CPU of each run without it (s)", "without_cache.machine_cpu_s_each")],
    },
    "monitoring_noop.json": {
        "title": "No-op re-run of playbooks/monitoring.yml",
        "script": "bench/bench_monitoring_noop.py",
        "measures": "`playbooks/monitoring.yml` run again on the converged fleet lab (SIMULATOR image), beside the "
                    "commit before its plan was pinned once per host and run and each exporter host decided on one "
                    "read (same script, same lab): the controller's CPU, the machine's, the wall time and the "
                    "host-tasks.",
        "numbers": [("controller CPU (s)", "controller_cpu_s"), ("baseline: controller CPU (s)", "baseline.controller_cpu_s"),
                    ("ratio", "controller_cpu_s_over_baseline"),
                    ("machine CPU (s)", "machine_cpu_s"), ("baseline: machine CPU (s)", "baseline.machine_cpu_s"),
                    ("wall (s)", "wall_s"), ("baseline: wall (s)", "baseline.wall_s"),
                    ("host-tasks", "host_tasks"), ("baseline: host-tasks", "baseline.host_tasks")],
    },
    "registry_push.json": {
        "title": "The lab registry's image upload",
        "script": "bench/bench_registry_push.py",
        "measures": "The real-engine image put into an empty lab registry and pulled by digest on a lab node, once "
                    "by `docker push` (dockerd gzips every layer, the node's dockerd gunzips it) and once by "
                    "`lab/registry_push.py` (the layers as `docker save` writes them, uncompressed): the machine's "
                    "CPU (host dockerd, registry, uploader, the node's dockerd) and the wall time of each step.",
        "numbers": [("push and pull, machine CPU, uncompressed (s)", "uncompressed_upload.cpu_s"),
                    ("push and pull, machine CPU, docker push (s)", "docker_push.cpu_s"),
                    ("ratio", "cpu_ratio"),
                    ("push: machine CPU, uncompressed (s)", "uncompressed_upload.push_cpu_s"),
                    ("push: machine CPU, docker push (s)", "docker_push.push_cpu_s"),
                    ("pull: machine CPU, uncompressed (s)", "uncompressed_upload.pull_cpu_s"),
                    ("pull: machine CPU, docker push (s)", "docker_push.pull_cpu_s"),
                    ("push wall, uncompressed (s)", "uncompressed_upload.push_wall_s"),
                    ("push wall, docker push (s)", "docker_push.push_wall_s"),
                    ("pull wall, uncompressed (s)", "uncompressed_upload.pull_wall_s"),
                    ("pull wall, docker push (s)", "docker_push.pull_wall_s")],
    },
    "router_noop.json": {
        "title": "No-op re-run of playbooks/router.yml",
        "script": "bench/bench_router_noop.py",
        "measures": "`playbooks/router.yml` run again on the converged fleet lab's two routers (one at a time, as "
                    "it converges them), beside the commit before each router was decided on one read for HAProxy "
                    "and one for keepalived (same script, same lab): the machine's CPU, the controller's, the wall "
                    "time and the host-tasks.",
        "numbers": [("machine CPU (s)", "machine_cpu_s"), ("baseline: machine CPU (s)", "baseline.machine_cpu_s"),
                    ("ratio", "machine_cpu_s_over_baseline"),
                    ("controller CPU (s)", "controller_cpu_s"), ("baseline: controller CPU (s)", "baseline.controller_cpu_s"),
                    ("wall (s)", "wall_s"), ("baseline: wall (s)", "baseline.wall_s"),
                    ("host-tasks", "host_tasks"), ("baseline: host-tasks", "baseline.host_tasks")],
    },
    "payload_cache.json": {
        "title": "The lab controllers' module payload cache",
        "script": "bench/bench_payload_cache.py",
        "measures": "A no-op `site.yml` on the converged lab pair, alternately with the lab controllers' payload "
                    "cache (test venvs only, when DSPARK_LAB_PAYLOAD_CACHE is set: docs/design-lab.md) and without "
                    "it: the controller's CPU (ansible-playbook, its forks, ssh), the machine's and the wall time.",
        "numbers": [("controller CPU with the cache (s)", "with_cache.controller_cpu_s"),
                    ("controller CPU without it (s)", "without_cache.controller_cpu_s"),
                    ("ratio", "controller_cpu_ratio"),
                    ("machine CPU with the cache (s)", "with_cache.machine_cpu_s"),
                    ("machine CPU without it (s)", "without_cache.machine_cpu_s"),
                    ("wall with the cache (s)", "with_cache.wall_s"), ("wall without it (s)", "without_cache.wall_s"),
                    ("controller CPU of each run with the cache (s)", "with_cache.controller_cpu_s_each"),
                    ("controller CPU of each run without it (s)", "without_cache.controller_cpu_s_each")],
    },
    "site_noop.json": {
        "title": "No-op re-run of site.yml",
        "script": "bench/bench_site_noop.py",
        "measures": "`site.yml` run again on the converged lab pair (SIMULATOR image): what an operator pays "
                    "for a run that must change nothing, in host-tasks per node, wall time and controller CPU "
                    "(issue #40), then one forced reprovision of the group; beside the same numbers of the "
                    "baseline commit, run by the same script against the same lab.",
        "numbers": [("host-tasks per node (most)", "host_tasks_per_node_max"),
                    ("baseline: host-tasks per node", "baseline.host_tasks.*"),
                    ("wall of each run (s)", "wall_s_each"), ("baseline: wall of each run (s)", "baseline.wall_s_each"),
                    ("controller CPU per node (s)", "cpu_s_per_node"),
                    ("baseline: controller CPU per node (s)", "baseline.cpu_s_per_node"),
                    ("forced reprovision wall (s)", "forced.wall_s"),
                    ("baseline: forced reprovision wall (s)", "baseline.forced.wall_s"),
                    ("forced wall / baseline", "forced_wall_over_baseline"),
                    ("most tasks changed in one run", "max_changed")],
    },
    "tp_ranks_readiness.json": {
        "title": "tp_ranks readiness lag (simulator)",
        "script": "bench/bench_tp_ranks_readiness.py",
        "measures": "How soon `tp_ranks` calls a restarted lab group ready: its `ready_at` minus the SIMULATOR's "
                    "own `Application startup complete.` time (the lab's containers share the controller's clock).",
        "numbers": [("lag of each run (s)", "lag_seconds"), ("worst lag (s)", "max_lag_seconds")],
    },
    "real_engine_start.json": {
        "title": "Real engine: start to proven serving, readiness lag",
        "script": "bench/bench_real_engine.py",
        "measures": "On the real-engine pair (`make lab-real site-real`: vLLM's CPU build, the lab's tiny model, "
                    "TP=2 over Gloo), `playbooks/serve.yml` restarts the group; measured are the time from the "
                    "playbook's start to `tp_ranks`' proof, and the readiness lag (proof minus the API's "
                    "`Application startup complete.`), split into the first `/health` answer and the engine's "
                    "first generation.",
        "numbers": [("start to proven serving, worst run (s)", "max_start_to_proven_serving_s"),
                    ("readiness lag of each run (s)", "results.*.readiness_lag_s"),
                    ("first /health answer after the API started, worst (s)", "max_api_answer_seen_after_s"),
                    ("first generation, worst (s)", "max_first_generation_s")],
    },
    "edge_latency.json": {
        "title": "The API edge's added latency (real engine)",
        "script": "bench/bench_edge_latency.py",
        "measures": "On the real-engine pair's head, `GET /v1/models` with the group's key through the API edge "
                    "(HAProxy on the API port) and straight to vLLM on its loopback port, alternated, a new "
                    "connection each; the added latency is the difference of their p50 and of their p99.",
        "numbers": [("through the edge, p50 (ms)", "through_edge.p50_ms"),
                    ("straight to vLLM, p50 (ms)", "straight_to_engine.p50_ms"),
                    ("added at p50 (ms)", "added_p50_ms"), ("added at p99 (ms)", "added_p99_ms")],
    },
    "lmcache_ttft.json": {
        "title": "Time to first token of a repeated long prompt after a restart, with and without LMCache",
        "script": "bench/bench_lmcache_ttft.py",
        "measures": "`lab/lmcache/tp2.sh`'s TP=2 vLLM CPU group (the lab's tiny model) in throwaway containers, "
                    "without a KV connector and with LMCache's server per node (`MODE=urls`): a fresh group "
                    "answers a long prompt, the whole group (LMCache's servers too) is stopped and started, and "
                    "after a short warm-up request the same prompt is asked again; its streamed time to first "
                    "token, and with LMCache the tokens vLLM took from it (issue #45).",
        "numbers": [("long prompt, cut to at most (tokens)", "prompt_tokens"),
                    ("long prompt as vLLM counted it, each sample (tokens)", "samples.*.prompt_tokens"),
                    ("median TTFT after the restart, no LMCache (s)", "median_ttft_none_s"),
                    ("median TTFT after the restart, LMCache (s)", "median_ttft_lmcache_s"),
                    ("speed-up (none / LMCache)", "speedup"),
                    ("no LMCache: TTFT after the restart, each run (s)", "modes.none.ttft_s_each"),
                    ("LMCache: TTFT after the restart, each run (s)", "modes.urls.ttft_s_each"),
                    ("no LMCache: median TTFT of a fresh group's first ask (s)", "modes.none.median_cold_ttft_s"),
                    ("LMCache: median TTFT of a fresh group's first ask (s)", "modes.urls.median_cold_ttft_s"),
                    ("LMCache: external prefix cache hits, each run (tokens)",
                     "modes.urls.external_prefix_cache_hits_each")],
    },
    "recovery.json": {
        "title": "Supervisor recovery (simulator, fleet lab)",
        "script": "bench/bench_recovery.py",
        "measures": "A worker rank of a fleet-lab group is killed while `dspark-fleet watch` runs; the clock runs "
                    "until a chat completion on the head answers again after the supervisor's restart.",
        "numbers": [("watch interval (s)", "watch_interval_s"),
                    ("death to serving, each run (s)", "results.*.death_to_serving_s"),
                    ("death to failed check, each run (s)", "results.*.death_to_failed_check_s"),
                    ("restart (serve.yml), each run (s)", "results.*.restart_s")],
    },
    "supervisor_round.json": {
        "title": "The supervisor's healthy round (simulator, fleet lab)",
        "script": "bench/bench_supervisor_round.py",
        "measures": "`dspark-fleet watch` on the fleet lab while every group serves (issue #40): controller CPU "
                    "(every process waited for, plus the ssh ControlMasters) and wall of a `--once` round over one "
                    "group and over both, hence the fixed cost of a round and the marginal cost of a group, "
                    "projected to 100 groups; and the service's own round (several rounds in one process: the start "
                    "paid once). Beside the same numbers of the baseline commit (one verify.yml run per group), run "
                    "by the same script against the same lab.",
        "numbers": [("service's round, CPU per group (s)", "service_round.cpu_s_per_group"),
                    ("baseline: service's round, CPU per group (s)", "baseline.service_round.cpu_s_per_group"),
                    ("service's round over two groups, CPU (s)", "service_round.cpu_s_per_round"),
                    ("baseline: service's round over two groups, CPU (s)", "baseline.service_round.cpu_s_per_round"),
                    ("--once over two groups, CPU per group (s)", "both_groups.cpu_s_per_group"),
                    ("baseline: --once over two groups, CPU per group (s)", "baseline.both_groups.cpu_s_per_group"),
                    ("--once over two groups, wall of each run (s)", "both_groups.wall_s_each"),
                    ("baseline: --once over two groups, wall of each run (s)", "baseline.both_groups.wall_s_each"),
                    ("fixed CPU per round (s)", "fixed_cpu_s_per_round"),
                    ("baseline: fixed CPU per round (s)", "baseline.fixed_cpu_s_per_round"),
                    ("marginal CPU per group (s)", "marginal_cpu_s_per_group"),
                    ("baseline: marginal CPU per group (s)", "baseline.marginal_cpu_s_per_group"),
                    ("100 groups: CPU per group (s)", "projection.cpu_s_per_group"),
                    ("baseline: 100 groups: CPU per group (s)", "baseline.projection.cpu_s_per_group"),
                    ("100 groups: cores at a 60 s interval", "projection.cores_at_60_s_interval"),
                    ("baseline: 100 groups: cores at a 60 s interval", "baseline.projection.cores_at_60_s_interval")],
    },
    "real_engine_recovery.json": {
        "title": "Supervisor recovery (real engine)",
        "script": "bench/bench_recovery.py",
        "measures": "The same as the simulator's recovery benchmark (`BENCH_LAB=real`), on the real-engine pair: "
                    "a killed worker rank, `dspark-fleet watch`, until the head answers a chat completion again.",
        "numbers": [("watch interval (s)", "watch_interval_s"),
                    ("death to serving, each run (s)", "results.*.death_to_serving_s"),
                    ("death to failed check, each run (s)", "results.*.death_to_failed_check_s"),
                    ("restart (serve.yml), each run (s)", "results.*.restart_s")],
    },
    "checkpoint_reverify.json": {
        "title": "Checkpoint re-verify",
        "script": "bench/bench_checkpoint_reverify.py",
        "measures": "The fast-path re-verify of an unchanged checkpoint of sparse shards (150 GiB apparent size, "
                    "HF cache layout), as the library call and end to end as the module through ad-hoc `ansible` "
                    "(with `ansible.builtin.ping` timed beside it: Ansible's own start-up); also the first "
                    "manifest build and verification.",
        "numbers": [("apparent size (GiB)", "checkpoint.apparent_gib"), ("files", "checkpoint.files"),
                    ("re-verify, library, each run (s)", "reverify_library_seconds"),
                    ("re-verify, module, each run (s)", "reverify_module_seconds"),
                    ("ansible ping, each run (s)", "ansible_ping_seconds"),
                    ("manifest build (s)", "build_manifest.seconds"),
                    ("first verification (s)", "first_verify.seconds")],
    },
    "checkpoint_throughput.json": {
        "title": "Checkpoint SCP copy over the lab fabric",
        "script": "bench/bench_checkpoint_throughput.py",
        "measures": "`BENCH_LINK=lab`: the checkpoint role's SCP-mode copy task against plain `rsync -a` of the "
                    "same files over the container lab's fabric bridge, rounds alternating which goes first.",
        "numbers": [("plain rsync -a (MB/s)", "plain_rsync_mb_s"), ("role's copy (MB/s)", "role_copy_mb_s"),
                    ("ratio (plain time / role time)", "throughput_ratio"), ("ratio of each round", "rounds.*.ratio")],
    },
    "checkpoint_throughput_local.json": {
        "title": "Parallel SCP streams, loopback, 2 cores",
        "script": "bench/bench_checkpoint_throughput.py",
        "measures": "`BENCH_LINK=local`: the `checkpoint_copy` module with one stream and with several streams "
                    "(AES-GCM, the key forced into rrsync) against plain `rsync -a`, through a private sshd on "
                    "127.0.0.1 of the 2-core development machine: sender, receiver, ssh and sshd share its cores.",
        "numbers": COPY_NUMBERS,
    },
    "checkpoint_throughput_local_run1.json": {
        "title": "Parallel SCP streams, loopback, 2 cores (earlier run)",
        "script": "bench/bench_checkpoint_throughput.py",
        "measures": "An earlier run of the same loopback benchmark, kept beside it: the load from other sessions "
                    "on the same 2 cores swung during both runs.",
        "numbers": COPY_NUMBERS,
    },
    "checkpoint_throughput_device.json": {
        "title": "Parallel SCP streams, loopback, 16 cores",
        "script": "bench/bench_checkpoint_throughput.py",
        "measures": "The same loopback benchmark (`BENCH_SSHD=/usr/sbin/sshd`) on a 16-core x86 machine (the "
                    "device machine, GPU unused), where the cores do not bound the copy as they do on 2; four "
                    "runs at different stream and shard counts.",
        "numbers": [("streams", "streams"), ("plain rsync -a (MB/s)", "plain_rsync_mb_s"),
                    ("one stream (MB/s)", "single_stream_mb_s"), ("parallel streams (MB/s)", "parallel_mb_s"),
                    ("parallel / plain", "throughput_ratio"),
                    ("all runs: shards", "device_runs.*.shards"), ("all runs: streams", "device_runs.*.streams"),
                    ("all runs: parallel / plain", "device_runs.*.throughput_ratio")],
    },
    "controller_cost.json": {
        "title": "Controller cost per host",
        "script": "bench/bench_controller_cost.py",
        "measures": "The controller's CPU-seconds (ansible-playbook, its forks, ssh and the ssh ControlMaster "
                    "processes) for a no-op `site.yml` and for a forced restart of every group, on the SIMULATED "
                    "lab pair and fleet lab; per host and per host-task, and a projection to 100 groups of two "
                    "nodes (docs/fleet.md, one controller for 100 groups).",
        "numbers": COST_NUMBERS,
    },
    "controller_cost_mitogen.json": {
        "title": "Controller cost per host under Mitogen's strategy",
        "script": "bench/bench_controller_cost.py",
        "measures": "The same as the controller cost benchmark with `BENCH_SETTINGS=mitogen`: Mitogen's "
                    "`mitogen_linear` strategy (one persistent Python per node instead of a new interpreter per "
                    "module run; docs/fleet.md, controller settings).",
        "numbers": COST_NUMBERS,
    },
    "fleet_scale.json": {
        "title": "Fleet scale",
        "script": "bench/bench_fleet.py",
        "measures": "On the SIMULATED fleet lab (a pair and a trio): `dspark-fleet reprovision` with a forced "
                    "restart of every group in parallel against one group alone, and a no-op `site.yml` over the "
                    "fleet against one pair, in the same run; also the controller memory per group.",
        "numbers": FLEET_NUMBERS,
    },
    "fleet_scale_mitogen.json": {
        "title": "Fleet scale under Mitogen's strategy",
        "script": "bench/bench_fleet.py",
        "measures": "The same as the fleet scale benchmark with `BENCH_SETTINGS=mitogen` (every `dspark-fleet` and "
                    "`ansible-playbook` run under Mitogen's `mitogen_linear` strategy; the bench checks that each "
                    "group's run used it).",
        "numbers": FLEET_NUMBERS,
    },
    "qualify_fleet.json": {
        "title": "Node qualification over the fleet",
        "script": "bench/bench_qualify.py",
        "measures": "On the SIMULATED fleet lab (two pairs and a trio): `dspark-fleet qualify` of every group at once "
                    "against one group alone, three runs each (the median kept); the checks it judged and the "
                    "controller memory per group.",
        "numbers": [("groups", "fleet.groups"), ("nodes", "fleet.nodes"), ("checks", "qualify.checks"),
                    ("fleet (s)", "qualify.fleet_seconds"), ("one group (s)", "qualify.one_group_seconds"),
                    ("fleet / one group", "qualify.ratio"),
                    ("controller memory peak per group (MiB)", "qualify.groups.*.controller_memory_peak_mib")],
    },
    "router_roll.json": {
        "title": "Requests through the router during a rolling reprovision",
        "script": "bench/bench_router_roll.py",
        "measures": "A steady load through the fleet lab's HAProxy router (half the requests streamed), first "
                    "alone, then during `dspark-fleet reprovision --rolling` of every group (drain, site.yml, "
                    "proof, back in rotation).",
        "numbers": ROLL_NUMBERS,
    },
    "router_failover.json": {
        "title": "Failover of the service address between two routers",
        "script": "bench/bench_router_failover.py",
        "measures": "The fleet lab's two routers behind one service address (keepalived): under a steady load, the "
                    "holder's HAProxy killed, its container stopped, its frames dropped, a few rounds each; the time "
                    "from the start of the kill to the first answer of a request sent after it, and the failed "
                    "requests: in flight, sent during the kill (docker exec, nft), sent after it took effect.",
        "numbers": [("worst failover (s)", "worst_failover_s"),
                    ("HAProxy killed (s)", "failures.haproxy_killed.*.failover_s"),
                    ("router stopped (s)", "failures.router_stopped.*.failover_s"),
                    ("frames dropped (s)", "failures.frames_dropped.*.failover_s"),
                    ("failed per round (every failure mode)", "failures.*.*.failed"),
                    ("in flight at the death per round", "failures.*.*.in_flight_at_death"),
                    ("the kill's own time (s)", "failures.*.*.kill_s"),
                    ("failed requests sent during the kill", "failures.*.*.failed_sent_during_kill"),
                    ("failed requests sent after the kill took effect", "failures.*.*.failed_sent_after_death")],
    },
    "real_engine_roll.json": {
        "title": "Requests through the router during a rolling reprovision (real engine)",
        "script": "bench/bench_router_roll.py",
        "measures": "The same as the fleet lab's roll benchmark (`BENCH_LAB=real`), on the real-engine lab: its real "
                    "vLLM group is drained, restarted (a real engine start), proven and put back while its "
                    "simulated group serves, under a steady load of 16-token answers with an API key.",
        "numbers": ROLL_NUMBERS,
    },
}

INTRO = """\
# Benchmarks

<!-- Generated from bench/results/*.json by tests/ci/bench_docs.py; do not edit by hand. -->

Each script in `bench/` writes its result to `bench/results/<name>.json` (`make bench` runs them all through
`bench/run.sh`; `bench/benchlib.py` holds the shared timing and result code). This page is generated from those
files: `python tests/ci/bench_docs.py` rewrites it, and `make lint` fails when it differs from them. The text about
each benchmark is in that script's `BENCHMARKS` table; every number, goal and verdict comes from the result.

Unless a result says otherwise, numbers were measured on the 2-core development machine, usually with other labs
or CI running beside them. Where the serving image is the SIMULATOR they measure the collection's own overhead
(Ansible, the proof, the copy), never vLLM's speed; the real-engine results use vLLM's CPU build and a tiny model.
Further measurements: the role READMEs ("Measured" sections of `roles/checkpoint/README.md` and
`roles/router/README.md`), `docs/fleet.md` (the fleet lab) and `docs/development.md` (CI stage times).
"""


class ResultError(Exception):
    """A result file that cannot be rendered; the message names the file and the fix."""


def load(path):
    """The parsed JSON object of one result file."""
    try:
        data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise ResultError("%s: cannot read it (%s)" % (path, err.strerror or err)) from err
    except ValueError as err:
        raise ResultError("%s: not valid JSON (%s). Fix: run its benchmark again or repair the file" % (path, err)) from err
    if not isinstance(data, dict):
        raise ResultError("%s: a result must be a JSON object, found %s" % (path, type(data).__name__))
    return data


def lookup(data, path):
    """The value at a dotted path ("*" = every item); KeyError naming the missing part."""
    values = [data]
    for part in path.split("."):
        found = []
        for value in values:
            if part == "*" and isinstance(value, list):
                found.extend(value)
            elif part == "*" and isinstance(value, dict):
                found.extend(value.values())
            elif isinstance(value, dict) and part in value:
                found.append(value[part])
            else:
                raise KeyError(part)
        values = found
    return values if "*" in path.split(".") else values[0]


def fmt(value):
    """A JSON value as page text."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(fmt(item) for item in value)
    if isinstance(value, dict):
        return ", ".join("%s %s" % (key, fmt(item)) for key, item in value.items())
    if value is None:
        return "none"
    return str(value)


def goal_text(goal):
    """A result's `goal` mapping in words: max_x / x_max = at most, min_x / x_min = at least, else equals."""
    if not goal:
        return "none recorded"
    parts = []
    for key, value in goal.items():
        if key.startswith("max_") or key.endswith("_max"):
            parts.append("`%s` at most %s" % (key.replace("max_", "", 1) if key.startswith("max_") else key[:-4], fmt(value)))
        elif key.startswith("min_") or key.endswith("_min"):
            parts.append("`%s` at least %s" % (key.replace("min_", "", 1) if key.startswith("min_") else key[:-4], fmt(value)))
        else:
            parts.append("`%s` = %s" % (key, fmt(value)))
    return ", ".join(parts)


def verdict(data):
    if "met" not in data:
        return "no verdict recorded"
    return "**met**" if data["met"] else "**not met**"


def commit(data):
    value = data.get("git_commit") or data.get("commit")
    return "`%s`" % str(value)[:12] if value else "not recorded"


def machine(data):
    info = data.get("machine") or {}
    if not info:
        return "not recorded"
    text = "%s cores, %s" % (info.get("cores", "?"), info.get("cpu", "unknown CPU"))
    if info.get("python"):
        text += ", Python %s" % info["python"]
    return text


def entry(name):
    if name not in BENCHMARKS:
        raise ResultError("%s/%s: no entry for it in BENCHMARKS in tests/ci/bench_docs.py. Fix: add one (title, "
                          "script, what it measures, key numbers), then %s" % (RESULTS, name, FIX))
    return BENCHMARKS[name]


def numbers(name, data):
    """The key-number lines of one result."""
    lines = []
    for label, path in entry(name)["numbers"]:
        try:
            value = lookup(data, path)
        except KeyError as err:
            raise ResultError("%s/%s: no field %r (part %r missing), which BENCHMARKS in tests/ci/bench_docs.py "
                              "names as a key number. Fix: correct the entry or the result" % (RESULTS, name, path, err.args[0])) from err
        lines.append("- %s: %s" % (label, fmt(value)))
    return lines


def section(name, data):
    spec = entry(name)
    lines = ["## %s" % spec["title"], "", spec["measures"], "",
             "- result: `%s/%s`, written by `%s`" % (RESULTS, name, spec["script"]),
             "- goal: %s; %s" % (goal_text(data.get("goal")), verdict(data)),
             "- measured: %s, commit %s, on %s" % (data.get("date", "date not recorded"), commit(data), machine(data))]
    lines.extend(numbers(name, data))
    if data.get("note"):
        lines.extend(["", "Note recorded with the result: %s" % " ".join(str(data["note"]).split())])
    return lines


def render(results_dir):
    """The page for every *.json in results_dir (sorted by file name)."""
    paths = sorted(pathlib.Path(results_dir).glob("*.json"))
    if not paths:
        raise ResultError("%s: no *.json result files" % results_dir)
    loaded = [(path.name, load(path)) for path in paths]
    rows = ["| Result | Benchmark | Goal | Verdict | Measured |", "| --- | --- | --- | --- | --- |"]
    body = []
    for name, data in loaded:
        spec = entry(name)
        rows.append("| `%s` | %s | %s | %s | %s |" % (
            name, spec["title"], goal_text(data.get("goal")).replace("|", "\\|"), verdict(data),
            str(data.get("date", "not recorded"))[:10]))
        body.extend([""] + section(name, data))
    return INTRO + "\n" + "\n".join(rows) + "\n" + "\n".join(body) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail with a diff when the page is out of date")
    parser.add_argument("--results", default=str(ROOT / RESULTS), help="result directory (default: %(default)s)")
    parser.add_argument("--output", default=str(ROOT / PAGE), help="page to write or check (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        wanted = render(args.results)
    except ResultError as err:
        print("bench_docs: %s" % err, file=sys.stderr)
        return 2
    output = pathlib.Path(args.output)
    current = output.read_text(encoding="utf-8") if output.exists() else ""
    if args.check:
        if current == wanted:
            return 0
        diff = difflib.unified_diff(current.splitlines(True), wanted.splitlines(True),
                                    "%s (committed)" % args.output, "%s (from the results)" % args.output)
        sys.stderr.writelines(diff)
        print("bench_docs: %s differs from %s. Fix: %s" % (args.output, args.results, FIX), file=sys.stderr)
        return 1
    if current != wanted:
        output.write_text(wanted, encoding="utf-8")
        print("wrote %s" % args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
