"""SCP-mode copy throughput against plain `rsync -a` over the same link: goal at least 0.9 of it.

On the lab pair (containers joined by the MTU 9000 fabric bridge), the worker (the checkpoint source)
gets a checkpoint of BENCH_SHARDS non-sparse shards of BENCH_SHARD_SIZE random bytes. Each round then
  - plain: root on the worker runs `rsync -a` of the model directory to root@head over the fabric
    with a throw-away unrestricted key (the baseline),
  - role:  the head's copy is removed and playbooks/checkpoint.yml copies it again (SCP mode: the
    dedicated key forced into rrsync, --sparse --partial, itemized); its copy task's duration comes
    from the json callback. The playbook's whole wall time (manifest, key exchange, verification of
    every byte on the target) is recorded beside it, as the cost of the full run.
Rounds alternate which copy goes first (page cache). Everything the benchmark made is removed at the end.

    python3 bench/bench_checkpoint_throughput.py     # after `make lab`; BENCH_ROUNDS, BENCH_SHARDS, ...
"""

import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

from benchlib import machine, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "checkpoint_throughput.json"
INVENTORY = "inventories/lab/hosts.yml"
GOAL_RATIO = 0.9
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SHARDS = int(os.environ.get("BENCH_SHARDS", "12"))
SHARD_SIZE = os.environ.get("BENCH_SHARD_SIZE", "256M")
MODEL = "dspark-bench/Throughput-Test"
REVISION = "b3c5e1a0d2f4b6c8e0a2c4e6a8c0e2a4c6e8a0b2"
CACHE = "/var/lib/dspark/hf-cache"
REPO_DIR = "%s/hub/models--%s" % (CACHE, MODEL.replace("/", "--"))
PLAIN_DEST = "/var/tmp/dspark-bench-plain"
BENCH_KEY = "/root/.ssh/dspark_bench_plain"
HEAD, WORKER = "spark-head", "spark-worker"
HEAD_FABRIC, WORKER_FABRIC = "192.168.100.1", "192.168.100.2"
COPY_TASK = "Copy the snapshot from the source to the target"
BIN = ROOT / ".venv" / "bin"


def tool(name):
    return str(BIN / name) if (BIN / name).exists() else name


def run(argv, env=None):
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False,
                          env=dict(os.environ, **(env or {})))
    if done.returncode != 0:
        sys.exit("%s failed (rc=%d):\n%s" % (" ".join(argv[:4]), done.returncode,
                                             done.stdout[-4000:] + done.stderr[-2000:]))
    return done.stdout


def shell(host, script):
    """Run a shell script as root on one lab node; its stdout."""
    out = run([tool("ansible"), host, "-i", INVENTORY, "-b", "-m", "ansible.builtin.shell",
               "-a", json.dumps({"cmd": script, "executable": "/bin/bash"})],
              env={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"})
    return json.loads(out)["plays"][0]["tasks"][0]["hosts"][host]["stdout"]


def seconds_between(duration):
    """Seconds from a json-callback duration's start to its end (ISO times in UTC)."""
    start, end = (datetime.datetime.fromisoformat(duration[k].rstrip("Z")) for k in ("start", "end"))
    return round((end - start).total_seconds(), 3)


def role_copy():
    """Remove the head's copy, run the checkpoint playbook; (copy task seconds, playbook seconds, copied files)."""
    shell(HEAD, "rm -rf %s /var/lib/dspark/checkpoint/models--%s-*" % (REPO_DIR, MODEL.replace("/", "--")))
    started = time.monotonic()
    out = run([tool("ansible-playbook"), "-i", INVENTORY, "playbooks/checkpoint.yml",
               "-e", "dspark_model=%s" % MODEL, "-e", "dspark_model_revision=%s" % REVISION],
              env={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"})
    wall = round(time.monotonic() - started, 3)
    tasks = [t for play in json.loads(out)["plays"] for t in play["tasks"] if COPY_TASK in t["task"]["name"]]
    if not tasks or HEAD not in tasks[0]["hosts"]:
        sys.exit("the playbook ran no copy task for %s" % HEAD)
    copied = len(tasks[0]["hosts"][HEAD].get("stdout_lines", []))
    return seconds_between(tasks[0]["task"]["duration"]), wall, copied


def plain_copy():
    """rsync -a of the same directory over the same link, timed on the worker around rsync alone."""
    out = shell(WORKER, """set -e
        ssh -i {key} -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
            root@{head} rm -rf {dest}
        start=$(date +%s.%N)
        rsync -a -e 'ssh -i {key} -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null' \
            {src}/ root@{head}:{dest}/
        end=$(date +%s.%N)
        echo "$start $end"
        """.format(key=BENCH_KEY, head=HEAD_FABRIC, dest=PLAIN_DEST, src=REPO_DIR))
    start, end = out.split()[-2:]
    return round(float(end) - float(start), 3)


def setup():
    # The lab seeds lab/fake_checkpoint.py on the worker (lab/seed_checkpoint.yml).
    shell(WORKER, "python3 /usr/local/lib/fake_checkpoint.py --cache {cache} --model {model} --revision {rev} "
                  "--shards {n} --shard-size {size} --sparse-size 0 --seed 7 >/dev/null && "
                  "du -sb {repo} | cut -f1".format(cache=CACHE, model=MODEL, rev=REVISION, n=SHARDS,
                                                   size=SHARD_SIZE, repo=REPO_DIR))
    shell(WORKER, "install -d -m 0700 /root/.ssh && rm -f {k} {k}.pub && ssh-keygen -q -t ed25519 -N '' "
                  "-C dspark-bench -f {k}".format(k=BENCH_KEY))
    pub = shell(WORKER, "cat %s.pub" % BENCH_KEY).strip()
    shell(HEAD, "install -d -m 0700 /root/.ssh && echo 'from=\"%s\" %s' >> /root/.ssh/authorized_keys"
          % (WORKER_FABRIC, pub))


def cleanup():
    shell(HEAD, "rm -rf %s %s /var/lib/dspark/checkpoint/models--%s-*; "
                "sed -i '/ dspark-bench$/d' /root/.ssh/authorized_keys" % (PLAIN_DEST, REPO_DIR, MODEL.replace("/", "--")))
    shell(WORKER, "rm -rf %s /var/lib/dspark/checkpoint/models--%s-* %s %s.pub"
          % (REPO_DIR, MODEL.replace("/", "--"), BENCH_KEY, BENCH_KEY))


def main():
    try:
        setup()
        size = int(shell(WORKER, "du -sb --apparent-size %s | cut -f1" % REPO_DIR).strip())
        rounds = []
        for i in range(ROUNDS):
            if i % 2 == 0:
                plain = plain_copy()
                copy, wall, files = role_copy()
            else:
                copy, wall, files = role_copy()
                plain = plain_copy()
            rounds.append({"plain_rsync_seconds": plain, "role_copy_seconds": copy, "role_playbook_seconds": wall,
                           "role_files_copied": files, "first": "plain" if i % 2 == 0 else "role",
                           "ratio": round(plain / copy, 3)})
    finally:
        cleanup()
    plain_total = sum(r["plain_rsync_seconds"] for r in rounds)
    copy_total = sum(r["role_copy_seconds"] for r in rounds)
    ratio = round(plain_total / copy_total, 3)
    result = {
        "benchmark": "checkpoint SCP mode copy throughput against plain rsync -a, same files, same link, same run",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "git_commit": run(["git", "rev-parse", "--short", "HEAD"]).strip(),
        "link": "lab fabric: Docker bridge between two containers on one host, MTU 9000, SSH (encrypted) both ways",
        "checkpoint": {"model": MODEL, "shards": SHARDS, "shard_size": SHARD_SIZE, "apparent_bytes": size,
                       "sparse": False},
        "rounds": rounds,
        "plain_rsync_mb_s": round(size * ROUNDS / plain_total / 1e6, 1),
        "role_copy_mb_s": round(size * ROUNDS / copy_total / 1e6, 1),
        "throughput_ratio": ratio,
        "goal": {"min_ratio": GOAL_RATIO},
        "met": ratio >= GOAL_RATIO,
        "note": ("ratio = plain rsync time / role copy-task time over all rounds. The copy task's time includes "
                 "Ansible's delegation to the source (about a second); role_playbook_seconds is the whole "
                 "checkpoint run, including building the manifest and hashing every byte again on the target."),
    }
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
