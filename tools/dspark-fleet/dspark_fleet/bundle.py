"""dspark-fleet bundle: one redacted support bundle per serving group (issue #43).

Per group: ``playbooks/bundle.yml --limit <group>`` (each node's versions, fabric, container, checkpoint manifest
summary and log; it changes nothing and hands each node's raw state and the secrets its variables hold to a 0700
private folder, never to an event or a log), ``playbooks/status.yml --limit <group>`` (the status view, the rank that
failed first), once ``playbooks/router_status.yml`` when the inventory has routers, the last qualification report in
the state dir and the supervisor's journal lines of the group. Everything is redacted (the known secrets, then every
key-shaped string; plugin_utils/_bundle.py), bounded (a total and a per-file cap, cuts recorded) and swept again for
every known secret before the tarball ``<output>/<group>-bundle-<UTC stamp>.tar.gz`` is written: a hit writes no
bundle (the file is named, never the secret).

Exit codes: 0 every group bundled with every section; 1 a section failed (the bundle is still written, the errors in
its manifest) or a bundle was refused by the sweep; 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from datetime import datetime, timezone

import yaml

from . import __version__, collection, journal as journal_mod, report, runner_exec
from .events import GroupEvents

PLAYBOOK = "playbooks/bundle.yml"
STATUS = "playbooks/status.yml"
ROUTER_STATUS = "playbooks/router_status.yml"
ROUTER_GROUP = "dspark_router"
MIB = 1024 * 1024
DEFAULT_MAX_BYTES = 20 * MIB
DEFAULT_FILE_BYTES = 4 * MIB
DEFAULT_LOG_LINES = 500
PRIVATE = ".bundle"
# Sections with a file per host: the manifest names their folder.
FOLDERS = {"fabric": "fabric/", "environment": "env/", "logs": "logs/"}

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_parser(sub, common):
    bun = sub.add_parser(
        "bundle", parents=[common], allow_abbrev=False,
        help="one redacted support bundle (tar.gz) per group: versions, fabric, NCCL/Gloo environment, status, logs, "
             "qualification, router and supervisor views (changes nothing)",
        description="Collect, per serving group, one redacted tarball <output>/<group>-bundle-<UTC stamp>.tar.gz "
                    "to send back for diagnosis. Changes nothing on any node.",
        epilog="Exit codes: 0 every group bundled with every section, 1 a section failed (the bundle is written with "
               "the error in its manifest) or a bundle was refused (a secret found by the final sweep), 2 bad usage "
               "or bad input.")
    bun.add_argument("--output", metavar="DIR", help="where the tarballs go (default <state dir>/bundles)")
    bun.add_argument("--max-bytes", type=_size, default=DEFAULT_MAX_BYTES, metavar="N",
                     help="the most bytes of one bundle's files before compression (default 20MiB; K, M, G, "
                          "KiB, MiB, GiB suffixes)")
    bun.add_argument("--file-max-bytes", type=_size, default=DEFAULT_FILE_BYTES, metavar="N",
                     help="the most bytes of one file in the bundle (default 4MiB); a log keeps its end")
    bun.add_argument("--log-lines", type=int, default=DEFAULT_LOG_LINES, metavar="N",
                     help="each rank's last N log lines (default %d)" % DEFAULT_LOG_LINES)
    bun.add_argument("--journal", metavar="PATH", help="the supervisor's journal (default <state dir>/journal.jsonl)")
    bun.add_argument("--qualification", metavar="REPORT",
                     help="the dspark-fleet report (report.json) whose qualification goes into the bundle (default the "
                          "newest one under the state dir; acceptance passes its own)")
    bun.add_argument("--json", action="store_true",
                     help='print {"bundles": [{"group", "path", "bytes", "sections", "redacted"}]} on stdout')
    return bun


def _size(text):
    """A byte count: 500000, 20MiB, 20M (10**6), 4KiB ..."""
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)(i?)b?\s*$", str(text), re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError("%r is not a size (e.g. 20MiB, 500000)" % text)
    power = " kmg".index(match.group(2).lower() or " ")
    value = int(float(match.group(1)) * ((1024 if match.group(3) else 1000) ** power))
    if value < 4096:
        raise argparse.ArgumentTypeError("%s is less than 4096 bytes" % text)
    return value


def utc_stamp(now=None):
    return datetime.fromtimestamp(now or time.time(), timezone.utc).strftime("%Y%m%dT%H%M%SZ")


# --------------------------------------------------------------------------- running the playbooks


class Collected:
    """One playbook run's events, its artifact data (set_stats) and its result."""

    def __init__(self):
        self.events = GroupEvents()
        self.artifact_data = {}
        self.result = None

    def feed(self, event):
        if event.get("event") == "playbook_on_stats":
            self.artifact_data = (event.get("event_data") or {}).get("artifact_data") or {}
        self.events.feed(event)
        return True


def run_one(sel, interrupts, ident, playbook, limit, extra=None, runner=None):
    """One playbook run through ansible-runner (extra vars through 0600 files); its Collected."""
    args = sel.extra_args()
    if extra:
        args += ["-e", json.dumps(extra)]
    spec = sel.spec(ident, os.path.join(sel.artifacts, "bundle"), playbook, limit, args)
    got = Collected()
    got.result = (runner or runner_exec.run_playbook)(spec, event_handler=got.feed,
                                                      cancel_callback=lambda: bool(interrupts.count))
    got.spec = spec
    return got


def _failure_text(got, host=None):
    view = got.events.failure_view()
    if view is None:
        if got.result is not None and got.result.status not in ("successful",):
            return "the run ended %s (rc %s)%s" % (got.result.status, got.result.rc,
                                                   ": " + got.result.error if got.result.error else "")
        return None
    if host is not None:
        for task in view["failed_tasks"]:
            if task["host"] == host:
                return "%s: %s" % (task["task"], task["msg"])
    return view["summary"]


# --------------------------------------------------------------------------- secrets


def inventory_secrets(bun, rules, inv, hosts):
    """(values, names) of the secrets the inventory's variables of `hosts` hold, as ansible-inventory printed them
    (untemplated; the node side adds the templated and decrypted ones)."""
    values, names = set(), set()
    for host in hosts:
        variables = inv.vars_of(host)
        values |= bun.secret_values(variables, rules.is_secret)
        names |= set(bun.secret_names(variables, rules.is_secret))
    return values, sorted(names)


def extra_vars_secrets(bun, rules, extra_vars):
    """Secrets of the -e values given inline as JSON/YAML or key=value (an @file by its content)."""
    values = set()
    for value in extra_vars or []:
        try:
            if value.startswith("@"):
                with open(value[1:], encoding="utf-8") as handle:
                    data = yaml.safe_load(handle)
            else:
                data = yaml.safe_load(runner_exec._extra_vars_text(value))  # pylint: disable=protected-access
        except (OSError, yaml.YAMLError, ValueError):
            continue
        if isinstance(data, dict):
            values |= bun.secret_values(data, rules.is_secret)
    return values


# --------------------------------------------------------------------------- building one group's files


def _dump(data):
    return json.dumps(data, indent=1, sort_keys=True, default=str) + "\n"


def _node_file(private, host):
    """(node state dict or None, secrets dict, error or None) from <private>/<host>.json."""
    path = os.path.join(private, host + ".json")
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except FileNotFoundError:
        return None, {}, "no state came back from %s" % host
    except (OSError, ValueError) as exc:
        return None, {}, "cannot read the state of %s: %s" % (host, exc)
    secrets = doc.get("secrets") if isinstance(doc.get("secrets"), dict) else {}
    if doc.get("rc") != 0:
        return None, secrets, "reading %s failed (rc %s): %s" % (host, doc.get("rc"), (
            doc.get("stderr") or doc.get("msg") or doc.get("stdout") or "")[-500:])
    try:
        return json.loads(doc.get("stdout") or ""), secrets, None
    except ValueError as exc:
        return None, secrets, "the state of %s is not JSON: %s" % (host, exc)


def _qualify_entry(path, group):
    """{report, subcommand, finished, result, qualify} of `group` in one dspark-fleet report, or None."""
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return None
    entry = ((doc.get("groups") or {}).get(group) or {}) if isinstance(doc, dict) else {}
    if isinstance(entry, dict) and entry.get("qualify"):
        return {"report": path, "subcommand": (doc.get("command") or {}).get("subcommand"),
                "finished": doc.get("finished"), "result": entry.get("result"), "qualify": entry["qualify"]}
    return None


def last_qualification(state_dir, group, report=None):
    """(entry, why): the qualification of `group` from `report` (--qualification) when given, else from the newest
    report under the state dir that has a qualify section for it; entry None with why it is absent."""
    if report:
        found = _qualify_entry(report, group)
        return found, None if found else "%s holds no qualification of group %s" % (report, group)
    paths = []
    for path in glob.glob(os.path.join(state_dir, "*", "report.json")):
        try:
            paths.append((os.path.getmtime(path), path))
        except OSError:
            continue
    for _mtime, path in sorted(paths, reverse=True):
        found = _qualify_entry(path, group)
        if found:
            return found, None
    return None, "no qualification report in the state dir (%s); --qualification names one" % state_dir


def collection_info(project_dir):
    info = {"name": "dspark.cluster", "version": None, "commit": None}
    try:
        with open(os.path.join(project_dir, "galaxy.yml"), encoding="utf-8") as handle:
            galaxy = yaml.safe_load(handle) or {}
        info["version"] = galaxy.get("version")
        info["name"] = "%s.%s" % (galaxy.get("namespace"), galaxy.get("name"))
    except (OSError, yaml.YAMLError, AttributeError):
        pass
    try:
        proc = subprocess.run(["git", "-C", project_dir, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=False)
        if proc.returncode == 0:
            info["commit"] = proc.stdout.strip()
            dirty = subprocess.run(["git", "-C", project_dir, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10, check=False)
            info["dirty"] = bool(dirty.stdout.strip()) if dirty.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def group_files(group, members, nodes, node_errors, status, qualification, router, journal_lines):
    """The bundle's files before redaction: [(section, file, text, is_log)] and the sections' states
    {section: (state, error, hosts)}. `nodes`: {host: node state or None}."""
    files, states = [], {}

    def per_host(name, key, build, folder=None, single=None):
        errors, collected = {}, {}
        for member in members:
            host = member["host"]
            node = nodes.get(host)
            part = (node or {}).get(key) if key else node
            if node is None:
                errors[host] = node_errors.get(host) or "no state"
                continue
            if isinstance(part, dict) and part.get("error") and len(part) == 1:
                errors[host] = part["error"]
                continue
            collected[host] = build(member, node)
        if folder:
            for host, data in collected.items():
                files.append((name, "%s/%s.json" % (folder, host), _dump(data), False))
        else:
            files.append((name, single, _dump(collected), False))
        states[name] = ("error" if errors else "ok", "; ".join("%s: %s" % kv for kv in errors.items()) or None,
                        sorted(collected))

    def versions(member, node):
        out = dict(node.get("versions") or {})
        box = node.get("container") or {}
        out.update({"rank": member["rank"], "image": box.get("image"), "image_id": box.get("image_id"),
                    "repo_digests": box.get("repo_digests"), "repo_tags": box.get("repo_tags"),
                    "vllm": box.get("vllm"),
                    "container": (box.get("state") or {}).get("Status") if box.get("present") else "absent"})
        return out

    def environment(member, node):
        box = node.get("container") or {}
        argv = list(box.get("entrypoint") or []) + list(box.get("command") or [])
        return {"rank": member["rank"], "container_present": box.get("present"), "env": box.get("env"),
                "serve_command": shlex.join(str(a) for a in argv) if argv else None,
                "compose_file": box.get("compose_file"), "error": box.get("error")}

    per_host("versions", None, versions, single="versions.json")
    per_host("fabric", "fabric", lambda m, n: dict(n["fabric"], rank=m["rank"]), folder="fabric")
    per_host("environment", None, environment, folder="env")
    per_host("checkpoint", "checkpoint", lambda m, n: dict(n["checkpoint"], rank=m["rank"]), single="checkpoint.json")

    # Each rank's log: its own file, the end kept.
    errors, hosts = {}, []
    for member in members:
        host = member["host"]
        log = (nodes.get(host) or {}).get("log") if nodes.get(host) else None
        if log is None:
            errors[host] = node_errors.get(host) or "no state"
        elif not log.get("ok"):
            errors[host] = log.get("error") or "docker logs failed"
        else:
            hosts.append(host)
            files.append(("logs", "logs/rank%s-%s.log" % (member["rank"], host), log.get("text") or "", True))
    states["logs"] = ("error" if errors else "ok", "; ".join("%s: %s" % kv for kv in errors.items()) or None, hosts)

    files.append(("status", "status.json", _dump(status["data"]), False))
    states["status"] = (status["state"], status.get("error"), None)
    found, why = qualification
    files.append(("qualification", "qualify.json", _dump(found or {"found": False}), False))
    states["qualification"] = ("ok" if found else "absent", why, None)
    files.append(("router", "router.json", _dump(router["data"]), False))
    states["router"] = (router["state"], router.get("error"), None)
    journal_text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in journal_lines or [])
    files.append(("supervisor", "supervisor.jsonl", journal_text, False))
    states["supervisor"] = ("ok" if journal_lines is not None else "absent",
                            None if journal_lines is not None else "no supervisor journal", None)
    del group
    return files, states


def status_section(got, group):
    """status.yml's view of the group: the rank that failed first named first (summary, first_failure), then
    serving, every rank's container, the run's failure."""
    view = report.status_view(got.events)
    stats = (got.artifact_data.get("dspark_status") or {}).get(group) or {}
    first = view.get("first_failure")
    text = (stats.get("text") or "").strip()
    failure = got.events.failure_view()
    summary = text or ("serving" if view.get("serving") else (failure or {}).get("summary") or "not serving")
    data = {"summary": summary, "first_failure": first, "serving": bool(view.get("serving")),
            "ranks": view["ranks"], "text": text or None, "metrics": stats.get("metrics"),
            "failure": failure}
    if not view["ranks"]:
        return {"state": "error", "error": _failure_text(got) or "no rank reported its status", "data": data}
    return {"state": "ok", "error": None, "data": data}


# --------------------------------------------------------------------------- one bundle


def build_bundle(bun, group, members, raw_files, states, secrets, max_bytes, file_bytes, tool, coll, created):
    """Redact, bound and sweep; returns (files {name: bytes} in order, manifest dict, refused [names])."""
    red = bun.Redactor(secrets)
    bounds = bun.Bounds(max_bytes, file_bytes)
    out, sizes = {}, {}
    for section_name, name, text, is_log in raw_files:
        data = red.redact(text).encode("utf-8")
        data = bounds.fit(name, data, tail=is_log)
        out[name] = data
        sizes.setdefault(section_name, []).append(len(data))
    sections = []
    for section_name, (state, error, hosts) in states.items():
        file_names = [raw[1] for raw in raw_files if raw[0] == section_name]
        folder = FOLDERS.get(section_name)
        entry = bun.section(section_name, folder or (file_names[0] if file_names else None),
                            state=state, error=red.redact(error) if error else None,
                            bytes_=sum(sizes.get(section_name, [])), hosts=hosts)
        sections.append(entry)
    manifest = bun.manifest(group, created, members, sections, red.counts, bounds.view(), tool, coll)
    out["manifest.json"] = red.redact(_dump(manifest)).encode("utf-8")
    refused = bun.sweep(out, secrets)
    return out, manifest, refused


def write_tarball(path, top, files):
    """files {name: bytes} as <top>/<name> in a gzip tarball at path (0600, written aside, then renamed)."""
    part = path + ".part"
    descriptor = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle, tarfile.open(fileobj=handle, mode="w:gz") as tar:
            now = time.time()
            for name, data in files.items():
                info = tarfile.TarInfo("%s/%s" % (top, name))
                info.size, info.mtime, info.mode = len(data), now, 0o600
                tar.addfile(info, io.BytesIO(data))
        os.replace(part, path)
    except BaseException:
        try:
            os.unlink(part)
        except OSError:
            pass
        raise
    return os.path.getsize(path)


# --------------------------------------------------------------------------- the subcommand


def _private_dir(artifacts, group):
    path = os.path.join(artifacts, PRIVATE, group)
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(os.path.join(artifacts, PRIVATE), 0o700)
    os.chmod(path, 0o700)
    return path


def router_view(sel, interrupts, prog, runner=None):
    routers = sel.inv.hosts_of(ROUTER_GROUP)
    if not routers:
        return {"state": "absent", "error": "the inventory has no host in %s" % ROUTER_GROUP,
                "data": {"routers": []}}, routers
    if not os.path.isfile(os.path.join(sel.project_dir, ROUTER_STATUS)):
        return {"state": "error", "error": "%s is missing" % ROUTER_STATUS, "data": {"routers": routers}}, routers
    folder = _private_dir(sel.artifacts, "_router")
    path = os.path.join(folder, "router.json")
    prog.message("router: %s" % ROUTER_STATUS)
    got = run_one(sel, interrupts, "_router", ROUTER_STATUS, ",".join(routers), {"router_report_file": path},
                  runner=runner)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        return {"state": "error", "error": _failure_text(got) or "no router report: %s" % exc,
                "data": {"routers": routers}}, routers
    error = _failure_text(got)
    return {"state": "error" if error else "ok", "error": error, "data": data}, routers


def run(sel, args, interrupts, prog, runner=None):
    """The bundle subcommand over the Selection `sel` with bundle's options `args`: the exit code."""
    try:
        bun = collection.plugin_utils("_bundle", sel.project_dir)
        rules = collection.plugin_utils("_role_rules", sel.project_dir)
    except ImportError as exc:
        print("dspark-fleet: error: %s" % exc, file=sys.stderr)
        return EXIT_USAGE
    state_dir = sel.state_dir
    output = os.path.abspath(args.output or os.path.join(state_dir, "bundles"))
    try:
        os.makedirs(output, mode=0o700, exist_ok=True)
    except OSError as exc:
        print("dspark-fleet: error: cannot create --output %s: %s" % (output, exc), file=sys.stderr)
        return EXIT_USAGE
    journal_path = args.journal or journal_mod.default_path(state_dir)
    records = journal_mod.read(journal_path) if os.path.isfile(journal_path) else None
    tool = {"name": "dspark-fleet", "version": __version__}
    coll = collection_info(sel.project_dir)
    pattern = rules._SECRET_NAME_RE.pattern      # pylint: disable=protected-access  # one definition of the rule
    extra_secrets = extra_vars_secrets(bun, rules, sel.extra_vars)

    router, routers = router_view(sel, interrupts, prog, runner=runner)
    router_secrets = inventory_secrets(bun, rules, sel.inv, routers)[0]
    results, code = [], EXIT_OK
    try:
        for group in sel.groups:
            if interrupts.count:
                results.append({"group": group, "path": None, "bytes": 0, "sections": [], "redacted": {},
                                "error": "interrupted"})
                code = EXIT_FAILED
                continue
            entry = one_group(sel, args, interrupts, prog, bun, rules, group, pattern,
                              extra_secrets | router_secrets, router, records, output, tool, coll, runner)
            results.append(entry)
            if entry.get("error") or not all(s["ok"] for s in entry["sections"]):
                code = EXIT_FAILED
    finally:
        shutil.rmtree(os.path.join(sel.artifacts, PRIVATE), ignore_errors=True)
    if args.json:
        print(json.dumps({"bundles": results}, indent=1, sort_keys=True))
    else:
        print_summary(results)
    return code


def one_group(sel, args, interrupts, prog, bun, rules, group, pattern, more_secrets, router, records, output, tool,
              coll, runner):
    members = sel.members_of(group)
    hosts = [m["host"] for m in members]
    secrets, names = inventory_secrets(bun, rules, sel.inv, hosts)
    secrets |= more_secrets
    private = _private_dir(sel.artifacts, group)
    prog.message("%s: %s" % (group, PLAYBOOK))
    got = run_one(sel, interrupts, group, PLAYBOOK, group, {
        "bundle_private_dir": private, "bundle_secret_pattern": pattern, "bundle_secret_vars": names,
        "bundle_log_lines": args.log_lines, "bundle_log_bytes": args.file_max_bytes}, runner=runner)
    nodes, errors = {}, {}
    for host in hosts:
        node, host_secrets, error = _node_file(private, host)
        secrets |= bun.secret_values(host_secrets, rules.is_secret)
        nodes[host] = node
        if error:
            errors[host] = (_failure_text(got, host) or error) if node is None else error
    shutil.rmtree(private, ignore_errors=True)
    prog.message("%s: %s" % (group, STATUS))
    status = status_section(run_one(sel, interrupts, group + ".status", STATUS, group, runner=runner), group)
    qualification = last_qualification(sel.state_dir, group, args.qualification)
    lines = [r for r in records if r.get("group") == group] if records is not None else None
    raw_files, states = group_files(group, members, nodes, errors, status, qualification, router, lines)
    created = time.time()
    stamp = utc_stamp(created)
    files, manifest, refused = build_bundle(
        bun, group, members, raw_files, states, secrets, args.max_bytes, args.file_max_bytes, tool, coll,
        datetime.fromtimestamp(created, timezone.utc).isoformat().replace("+00:00", "Z"))
    entry = {"group": group, "path": None, "bytes": 0, "sections": manifest["sections"],
             "redacted": manifest["redacted"]["counts"]}
    if refused:
        entry["error"] = ("refused: a known secret is still in %s after redaction; no bundle was written"
                          % ", ".join(refused))
        prog.message("%s: %s" % (group, entry["error"]))
        return entry
    top = "%s-bundle-%s" % (group, stamp)
    path = os.path.join(output, top + ".tar.gz")
    try:
        entry["bytes"] = write_tarball(path, top, files)
    except OSError as exc:
        entry["error"] = "cannot write %s: %s" % (path, exc)
        return entry
    entry["path"] = path
    prog.message("%s: %s (%d bytes)" % (group, path, entry["bytes"]))
    return entry


def print_summary(results):
    print("")
    print("bundle: %d group(s)" % len(results))
    for entry in results:
        failed = [s for s in entry["sections"] if not s["ok"]]
        if entry.get("error"):
            print("  %s FAILED: %s" % (entry["group"], entry["error"]))
            continue
        print("  %s %s (%d bytes): %d section(s)%s; redacted %s" % (
            entry["group"], entry["path"], entry["bytes"], len(entry["sections"]),
            ", failed: " + ", ".join("%s (%s)" % (s["name"], s["error"]) for s in failed) if failed else "",
            ", ".join("%s %d" % kv for kv in sorted(entry["redacted"].items())) or "nothing"))
