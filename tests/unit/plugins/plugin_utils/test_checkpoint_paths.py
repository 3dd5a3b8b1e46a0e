"""plugins/plugin_utils/_checkpoint_paths.py: the checkpoint role's record paths, read by checkpoint, serve and
monitoring from one place."""

from pathlib import Path

import pytest
import yaml

from ansible_collections.dspark.cluster.plugins.filter.checkpoint_paths import FilterModule
from ansible_collections.dspark.cluster.plugins.plugin_utils import _checkpoint_paths

ROLES = Path(__file__).resolve().parents[4] / "roles"
REV = "a" * 40


def test_paths_of_a_revision():
    got = _checkpoint_paths.paths("deepseek-ai/DeepSeek-V4-Flash", REV, "/srv/records/", 2, None)
    prefix = "/srv/records/models--deepseek-ai--DeepSeek-V4-Flash-" + REV
    assert got == {
        "repo_folder": "models--deepseek-ai--DeepSeek-V4-Flash", "manifest_dir": "/srv/records",
        "manifest": prefix + ".json", "state": prefix + ".state.json", "stamp": prefix + ".verified.json",
        "files": prefix + ".verified-files.json", "known_hosts": "/srv/records/known_hosts",
        "source_rank": 2, "nfs_export_rank": 2,
    }


@pytest.mark.parametrize("manifest_dir", [None, ""])
def test_unset_values_take_the_checkpoint_roles_defaults(manifest_dir):
    got = _checkpoint_paths.paths("o/m", REV, manifest_dir)
    assert got["stamp"] == "/var/lib/dspark/checkpoint/models--o--m-%s.verified.json" % REV
    assert (got["source_rank"], got["nfs_export_rank"]) == (1, 1)


def test_ranks_as_the_inventory_gives_them():
    assert _checkpoint_paths.paths("o/m", REV, None, "0", "3")["source_rank"] == 0
    assert _checkpoint_paths.paths("o/m", REV, None, "0", "3")["nfs_export_rank"] == 3
    # Not an integer: left as given for the roles' rules to name (never silently rank 0, as `| int` would).
    assert _checkpoint_paths.paths("o/m", REV, None, "one", True)["source_rank"] == "one"
    assert _checkpoint_paths.paths("o/m", REV, None, "one", True)["nfs_export_rank"] is True


def test_defaults_are_the_roles_defaults():
    checkpoint = yaml.safe_load((ROLES / "checkpoint" / "defaults" / "main.yml").read_text())
    assert checkpoint["checkpoint_manifest_dir"] == _checkpoint_paths.DEFAULT_MANIFEST_DIR
    assert checkpoint["checkpoint_source_rank"] == _checkpoint_paths.DEFAULT_SOURCE_RANK
    nfs_export = yaml.safe_load((ROLES / "nfs_export" / "defaults" / "main.yml").read_text())
    assert nfs_export["nfs_export_rank"] == "{{ checkpoint_source_rank | default(1) }}"


def test_filter_is_the_helper():
    assert FilterModule().filters()["checkpoint_paths"]("o/m", REV) == _checkpoint_paths.paths("o/m", REV)


def test_no_role_rebuilds_the_record_names():
    # vars and tasks (what runs); the argument specs and READMEs describe the names.
    for path in list(ROLES.glob("*/vars/*.yml")) + list(ROLES.glob("*/tasks/*.yml")):
        text = path.read_text()
        for name in (".verified.json", ".verified-files.json", ".state.json"):
            assert name not in text, "%s builds %s" % (path, name)
