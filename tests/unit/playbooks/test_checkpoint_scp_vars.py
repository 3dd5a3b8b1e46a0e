"""The checkpoint role's refused rsync options (plugin_utils._role_rules RSYNC_FORBIDDEN_RE, the rule preflight and
the role run) and the role's rsync settings, checked without running Ansible."""

import pathlib

import pytest
import yaml

from ansible_collections.dspark.cluster.plugins.plugin_utils import _role_rules

ROLE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "checkpoint"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
FORBIDDEN = _role_rules.RSYNC_FORBIDDEN_RE
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


@pytest.mark.parametrize("option", [
    "--archive", "-a", "-av", "-rlptgoD", "-o", "-g", "-D", "-l", "-p", "-H", "-A", "-X", "-E", "-K", "-k", "-R",
    "--owner", "--group", "--devices", "--specials", "--links", "--hard-links", "--perms", "--chmod=F4755",
    "--chown=root:root", "--usermap=*:root", "--super", "--fake-super", "--acls", "--xattrs", "--copy-unsafe-links",
    "--safe-links", "--no-munge-links", "--munge-links", "--no-copy-links", "--keep-dirlinks", "--timeout=5",
    "--delete", "--delete-after", "--del", "--remove-source-files", "--inplace", "--append", "--append-verify",
    "--files-from=/x", "--filter=+ /etc", "--include=*", "--exclude=x", "--rsync-path=sudo rsync", "-e", "--rsh=ssh",
    "-F", "-f", "--relative",
])
def test_refused(option):
    assert FORBIDDEN.match(option), option


@pytest.mark.parametrize("option", [
    "--sparse", "--partial", "-S", "-P", "--bwlimit=100m", "--checksum", "-c", "-z", "--compress", "--stats",
    "--human-readable", "--partial-dir=.rsync-partial", "--info=progress2", "--whole-file", "-W", "--no-whole-file",
    "--block-size=131072", "--modify-window=1",
])
def test_accepted(option):
    assert not FORBIDDEN.match(option), option


def test_defaults_pass_and_keep_no_timeout_of_their_own():
    assert not [o for o in DEFAULTS["checkpoint_rsync_options"] if FORBIDDEN.match(o)]
    assert DEFAULTS["checkpoint_scp_user"] != "root"


def test_the_key_entry_confines_rrsync_to_the_model_directory():
    assert VARS["_checkpoint_rrsync_flags"].startswith("-wo -munge -no-del")
    assert VARS["_checkpoint_key_options"].strip().endswith('{{ _checkpoint_rrsync_flags }} {{ _checkpoint_model_dir }}"')
    assert "--include=/blobs/***" not in VARS["_checkpoint_filters"]
