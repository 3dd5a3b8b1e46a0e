"""checkpoint_scp_info module: the SCP mode's reads in one run (tools, copy key, host key, account, mount)."""

import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.module_utils import checkpoint_scp_info as utils
from ansible_collections.dspark.cluster.plugins.modules import checkpoint_scp_info


def run_main(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            checkpoint_scp_info.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_tools_and_host_key(tmp_path, capsys):
    present = tmp_path / "rsync"
    present.write_text("")
    host_key = tmp_path / "ssh_host_ed25519_key.pub"
    host_key.write_text("ssh-ed25519 AAAAC3Nza root@node\n")
    code, result = run_main({"tools": [str(present), str(tmp_path / "rrsync")], "host_key": str(host_key)}, capsys)
    assert code == 0 and result["changed"] is False
    assert result["tools_missing"] == [str(tmp_path / "rrsync")]
    assert result["host_key"] == "ssh-ed25519 AAAAC3Nza"
    assert "key" not in result and "account" not in result and "mount" not in result


def test_unreadable_host_key_fails_naming_it(tmp_path, capsys):
    code, result = run_main({"host_key": str(tmp_path / "absent.pub")}, capsys)
    assert code == 1 and result["failed"] is True and str(tmp_path / "absent.pub") in result["msg"]


def test_key_state_absent_and_public(tmp_path):
    key = tmp_path / "keys" / "id_ed25519"
    assert utils.key_state(str(key)) == {"dir_ok": False, "private_ok": False, "public": None, "ready": False}
    key.parent.mkdir()
    key.write_text("private")
    (tmp_path / "keys" / "id_ed25519.pub").write_text("ssh-ed25519 AAAA dspark-checkpoint@w\n")
    os.chmod(str(key.parent), 0o700)
    os.chmod(str(key), 0o600)
    state = utils.key_state(str(key))
    assert state["public"] == "ssh-ed25519 AAAA dspark-checkpoint@w"
    # root:root and the modes make it ready; a test run as another user sees the ownership differ.
    assert state["ready"] is (os.geteuid() == 0 and os.getegid() == 0)
    os.chmod(str(key), 0o644)
    assert utils.key_state(str(key))["private_ok"] is False and utils.key_state(str(key))["ready"] is False


def test_account_state_never_returns_the_password_field():
    assert utils.account_state("", "") == {"exists": False, "locked": False}
    assert utils.account_state("u:x:999:999::/var/lib/u:/bin/sh\n", "u:!:20000::::::\n") == {"exists": True, "locked": True}
    assert utils.account_state("u:x:999:999::/var/lib/u:/bin/sh\n", "u:!*:20000::::::\n")["locked"] is True
    assert utils.account_state("u:x:999:999::/var/lib/u:/bin/sh\n", "u:*:20000::::::\n") == {"exists": True, "locked": False}
    # shadow unreadable (not root): not reported as locked.
    assert utils.account_state("u:x:999:999::/var/lib/u:/bin/sh\n", "") == {"exists": True, "locked": False}


def test_mount_state_and_warning():
    assert utils.mount_state("") is None
    assert utils.mount_state("/ rw,relatime\n") == {"target": "/", "options": ["rw", "relatime"], "lacking": []}
    own = utils.mount_state("/var/lib/dspark rw,nosuid,relatime\n")
    assert own["lacking"] == ["nodev"]
    text = utils.mount_warning("spark-head", own, "/var/lib/dspark/hf-cache/hub")
    assert text.startswith("spark-head: /var/lib/dspark (holding /var/lib/dspark/hf-cache/hub) is mounted without nodev.")
    assert "Fix: add nosuid,nodev to its /etc/fstab line and remount." in text
    assert utils.mount_warning("n", utils.mount_state("/x rw,nosuid,nodev\n"), "/x/hub") == ""
    assert utils.mount_warning("n", None, "/x/hub") == ""


def test_existing_ancestor(tmp_path):
    assert utils.existing_ancestor(str(tmp_path / "a" / "b")) == str(tmp_path)
    assert utils.existing_ancestor(str(tmp_path)) == str(tmp_path)


def test_main_reads_account_and_mount(tmp_path, capsys, monkeypatch):
    outputs = {"passwd": "dspark-ckpt:x:999:999::/var/lib/dspark-ckpt:/bin/sh\n", "shadow": "dspark-ckpt:!:1::::::\n",
               "findmnt": "/data rw,relatime\n"}

    def fake_run_command(self, argv, **kwargs):
        return 0, outputs[argv[1] if argv[0] == "getent" else argv[0]], ""

    monkeypatch.setattr(checkpoint_scp_info.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/bin/" + name)
    monkeypatch.setattr(checkpoint_scp_info.AnsibleModule, "run_command", fake_run_command)
    code, result = run_main({"user": "dspark-ckpt", "mount_path": str(tmp_path / "hub"), "node": "spark-head"}, capsys)
    assert code == 0
    assert result["account"] == {"exists": True, "locked": True}
    assert result["mount"]["lacking"] == ["nosuid", "nodev"]
    assert any("spark-head: /data (holding %s) is mounted without nosuid,nodev." % (tmp_path / "hub") in str(w) for w in result.get("warnings", []))
    assert "!" not in json.dumps(result["account"])


def test_authorized_key_digests_read_keys_after_options_never_the_keys():
    text = ("# a comment\n\n"
            'restrict,from="10.0.0.1",command="/usr/bin/rrsync -wo /x" ssh-ed25519 AAAAC3NzaC1 dspark copy\n'
            "ssh-rsa AAAAB3NzaC1yc2E= admin@laptop\n"
            "ecdsa-sha2-nistp256 AAAAE2VjZHNh\n"
            "not a key line\n")
    digests = utils.authorized_key_digests(text)
    assert digests == [utils.key_digest("AAAAC3NzaC1"), utils.key_digest("AAAAB3NzaC1yc2E="), utils.key_digest("AAAAE2VjZHNh")]
    assert all(len(d) == 64 and "AAAA" not in d for d in digests)


def test_passwd_fields():
    assert utils.passwd_fields("") is None and utils.passwd_fields("u:x:1") is None
    assert utils.passwd_fields("dspark-ckpt:x:999:998:dspark.cluster checkpoint receiver:/var/lib/dspark-ckpt:/bin/sh\n") == {
        "name": "dspark-ckpt", "uid": 999, "gid": 998, "comment": "dspark.cluster checkpoint receiver",
        "home": "/var/lib/dspark-ckpt", "shell": "/bin/sh"}


def test_not_owned_names_entries_of_another_owner(tmp_path):
    top = tmp_path / "models--x"
    assert utils.not_owned(str(top), 0, 0) == ["%s is absent" % top]
    (top / "snapshots").mkdir(parents=True)
    (top / "snapshots" / "a").write_text("")
    os.symlink("a", top / "snapshots" / "link")
    me = (os.getuid(), os.getgid())
    assert utils.not_owned(str(top), *me) == []
    other = (me[0] + 1, me[1])
    found = utils.not_owned(str(top), *other)
    assert sorted(found) == sorted("%s is owned by %d:%d" % (p, me[0], me[1])
                                   for p in (top, top / "snapshots", top / "snapshots" / "a", top / "snapshots" / "link"))
    assert len(utils.not_owned(str(top), *other, limit=2)) == 2


EXPECTED = {"home": "/var/lib/dspark-ckpt", "comment": "dspark.cluster checkpoint receiver", "shell": "/bin/sh"}
ACCOUNT = {"name": "dspark-ckpt", "uid": 999, "gid": 999, "comment": EXPECTED["comment"], "home": EXPECTED["home"],
           "shell": "/bin/sh"}


def test_receiver_problems_each_difference_named():
    assert utils.receiver_problems(None, False, EXPECTED, None, False, None, []) == ["the receiving account is absent"]
    assert utils.receiver_problems(ACCOUNT, False, EXPECTED, 999, True, 0o755, []) == []
    problems = utils.receiver_problems(dict(ACCOUNT, shell="/usr/sbin/nologin"), True, EXPECTED, None, False, 0o700,
                                       ["/x is owned by 0:0"])
    assert problems == ["the receiving account is locked", "its home directory is absent",
                        "its shell is '/usr/sbin/nologin', not '/bin/sh'", "no group of its name",
                        "the hub directory is 0o700", "/x is owned by 0:0"]
    assert utils.receiver_problems(ACCOUNT, False, EXPECTED, 999, True, None, []) == ["the hub directory is absent"]


def test_main_reads_the_receiver_as_the_role_leaves_it(tmp_path, capsys, monkeypatch):
    """Every read real but getent: the current user stands for the receiving account."""
    import grp
    group = grp.getgrgid(os.getgid()).gr_name
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "authorized_keys").write_text('restrict ssh-ed25519 AAAAcopy dspark.cluster checkpoint copy\n')
    hub = tmp_path / "hub"
    (hub / "models--x" / "snapshots").mkdir(parents=True)
    os.chmod(hub, 0o755)
    passwd = "%s:x:%d:%d:%s:%s:/bin/sh\n" % (group, os.getuid(), os.getgid(), "recv", home)

    def fake_run_command(self, argv, **kwargs):
        return 0, passwd if argv[1] == "passwd" else group + ":*:1::::::\n", ""

    monkeypatch.setattr(checkpoint_scp_info.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/bin/" + name)
    monkeypatch.setattr(checkpoint_scp_info.AnsibleModule, "run_command", fake_run_command)
    args = {"user": group, "receiver": {"home": str(home), "comment": "recv", "hub": str(hub),
                                        "model_dir": str(hub / "models--x")}}
    code, result = run_main(args, capsys)
    assert code == 0, result
    receiver = result["receiver"]
    assert receiver["ready"] is True and receiver["problems"] == [], receiver
    assert receiver["copy_key_digests"] == [utils.key_digest("AAAAcopy")]
    assert "AAAAcopy" not in json.dumps(result)
    os.chmod(hub, 0o775)
    code, result = run_main(dict(args, receiver=dict(args["receiver"], comment="other")), capsys)
    assert result["receiver"]["ready"] is False
    assert result["receiver"]["problems"] == ["its comment is 'recv', not 'other'", "the hub directory is 0o775"]


def test_receiver_needs_the_user(capsys):
    code, result = run_main({"receiver": {"home": "/h", "comment": "c", "hub": "/hub", "model_dir": "/hub/m"}}, capsys)
    assert code == 1 and "receiver" in result["msg"]


def test_known_hosts_record_is_content_digest_mode_and_owner(tmp_path, capsys):
    known = tmp_path / "known_hosts"
    known.write_text("10.0.0.1 ssh-ed25519 AAAAhost\n")
    os.chmod(str(known), 0o644)
    code, result = run_main({"known_hosts": str(known)}, capsys)
    st = os.stat(str(known))
    assert code == 0 and result["known_hosts"] == {
        "sha256": utils.key_digest("10.0.0.1 ssh-ed25519 AAAAhost\n"), "mode": "0644", "uid": st.st_uid, "gid": st.st_gid}
    code, result = run_main({"known_hosts": str(tmp_path / "absent")}, capsys)
    assert code == 0 and result["known_hosts"] is None
