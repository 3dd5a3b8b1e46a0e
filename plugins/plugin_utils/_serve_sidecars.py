# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A serving group's sidecar engines on one member (issue #46, private): what the serve role writes and starts.

Each sidecar (``dspark_sidecars``, read by plugin_utils._group_engines) is its own compose project on every member:
``compose-<name>.yaml`` beside the main engine's compose file (so that it reads the same 0600 ``secrets.env``: the head's
sidecar answers with the group's keys), project ``<serve_project>-<name>``, container ``<serve_container_name>-<name>``,
labelled with its engine name (serve_node_info lists every such container of the node, wanted or left over). Its
container is the main engine's (image, network, IPC, cache read-only, environment, ulimits, devices) without the
recipe's hotfixes and without LMCache, running ``_serve_command.sidecar_command``. Its fingerprint covers everything
that makes the container; a changed one restarts that sidecar only. Pure Python, no Ansible imports.
"""

from __future__ import annotations

import hashlib
import json

from ansible_collections.dspark.cluster.plugins.plugin_utils import _checkpoint_paths, _group_engines, _inputs, _serve_command

ENTRYPOINT = ["/bin/sh", "-c", 'exec "$@"', "dspark-serve"]
# The role's variables the plan reads, by their names (the lookup dspark.cluster.role_vars hands them over:
# reads='serve_sidecars'), beside the main engine's compose values (_serve_command.COMPOSE_VALUES, of which argv,
# entrypoint, hash and hotfix_dir are the sidecar's own here) and the values below.
VARIABLES = _serve_command.COMPOSE_VARIABLES + ("serve_image", "serve_edge", "serve_host", "serve_config_dir", "serve_force_restart")
# sidecars: dspark_sidecars; found: serve_node_info's engines (every container labelled with an engine on the node).
VALUES = VARIABLES + ("sidecars", "tensor_parallel_size", "secrets_digest", "keys_mount", "found")


def container_name(main_container, name):
    return "%s-%s" % (main_container, name)


def listen(engine, edge, serve_host):
    """(host, port) where the sidecar's vLLM listens: loopback at its engine port behind the head's edge, else the API
    port on serve_host (as the main engine)."""
    return ("127.0.0.1", engine["engine_port"]) if edge else (serve_host, engine["api_port"])


def _runs(container, digest):
    """The container (serve_node_info's engines entry) runs the definition of this fingerprint."""
    return bool(container) and container.get("status") == "running" and container.get("config") == digest


def snapshots(sidecars, image, cache_path):
    """[{name, model, revision, snapshot_dir}] of every sidecar's checkpoint in the Hugging Face cache at ``cache_path``
    (what the checkpoint guard looks for on each member); [] for a list _group_engines refuses."""
    engines, problems = _group_engines.sidecars(sidecars, image)
    if problems:
        return []
    base = str(cache_path).rstrip("/")
    return [{"name": e["name"], "model": e["model"], "revision": e["revision"],
             "snapshot_dir": "%s/hub/%s/snapshots/%s" % (base, _checkpoint_paths.repo_folder(e["model"]), e["revision"])}
            for e in engines]


def plan(values, group):
    """{'problems': [message], 'engines': [one per sidecar: name, served_model_name, model, revision, api_port,
    master_port, engine_port, project, container, file, lines, hash, current], 'leftovers': [container]} for one member:
    ``current`` when the sidecar's container runs its wanted definition, ``leftovers`` the containers of engines that
    are no longer wanted.

    ``values``: the main engine's compose values (as _serve_command.compose_lines takes them) and VALUES; ``group``: the
    group model seen from this member. A refused sidecar list gives its problems and no engine (preflight says the
    same before any change; a role run alone stops on them)."""
    missing = [name for name in VALUES + ("rank", "image_id", "environment", "keys_file") if name not in values]
    if missing:
        raise _serve_command.CommandError("serve sidecars: %s not given. Fix: pass every value of _serve_sidecars.VALUES"
                                          % ", ".join(missing))
    engines, problems = _group_engines.sidecars(values["sidecars"], values["serve_image"])
    if problems:
        return {"problems": ["%s=%r %s. Fix: %s" % problem for problem in problems], "engines": [], "leftovers": []}
    out = []
    found = values["found"] or {}
    edge, force = _inputs.as_bool(values["serve_edge"]), _inputs.as_bool(values["serve_force_restart"])
    for engine in engines:
        host, port = listen(engine, edge, values["serve_host"])
        argv = _serve_command.sidecar_command(engine, values["rank"], values["tensor_parallel_size"], host, port, group)
        if values["keys_file"]:
            argv += ["--config", values["keys_mount"]]
        # The main engine's image (its ID, as the main container runs it) unless the sidecar names another.
        image = values["image_id"] if engine["image"] == values["serve_image"] else engine["image"]
        digest = hashlib.sha256(json.dumps({
            "image": image, "entry": ENTRYPOINT, "command": argv, "env": values["environment"],
            "secrets": values["secrets_digest"], "ulimits": values["serve_ulimits"], "shm": values["serve_shm_size"],
            "ib": values["infiniband"], "gpu": values["gpu"], "cache": values["hf_cache"], "jit": values["serve_jit_cache_dir"],
            "grace": values["serve_stop_grace_period"], "engine": engine["name"]}, sort_keys=True).encode("utf-8")).hexdigest()
        container = container_name(values["serve_container_name"], engine["name"])
        lines = _serve_command.compose_lines(dict(
            values, serve_project="%s-%s" % (values["serve_project"], engine["name"]), serve_container_name=container,
            serve_lmcache=False, image_id=image, entrypoint=ENTRYPOINT, argv=argv, hash=digest, hotfix_dir="",
            cache_read_only=True, engine=engine["name"]))
        out.append({
            "name": engine["name"], "served_model_name": engine["served_model_name"], "model": engine["model"],
            "revision": engine["revision"], "api_port": engine["api_port"], "master_port": engine["master_port"],
            "engine_port": engine["engine_port"], "project": "%s-%s" % (values["serve_project"], engine["name"]),
            "container": container, "file": "%s/compose-%s.yaml" % (values["serve_config_dir"], engine["name"]),
            "lines": lines, "hash": digest, "current": _runs(found.get(container), digest) and not force})
    wanted = {engine["container"] for engine in out}
    return {"problems": [], "engines": out, "leftovers": sorted(name for name in found if name not in wanted)}
