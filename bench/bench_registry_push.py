"""What lab/registry_push.py saves against `docker push`: the lab registry (lab/registry.sh) gets BENCH_IMAGE (default the
real-engine image, 2.8 GB) once each way, from a fresh registry each time, and a lab node (spark-head of the pair lab)
pulls it by digest each time. The numbers are the machine's busy CPU (every process: the host's dockerd, the registry,
the uploader, the node's dockerd; /proc/stat) and the wall time of the push and of the pull. Goal: the uploader's push
and pull together at most 0.6 of `docker push`'s. The saving is the push's (dockerd gzips every layer); the pull
costs about the same either way (gunzip of 1 GB against 2.8 GB more over the bridge).

Needs the pair lab with its registry and docker_runtime converged (the nodes trust the lab registry): `make lab`, then
`.venv/bin/ansible-playbook -i inventories/lab/hosts.yml site.yml --tags docker_runtime` (or `make lab site`).
Env: BENCH_IMAGE (an image of this host's dockerd), BENCH_NODE (default spark-head), BENCH_RUNS (default 1: each run
moves the image four times).
"""

import os
import pathlib
import subprocess
import sys
import time

from benchlib import busy_core_seconds, stamp, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "registry_push.json"
IMAGE = os.environ.get("BENCH_IMAGE", "dspark-lab/vllm-cpu:0.32.0")
NODE = os.environ.get("BENCH_NODE", "spark-head")
RUNS = int(os.environ.get("BENCH_RUNS", "1"))
STATE = ROOT / ".lab" / "registry"
HOST = "127.0.0.1:%s" % os.environ.get("REGISTRY_HOST_PORT", "5998")
GOAL = {"cpu_ratio_max": 0.6}


def sh(*argv, check=True):
    run = subprocess.run([str(a) for a in argv], cwd=ROOT, capture_output=True, text=True, check=False)
    if check and run.returncode != 0:
        raise SystemExit("bench: %s failed (exit %d):\n%s" % (" ".join(map(str, argv)), run.returncode,
                                                              (run.stdout + run.stderr)[-3000:]))
    return run.stdout.strip()


def measured(action):
    """(result of action(), wall seconds, machine busy CPU-seconds) of one call."""
    busy, started = busy_core_seconds(), time.monotonic()
    value = action()
    return value, round(time.monotonic() - started, 1), round(busy_core_seconds() - busy, 1)


def fresh_registry():
    """An empty registry (its blobs live in its container): down, then up (which puts the small SIMULATOR back)."""
    sh("bash", "lab/registry.sh", "down")
    sh("bash", "lab/registry.sh", "up")
    return (STATE / "address").read_text(encoding="utf-8").strip()


def docker_push(repo):
    """`docker push` of IMAGE as HOST/repo:latest; its manifest digest from RepoDigests."""
    ref = "%s/%s" % (HOST, repo)
    sh("docker", "tag", IMAGE, ref + ":latest")
    try:
        sh("docker", "push", "-q", ref + ":latest")
        digests = sh("docker", "image", "inspect", "-f", "{{range .RepoDigests}}{{println .}}{{end}}", ref + ":latest")
    finally:
        sh("docker", "rmi", ref + ":latest", check=False)
    return next(line.split("@", 1)[1] for line in digests.splitlines() if line.startswith(ref + "@"))


def uploader(repo):
    return sh(sys.executable, "lab/registry_push.py", IMAGE, HOST, repo, "latest")


def node_pull(reference):
    """The node pulls REFERENCE (absent there before); its image ID."""
    sh("docker", "exec", NODE, "docker", "pull", "-q", reference)
    return sh("docker", "exec", NODE, "docker", "image", "inspect", "-f", "{{.Id}}", reference)


def one(method, push, want_id):
    """One push of METHOD from an empty registry and one pull on the node: wall and machine CPU of each."""
    address = fresh_registry()
    repo = "bench/%s" % method
    digest, push_wall, push_cpu = measured(lambda: push(repo))
    reference = "%s/%s@%s" % (address, repo, digest)
    try:
        image_id, pull_wall, pull_cpu = measured(lambda: node_pull(reference))
    finally:
        sh("docker", "exec", NODE, "docker", "rmi", reference, check=False)
    if image_id != want_id:
        raise SystemExit("bench: %s: the node's image ID %s is not the host's %s" % (method, image_id, want_id))
    return {"push_wall_s": push_wall, "push_cpu_s": push_cpu, "pull_wall_s": pull_wall, "pull_cpu_s": pull_cpu,
            "cpu_s": round(push_cpu + pull_cpu, 1)}


def median(samples):
    middle = sorted(samples, key=lambda s: s["cpu_s"])[len(samples) // 2]
    return dict(middle, cpu_s_each=[s["cpu_s"] for s in samples])


def main():
    want_id = sh("docker", "image", "inspect", "-f", "{{.Id}}", IMAGE)
    size = int(sh("docker", "image", "inspect", "-f", "{{.Size}}", IMAGE))
    samples = {"docker_push": [], "uncompressed_upload": []}
    try:
        for dummy in range(RUNS):
            samples["docker_push"].append(one("docker_push", docker_push, want_id))
            samples["uncompressed_upload"].append(one("uncompressed_upload", uploader, want_id))
    finally:
        fresh_registry()                       # leave the lab's registry as `registry.sh up` makes it
    gzip, plain = median(samples["docker_push"]), median(samples["uncompressed_upload"])
    ratio = round(plain["cpu_s"] / gzip["cpu_s"], 2)
    result = {"benchmark": "an image into the lab registry and pulled by digest on a lab node: `docker push` against "
                           "lab/registry_push.py (uncompressed layers)", **stamp(), "image": IMAGE,
              "image_size_gb": round(size / 1e9, 2), "runs": RUNS, "docker_push": gzip, "uncompressed_upload": plain,
              "cpu_ratio": ratio, "push_cpu_ratio": round(plain["push_cpu_s"] / gzip["push_cpu_s"], 2),
              "pull_cpu_ratio": round(plain["pull_cpu_s"] / gzip["pull_cpu_s"], 2), "goal": GOAL}
    result["met"] = ratio <= GOAL["cpu_ratio_max"]
    return write_result(RESULT, result)


if __name__ == "__main__":
    sys.exit(main())
