# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a serving node's state for the support bundle (playbooks/bundle.yml; issue #43). Reads only, changes nothing.

Argument: base64 of a JSON object (container, compose_file, log_lines, log_bytes, sysctl_keys, sysctl_file,
interfaces, manifest, vllm_timeout). Prints one JSON object: versions, fabric, container (env, command), checkpoint
(the manifest's summary), log. Every value is raw: the controller redacts it before anything is written.
Python 3 standard library only (the node's python3).
"""

import base64
import glob
import hashlib
import json
import platform
import shutil
import subprocess
import sys

ENV_PREFIXES = ("NCCL_", "GLOO_", "VLLM_", "TP_", "MASTER_", "UCX_", "TORCH_", "CUDA_", "DSPARK_", "RANK", "WORLD_",
                "LOCAL_RANK", "OMP_", "HF_", "TRANSFORMERS_")


def run(argv, timeout=20, limit=None):
    """(rc, stdout, stderr) of a command; rc None when it cannot run."""
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "", "%s: %s" % (type(exc).__name__, exc)
    out = proc.stdout if limit is None else proc.stdout[-limit:]
    return proc.returncode, out.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")[-2000:]


def read(path, limit=1 << 20):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def os_release():
    info = {}
    for line in (read("/etc/os-release") or "").splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            info[key] = value.strip().strip('"')
    return info.get("PRETTY_NAME") or info.get("NAME") or "unknown"


def driver():
    if shutil.which("nvidia-smi"):
        rc, out, err = run(["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"])
        if rc == 0 and out.strip():
            return out.strip()
        return "nvidia-smi failed (rc %s): %s" % (rc, (err or out).strip()[-300:])
    text = read("/proc/driver/nvidia/version")
    if text:
        return text.strip().splitlines()[0]
    return "absent"


def docker_version():
    rc, out, err = run(["docker", "version", "--format", "{{.Server.Version}}"])
    return out.strip() if rc == 0 else "unknown (%s)" % (err or out).strip()[-300:]


def ip_json(*args):
    rc, out, err = run(["ip", "-j"] + list(args))
    if rc != 0:
        return {"error": (err or out).strip()[-300:] or "rc %s" % rc}
    try:
        return json.loads(out or "null")
    except ValueError as exc:
        return {"error": "not JSON: %s" % exc}


def gids():
    """Every non-zero RoCE GID of every HCA port, with its type and netdev (sysfs)."""
    out = []
    for path in sorted(glob.glob("/sys/class/infiniband/*/ports/*/gids/*")):
        value = (read(path) or "").strip()
        if not value or set(value.replace(":", "")) <= {"0"}:
            continue
        parts = path.split("/")
        hca, port, index = parts[4], parts[6], parts[8]
        base = "/sys/class/infiniband/%s/ports/%s/gid_attrs" % (hca, port)
        out.append({"hca": hca, "port": port, "index": int(index), "gid": value,
                    "type": (read("%s/types/%s" % (base, index)) or "").strip() or None,
                    "ndev": (read("%s/ndevs/%s" % (base, index)) or "").strip() or None})
    return out


def fabric(args):
    links = {}
    for name in args.get("interfaces") or []:
        links[name] = {"speed": (read("/sys/class/net/%s/speed" % name) or "").strip() or None,
                       "operstate": (read("/sys/class/net/%s/operstate" % name) or "").strip() or None,
                       "mtu": (read("/sys/class/net/%s/mtu" % name) or "").strip() or None}
    rdma = "absent"
    if shutil.which("rdma"):
        rc, out, err = run(["rdma", "-j", "link"])
        try:
            rdma = json.loads(out) if rc == 0 else "rdma link failed: %s" % (err or out).strip()[-300:]
        except ValueError:
            rdma = out
    sysctls = {}
    for key in args.get("sysctl_keys") or []:
        value = read("/proc/sys/" + key.replace(".", "/"))
        sysctls[key] = " ".join(value.split()) if value is not None else None
    return {"links": ip_json("link", "show"), "addresses": ip_json("addr", "show"),
            "routes": ip_json("route", "show", "table", "all"), "routes6": ip_json("-6", "route", "show"),
            "fabric_links": links, "roce_gids": gids(), "rdma_link": rdma, "sysctls": sysctls,
            "sysctl_file": read(args.get("sysctl_file") or "/nonexistent")}


def container(args):
    name = args["container"]
    rc, out, err = run(["docker", "inspect", name])
    if rc != 0:
        return {"present": False, "error": (err or out).strip()[-300:]}
    try:
        info = json.loads(out)[0]
    except (ValueError, IndexError) as exc:
        return {"present": False, "error": "docker inspect printed no JSON: %s" % exc}
    config = info.get("Config") or {}
    env = [e for e in config.get("Env") or [] if e.startswith(ENV_PREFIXES)]
    image_id = info.get("Image")
    digests, tags = [], []
    fmt = '{"d": {{json .RepoDigests}}, "t": {{json .RepoTags}}}'
    rc, out, _err = run(["docker", "image", "inspect", "--format", fmt, image_id or ""])
    if rc == 0:
        try:
            found = json.loads(out)
            digests, tags = found.get("d") or [], found.get("t") or []
        except (ValueError, AttributeError):
            pass
    state = info.get("State") or {}
    vllm = "unknown (the container is not running)"
    if state.get("Running"):
        rc, out, err = run(["docker", "exec", name, "python3", "-c", "import vllm; print(vllm.__version__)"],
                           timeout=args.get("vllm_timeout") or 60)
        lines = (err or out).strip().splitlines()
        vllm = out.strip() if rc == 0 and out.strip() else "unknown (%s)" % (lines[-1] if lines else "rc %s" % rc)
    return {"present": True, "name": name, "image": config.get("Image"), "image_id": image_id,
            "repo_digests": digests, "repo_tags": tags, "vllm": vllm, "env": env,
            "entrypoint": config.get("Entrypoint"), "command": config.get("Cmd"),
            "state": {k: state.get(k) for k in ("Status", "ExitCode", "OOMKilled", "StartedAt", "FinishedAt")},
            "restarts": info.get("RestartCount"), "compose_file": read(args.get("compose_file") or "/nonexistent")}


def checkpoint(args):
    path = args.get("manifest")
    raw = None
    if path:
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except OSError as exc:
            return {"manifest": path, "present": False, "error": str(exc)}
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, AttributeError) as exc:
        return {"manifest": path, "present": True, "error": "not JSON: %s" % exc}
    return {"manifest": path, "present": True, "model": doc.get("model"), "revision": doc.get("revision"),
            "created": doc.get("created"), "file_count": doc.get("file_count", len(doc.get("entries") or [])),
            "total_bytes": doc.get("total_size"), "algorithm": doc.get("algorithm"),
            "sha256": hashlib.sha256(raw).hexdigest()}


def logs(args):
    # docker logs writes the container's stdout and stderr to its own: both are the log, in their order.
    argv = ["docker", "logs", "--timestamps", "--tail", str(args.get("log_lines") or 500), args["container"]]
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "text": None, "error": "%s: %s" % (type(exc).__name__, exc)}
    limit = int(args.get("log_bytes") or 1 << 20)
    text = proc.stdout[-limit:].decode("utf-8", "replace")
    if proc.returncode != 0:
        return {"ok": False, "text": None, "error": text.strip()[-300:] or "rc %s" % proc.returncode}
    return {"ok": True, "text": text, "error": None}


def main():
    args = json.loads(base64.b64decode(sys.argv[1]).decode("utf-8"))
    out = {"versions": {"os": os_release(), "kernel": platform.release(), "driver": driver(),
                        "docker": docker_version()}}
    for key, reader in (("fabric", fabric), ("container", container), ("checkpoint", checkpoint), ("log", logs)):
        try:
            out[key] = reader(args)
        except Exception as exc:  # pylint: disable=broad-except  # one section's failure is reported, not fatal
            out[key] = {"error": "%s: %s" % (type(exc).__name__, exc)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
