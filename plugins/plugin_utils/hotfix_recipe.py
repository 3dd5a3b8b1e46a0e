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

import hashlib
import os
import re
import shlex
import shutil
import subprocess
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


def required_problems(recipe_dir, source, switches, keys_set):
    """One message per required hotfix missing from <recipe_dir>/patches, naming the file, variable and fix."""
    problems = []
    seen = set()
    for step in CATALOG:
        name = step["file"]
        if name in seen or not active(step, switches, keys_set):
            continue
        seen.add(name)
        path = os.path.join(recipe_dir, PATCHES, name)
        if not os.path.isfile(path):
            why, fix = _why(step, switches)
            problems.append("serve_hotfix_recipe=%s: %s/%s is missing; it is required because %s. Fix: %s."
                            % (source, PATCHES, name, why, fix))
    return problems


def tree_files(recipe_dir):
    """[(relative path under patches/, sha256)] of every regular file under <recipe_dir>/patches, sorted."""
    root = os.path.join(recipe_dir, PATCHES)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__"))
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.isfile(path):
                continue
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
            out.append((os.path.relpath(path, root).replace(os.sep, "/"), digest.hexdigest()))
    return sorted(out)


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


def plan(recipe_dir, source, switches, keys_set, model, revision):
    """Everything the role needs for one rank, or RecipeError with every problem."""
    if not os.path.isdir(os.path.join(recipe_dir, PATCHES)):
        raise RecipeError("serve_hotfix_recipe=%s: %s has no %s/ directory, so it is not a checkout of the recipe. "
                          "Fix: point serve_hotfix_recipe at the recipe repository's root (a controller directory, or "
                          "a git URL with serve_hotfix_recipe_version)." % (source, recipe_dir, PATCHES))
    problems = required_problems(recipe_dir, source, switches, keys_set)
    if problems:
        raise RecipeError("\n".join(problems))
    files = tree_files(recipe_dir)
    script = entry_script(model, revision)
    sums = sums_text(files)
    digest = hashlib.sha256((sums + "\0" + script).encode("utf-8")).hexdigest()
    steps = ["%s%s" % (s["file"], "".join(" " + a for a in s["args"])) for s in CATALOG if active(s, switches, keys_set)]
    return {
        "patches_dir": os.path.join(recipe_dir, PATCHES),
        "files": [rel for rel, _sha in files],
        "sums": sums,
        "script": script,
        "digest": digest,
        "env": switch_env(switches),
        "steps": steps,
    }


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
    into place, so parallel forks never see half a checkout) and checked to be exactly that commit.
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
