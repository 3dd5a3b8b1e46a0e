"""file_state.file_record: what a role's write compares (content digest, mode, owner), links followed only on request."""

import hashlib
import os

from ansible_collections.dspark.cluster.plugins.module_utils.file_state import file_record


def test_a_regular_file_and_a_link_to_it(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_bytes(b"{}\n")
    os.chmod(str(path), 0o640)
    st = os.stat(str(path))
    want = {"sha256": hashlib.sha256(b"{}\n").hexdigest(), "mode": "0640", "uid": st.st_uid, "gid": st.st_gid}
    assert file_record(str(path)) == want
    os.symlink(str(path), str(tmp_path / "link"))
    assert file_record(str(tmp_path / "link")) is None
    assert file_record(str(tmp_path / "link"), follow=True) == want


def test_nothing_to_compare(tmp_path):
    assert file_record(str(tmp_path / "absent")) is None
    assert file_record(str(tmp_path)) is None
    os.symlink(str(tmp_path / "nowhere"), str(tmp_path / "dangling"))
    assert file_record(str(tmp_path / "dangling"), follow=True) is None
