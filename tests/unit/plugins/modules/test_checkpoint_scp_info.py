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
