"""_file_holds.holds: the comparison behind every write a converged node skips."""

import hashlib

from ansible_collections.dspark.cluster.plugins.plugin_utils._file_holds import holds

TEXT = '{\n    "model": "x"\n}\n'
DIGEST = hashlib.sha256(TEXT.encode()).hexdigest()


def test_content_mode_and_owner_where_given():
    record = {"sha256": DIGEST, "mode": "0644", "uid": 0, "gid": 0}
    assert holds(record, TEXT, "0644", 0, 0) and holds(record, TEXT, "0644")
    assert not holds(record, TEXT + " ", "0644", 0, 0)
    assert not holds(record, TEXT, "0600", 0, 0)
    assert not holds(dict(record, uid=1000), TEXT, "0644", 0, 0)
    assert not holds(dict(record, gid=1000), TEXT, "0644", 0, 0)
    assert holds({"sha256": DIGEST, "mode": "0644"}, TEXT, "0644")


def test_an_absent_file_holds_nothing():
    assert not holds(None, TEXT, "0644") and not holds({}, TEXT, "0644")
    assert not holds({"sha256": DIGEST, "mode": "0644"}, TEXT, "0644", 0, 0)
