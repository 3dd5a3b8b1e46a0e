"""The checkpoint role's NFS diagnosis (filter checkpoint_nfs_fix, plugin_utils._nfs_plan mount_fix/verify_fix): the fix
its failure messages name, from the test mount's output and status or the verification's message."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dspark.cluster.plugins.filter.checkpoint_nfs_fix import checkpoint_nfs_fix

MOUNT = {"source": "a-worker", "export_dir": "/var/lib/dspark/hf", "group": "pair_a", "address": "10.77.77.1",
         "source_address": "10.77.77.2"}


@pytest.mark.parametrize("result, start", [
    ({"stdout": "mount.nfs4: access denied by server while mounting 10.77.77.2:/var/lib/dspark/hf", "rc": 32},
     "the server refuses this node or does not export /var/lib/dspark/hf: run playbooks/nfs_export.yml for pair_a and check "
     "that 10.77.77.1 is in nfs_export_clients"),
    ({"stdout": "mount.nfs4: mounting 10.77.77.2:/x failed, reason given by server: No such file or directory", "rc": 32},
     "the server refuses this node or does not export"),
    ({"stdout": "mounted, but hub/models--x is not visible through the export", "rc": 2},
     "download the checkpoint into /var/lib/dspark/hf on a-worker, or correct dspark_hf_cache."),
    ({"stdout": "no answer within 20 s", "rc": "124"}, "start the NFS server on a-worker"),
    ({}, "start the NFS server on a-worker (systemctl start nfs-server, or run playbooks/nfs_export.yml) and check the "
         "fabric link (ping 10.77.77.2)"),
])
def test_mount_fix(result, start):
    assert checkpoint_nfs_fix(result, "mount", **MOUNT).startswith(start)


def test_mount_fix_without_an_address():
    fix = checkpoint_nfs_fix({"stdout": "access denied", "rc": 32}, "mount", source="a-worker", export_dir="/x", group="pair_a")
    assert "check that this node is in nfs_export_clients" in fix


@pytest.mark.parametrize("msg, start", [
    ("Permission denied: /var/lib/dspark/hf/hub/models--x/snapshots/abc/model.safetensors",
     "the squashed clients cannot read some files: on a-worker run chmod -R o+rX /m, or run playbooks/nfs_export.yml"),
    ("1 file differs from the manifest", "the snapshot on a-worker changed since its manifest was built"),
    (None, "the snapshot on a-worker changed"),
])
def test_verify_fix(msg, start):
    assert checkpoint_nfs_fix({"msg": msg}, "verify", source="a-worker", model_dir="/m").startswith(start)


def test_an_unknown_kind_is_an_error():
    with pytest.raises(AnsibleFilterError):
        checkpoint_nfs_fix({}, "umount", source="a-worker")
