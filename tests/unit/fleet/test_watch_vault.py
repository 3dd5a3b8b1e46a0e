"""`dspark-fleet watch` end to end with a vaulted inventory (--vault-password-file), its refusal to start from
paths others can write (exit 3, before anything runs), and the pruning of earlier rounds, through the real CLI
and ansible-runner on the fake project (test_watch_e2e.py's playbooks)."""

import json
import os

from ansible.parsing.vault import VaultLib, VaultSecret

from dspark_fleet import cli, trust, watch

from test_e2e import write_inventory
from test_watch_e2e import project

PASSWORD = "correct horse battery staple 4711"
SECRET = "the-vaulted-api-key-0815"

VERIFY_VAULT = """---
- name: Verify - fake, with a vaulted variable
  hosts: dspark
  gather_facts: false
  tasks:
    - name: The vaulted variable reached the play decrypted
      ansible.builtin.assert:
        that: fake_vaulted | length > 0
        quiet: true
    - name: Prove every tensor-parallel rank registered and the API generates
      dspark.cluster.tp_ranks:
        group: "{{ dspark_group }}"
        fail: "{{ (fake_vaulted | hash('sha256')) != fake_secret_sha256 }}"
      when: dspark_rank | int == 0
"""


def vaulted(text, password=PASSWORD):
    return VaultLib([("default", VaultSecret(password.encode()))]).encrypt(text).decode()


def setup(tmp_path, fake_project, mode=0o600):
    import hashlib  # pylint: disable=import-outside-toplevel
    copy = project(tmp_path, fake_project)
    (copy / "playbooks" / "verify.yml").write_text(VERIFY_VAULT)
    inv = write_inventory(tmp_path / "hosts.yml", {"grp_a": {"fake_secret_sha256": hashlib.sha256(SECRET.encode()).hexdigest()}})
    # The vaulted value, as `ansible-vault encrypt_string` writes it, in the inventory's group_vars.
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "dspark.yml").write_text("fake_vaulted: !vault |\n" + "".join(
        "  %s\n" % line for line in vaulted(SECRET).splitlines()))
    vault = tmp_path / "vault-pass"
    vault.write_text(PASSWORD + "\n")
    os.chmod(vault, mode)
    return copy, inv, vault


def run(tmp_path, copy, inv, *args):
    return cli.main(["watch", "-i", inv, "--project-dir", str(copy), "--plain", "--state-dir", str(tmp_path / "state"),
                     "--artifacts", str(tmp_path / "art"), "--once"] + list(args))


def every_file(*roots):
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                yield os.path.join(folder, name)


def test_a_vaulted_inventory_is_read_and_the_password_never_written(tmp_path, fake_project, capsys):
    copy, inv, vault = setup(tmp_path, fake_project)
    code = run(tmp_path, copy, inv, "--vault-password-file", str(vault), "--keep-rounds", "0")
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    records = [json.loads(line) for line in (tmp_path / "state" / "journal.jsonl").read_text().splitlines()]
    assert [(r["group"], r["action"], r.get("ok")) for r in records if r["group"]] == [("grp_a", "check", True)]
    # Without the password the same check fails (the vaulted variable cannot be decrypted).
    code = cli.main(["watch", "-i", inv, "--project-dir", str(copy), "--plain", "--state-dir", str(tmp_path / "state2"),
                     "--artifacts", str(tmp_path / "art2"), "--once", "--max-restarts", "0"])
    assert code == 1
    assert "no vault secrets found" in capsys.readouterr().err
    for path in every_file(tmp_path / "art", tmp_path / "state"):
        with open(path, "rb") as handle:
            data = handle.read()
        assert PASSWORD.encode() not in data, path
        assert SECRET.encode() not in data, path


def test_the_password_file_reaches_ansible_by_its_path_only(tmp_path, fake_project, capsys):
    """A failing check keeps its artifacts: ansible-runner's `command` names the file in the environment, not its
    content, and the command line has neither."""
    copy, inv, vault = setup(tmp_path, fake_project)
    code = run(tmp_path, copy, inv, "--vault-password-file", str(vault), "--max-restarts", "0", "-e",
               json.dumps({"fake_secret_sha256": "other"}))
    capsys.readouterr()
    assert code == 1
    command = json.loads((tmp_path / "art" / "round00001" / "all-groups" / "check" / "command").read_text())
    assert command["env"][watch.VAULT_ENV] == str(vault)
    assert PASSWORD not in json.dumps(command) and str(vault) not in " ".join(command["command"])


def test_a_readable_password_file_is_refused_before_anything_runs(tmp_path, fake_project, capsys):
    copy, inv, vault = setup(tmp_path, fake_project, mode=0o644)
    code = run(tmp_path, copy, inv, "--vault-password-file", str(vault))
    err = capsys.readouterr().err
    assert code == trust.EXIT_UNTRUSTED == 3
    lines = [line for line in err.splitlines() if "refusing to start" in line]
    assert lines == ["dspark-fleet watch: refusing to start: the vault password file: %s must be mode 0600 or 0400 "
                     "(nobody else may read it; an executable one would be run by Ansible) (owner root:root, mode 0644); "
                     "fix: chmod 0600 %s" % (vault, vault)] or os.geteuid() != 0, err
    assert "there is no option to skip this check" in err
    assert not (tmp_path / "art").exists() and not (tmp_path / "state").exists()


def test_a_group_writable_checkout_is_refused(tmp_path, fake_project, capsys):
    copy, inv, _vault = setup(tmp_path, fake_project)
    os.chmod(copy / "playbooks", 0o775)
    os.chmod(tmp_path / "group_vars" / "dspark.yml", 0o666)
    code = run(tmp_path, copy, inv)
    err = capsys.readouterr().err
    assert code == 3
    assert "the checkout: %s is writable by its group " % (copy / "playbooks") in err
    assert "the inventory: %s is writable by its group and everyone " % (tmp_path / "group_vars" / "dspark.yml") in err
    assert "fix: chmod go-w %s" % (copy / "playbooks") in err
    assert not (tmp_path / "art").exists()


def test_earlier_rounds_are_pruned_by_the_running_watch(tmp_path, fake_project, capsys):
    """Three rounds of a dead group with --keep-rounds 1: only the newest earlier round's artifacts stay beside the
    last one."""
    copy, inv, vault = setup(tmp_path, fake_project)
    code = cli.main(["watch", "-i", inv, "--project-dir", str(copy), "--plain", "--state-dir", str(tmp_path / "state"),
                     "--artifacts", str(tmp_path / "art"), "--rounds", "3", "--interval", "0.1", "--max-restarts", "0",
                     "--keep-rounds", "1", "--vault-password-file", str(vault), "-e", '{"fake_secret_sha256": "x"}'])
    err = capsys.readouterr().err
    assert code == 1
    assert sorted(p.name for p in (tmp_path / "art").iterdir() if p.name.startswith("round")) == [
        "round00002", "round00003"]
    assert "pruned 1 old round artifact dir(s) (keeping 1, at most 14 days)" in err


def test_missing_paths_are_bad_input(tmp_path, fake_project, capsys):
    copy, inv, vault = setup(tmp_path, fake_project)
    assert run(tmp_path, copy, inv, "--vault-password-file", str(vault) + ".gone") == 2
    assert "dspark-fleet: error: the vault password file %s.gone does not exist" % vault in capsys.readouterr().err
    assert run(tmp_path, copy, str(tmp_path / "nowhere.yml")) == 2
    assert "inventory %s does not exist" % (tmp_path / "nowhere.yml") in capsys.readouterr().err
