"""serve_node_info module: main() on this machine with nothing of the serve role there (the logic: test_serve_node)."""

import json

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dspark.cluster.plugins.modules import serve_node_info


def test_main_reads_and_changes_nothing(tmp_path, capsys):
    (tmp_path / "snap").mkdir()
    args = {"docker_path": str(tmp_path / "no-docker"), "image": "x:1", "container": "c", "cache_dir": str(tmp_path),
            "snapshot_dir": str(tmp_path / "snap"), "stamp_path": str(tmp_path / "stamp.json"),
            "recheck": {"model": "org/m", "revision": "a" * 40, "cache_dir": str(tmp_path / "hf"),
                        "files_path": str(tmp_path / "files.json")},
            "firewall_table": "dspark_serve", "nft_path": str(tmp_path / "no-nft"),
            "files": [{"path": str(tmp_path / "absent"), "mode": "0600"}, {"path": str(tmp_path / "keys"), "kind": "absent"}],
            "digests": [str(tmp_path / "compose.yaml")], "timeout": 5}
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            serve_node_info.main()
    assert exit_info.value.code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["changed"] is False and result["docker"] is False and result["image"]["id"] is None
    assert result["snapshot_isdir"] is True and result["stamp"] == {}
    assert result["recheck"]["ok"] is False and "no verification record" in result["recheck"]["msg"]
    assert result["firewall"]["nft"] is False
    assert result["files"] == {str(tmp_path / "absent"): False, str(tmp_path / "keys"): True}
    assert result["digests"] == {str(tmp_path / "compose.yaml"): None}
    assert list(tmp_path.iterdir()) == [tmp_path / "snap"]


def test_runner_bounds_and_reports_missing_commands():
    class Fake:
        @staticmethod
        def get_bin_path(name):
            return None

    run = serve_node_info.runner(Fake(), 5)
    assert run(["no-such-command-here", "x"])[0] == 127
    assert run(["/bin/sh", "-c", "echo out; echo err >&2"]) == (0, "out\n", "err\n")
    assert serve_node_info.runner(Fake(), 1)(["/bin/sh", "-c", "sleep 3"])[0] == 124


def test_a_secret_files_digest_is_hidden_from_the_result(tmp_path, capsys):
    """The digest of a file holding a secret (keepalived.conf) is compared on the node and never comes back."""
    import hashlib
    conf = tmp_path / "keepalived.conf"
    conf.write_text("auth_pass lab-vrrp\n")
    digest = hashlib.sha256(b"auth_pass lab-vrrp\n").hexdigest()
    args = {"docker_path": str(tmp_path / "no-docker"), "secret_files": [{"path": str(conf), "sha256": digest}],
            "timeout": 5, "_ansible_verbosity": 4}
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            serve_node_info.main()
    out = capsys.readouterr().out
    result = json.loads(out)
    assert digest not in out and result["files"] == {str(conf): True}
    # where the arguments come back (ansible-core 2.19 returns the invocation; 2.21 does not), the digest is masked
    if "invocation" in result:
        assert result["invocation"]["module_args"]["secret_files"][0]["path"] == str(conf)
