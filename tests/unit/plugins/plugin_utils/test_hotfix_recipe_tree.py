"""The recipe cannot smuggle files (#26 point 6): links and special files under patches/ are refused before
anything is copied, a versioned recipe (a directory or a git URL's cached clone) must hold exactly the commit's
blobs, and the role copies a staged snapshot of the very bytes that were checked. Real git repositories in
tmp_path; each case is refused or accepted with its message asserted."""

import hashlib
import os
import pathlib
import shutil
import socket
import subprocess
import tarfile

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import hotfix_recipe as hr

ROOT = pathlib.Path(__file__).resolve().parents[4]
LAB_RECIPE = ROOT / "lab" / "recipe"
MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"
REV = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
SPIN = "hotfix-gb10-spin-wait.sh"


def git(*args, cwd):
    run = subprocess.run(["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", "-c", "core.autocrlf=false"]
                         + list(args), cwd=cwd, check=True, capture_output=True, text=True)
    return run.stdout.strip()


def make_repo(path, subdir=""):
    """A git repository at path holding a copy of the lab's stand-in recipe at path/subdir; (recipe dir, HEAD)."""
    recipe = path / subdir if subdir else path
    shutil.copytree(LAB_RECIPE, recipe)
    (path / ".gitignore").write_text("*.orig\n")
    (recipe / "patches" / "extra").mkdir()
    (recipe / "patches" / "extra" / "data.txt").write_text("nested, tracked\n")
    git("init", "-q", cwd=path)
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", "stand-in", cwd=path)
    return recipe, git("rev-parse", "HEAD", cwd=path)


def plan(recipe, version="", source=None, cache=None, **kwargs):
    return hr.plan(str(recipe), source or str(recipe), {}, False, MODEL, REV, version=version,
                   cache_dir=str(cache) if cache else None, **kwargs)


# --- links and special files: refused with or without a version -------------------------------------------

def outside_link(recipe, tmp_path):
    secret = tmp_path / "controller-secret"
    secret.write_text("not a hotfix\n")
    os.symlink(str(secret), str(recipe / "patches" / "evil.sh"))
    return ["patches/evil.sh is a symlink to %s" % secret, "resolves to %s, outside the recipe's patches/ tree" % secret]


def relative_outside_link(recipe, tmp_path):
    os.symlink("../../README.md", str(recipe / "patches" / "extra" / "up.md"))
    return ["patches/extra/up.md is a symlink to ../../README.md", "outside the recipe's patches/ tree"]


def inside_link(recipe, tmp_path):
    os.symlink(SPIN, str(recipe / "patches" / "alias.sh"))
    return ["patches/alias.sh is a symlink to %s" % SPIN, "it stays inside patches/, but no link is copied"]


def dangling_link(recipe, tmp_path):
    os.symlink("/nonexistent/x", str(recipe / "patches" / "gone.sh"))
    return ["patches/gone.sh is a symlink to /nonexistent/x", "outside the recipe's patches/ tree"]


def link_to_directory(recipe, tmp_path):
    os.symlink("/etc", str(recipe / "patches" / "etc"))
    return ["patches/etc is a symlink to /etc", "resolves to /etc, outside"]


def a_fifo(recipe, tmp_path):
    os.mkfifo(str(recipe / "patches" / "pipe"))
    return ["patches/pipe is a fifo, not a regular file", "Fix: remove it from the recipe's patches/ directory"]


def a_socket(recipe, tmp_path):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(recipe / "patches" / "s"))
    sock.close()
    return ["patches/s is a socket, not a regular file"]


def patches_is_a_link(recipe, tmp_path):
    real = tmp_path / "elsewhere"
    shutil.move(str(recipe / "patches"), str(real))
    os.symlink(str(real), str(recipe / "patches"))
    return ["patches/ is a symlink to %s" % real, "Fix: make patches/ a real directory"]


REFUSED_TREES = [outside_link, relative_outside_link, inside_link, dangling_link, link_to_directory, a_fifo, a_socket,
                 patches_is_a_link]


@pytest.mark.parametrize("versioned", [False, True], ids=["unversioned", "versioned"])
@pytest.mark.parametrize("case", REFUSED_TREES, ids=[c.__name__ for c in REFUSED_TREES])
def test_links_and_special_files_are_refused(tmp_path, case, versioned):
    recipe, head = make_repo(tmp_path / "repo")
    words = case(recipe, tmp_path)
    cache = tmp_path / "cache"
    with pytest.raises(hr.RecipeError) as err:
        plan(recipe, head if versioned else "", source="/srv/recipe", cache=cache)
    text = str(err.value)
    assert text.startswith("serve_hotfix_recipe=/srv/recipe: patches/")
    assert "Fix: " in text
    for word in words:
        assert word in text
    assert not cache.exists()  # refused before anything was staged, so before anything reaches a node


def test_every_bad_entry_is_named_at_once(tmp_path):
    recipe, dummy = make_repo(tmp_path / "repo")
    outside_link(recipe, tmp_path)
    a_fifo(recipe, tmp_path)
    with pytest.raises(hr.RecipeError) as err:
        plan(recipe)
    lines = str(err.value).splitlines()
    assert len(lines) == 2 and "evil.sh" in lines[0] and "pipe" in lines[1]


def test_hard_links_are_plain_files(tmp_path):
    """A hard link is a regular file: its content is read and summed like any other (never a path to follow)."""
    recipe, dummy = make_repo(tmp_path / "repo")
    outside = tmp_path / "outside.txt"
    outside.write_text("hard-linked\n")
    os.link(str(outside), str(recipe / "patches" / "linked.txt"))
    result = plan(recipe, cache=tmp_path / "cache")
    assert "linked.txt" in result["files"]
    assert "%s  patches/linked.txt" % hashlib.sha256(b"hard-linked\n").hexdigest() in result["sums"]


def test_a_file_swapped_after_the_check_is_not_followed(tmp_path):
    """The open itself never follows a link (O_NOFOLLOW) and must find the very file that lstat saw."""
    (tmp_path / "real").write_text("x\n")
    (tmp_path / "other").write_text("y\n")
    os.symlink(str(tmp_path / "real"), str(tmp_path / "link"))
    before = os.stat(str(tmp_path / "real"), follow_symlinks=False)
    fd = os.open(str(tmp_path), os.O_RDONLY)
    try:
        with pytest.raises(OSError):  # ELOOP: a link put where a regular file was
            hr._read_file(fd, "link", "f", before, "label", [0])
        with pytest.raises(hr.RecipeError, match="label was replaced while it was read"):
            hr._read_file(fd, "other", "f", before, "label", [0])
        assert hr._read_file(fd, "real", "f", before, "label", [0])[1] == b"x\n"
    finally:
        os.close(fd)


# --- a versioned directory: the content of patches/ against the commit ---------------------------------------

def modified(recipe):
    (recipe / "patches" / SPIN).write_text("echo smuggled\n")
    return ["patches/%s differs from the commit's content (modified" % SPIN, "Fix: restore it (git -C ",
            "checkout %s -- patches/%s)" % ("{head}", SPIN), "or commit the change and set serve_hotfix_recipe_version"]


def modified_nested(recipe):
    (recipe / "patches" / "extra" / "data.txt").write_text("changed\n")
    return ["patches/extra/data.txt differs from the commit's content (modified"]


def staged_but_not_committed(recipe):
    (recipe / "patches" / SPIN).write_text("echo staged\n")
    git("add", "-A", cwd=recipe)  # the index does not count: only the commit's blobs do
    return ["patches/%s differs from the commit's content" % SPIN]


def untracked(recipe):
    (recipe / "patches" / "new.sh").write_text("echo new\n")
    return ["patches/new.sh is not in the commit (an untracked or ignored file), and every file of patches/ is copied",
            "Fix: remove it, or commit it"]


def ignored(recipe):
    (recipe / "patches" / "x.orig").write_text("ignored by .gitignore, still copied\n")
    assert git("status", "--porcelain", cwd=recipe) == ""  # git status alone would not see it
    return ["patches/x.orig is not in the commit (an untracked or ignored file)"]


def deleted(recipe):
    (recipe / "patches" / "lab-standin.sh").unlink()
    return ["patches/lab-standin.sh is in the commit but missing from the directory (deleted)", "Fix: restore it"]


def deleted_required(recipe):
    (recipe / "patches" / SPIN).unlink()
    return ["patches/%s is in the commit but missing from the directory (deleted)" % SPIN]


def mode_change_only(recipe):
    os.chmod(str(recipe / "patches" / SPIN), 0o644)  # the role copies with mode 0644 anyway: content is what counts
    return None


def clean(recipe):
    return None


VERSIONED_CASES = [modified, modified_nested, staged_but_not_committed, untracked, ignored, deleted, deleted_required,
                   mode_change_only, clean]


@pytest.mark.parametrize("subdir", ["", "lab/recipe"], ids=["repo-root", "subdirectory"])
@pytest.mark.parametrize("case", VERSIONED_CASES, ids=[c.__name__ for c in VERSIONED_CASES])
def test_a_versioned_directory_must_hold_the_commits_blobs(tmp_path, case, subdir):
    recipe, head = make_repo(tmp_path / "repo", subdir)
    words = case(recipe)
    cache = tmp_path / "cache"
    assert hr.resolve(str(recipe), head, str(cache)) == str(recipe)  # the HEAD is right in every case
    if words is None:
        result = plan(recipe, head, source="/srv/recipe", cache=cache)
        assert result["recipe"] == {"source": "/srv/recipe", "path": str(recipe), "version": head, "verified": True}
        assert "extra/data.txt" in result["files"]
        return
    with pytest.raises(hr.RecipeError) as err:
        plan(recipe, head, source="/srv/recipe", cache=cache)
    text = str(err.value)
    assert text.startswith("serve_hotfix_recipe=/srv/recipe (serve_hotfix_recipe_version=%s): patches/" % head)
    assert len(text.splitlines()) == 1
    for word in words:
        assert word.replace("{head}", head) in text
    assert not cache.exists()


def test_a_versioned_directory_that_is_not_a_git_checkout(tmp_path):
    recipe = tmp_path / "recipe"
    shutil.copytree(LAB_RECIPE, recipe)
    with pytest.raises(hr.RecipeError, match="is at no git commit, not at serve_hotfix_recipe_version="):
        hr.resolve(str(recipe), "a" * 40, str(tmp_path / "cache"))
    problems = hr.commit_problems(str(recipe), "/srv/recipe", "a" * 40, hr.read_tree(str(recipe), "/srv/recipe"))
    assert problems[0].startswith("serve_hotfix_recipe=/srv/recipe (serve_hotfix_recipe_version=%s): %s is not a git "
                                  "checkout" % ("a" * 40, recipe))


def test_a_commit_without_patches(tmp_path):
    repo = tmp_path / "repo"
    recipe, dummy = make_repo(repo)
    git("rm", "-r", "-q", "patches", cwd=repo)
    git("commit", "-q", "-m", "no patches", cwd=repo)
    bare = git("rev-parse", "HEAD", cwd=repo)
    git("checkout", "-q", "HEAD~1", cwd=repo)
    problems = hr.commit_problems(str(recipe), "/srv/recipe", bare, hr.read_tree(str(recipe), "/srv/recipe"))
    assert problems == ["serve_hotfix_recipe=/srv/recipe (serve_hotfix_recipe_version=%s): the commit has no patches/ "
                        "directory. Fix: set serve_hotfix_recipe_version to a commit of the recipe." % bare]


def test_a_changed_object_store_cannot_vouch_for_the_content(tmp_path):
    """Every object on the way from the commit id to patches/ is hashed again: a tree rewritten in the object
    store (here: what git hands back) is named, not trusted."""
    recipe, head = make_repo(tmp_path / "repo")

    def lying(argv, **kwargs):
        run = subprocess.run(argv, check=kwargs.pop("check", False), **kwargs)
        if argv[1:3] == ["cat-file", "tree"]:
            run.stdout = run.stdout.replace(b"lab-standin.sh", b"lab-standin.sx")
        return run

    problems = hr.commit_problems(str(recipe), "/srv/recipe", head, hr.read_tree(str(recipe), "/srv/recipe"), runner=lying)
    assert len(problems) == 1
    assert "does not hash to its id, so the checkout cannot vouch for its content" in problems[0]
    assert problems[0].startswith("serve_hotfix_recipe=/srv/recipe (serve_hotfix_recipe_version=%s): the tree " % head)


def test_blob_ids_are_gits(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"hello\n\0binary")
    assert hr.git_object_id("blob", path.read_bytes()) == git("hash-object", str(path), cwd=tmp_path)


# --- a git URL: the cached clone is checked the same way, every time ----------------------------------------

def test_a_cached_clone_is_checked_every_time(tmp_path):
    origin, head = make_repo(tmp_path / "origin")
    url = "file://%s" % origin
    cache = tmp_path / "cache"
    clone = hr.resolve(url, head, str(cache))
    first = plan(clone, head, source=url, cache=cache)
    assert first["recipe"]["verified"] is True
    (pathlib.Path(clone) / "patches" / SPIN).write_text("echo tampered after cloning\n")
    assert hr.resolve(url, head, str(cache)) == clone  # HEAD unchanged: resolve alone would trust it
    with pytest.raises(hr.RecipeError) as err:
        plan(clone, head, source=url, cache=cache)
    text = str(err.value)
    assert text.startswith("serve_hotfix_recipe=%s (serve_hotfix_recipe_version=%s) in its cached clone %s: patches/%s "
                           "differs from the commit's content (modified" % (url, head, clone, SPIN))
    assert "Fix: remove %s (the next run clones the commit again)" % clone in text
    (pathlib.Path(clone) / "patches" / "added.sh").write_text("echo added\n")
    with pytest.raises(hr.RecipeError) as err:
        plan(clone, head, source=url, cache=cache)
    assert "patches/added.sh is not in the commit" in str(err.value)
    shutil.rmtree(clone)  # the fix the message names
    again = hr.resolve(url, head, str(cache))
    assert plan(again, head, source=url, cache=cache)["tree_digest"] == first["tree_digest"]


# --- the staged copy: what the role copies is exactly what was checked --------------------------------------

def test_the_role_copies_a_staged_snapshot_of_the_checked_bytes(tmp_path):
    recipe, head = make_repo(tmp_path / "repo")
    cache = tmp_path / "cache"
    result = plan(recipe, head, cache=cache)
    staged = pathlib.Path(result["patches_dir"])
    assert staged == cache / "trees" / result["tree_digest"]
    assert result["tree_digest"] == hashlib.sha256(result["sums"].encode()).hexdigest()
    held = sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file())
    assert held == result["files"]
    assert not any(p.is_symlink() for p in staged.rglob("*"))
    for line in result["sums"].splitlines():
        sha, rel = line.split("  patches/")
        assert hashlib.sha256((staged / rel).read_bytes()).hexdigest() == sha
    assert oct((cache / "trees").stat().st_mode & 0o777) == "0o700"
    # A change in the recipe after the check does not reach the staged copy the role reads.
    (recipe / "patches" / SPIN).write_text("echo later\n")
    assert "later" not in (staged / SPIN).read_text()
    assert not list((cache / "trees").glob(".*"))  # no temporary directory left


@pytest.mark.parametrize("tamper", ["content", "extra", "link", "missing"])
def test_a_changed_staged_copy_is_replaced(tmp_path, tamper):
    recipe, dummy = make_repo(tmp_path / "repo")
    cache = tmp_path / "cache"
    staged = pathlib.Path(plan(recipe, cache=cache)["patches_dir"])
    target = staged / SPIN
    if tamper == "content":
        target.write_text("echo swapped\n")
    elif tamper == "extra":
        (staged / "extra.sh").write_text("echo extra\n")
    elif tamper == "link":
        target.unlink()
        os.symlink("/etc/hostname", str(target))
    else:
        target.unlink()
    again = plan(recipe, cache=cache)
    assert pathlib.Path(again["patches_dir"]) == staged
    assert (staged / SPIN).read_bytes() == (recipe / "patches" / SPIN).read_bytes()
    assert not (staged / SPIN).is_symlink() and not (staged / "extra.sh").exists()
    assert not list((cache / "trees").glob(".*"))


def test_an_unversioned_directory_records_its_tree_digest(tmp_path):
    recipe, dummy = make_repo(tmp_path / "repo")
    (recipe / "patches" / SPIN).write_text("echo local edit\n")  # used as it is, as today
    result = plan(recipe, cache=tmp_path / "cache")
    assert result["recipe"]["verified"] is False and result["recipe"]["version"] == ""
    assert result["tree_digest"] == hashlib.sha256(result["sums"].encode()).hexdigest()
    assert plan(recipe, cache=tmp_path / "cache")["tree_digest"] == result["tree_digest"]
    (recipe / "patches" / SPIN).write_text("echo another edit\n")
    assert plan(recipe, cache=tmp_path / "cache")["tree_digest"] != result["tree_digest"]


def test_the_lab_recipe_passes_the_tree_rules(tmp_path):
    """lab/recipe is a plain directory inside this repository, used unversioned by the labs (DSPARK_LAB_RECIPE)."""
    files = hr.read_tree(str(LAB_RECIPE), "lab")
    assert files and all(not os.path.islink(str(LAB_RECIPE / "patches" / rel)) for rel, _data, _sha in files)
    assert plan(LAB_RECIPE, cache=tmp_path / "cache")["recipe"]["verified"] is False


def test_a_sha256_repository_is_checked_the_same_way(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(LAB_RECIPE, repo)
    git("init", "-q", "--object-format=sha256", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "stand-in", cwd=repo)
    head = git("rev-parse", "HEAD", cwd=repo)
    assert len(head) == 64
    assert plan(repo, head)["recipe"]["verified"] is True
    (repo / "patches" / SPIN).write_text("echo changed\n")
    with pytest.raises(hr.RecipeError, match="patches/%s differs from the commit's content" % SPIN):
        plan(repo, head)


# --- the archive: one transfer of exactly the checked bytes ------------------------------------------------

def test_the_archive_holds_exactly_the_checked_files(tmp_path):
    recipe, dummy = make_repo(tmp_path / "repo")
    (recipe / "patches" / "sub").mkdir()
    (recipe / "patches" / "sub" / "nested.py").write_text("print('nested')\n")
    cache = tmp_path / "cache"
    result = plan(recipe, cache=cache)
    path = pathlib.Path(result["archive"])
    assert path == cache / "archives" / (result["tree_digest"] + ".tar")
    assert oct((cache / "archives").stat().st_mode & 0o777) == "0o700"
    with tarfile.open(str(path)) as tar:
        members = tar.getmembers()
        files = {m.name: tar.extractfile(m).read() for m in members if m.isfile()}
    assert {"patches", "patches/sub"} <= {m.name for m in members if m.isdir()}
    assert {m.name for m in members if m.isdir()} == {"patches"} | {"patches/" + r.rsplit("/", 1)[0] for r in result["files"] if "/" in r}
    assert all(m.isfile() or m.isdir() for m in members)  # no links, devices or absolute paths
    assert all(m.uid == 0 and m.mtime == 0 and m.mode == (0o755 if m.isdir() else 0o644) for m in members)
    for line in result["sums"].splitlines():
        sha, rel = line.split("  ")
        assert hashlib.sha256(files.pop(rel)).hexdigest() == sha
    assert not files
    # The same tree gives the same bytes (the node's check decides whether to send it, not the file's date).
    assert hr.archive_bytes(hr.read_tree(str(recipe), "x")) == path.read_bytes()


def test_a_changed_archive_is_replaced(tmp_path):
    recipe, dummy = make_repo(tmp_path / "repo")
    cache = tmp_path / "cache"
    path = pathlib.Path(plan(recipe, cache=cache)["archive"])
    good = path.read_bytes()
    path.write_bytes(good[:-1024] + b"x" * 1024)
    assert pathlib.Path(plan(recipe, cache=cache)["archive"]) == path and path.read_bytes() == good
    path.unlink()
    os.symlink("/etc/hostname", str(path))
    plan(recipe, cache=cache)
    assert not path.is_symlink() and path.read_bytes() == good
    assert not list((cache / "archives").glob(".*"))
