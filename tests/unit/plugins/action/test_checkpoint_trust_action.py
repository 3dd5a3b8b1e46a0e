"""The checkpoint_trust action shell: decides and writes the controller's trust file in the controller's process,
never connects, and fails naming the mismatch and its fix (the decision itself: module_utils' tests)."""

from unittest.mock import MagicMock

from ansible.playbook.task import Task
from ansible.template import Templar

from ansible_collections.dspark.cluster.plugins.action.checkpoint_trust import ActionModule

MANIFEST = {"format": "dspark.cluster/checkpoint-manifest", "version": 1, "model": "org/m", "revision": "a" * 40,
            "entries": [{"path": "config.json", "size": 2, "sha256": "b" * 64}], "file_count": 1, "total_size": 2}


def run_action(check_mode=False, **args):
    task = MagicMock(Task)
    task.args = args
    task.async_val = 0
    task.check_mode = check_mode
    connection = MagicMock()
    action = ActionModule(task, connection, MagicMock(), loader=None, templar=Templar(loader=None),
                          shared_loader_obj=None)
    result = action.run(task_vars={})
    assert not connection.exec_command.called and not connection.put_file.called
    return result


def test_first_use_is_recorded_then_trusted_and_another_digest_refused(tmp_path):
    path = tmp_path / "trust" / "pair_a.json"
    result = run_action(check_mode=True, path=str(path), group="pair_a", manifest=MANIFEST)
    assert result["changed"] is True and result["decision"] == "new" and not path.exists()
    result = run_action(path=str(path), group="pair_a", manifest=MANIFEST)
    assert result["changed"] is True and not result.get("failed") and oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    result = run_action(path=str(path), group="pair_a", manifest=MANIFEST)
    assert result["changed"] is False and result["decision"] == "trusted"
    other = dict(MANIFEST, entries=[dict(MANIFEST["entries"][0], sha256="c" * 64)])
    before = path.read_text()
    result = run_action(path=str(path), group="pair_a", manifest=other)
    assert result["failed"] is True and result["code"] == "manifest_mismatch" and result["decision"] == "mismatch"
    assert "group pair_a: the source built a manifest of org/m@aaaaaaaaaaaa" in result["msg"]
    assert "checkpoint_trust_rotate=true" in result["msg"] and path.read_text() == before
    result = run_action(path=str(path), group="pair_a", manifest=other, rotate=True)
    assert result["decision"] == "rotated" and result["changed"] is True and path.read_text() != before


def test_a_file_of_another_group_or_a_manifest_without_revision_fails(tmp_path):
    path = tmp_path / "pair_a.json"
    assert not run_action(path=str(path), group="pair_a", manifest=MANIFEST).get("failed")
    result = run_action(path=str(path), group="pair_b", manifest=MANIFEST)
    assert result["failed"] is True and result["code"] == "malformed_trust"
    result = run_action(path=str(tmp_path / "x.json"), group="pair_a", manifest=dict(MANIFEST, revision=""))
    assert result["failed"] is True and result["code"] == "malformed_manifest"
