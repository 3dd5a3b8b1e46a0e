"""The dspark.cluster.redact_secrets filter: the saved rank logs lose the group's keys and secret-shaped values."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dspark.cluster.plugins.filter.redact_secrets import FilterModule, redact_secrets


def test_filter_is_registered_and_redacts():
    assert FilterModule().filters()["redact_secrets"] is redact_secrets
    log = "non-default args: {'api_key': ['k-1234', 'k-5678']}\ngot k-5678 from a client\n"
    out = redact_secrets(log, ["k-1234", "k-5678"])
    assert "k-1234" not in out and "k-5678" not in out and out.endswith("from a client\n")


def test_filter_inputs():
    assert redact_secrets(None) == ""
    assert redact_secrets("key abcd-1", "abcd-1") == "key [REDACTED]"
    assert redact_secrets("plain", None) == "plain"
    with pytest.raises(AnsibleFilterError, match="list of strings"):
        redact_secrets("x", {"a": 1})
