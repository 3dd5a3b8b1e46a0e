"""nfs_server_info module: main() against a fake cache (the /proc part is covered in test_nfs_server)."""

import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.modules import nfs_server_info


def test_main_reports_audit_and_secrets(tmp_path, capsys):
    cache = tmp_path / "cache"
    (cache / "hub" / "m").mkdir(parents=True)
    for d in [cache, cache / "hub"]:
        os.chmod(str(d), 0o755)
    os.chmod(str(cache / "hub" / "m"), 0o700)
    (cache / "token").write_text("hf_x")
    os.chmod(str(cache / "token"), 0o644)
    with patch_module_args({"path": str(cache)}):
        with pytest.raises(SystemExit) as exit_info:
            nfs_server_info.main()
    assert exit_info.value.code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["changed"] is False
    assert result["path_exists"] is True
    assert result["unreadable"] == [str(cache / "hub" / "m")] and result["unreadable_count"] == 1
    assert result["secrets"][0]["path"] == str(cache / "token") and result["secrets"][0]["private"] is False
    assert set(["running", "versions", "legacy", "clients", "installed"]) <= set(result)


def test_run_absent_cache(tmp_path):
    result = nfs_server_info.run({"path": str(tmp_path / "x"), "audit_subdirs": ["hub"], "secrets": ["token"], "limit": 5})
    assert result["path_exists"] is False and result["unreadable"] == [] and result["secrets"] == []
