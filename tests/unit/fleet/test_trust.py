"""trust.py: which paths make `dspark-fleet watch` refuse to start. Real files under tmp_path with os.chmod; other
owners through an injected lstat (the tests run as root here and elsewhere as a normal user: both work)."""

import os
import stat

import pytest

from dspark_fleet import trust

ALICE = 1001
SERVICE = 990


def fake_lstat(owners=None, modes=None):
    """os.lstat with st_uid / the permission bits replaced for some paths (owners: path -> uid, modes: path -> mode)."""
    owners, modes = owners or {}, modes or {}

    def lstat(path):
        real = os.lstat(path)
        values = list(real)
        if path in owners:
            values[stat.ST_UID] = owners[path]
        else:
            values[stat.ST_UID] = 0 if real.st_uid == os.geteuid() else real.st_uid
        if path in modes:
            values[stat.ST_MODE] = stat.S_IFMT(real.st_mode) | modes[path]
        return os.stat_result(values)
    return lstat


def checker(uid=SERVICE, **kw):
    names = {0: "root", ALICE: "alice", SERVICE: "dspark-fleet"}
    return trust.Checker(uid=uid, lstat=fake_lstat(**kw), user_name=lambda u: names.get(u, str(u)),
                         group_name=lambda g: "root" if g == 0 else str(g))


@pytest.fixture
def base(tmp_path):
    """tmp_path's own parents as they are (root's or this user's, /tmp sticky): a clean checkout, venv, inventory."""
    for rel in ("project/playbooks/templates", "project/roles/serve/tasks", "project/plugins/filter", "venv/bin",
                "inv/group_vars/dspark", "inv/host_vars"):
        (tmp_path / rel).mkdir(parents=True)
    for rel in ("project/ansible.cfg", "project/site.yml", "project/playbooks/verify.yml", "project/roles/serve/tasks/main.yml",
                "project/plugins/filter/x.py", "venv/bin/ansible-playbook", "inv/hosts.yml", "inv/group_vars/dspark/main.yml",
                "inv/host_vars/h1.yml"):
        (tmp_path / rel).write_text("x\n")
    vault = tmp_path / "vault.txt"
    vault.write_text("secret\n")
    os.chmod(vault, 0o600)
    for path in [tmp_path] + list(tmp_path.rglob("*")):
        if path != vault:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return tmp_path


def paths(base, inventory="inv/hosts.yml", vault=True):
    return trust.watch_paths(str(base / "project"), str(base / inventory),
                             [str(base / "vault.txt")] if vault else [],
                             python=[(str(base / "venv"), "the venv", trust.TREE)], package_dir=str(base / "project" / "plugins"))


def findings(base, **kw):
    inventory = kw.pop("inventory", "inv/hosts.yml")
    return [(f.path.replace(str(base), "B"), f.what, f.problem, f.mode, f.fix.replace(str(base), "B"))
            for f in trust.check(paths(base, inventory), checker(**kw))]


def test_a_clean_tree_passes(base):
    assert findings(base) == []


def test_owned_by_the_service_user_is_trusted(base):
    owners = dict((str(p), SERVICE) for p in base.rglob("*"))
    assert findings(base, owners=owners) == []


# chmod on a real file, then what the check says: (relative path, mode, what, problem start, fix)
CASES = [
    ("project/ansible.cfg", 0o664, "the checkout", "is writable by its group", "chmod go-w B/project/ansible.cfg"),
    ("project/playbooks/templates", 0o777, "the checkout", "is writable by its group and everyone", "chmod go-w"),
    ("project/roles/serve/tasks/main.yml", 0o646, "the checkout", "is writable by everyone", "chmod go-w"),
    ("project", 0o775, "the checkout", "is writable by its group", "chmod go-w B/project"),
    ("venv/bin/ansible-playbook", 0o775, "the venv", "is writable by its group", "chmod go-w"),
    ("inv/group_vars/dspark/main.yml", 0o666, "the inventory", "is writable by its group and everyone", "chmod go-w"),
    ("inv/host_vars", 0o775, "the inventory", "is writable by its group", "chmod go-w"),
    ("vault.txt", 0o640, "the vault password file", "must be mode 0600 or 0400", "chmod 0600 B/vault.txt"),
    ("vault.txt", 0o700, "the vault password file", "must be mode 0600 or 0400", "chmod 0600"),
    ("vault.txt", 0o200, "the vault password file", "must be mode 0600 or 0400", "chmod 0600"),
]


@pytest.mark.parametrize("rel, mode, what, problem, fix", CASES)
def test_a_writable_path_is_named_with_its_fix(base, rel, mode, what, problem, fix):
    os.chmod(base / rel, mode)
    found = findings(base)
    assert len(found) == 1, found
    path, got_what, got_problem, got_mode, got_fix = found[0]
    assert (path, got_what, got_mode) == ("B/" + rel if rel else "B", what, "%04o" % mode)
    assert got_problem.startswith(problem) and got_fix.startswith(fix)


def test_the_vault_file_may_be_read_only(base):
    os.chmod(base / "vault.txt", 0o400)
    assert findings(base) == []


def test_a_parent_directory_counts(base):
    """base (tmp_path) is above every path: group-writable, it is named once, as the first path that needs it."""
    os.chmod(base, 0o775)
    found = findings(base)
    assert [(f[0], f[1], f[2]) for f in found] == [("B", "the checkout", "is writable by its group")]


def test_a_sticky_world_writable_parent_is_accepted_but_not_inside_a_tree(base):
    os.chmod(base, 0o1777)
    assert findings(base) == []
    os.chmod(base / "project" / "playbooks", 0o1777)
    assert [f[0] for f in findings(base)] == ["B/project/playbooks"]


@pytest.mark.parametrize("rel, what", [
    ("project/site.yml", "the checkout"),
    ("project/plugins/filter", "the checkout"),
    ("venv/bin", "the venv"),
    ("inv/hosts.yml", "the inventory"),
    ("inv/host_vars/h1.yml", "the inventory"),
    ("vault.txt", "the vault password file"),
    ("", "the checkout"),
])
def test_another_owner_is_named(base, rel, what):
    path = str(base / rel) if rel else str(base)
    found = findings(base, owners={path: ALICE})
    assert [(f[0], f[1], f[2]) for f in found] == [(path.replace(str(base), "B"), what,
                                                    "is owned by alice, not by root or dspark-fleet")]
    assert found[0][4].startswith("chown root (or dspark-fleet) ")


def test_running_as_root_trusts_root_only(base):
    found = trust.check(paths(base), checker(uid=0, owners={str(base / "inv" / "hosts.yml"): SERVICE}))
    assert [f.problem for f in found] == ["is owned by dspark-fleet, not by root"]


def test_an_inventory_directory_is_checked_recursively(base):
    os.chmod(base / "inv" / "group_vars" / "dspark" / "main.yml", 0o664)
    found = findings(base, inventory="inv")
    assert [f[0] for f in found] == ["B/inv/group_vars/dspark/main.yml"]


def test_a_link_is_followed_and_its_target_checked(base, tmp_path_factory):
    """A role linked to a directory outside the checkout: the target tree and its parents count; a link back into
    a checked tree (the collection's link to the checkout) is not walked twice."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "tasks").mkdir()
    (elsewhere / "tasks" / "main.yml").write_text("x\n")
    os.chmod(elsewhere / "tasks" / "main.yml", 0o666)
    os.symlink(str(elsewhere), str(base / "project" / "roles" / "linked"))
    os.symlink("../..", str(base / "project" / "roles" / "serve" / "back"))
    found = findings(base)
    assert [f[0] for f in found] == [str(elsewhere / "tasks" / "main.yml")]


def test_a_link_owned_by_another_user_is_named(base):
    link = base / "project" / "playbooks" / "x.yml"
    os.symlink("verify.yml", str(link))
    found = findings(base, owners={str(link): ALICE})
    assert [(f[0], f[2]) for f in found] == [("B/project/playbooks/x.yml", "is owned by alice, not by root or dspark-fleet")]


def test_missing_required_paths(base):
    (base / "project" / "ansible.cfg").unlink()
    (base / "vault.txt").unlink()
    found = findings(base)
    assert [(f[0], f[2]) for f in found] == [("B/project/ansible.cfg", "does not exist"), ("B/vault.txt", "does not exist")]


def test_inventory_file_brings_its_group_vars(base):
    listed = [(p.replace(str(base), "B"), w, k) for p, w, k in paths(base)]
    assert ("B/inv/group_vars", "the inventory", "tree") in listed
    assert ("B/inv/host_vars", "the inventory", "tree") in listed
    assert ("B/project", "the checkout", "node") in listed
    assert ("B/project/roles", "the checkout", "tree") in listed
    assert ("B/vault.txt", "the vault password file", "secret") in listed


def test_report_is_one_line_per_path_and_capped():
    lines = []
    many = [trust.Finding("/p%d" % i, "the checkout", "is writable by its group", "root:staff", "0775", "chmod go-w /p%d" % i)
            for i in range(25)]
    trust.report(many, lines.append)
    assert len(lines) == 21
    assert lines[0] == ("dspark-fleet watch: refusing to start: the checkout: /p0 is writable by its group "
                        "(owner root:staff, mode 0775); fix: chmod go-w /p0")
    assert "and 5 more" in lines[-1]


def test_this_checkout_and_venv_pass():
    """The repository the tests run from, its venv and the lab inventories (as CI runs the supervisor on them)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    found = trust.check(trust.watch_paths(root, os.path.join(root, "inventories", "lab-fleet", "hosts.yml")))
    assert found == [], "\n".join(f.line() for f in found)
