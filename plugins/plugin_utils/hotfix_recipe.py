# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The recipe's hotfixes, controller side: where the recipe checkout is, which hotfixes a rank needs, and
the script that runs them in the container in the upstream entrypoint's order, fail-closed.

Upstream (MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark, shared/reference/upstream-recipe.md section 6)
mounts `patches/` read-only at /opt/dspark-patches and runs the hotfixes in the container's entrypoint before
`exec vllm serve`, every step `|| exit 1`. The catalog below follows that order; its switches are the
upstream environment variables, set from the serve role's `serve_hotfix_*` variables.

Plain Python, no Ansible imports: the action plugin `dspark.cluster.serve_hotfixes` is a thin shell around it.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import shlex
import shutil
import stat
import subprocess
import tarfile
import tempfile

PATCHES = "patches"
MOUNT_PATCHES = "/opt/dspark-patches"
MOUNT_SERVE = "/opt/dspark-serve"
SCRIPT_NAME = "hotfixes.sh"
SUMS_NAME = "SHA256SUMS"

# Role variable -> (upstream environment variable, kind). "skip" switches skip a default hotfix when exactly
# "1"; "enable" switches apply an opt-in hotfix only when exactly "1" (upstream semantics).
SWITCHES = {
    "serve_hotfix_skip": ("DSPARK_SKIP_HOTFIX", "skip"),
    "serve_hotfix_skip_issue22": ("DSPARK_SKIP_ISSUE22_HOTFIX", "skip"),
    "serve_hotfix_skip_spin_wait": ("DSPARK_SKIP_SPIN_WAIT_HOTFIX", "skip"),
    "serve_hotfix_skip_suppress_stops": ("DSPARK_SKIP_SUPPRESS_STOPS_HOTFIX", "skip"),
    "serve_hotfix_enable_issue31_gpu": ("DSPARK_ENABLE_ISSUE31_GPU_HOTFIX", "enable"),
    "serve_hotfix_enable_assistant_final": ("DSPARK_ENABLE_ASSISTANT_FINAL_HOTFIX", "enable"),
}

ALWAYS = "always"
KEYS = "keys"
ENCODING = "encoding"


def _step(name, when, args=()):
    return {"file": name, "when": when, "args": tuple(args)}


# The upstream entrypoint's order (snapshot 489af95, section 6 steps 2-7). `when`: ALWAYS, KEYS (API keys are
# set), ENCODING (the model's encoding_dsv4.py was found at run time; the file is still required), or the
# name of a switch variable from SWITCHES.
CATALOG = (
    _step("hotfix-encoding-dsv4-issue21.py", ENCODING),
    _step("hotfix-dsv4-issue31-v2-thinking-budget-gpu.py", "serve_hotfix_enable_issue31_gpu"),
    _step("hotfix-dsv4-issue55-tool-truncation.py", ALWAYS),
    _step("hotfix-nvfp4-ds-mla-issue22.sh", "serve_hotfix_skip_issue22"),
    _step("hotfix-gb10-spin-wait.sh", "serve_hotfix_skip_spin_wait"),
    _step("hotfix-dsv4-mtp-buffer-50312.sh", "serve_hotfix_skip"),
    _step("hotfix-dsv4-adaptive-topk-50004.sh", "serve_hotfix_skip"),
    _step("hotfix-dsv4-skip-topk-49486.sh", "serve_hotfix_skip"),
    _step("hotfix-dsv4-dense-prefill-indexer-48407.sh", "serve_hotfix_skip"),
    _step("hotfix-dsv4-skip-empty-c128-48957.sh", "serve_hotfix_skip"),
    _step("hotfix-dsv4-flashmla-workspace-50298.sh", "serve_hotfix_skip"),
    _step("hotfix-dsv4-grammar-advance.sh", "serve_hotfix_skip"),
    _step("hotfix-vllm-redact-api-key-log.sh", KEYS),
    _step("hotfix-vllm-redact-api-key-log.sh", KEYS, ["--status"]),
    _step("hotfix-vllm-empty-encoder-output.py", ALWAYS),
    _step("hotfix-dsv4-issue27-partial-prefill-concurrency.py", ALWAYS),
    _step("hotfix-dsv4-issue43-decode-fairness-and-diag.py", ALWAYS),
    _step("hotfix-dsv4-issue26-hybrid-swa-min.py", ALWAYS),
    _step("hotfix-dsv4-suppress-stops-in-reasoning.py", "serve_hotfix_skip_suppress_stops"),
    _step("hotfix-dsv4-assistant-final-continuation.py", "serve_hotfix_enable_assistant_final"),
)

# Every directory and file of the tree is opened without following a link; O_NONBLOCK keeps a fifo from hanging.
_OPEN_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
# Names under patches/ that are neither read nor copied (nor expected from a commit).
SKIP_NAMES = (".git", "__pycache__")
MAX_TREE_BYTES = 64 << 20

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|[\w.-]+@[\w.-]+:)", re.IGNORECASE)


class RecipeError(Exception):
    """A problem that stops the run before anything starts; the message names the variable and the fix."""


def is_git_url(source):
    return bool(_URL.match(source or ""))


def switch_env(switches):
    """{upstream variable: "1" or "0"} from {role variable: bool}."""
    return {env: "1" if switches.get(var) else "0" for var, (env, _kind) in SWITCHES.items()}


def switch_conflicts(switches, env_sources):
    """Problems where serve_hotfix_env or serve_extra_env ask for a switch its role variable does not set.

    The role variables win (their rendering is added to the container environment last); "0", the upstream
    default (and serve_hotfix_env's), is never a conflict. Any other value that differs is: the user asked
    for a skip or an opt-in that would silently not happen.
    env_sources: [(variable name, dict)], e.g. [("serve_hotfix_env", {...}), ("serve_extra_env", {...})].
    """
    wanted = switch_env(switches)
    problems = []
    for var, (env, _kind) in SWITCHES.items():
        for source, values in env_sources:
            if env in (values or {}) and str(values[env]) not in ("0", wanted[env]):
                problems.append(
                    "%s sets %s=%r but %s is %s (it renders %s=%s). Fix: set %s: %s and remove %s from %s."
                    % (source, env, str(values[env]), var, "true" if switches.get(var) else "false", env,
                       wanted[env], var, "true" if str(values[env]) == "1" else "false", env, source))
    return problems


def active(step, switches, keys_set):
    """Whether a catalog step runs (or may run, for ENCODING) with these switches."""
    when = step["when"]
    if when in (ALWAYS, ENCODING):
        return True
    if when == KEYS:
        return bool(keys_set)
    kind = SWITCHES[when][1]
    return not switches.get(when) if kind == "skip" else bool(switches.get(when))


def _why(step, switches):
    when = step["when"]
    if when == ALWAYS:
        return ("the recipe's entrypoint always runs it",
                "point serve_hotfix_recipe (or serve_hotfix_recipe_version) at a recipe checkout that has it")
    if when == ENCODING:
        return ("the recipe's entrypoint runs it whenever the model's encoding_dsv4.py is found",
                "point serve_hotfix_recipe (or serve_hotfix_recipe_version) at a recipe checkout that has it")
    if when == KEYS:
        return ("API keys are set (serve_api_key/serve_api_keys): without it vLLM writes the keys to its log",
                "point serve_hotfix_recipe (or serve_hotfix_recipe_version) at a recipe checkout that has it, "
                "or unset serve_api_key and serve_api_keys")
    env, kind = SWITCHES[when]
    if kind == "skip":
        return ("%s is false (upstream %s=0)" % (when, env),
                "point serve_hotfix_recipe (or serve_hotfix_recipe_version) at a recipe checkout that has it, "
                "or set %s: true to run without this hotfix" % when)
    return ("%s is true (upstream %s=1)" % (when, env),
            "point serve_hotfix_recipe at a recipe checkout that has it, or set %s: false" % when)


def required_problems(present, source, switches, keys_set):
    """One message per required hotfix missing from the tree, naming the file, variable and fix.

    present: the relative paths under patches/ of the regular files read from the tree (read_tree).
    """
    problems = []
    seen = set()
    for step in CATALOG:
        name = step["file"]
        if name in seen or not active(step, switches, keys_set):
            continue
        seen.add(name)
        if name not in present:
            why, fix = _why(step, switches)
            problems.append("serve_hotfix_recipe=%s: %s/%s is missing; it is required because %s. Fix: %s."
                            % (source, PATCHES, name, why, fix))
    return problems


# --- reading the tree: regular files and directories only, never through a link -----------------------------

def _special(mode):
    for test, name in ((stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a special file (mode %o)" % stat.S_IFMT(mode)


def _link_problem(source, root, rel, target):
    """The message for a symlink at <root>/<rel> (root: the patches/ directory) pointing at target."""
    resolved = os.path.realpath(os.path.join(os.path.dirname(os.path.join(root, rel)), target))
    real_root = os.path.realpath(root)
    if resolved == real_root or resolved.startswith(real_root + os.sep):
        where = ("it stays inside %s/, but no link is copied to the nodes (a link can be repointed after the check)"
                 % PATCHES)
    else:
        where = "it resolves to %s, outside the recipe's %s/ tree, which would copy a controller file" % (resolved, PATCHES)
    return ("serve_hotfix_recipe=%s: %s is a symlink to %s; %s. Fix: replace the link with a regular file (the "
            "content it should hold, committed in the recipe) or remove it."
            % (source, "%s/%s" % (PATCHES, rel), target, where))


def _walk(dir_fd, prefix, root, source, files, problems, total):
    for name in sorted(os.listdir(dir_fd)):
        if name in SKIP_NAMES:
            continue
        rel = prefix + name
        label = "serve_hotfix_recipe=%s: %s/%s" % (source, PATCHES, rel)
        try:
            before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(before.st_mode):
                problems.append(_link_problem(source, root, rel, os.readlink(name, dir_fd=dir_fd)))
            elif stat.S_ISDIR(before.st_mode):
                sub = os.open(name, _OPEN_DIR, dir_fd=dir_fd)
                try:
                    _walk(sub, rel + "/", root, source, files, problems, total)
                finally:
                    os.close(sub)
            elif not stat.S_ISREG(before.st_mode):
                problems.append("%s is %s, not a regular file; only regular files and directories are copied to the "
                                "nodes. Fix: remove it from the recipe's %s/ directory." % (label, _special(before.st_mode), PATCHES))
            else:
                files.append(_read_file(dir_fd, name, rel, before, label, total))
        except RecipeError as exc:
            problems.append(str(exc))
        except OSError as exc:
            problems.append("%s could not be read without following a link: %s. Fix: make it a regular file (or a "
                            "directory) that the controller user can read." % (label, exc))


def _read_file(dir_fd, name, rel, before, label, total):
    # O_NOFOLLOW: a link swapped in after the lstat fails here (ELOOP); O_NONBLOCK: a fifo swapped in does not hang.
    fd = os.open(name, _OPEN_FILE, dir_fd=dir_fd)
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise RecipeError("%s was replaced while it was read. Fix: run again once nothing changes the recipe "
                              "directory." % label)
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total[0] += len(chunk)
            if total[0] > MAX_TREE_BYTES:
                raise RecipeError("%s: the recipe's %s/ tree is larger than %d MiB, which no hotfix tree is. Fix: point "
                                  "serve_hotfix_recipe at the recipe's root." % (label, PATCHES, MAX_TREE_BYTES >> 20))
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return rel, data, hashlib.sha256(data).hexdigest()


def _scan(root, source):
    """(files, problems) of the directory root: files are (relative path, bytes, sha256) of every regular file."""
    files, problems = [], []
    top = os.open(root, _OPEN_DIR)
    try:
        _walk(top, "", root, source, files, problems, [0])
    finally:
        os.close(top)
    return sorted(files), problems


def read_tree(recipe_dir, source):
    """[(relative path under patches/, bytes, sha256)] of every regular file under <recipe_dir>/patches, sorted.

    Read once, without following any link (O_NOFOLLOW on every directory and file, fstat against the lstat): these
    bytes are what is checked against a commit, summed, and staged for the copy. A symlink anywhere under patches/
    (patches/ itself included), a fifo, socket or device is refused with one message each; hard links are plain
    files and are read as such.
    """
    root = os.path.join(recipe_dir, PATCHES)
    try:
        files, problems = _scan(root, source)
    except OSError as exc:
        if os.path.islink(root):
            raise RecipeError("serve_hotfix_recipe=%s: %s/ is a symlink to %s; the tree copied to the nodes must be a "
                              "directory of the recipe itself, never reached through a link. Fix: make %s/ a real "
                              "directory (a checkout of the recipe)." % (source, PATCHES, os.readlink(root), PATCHES))
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise RecipeError("serve_hotfix_recipe=%s: %s has no %s/ directory, so it is not a checkout of the recipe. "
                              "Fix: point serve_hotfix_recipe at the recipe repository's root (a controller directory, "
                              "or a git URL with serve_hotfix_recipe_version)." % (source, recipe_dir, PATCHES))
        raise
    if problems:
        raise RecipeError("\n".join(problems))
    return files


def tree_files(recipe_dir, source=None):
    """[(relative path under patches/, sha256)] of every regular file under <recipe_dir>/patches, sorted."""
    return [(rel, sha) for rel, _data, sha in read_tree(recipe_dir, source or recipe_dir)]


def sums_text(files):
    """sha256sum(1) check file of the patches tree, relative to the node's copy of the tree."""
    return "".join("%s  %s/%s\n" % (sha, PATCHES, rel) for rel, sha in files)


def _shell_condition(step):
    when = step["when"]
    if when == KEYS:
        return '[ "$keys" = 1 ]'
    if when in SWITCHES:
        env, kind = SWITCHES[when]
        test = '[ "${%s:-0}" = 1 ]' % env
        return "! " + test if kind == "skip" else test
    return None


def entry_script(model, revision):
    """The shell script the container runs before `vllm serve`, in upstream order, fail-closed.

    Every condition is read from the container's environment at start, as upstream does, so the script is
    the same whatever the switches; a missing or failing hotfix ends the rank with "dspark-hotfix: FATAL".
    """
    hub = "/cache/huggingface/hub/models--" + model.replace("/", "--")
    lines = [
        "# dspark.cluster serve role: the recipe's hotfixes in the upstream entrypoint's order, fail-closed.",
        "# Generated by plugins/plugin_utils/hotfix_recipe.py; mounted read-only at %s/%s." % (MOUNT_SERVE, SCRIPT_NAME),
        "P=%s" % MOUNT_PATCHES,
        'note() { echo "dspark-hotfix: $*" >&2; }',
        'fatal() { echo "dspark-hotfix: FATAL: $*; this rank stops here (fail-closed)" >&2; exit 1; }',
        "apply() {",
        "  f=$1; shift",
        '  [ -f "$P/$f" ] || fatal "$P/$f is missing"',
        '  note "applying $f${*:+ $*}"',
        '  case "$f" in',
        '    *.py) python3 "$P/$f" "$@" ;;',
        '    *) bash "$P/$f" "$@" ;;',
        '  esac || fatal "$f${*:+ $*} failed with exit code $?"',
        "}",
        "keys=0",
        "[ -n \"$(printf '%s' \"${DSPARK_API_KEYS:-}\" | tr -d ' \\t')\" ] && keys=1",
        '[ -n "${VLLM_API_KEY:-}" ] && keys=1',
        "enc=${DSPARK_ENCODING_FILE:-}",
        "hub=%s" % shlex.quote(hub),
        "rev=%s" % shlex.quote(revision or "none"),
        'if [ -z "$enc" ] && [ -f "$hub/snapshots/$rev/encoding/encoding_dsv4.py" ]; then',
        '  enc="$hub/snapshots/$rev/encoding/encoding_dsv4.py"',
        "fi",
        'if [ -z "$enc" ]; then',
        '  for c in "$hub"/snapshots/*/encoding/encoding_dsv4.py; do',
        '    if [ -f "$c" ]; then enc=$c; break; fi',
        "  done",
        "fi",
        'if [ -n "$enc" ] && [ -f "$enc" ]; then',
        "  vdir=$(python3 -c 'import os, vllm; print(os.path.dirname(vllm.__file__))')"
        ' || fatal "cannot locate the vllm package for the encoder copy"',
        '  cp "$enc" "$vdir/tokenizers/deepseek_v4_encoding.py" || fatal "cannot copy $enc into vLLM"',
    ]
    body = []
    for step in CATALOG:
        call = " ".join(["apply", step["file"]] + list(step["args"]))
        if step["when"] == ENCODING:
            lines.append("  " + call)
            lines.append("else")
            lines.append('  note "WARN: encoding_dsv4.py not found (set DSPARK_ENCODING_FILE or check the model'
                         ' snapshot): encoder copy and issue21 skipped"')
            lines.append("fi")
            continue
        cond = _shell_condition(step)
        body.append("if %s; then %s; fi" % (cond, call) if cond else call)
    lines.extend(body)
    lines.append('note "all hotfixes applied"')
    return "\n".join(lines) + "\n"


def plan(recipe_dir, source, switches, keys_set, model, revision, version="", cache_dir=None, runner=subprocess.run):
    """Everything the role needs for one rank, or RecipeError with every problem.

    The tree is read once (read_tree); with a version its files must be exactly the commit's (commit_problems);
    with cache_dir the same bytes are staged there (stage) and patches_dir names that copy, which is what the
    role copies to the nodes. Without a version the directory is used as it is and tree_digest records it.
    """
    version = (version or "").strip().lower()
    files = read_tree(recipe_dir, source)
    problems = commit_problems(recipe_dir, source, version, files, runner) if version else []
    if not problems:
        problems = required_problems({rel for rel, _data, _sha in files}, source, switches, keys_set)
    if problems:
        raise RecipeError("\n".join(problems))
    sums = sums_text([(rel, sha) for rel, _data, sha in files])
    tree_digest = hashlib.sha256(sums.encode("utf-8")).hexdigest()
    script = entry_script(model, revision)
    digest = hashlib.sha256((sums + "\0" + script).encode("utf-8")).hexdigest()
    steps = ["%s%s" % (s["file"], "".join(" " + a for a in s["args"])) for s in CATALOG if active(s, switches, keys_set)]
    return {
        "patches_dir": stage(files, tree_digest, cache_dir) if cache_dir else os.path.join(recipe_dir, PATCHES),
        "archive": archive(files, tree_digest, cache_dir) if cache_dir else None,
        "files": [rel for rel, _data, _sha in files],
        "sums": sums,
        "script": script,
        "digest": digest,
        "tree_digest": tree_digest,
        "recipe": {"source": source, "path": recipe_dir, "version": version, "verified": bool(version)},
        "env": switch_env(switches),
        "steps": steps,
    }


# --- a versioned recipe: what is copied must be exactly the commit's blobs ---------------------------------

def _git_bytes(args, cwd, runner):
    run = runner(["git"] + list(args), cwd=cwd, capture_output=True, check=False)
    err = run.stderr or b""
    if isinstance(err, bytes):
        err = err.decode("utf-8", "replace")
    return run.returncode, run.stdout or b"", err.strip()


def _object_format(cwd, runner):
    rc, out, _err = _git(["rev-parse", "--show-object-format"], cwd=cwd, runner=runner)
    return out if rc == 0 and out in ("sha1", "sha256") else "sha1"


def git_object_id(kind, data, algo="sha1"):
    """The id git gives an object of this kind and content (git hash-object), e.g. kind "blob"."""
    return hashlib.new(algo, b"%s %d\0" % (kind.encode("ascii"), len(data)) + data).hexdigest()


class _Tampered(Exception):
    """A git object whose content does not hash to its id, or that cannot be read."""


def _read_object(cwd, kind, oid, algo, runner):
    # The commit id is the trust anchor: every object read on the way to patches/ is hashed again here, so a
    # changed object store (a cached clone someone edited) cannot vouch for other content.
    rc, data, err = _git_bytes(["cat-file", kind, oid], cwd, runner)
    if rc != 0:
        raise _Tampered("git cannot read the %s %s (%s)" % (kind, oid, err or "exit code %d" % rc))
    if git_object_id(kind, data, algo) != oid:
        raise _Tampered("the %s %s in the repository's object store does not hash to its id" % (kind, oid))
    return data


def _tree_entries(data, size):
    entries = {}
    pos = 0
    while pos < len(data):
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        entries[os.fsdecode(data[space + 1:nul])] = (data[pos:space].decode("ascii"), data[nul + 1:nul + 1 + size].hex())
        pos = nul + 1 + size
    return entries


def commit_tree(cwd, version, subdir, runner=subprocess.run):
    """({relative path: (git mode, object id)} of every entry under <subdir> in the commit `version`, the object
    format), read from the repository at cwd with every object on the way checked against its id; None when the
    commit has no such directory. Raises _Tampered."""
    algo = _object_format(cwd, runner)
    size = hashlib.new(algo).digest_size
    commit = _read_object(cwd, "commit", version, algo, runner)
    first = commit.split(b"\n", 1)[0].split(b" ")
    if len(first) != 2 or first[0] != b"tree":
        raise _Tampered("the commit %s has no tree" % version)
    tree = first[1].decode("ascii")
    for part in [p for p in subdir.split("/") if p]:
        mode, oid = _tree_entries(_read_object(cwd, "tree", tree, algo, runner), size).get(part, (None, None))
        if mode != "40000":
            return None
        tree = oid
    out = {}
    pending = [("", tree)]
    while pending:
        prefix, oid = pending.pop()
        for name, (mode, child) in _tree_entries(_read_object(cwd, "tree", oid, algo, runner), size).items():
            if name in SKIP_NAMES:
                continue
            if mode == "40000":
                pending.append((prefix + name + "/", child))
            else:
                out[prefix + name] = (mode, child)
    return out, algo


def commit_problems(recipe_dir, source, version, files, runner=subprocess.run):
    """Every difference between the files read from <recipe_dir>/patches and patches/ in the commit `version`.

    Compared by content: each file's git blob id (computed here from the bytes that will be copied) against the
    commit's tree, so a modified, added (untracked or ignored: it would be copied too) or deleted file is named,
    whatever the index or `git status` say. A git URL's cached clone is checked the same way.
    """
    cached = is_git_url(source)
    where = "serve_hotfix_recipe=%s (serve_hotfix_recipe_version=%s)" % (source, version)
    fix_any = None
    if cached:
        where += " in its cached clone %s" % recipe_dir
        fix_any = ("Fix: remove %s (the next run clones the commit again) and find out what changed it; a "
                   ".gitattributes eol or filter rule in the recipe that rewrites files on checkout cannot be used."
                   % recipe_dir)
    rc, prefix, err = _git(["rev-parse", "--show-prefix"], cwd=recipe_dir, runner=runner)
    if rc != 0:
        return ["%s: %s is not a git checkout (%s), so its content cannot be checked against the commit. Fix: point "
                "serve_hotfix_recipe at a git checkout of the recipe, or empty serve_hotfix_recipe_version to use "
                "the directory as it is." % (where, recipe_dir, err)]
    try:
        found = commit_tree(recipe_dir, version, prefix + PATCHES, runner)
    except _Tampered as exc:
        return ["%s: %s, so the checkout cannot vouch for its content. Fix: %s" % (
            where, exc, ("remove %s (the next run clones the commit again)." % recipe_dir) if cached else
            "check the repository (git fsck) or use a fresh clone of the recipe.")]
    if found is None:
        return ["%s: the commit has no %s%s/ directory. Fix: set serve_hotfix_recipe_version to a commit of the "
                "recipe." % (where, prefix, PATCHES)]
    expected, algo = found
    actual = {rel: git_object_id("blob", data, algo) for rel, data, _sha in files}
    problems = []
    for rel in sorted(set(expected) | set(actual)):
        shown = "%s/%s" % (PATCHES, rel)
        restore = "git -C %s checkout %s -- %s" % (shlex.quote(recipe_dir), version, shown)
        if rel not in expected:
            what = "is not in the commit (an untracked or ignored file), and every file of %s/ is copied" % PATCHES
            fix = "remove it, or commit it and set serve_hotfix_recipe_version to that commit"
        elif rel not in actual:
            what = "is in the commit but missing from the directory (deleted)"
            fix = "restore it (%s), or commit the removal and set serve_hotfix_recipe_version to that commit" % restore
        elif expected[rel][0] == "120000":
            what = "is a symlink in the commit, and links are never copied to the nodes"
            fix = "use a recipe commit whose %s/ holds regular files only" % PATCHES
        elif expected[rel][0] == "160000":
            what = "is a submodule in the commit, which is not supported"
            fix = "use a recipe commit whose %s/ holds regular files only" % PATCHES
        elif expected[rel][1] != actual[rel]:
            what = "differs from the commit's content (modified; blob %s, the commit has %s)" % (
                actual[rel][:12], expected[rel][1][:12])
            fix = ("restore it (%s), or commit the change and set serve_hotfix_recipe_version to that commit"
                   % restore)
        else:
            continue
        problems.append("%s: %s %s. %s" % (where, shown, what, fix_any if cached else "Fix: %s." % fix))
    return problems


# --- the staged copy: exactly the bytes that were checked ----------------------------------------------------

def _staged_ok(path, files):
    try:
        held, problems = _scan(path, path)
    except OSError:
        return False
    return not problems and [(rel, sha) for rel, _data, sha in held] == [(rel, sha) for rel, _data, sha in files]


def stage(files, tree_digest, cache_dir):
    """A private copy of the checked files in <cache_dir>/trees/<tree digest> (0700, regular files only), which
    the role copies to the nodes: the copy never reads the recipe directory again, so nothing swapped in after
    the check (a link, another content) can reach a node. An existing copy is used only when it still holds
    exactly these files; otherwise it is replaced."""
    base = os.path.join(os.path.expanduser(cache_dir), "trees")
    os.makedirs(base, mode=0o700, exist_ok=True)
    dest = os.path.join(base, tree_digest)
    for attempt in range(3):
        if _staged_ok(dest, files):
            return dest
        work = tempfile.mkdtemp(prefix=".stage-", dir=base)
        old = None
        try:
            for rel, data, _sha in files:
                path = os.path.join(work, *rel.split("/"))
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                finally:
                    os.close(fd)
            if os.path.lexists(dest):
                if _staged_ok(dest, files):  # another fork staged the same tree meanwhile
                    return dest
                old = tempfile.mkdtemp(prefix=".old-", dir=base)
                os.rename(dest, os.path.join(old, "tree"))
            os.rename(work, dest)
        except OSError:
            if attempt == 2:
                raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
            if old:
                shutil.rmtree(old, ignore_errors=True)
    if _staged_ok(dest, files):
        return dest
    raise RecipeError("serve_hotfix_recipe_cache_dir=%s: the staged copy %s of the recipe's %s/ keeps changing. "
                      "Fix: make sure nothing else writes to serve_hotfix_recipe_cache_dir." % (cache_dir, dest, PATCHES))


def archive_bytes(files):
    """The checked files as one tar (patches/<rel>, directories 0755, files 0644, owner root, time 0): the same
    bytes for the same tree, so one transfer and one extraction put the tree on a node (the copy module checks and
    sends a directory file by file over SSH: a minute for the recipe's 20-odd files)."""
    out = io.BytesIO()
    dirs = {PATCHES}
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_tar_info(PATCHES, tarfile.DIRTYPE, 0o755))
        for rel, data, _sha in sorted(files):
            parts = rel.split("/")
            for depth in range(1, len(parts)):
                name = "/".join([PATCHES] + parts[:depth])
                if name not in dirs:
                    dirs.add(name)
                    tar.addfile(_tar_info(name, tarfile.DIRTYPE, 0o755))
            info = _tar_info("%s/%s" % (PATCHES, rel), tarfile.REGTYPE, 0o644)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _tar_info(name, kind, mode):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = kind, mode, 0, 0, 0, "root", "root"
    return info


def archive(files, tree_digest, cache_dir):
    """<cache_dir>/archives/<tree digest>.tar holding exactly the checked files (archive_bytes), written atomically;
    an existing file is kept only when it holds these very bytes, so nothing placed there reaches a node."""
    base = os.path.join(os.path.expanduser(cache_dir), "archives")
    os.makedirs(base, mode=0o700, exist_ok=True)
    dest = os.path.join(base, tree_digest + ".tar")
    data = archive_bytes(files)
    try:
        fd = os.open(dest, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as held:
            if held.read(len(data) + 1) == data:
                return dest
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=".archive-", dir=base)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.rename(tmp, dest)
    except OSError:
        os.unlink(tmp)
        raise
    return dest


# --- where the recipe checkout comes from ---------------------------------------------------------------

def _git(args, cwd=None, runner=subprocess.run):
    run = runner(["git"] + list(args), cwd=cwd, capture_output=True, text=True, check=False)
    return run.returncode, (run.stdout or "").strip(), (run.stderr or "").strip()


def _head(path, runner):
    rc, out, _err = _git(["rev-parse", "HEAD"], cwd=path, runner=runner)
    return out if rc == 0 else None


def resolve(source, version, cache_dir, runner=subprocess.run):
    """Controller directory of the recipe checkout named by serve_hotfix_recipe / _version.

    A directory is used as it is (when version is set it must be that checkout's HEAD). A git URL needs a
    40-hex commit; it is cloned once into <cache_dir>/<url hash>-<commit> (a private temporary clone renamed
    into place, so parallel forks never see half a checkout) and checked to be exactly that commit. Only the
    HEAD is checked here: plan() then checks the content of patches/ against the commit (commit_problems), for a
    directory and for a cached clone alike.
    """
    source = (source or "").strip()
    version = (version or "").strip().lower()
    if is_git_url(source):
        if not _COMMIT.match(version):
            raise RecipeError("serve_hotfix_recipe=%s is a git URL but serve_hotfix_recipe_version=%r is not a 40-hex "
                              "commit id. Fix: pin the recipe: set serve_hotfix_recipe_version to the full commit id "
                              "(git rev-parse HEAD in the checkout you tested)." % (source, version))
        cache_dir = os.path.expanduser(cache_dir)
        dest = os.path.join(cache_dir, "%s-%s" % (hashlib.sha256(source.encode()).hexdigest()[:12], version))
        if os.path.isdir(dest) and _head(dest, runner) == version:
            return dest
        os.makedirs(cache_dir, exist_ok=True)
        work = tempfile.mkdtemp(prefix=".clone-", dir=cache_dir)
        try:
            rc, _out, err = _git(["clone", "--quiet", "--no-checkout", source, work], runner=runner)
            if rc == 0:
                rc, _out, err = _git(["checkout", "--quiet", "--detach", version], cwd=work, runner=runner)
            if rc != 0:
                raise RecipeError("serve_hotfix_recipe=%s at serve_hotfix_recipe_version=%s could not be checked out "
                                  "on the controller: %s. Fix: check the URL, the commit id and the controller's access "
                                  "to the repository (or use a controller directory)." % (source, version, err))
            if _head(work, runner) != version:
                raise RecipeError("serve_hotfix_recipe=%s: the checkout is not at %s. Fix: give the full commit id "
                                  "in serve_hotfix_recipe_version." % (source, version))
            if os.path.isdir(dest):
                shutil.rmtree(dest, ignore_errors=True)
            try:
                os.rename(work, dest)
            except OSError:
                if _head(dest, runner) != version:  # another fork renamed its clone first: that one is used
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return dest
    path = os.path.abspath(os.path.expanduser(source))
    if not os.path.isdir(path):
        raise RecipeError("serve_hotfix_recipe=%s is neither a directory on the controller nor a git URL. Fix: point "
                          "it at a checkout of the recipe repository, or at its git URL with "
                          "serve_hotfix_recipe_version." % source)
    if version:
        head = _head(path, runner)
        if head != version:
            raise RecipeError("serve_hotfix_recipe=%s is at %s, not at serve_hotfix_recipe_version=%s. Fix: check out "
                              "that commit there, or correct serve_hotfix_recipe_version (empty: use the directory "
                              "as it is)." % (source, head or "no git commit", version))
    return path
