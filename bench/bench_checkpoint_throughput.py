"""SCP-mode copy throughput against plain `rsync -a` over the same link: goal at least 1.5x of it (parallel streams).

Two links (BENCH_LINK):
  local  (default when no lab is up): a private sshd on 127.0.0.1 (BENCH_SSHD, its own host key, config and
         authorized_keys in a temporary directory; the role's key forced into `rrsync -wo -no-del` as the role
         installs it). Each round times plain `rsync -a` (default cipher, what a person types), the role's module
         `dspark.cluster.checkpoint_copy` with one stream, and with BENCH_STREAMS streams, all through
         `ansible localhost -m` (the module as the role runs it, without the playbook around it).
         Needs no lab: `BENCH_SSHD=/usr/sbin/sshd python3 bench/bench_checkpoint_throughput.py`.
  lab    (the container lab, `make lab` first), described below, with the role at checkpoint_scp_streams=1 and at
         BENCH_STREAMS.

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
GOAL_RATIO = 1.5
LINK = os.environ.get("BENCH_LINK", "local")
STREAMS = int(os.environ.get("BENCH_STREAMS", "4"))
SSHD = os.environ.get("BENCH_SSHD", "/usr/sbin/sshd")
PORT = int(os.environ.get("BENCH_PORT", "2299"))
LOCAL_RESULT = ROOT / "bench" / "results" / "checkpoint_throughput_local.json"
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


def role_copy(streams=STREAMS):
    """Remove the head's copy, run the checkpoint playbook; (copy task seconds, playbook seconds, copied files)."""
    shell(HEAD, "rm -rf %s /var/lib/dspark/checkpoint/models--%s-*" % (REPO_DIR, MODEL.replace("/", "--")))
    started = time.monotonic()
    out = run([tool("ansible-playbook"), "-i", INVENTORY, "playbooks/checkpoint.yml",
               "-e", "dspark_model=%s" % MODEL, "-e", "dspark_model_revision=%s" % REVISION,
               "-e", "checkpoint_scp_streams=%d" % streams],
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


def main_lab():
    try:
        setup()
        size = int(shell(WORKER, "du -sb --apparent-size %s | cut -f1" % REPO_DIR).strip())
        rounds = []
        for i in range(ROUNDS):
            if i % 2 == 0:
                plain = plain_copy()
                single = role_copy(1)[0]
                copy, wall, files = role_copy()
            else:
                copy, wall, files = role_copy()
                single = role_copy(1)[0]
                plain = plain_copy()
            rounds.append({"plain_rsync_seconds": plain, "role_single_stream_seconds": single,
                           "role_copy_seconds": copy, "role_playbook_seconds": wall, "streams": STREAMS,
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
        "streams": STREAMS,
        "role_single_stream_mb_s": round(size * ROUNDS / sum(r["role_single_stream_seconds"] for r in rounds) / 1e6, 1),
        "link": "lab fabric: Docker bridge between two containers on one host, MTU 9000, SSH (encrypted) both ways",
        "checkpoint": {"model": MODEL, "shards": SHARDS, "shard_size": SHARD_SIZE, "apparent_bytes": size,
                       "sparse": False},
        "rounds": rounds,
        "plain_rsync_mb_s": round(size * ROUNDS / plain_total / 1e6, 1),
        "role_copy_mb_s": round(size * ROUNDS / copy_total / 1e6, 1),
        "throughput_ratio": ratio,
        "goal": {"min_ratio": GOAL_RATIO},
        "met": ratio >= GOAL_RATIO,
        "note": ("ratio = plain rsync time / role copy-task time (BENCH_STREAMS streams) over all rounds. The copy task's time includes "
                 "Ansible's delegation to the source (about a second); role_playbook_seconds is the whole "
                 "checkpoint run, including building the manifest and hashing every byte again on the target."),
    }
    return write_result(RESULT, result)


LOCAL_SSHD_CONFIG = """Port {port}
ListenAddress 127.0.0.1
HostKey {d}/host_ed25519
AuthorizedKeysFile {d}/authorized_keys
PidFile {d}/sshd.pid
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
MaxStartups 20:30:100
"""


def local_rounds(d, size):
    """The three copies per round over the private sshd; rounds rotate which goes first."""
    src = os.path.join(d, "src", "hub", "models--" + MODEL.replace("/", "--"))
    known = "-o UserKnownHostsFile=%s/known_hosts -o StrictHostKeyChecking=yes -o BatchMode=yes -p %d" % (d, PORT)
    plain_ssh = "ssh -i %s/plain_key %s" % (d, known)
    role_ssh = "ssh -i %s/role_key -o IdentitiesOnly=yes %s" % (d, known)
    opts = json.dumps(["--archive", "--sparse", "--partial", "--timeout=300"])
    filters = json.dumps(["--include=/refs/", "--include=/refs/main", "--include=/snapshots/",
                          "--include=/snapshots/%s/***" % REVISION, "--include=/blobs/***", "--exclude=*"])
    dest_hub = os.path.join(d, "dst", "hub")
    env = {"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json",
           "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), "ANSIBLE_LOCALHOST_WARNING": "0",
           "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0", "ANSIBLE_PYTHON_INTERPRETER": sys.executable}

    def clear():
        subprocess.run(["rm", "-rf", dest_hub, os.path.join(d, "dst", "plain")], check=True)
        os.makedirs(dest_hub)

    def plain():
        clear()
        t0 = time.monotonic()
        run(["rsync", "-a", "-e", plain_ssh, src + "/", "root@127.0.0.1:%s/dst/plain/" % d])
        return round(time.monotonic() - t0, 3)

    def module(streams):
        clear()
        args = json.dumps({"src": src, "dest": "root@127.0.0.1:models--" + MODEL.replace("/", "--"),
                           "revision": REVISION, "streams": streams, "rsync_options": json.loads(opts),
                           "filters": json.loads(filters), "ssh_command": role_ssh})
        t0 = time.monotonic()
        out = run([tool("ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m",
                   "dspark.cluster.checkpoint_copy", "-a", args], env=env)
        wall = round(time.monotonic() - t0, 3)
        res = json.loads(out)["plays"][0]["tasks"][0]["hosts"]["localhost"]
        if res.get("failed"):
            sys.exit("checkpoint_copy failed: %s" % res.get("msg"))
        # again: nothing to copy, changed must be false
        again = json.loads(run([tool("ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m",
                                "dspark.cluster.checkpoint_copy", "-a", args], env=env))
        again = again["plays"][0]["tasks"][0]["hosts"]["localhost"]
        return {"seconds": res["seconds"], "ansible_wall_seconds": wall, "streams": res["streams"],
                "files_itemized": len(res["stdout_lines"]), "rerun_changed": again["changed"],
                "rerun_seconds": again["seconds"]}

    rounds = []
    order = [("plain", None), ("single", 1), ("parallel", STREAMS)]
    for i in range(ROUNDS):
        rot = order[i % 3:] + order[:i % 3]
        r = {"first": rot[0][0]}
        for name, streams in rot:
            if name == "plain":
                r["plain_rsync_seconds"] = plain()
            else:
                m = module(streams)
                r["%s_seconds" % name] = m["seconds"]
                r["%s_detail" % name] = m
        r["ratio_parallel"] = round(r["plain_rsync_seconds"] / r["parallel_seconds"], 3)
        r["ratio_single"] = round(r["plain_rsync_seconds"] / r["single_seconds"], 3)
        rounds.append(r)
    return rounds


def main_local():
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="bench-ckpt-", dir="/var/tmp")
    sshd = None
    try:
        subprocess.run([sys.executable, str(ROOT / "lab" / "fake_checkpoint.py"), "--cache", os.path.join(d, "src"),
                        "--model", MODEL, "--revision", REVISION, "--shards", str(SHARDS), "--shard-size", SHARD_SIZE,
                        "--sparse-size", "0", "--blobs", "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
        for key in ("host_ed25519", "plain_key", "role_key"):
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench", "-f", os.path.join(d, key)])
        os.makedirs(os.path.join(d, "dst", "hub"))
        with open(os.path.join(d, "authorized_keys"), "w", encoding="utf-8") as f:
            f.write(open(os.path.join(d, "plain_key.pub"), encoding="utf-8").read())
            f.write('restrict,from="127.0.0.1",command="/usr/bin/rrsync -wo -no-del -no-lock %s/dst/hub" %s'
                    % (d, open(os.path.join(d, "role_key.pub"), encoding="utf-8").read()))
        with open(os.path.join(d, "known_hosts"), "w", encoding="utf-8") as f:
            host_key = open(os.path.join(d, "host_ed25519.pub"), encoding="utf-8").read().split()[:2]
            f.write("[127.0.0.1]:%d %s\n" % (PORT, " ".join(host_key)))
        with open(os.path.join(d, "sshd_config"), "w", encoding="utf-8") as f:
            f.write(LOCAL_SSHD_CONFIG.format(port=PORT, d=d))
        sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", os.path.join(d, "sshd_config")],
                                stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "sshd.log"), "w"))
        time.sleep(1)
        src = os.path.join(d, "src", "hub", "models--" + MODEL.replace("/", "--"))
        size = int(run(["du", "-sb", "--apparent-size", src]).split()[0])
        load_before = open("/proc/loadavg", encoding="utf-8").read().split()[:3]
        rounds = local_rounds(d, size)
        load_after = open("/proc/loadavg", encoding="utf-8").read().split()[:3]
    finally:
        if sshd:
            sshd.terminate()
            sshd.wait()
        shutil.rmtree(d, ignore_errors=True)
    total = {k: sum(r[k] for r in rounds) for k in ("plain_rsync_seconds", "single_seconds", "parallel_seconds")}
    ratio = round(total["plain_rsync_seconds"] / total["parallel_seconds"], 3)
    result = {
        "benchmark": "checkpoint SCP mode copy (checkpoint_copy module) against plain rsync -a, same files, same link, same run",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "git_commit": run(["git", "rev-parse", "--short", "HEAD"]).strip(),
        "link": "loopback: a private sshd on 127.0.0.1 on the same host (sender, receiver, ssh and sshd share its cores)",
        "loadavg_before_after": [load_before, load_after],
        "ssh": subprocess.run(["ssh", "-V"], capture_output=True, text=True, check=False).stderr.strip(),
        "checkpoint": {"model": MODEL, "shards": SHARDS, "shard_size": SHARD_SIZE, "apparent_bytes": size,
                       "sparse": False, "blobs": True},
        "streams": STREAMS,
        "rounds": rounds,
        "plain_rsync_mb_s": round(size * ROUNDS / total["plain_rsync_seconds"] / 1e6, 1),
        "single_stream_mb_s": round(size * ROUNDS / total["single_seconds"] / 1e6, 1),
        "parallel_mb_s": round(size * ROUNDS / total["parallel_seconds"] / 1e6, 1),
        "ratio_single": round(total["plain_rsync_seconds"] / total["single_seconds"], 3),
        "throughput_ratio": ratio,
        "goal": {"min_ratio": GOAL_RATIO},
        "met": ratio >= GOAL_RATIO,
        "note": ("plain = rsync -a with ssh's default cipher (chacha20-poly1305), compression off (ssh default). "
                 "single/parallel = the module's own copy time (streams + the final filtered pass), cipher "
                 "aes128-gcm@openssh.com, no compression, the key forced into rrsync; each is run twice and the "
                 "second run must report changed=false (rerun_changed)."),
    }
    return write_result(LOCAL_RESULT, result)


if __name__ == "__main__":
    sys.exit(main_local() if LINK == "local" else main_lab())
