"""What a run works on, checked before anything runs: the `Selection` (inventory, groups and their members,
fingerprints, project, extra vars) and the `Options` of how the groups run. Both are frozen: every stage reads
them, none writes them; what a run finds goes into its record (run_record.py).

`select()` makes them from the parsed arguments, in the order the checks have always run (the first bad input is
the one reported, exit 2 through UsageError); it starts nothing but ``ansible-inventory --list``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from . import bundle, fingerprint, inventory, locks, proven, resume, rolling, runner_exec, watch
from .inventory import Inventory

# The playbook each subcommand runs per group (every subcommand is named here; acceptance runs site.yml through
# its child reprovision).
PLAYBOOKS = {"plan": "site.yml", "reprovision": "site.yml", "status": "playbooks/status.yml",
             "watch": watch.VERIFY, "qualify": "playbooks/qualify.yml", "acceptance": "site.yml",
             "bundle": bundle.PLAYBOOK}
PREFLIGHT = "playbooks/preflight.yml"
ROLLING_ONLY = ("--max-unavailable", "--drain-timeout", "--on-drain-timeout", "--no-qualify", "--no-rollback")


class UsageError(Exception):
    """Bad usage or bad input: exit 2."""


@dataclass(frozen=True)
class Selection:
    """The inventory and the selected serving groups as the run sees them, and where its files go."""

    subcommand: str
    started: float                  # when the run began (names the default artifacts dir)
    project_dir: str
    env_add: dict                   # added to every Ansible command's environment (ANSIBLE_CONFIG, PATH, vault)
    inventory: str                  # absolute path
    inv: Inventory                  # ansible-inventory's view (read only)
    patterns: list                  # --groups as given, split
    groups: list                    # the selected serving groups, in inventory order
    every_group: list               # every serving group of the inventory
    routers: list                   # the hosts of group dspark_router (the router in front of the groups)
    members: dict                   # group -> [{host, rank}] in rank order
    models: dict                    # group -> (dspark_model, dspark_model_revision) of its head
    fingerprints: dict              # group -> its inputs fingerprint (fingerprint.py)
    configs: dict                   # reprovision: group -> the image and revision its run uses (proven.py)
    extra_vars: tuple               # -e as given
    extra_digest: str
    tags: str | None
    code: str                       # the collection's code digest
    state_dir: str
    artifacts: str
    report_path: str
    private_dir: str = field(init=False)

    def __post_init__(self):
        # runner_exec.prepare() creates it under the artifacts dir before anything runs.
        object.__setattr__(self, "private_dir", os.path.join(self.artifacts, runner_exec.PRIVATE_DIR))

    def members_of(self, group):
        """A fresh [{host, rank}] of `group` (callers put it into their report entries)."""
        return [dict(m) for m in self.members[group]]

    def extra_args(self):
        """-e VALUE for every extra var, as every playbook run gets them."""
        args = []
        for value in self.extra_vars:
            args += ["-e", value]
        return args

    def spec(self, ident, folder, playbook, limit, args):
        """One ansible-playbook run of this project over this inventory (runner_exec.RunSpec)."""
        return runner_exec.RunSpec(
            ident=ident, playbook=os.path.join(self.project_dir, playbook), inventory=self.inventory,
            project_dir=self.project_dir, artifacts_dir=folder, private_dir=self.private_dir, limit=limit,
            args=args, envvars=self.env_add)


@dataclass(frozen=True)
class Rolling:
    """--rolling's options, checked against the inventory."""

    max_unavailable: int
    drain_timeout: int | None
    on_drain_timeout: str
    qualify_first: bool
    rollback: bool


@dataclass(frozen=True)
class Options:
    """How the groups run: --parallel for every subcommand, the rest reprovision's (None elsewhere)."""

    parallel: int
    canary: int | None = None
    max_failed: int | None = None
    resume: str | None = None           # the --resume report's absolute path
    previous: dict | None = None        # its content
    rolling: Rolling | None = None
    ignore_supervisor: bool = False


def default_project_dir():
    """The repository this package lives in (tools/dspark-fleet/dspark_fleet/ -> ../../..), else the cwd."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.abspath(os.path.join(here, "..", "..", ".."))
    for candidate in (repo, os.getcwd()):
        if os.path.isfile(os.path.join(candidate, "site.yml")):
            return candidate
    raise UsageError("cannot find the collection checkout (site.yml): pass --project-dir")


def utc_stamp(now=None):
    return datetime.fromtimestamp(now or time.time(), timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def given(argv, option):
    return any(a == option or a.startswith(option + "=") for a in argv)


def select(args, argv):
    """(Selection, Options) of the parsed `args` (`argv`: the command line, to tell a given option from a default).
    UsageError on bad input."""
    subcommand = args.subcommand
    started = time.time()
    project_dir = os.path.abspath(args.project_dir) if args.project_dir else default_project_dir()
    needed = ["ansible.cfg", PLAYBOOKS[subcommand]] + ([PREFLIGHT] if subcommand == "reprovision" else [])
    for rel in needed:
        if not os.path.isfile(os.path.join(project_dir, rel)):
            raise UsageError("%s has no %s (is --project-dir the collection checkout?)" % (project_dir, rel))
    env_add = runner_exec.ansible_env(project_dir)
    if args.vault_password_file:    # the path only, for ansible-inventory, the runs and hostvars.py
        env_add[watch.VAULT_ENV] = os.path.abspath(args.vault_password_file)
    previous = None
    if getattr(args, "resume", None):
        try:
            previous = resume.load_previous(args.resume)
        except resume.ResumeError as exc:
            raise UsageError(str(exc)) from None
    try:
        path = inventory.inventory_path(args.inventory)
        env = dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_FAILED="True", **env_add)
        data = inventory.list_inventory(path, project_dir, env, executable=runner_exec.tool("ansible-inventory"))
        inv = inventory.Inventory(data, project_dir=project_dir)
        patterns = inventory.split_patterns(args.groups)
        groups = inv.select(patterns)
    except inventory.InventoryError as exc:
        raise UsageError(str(exc)) from None
    parallel = args.parallel
    if subcommand == "qualify" and not given(argv, "--parallel"):
        parallel = max(1, len(groups))     # qualify changes nothing: every group at once
    try:
        extra_digest = fingerprint.extra_vars_digest(args.extra_vars)
    except fingerprint.ExtraVarsError as exc:
        raise UsageError(str(exc)) from None
    tags = getattr(args, "tags", None)
    configs = (dict((g, proven.config_of(inv, g, args.extra_vars)) for g in groups)
               if subcommand == "reprovision" else {})
    rolling_options = check_rolling(args, argv, inv, project_dir)
    code = fingerprint.code_digest(project_dir)
    fingerprints = dict((g, fingerprint.group_fingerprint(g, inv.member_vars(g), extra_digest, tags, code))
                        for g in groups)
    state_dir = locks.state_dir(args.state_dir)
    artifacts = os.path.abspath(args.artifacts or os.path.join(state_dir, utc_stamp(started)))
    if os.path.isdir(artifacts) and os.listdir(artifacts):
        raise UsageError("the artifacts directory %s is not empty: choose another --artifacts" % artifacts)
    if os.path.exists(artifacts) and not os.path.isdir(artifacts):
        raise UsageError("--artifacts %s is not a directory" % artifacts)
    sel = Selection(
        subcommand=subcommand, started=started, project_dir=project_dir, env_add=env_add, inventory=path, inv=inv,
        patterns=patterns, groups=groups, every_group=list(inv.groups), routers=inv.hosts_of(rolling.ROUTER_GROUP),
        members=dict((g, [{"host": h, "rank": inv.rank(h)} for h in inv.ordered_members(g)]) for g in groups),
        models=dict((g, (inv.head_var(g, "dspark_model"), inv.head_var(g, "dspark_model_revision"))) for g in groups),
        fingerprints=fingerprints, configs=configs, extra_vars=tuple(args.extra_vars), extra_digest=extra_digest,
        tags=tags, code=code, state_dir=state_dir, artifacts=artifacts,
        report_path=os.path.abspath(args.report) if args.report else os.path.join(artifacts, "report.json"))
    opts = Options(parallel=parallel, canary=getattr(args, "canary", None),
                   max_failed=getattr(args, "max_failed", None),
                   resume=os.path.abspath(args.resume) if getattr(args, "resume", None) else None, previous=previous,
                   rolling=rolling_options, ignore_supervisor=bool(getattr(args, "ignore_supervisor", False)))
    return sel, opts


def check_rolling(args, argv, inv, project_dir):
    """--rolling's Rolling (None without it), after checking its options against the inventory."""
    if not getattr(args, "rolling", False):
        named = [o for o in ROLLING_ONLY if getattr(args, o[2:].replace("-", "_"), None) is not None]
        if named:
            raise UsageError("%s only apply with --rolling" % ", ".join(named))
        return None
    if given(argv, "--parallel"):
        raise UsageError("--rolling takes its parallelism from --max-unavailable, not --parallel")
    if not inv.hosts_of(rolling.ROUTER_GROUP):
        raise UsageError("--rolling needs the router: the inventory has no host in group %s (playbooks/router.yml "
                         "sets it up); without it, reprovision without --rolling" % rolling.ROUTER_GROUP)
    groups = inv.groups
    if len(groups) < 2:
        raise UsageError("--rolling needs at least two serving groups behind the router, the inventory has one "
                         "(%s): reprovision it without --rolling (it will stop serving)" % groups[0])
    max_unavailable = args.max_unavailable or 1
    if max_unavailable >= len(groups):
        raise UsageError("--max-unavailable %d would leave no group in rotation: the router serves %d group(s) "
                         "(%s). Use at most %d" % (max_unavailable, len(groups), ", ".join(groups), len(groups) - 1))
    qualify_first = not args.no_qualify
    if qualify_first and not os.path.isfile(os.path.join(project_dir, rolling.QUALIFY)):
        raise UsageError("%s has no %s, which --rolling runs before draining each group (--no-qualify skips it)"
                         % (project_dir, rolling.QUALIFY))
    return Rolling(max_unavailable=max_unavailable, drain_timeout=args.drain_timeout,
                   on_drain_timeout=args.on_drain_timeout or "fail", qualify_first=qualify_first,
                   rollback=not args.no_rollback)


def prepare_artifacts(sel):
    """Create the artifacts dir and ansible-runner's private data dir in it (sel.private_dir)."""
    try:
        runner_exec.prepare(sel.artifacts)
    except OSError as exc:
        raise UsageError("cannot create the artifacts directory %s: %s" % (sel.artifacts, exc)) from None
