#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nfs_server_info
short_description: Read the kernel NFS server state and audit an exported Hugging Face cache for root_squash
version_added: 0.1.0
description:
  - Reads, in one call, what the C(dspark.cluster.nfs_export) role decides on. It reads whether nfsd runs,
    which protocol versions it serves (C(/proc/fs/nfsd/versions)) and how many NFSv4 clients it knows
    (C(/proc/fs/nfsd/clients)).
  - Audits the exported cache for root_squash. Clients read as the anonymous user, so O(path) and
    everything under its C(hub/) subdirectory must be world-readable (directories C(o+rx), files C(o+r)).
  - Reports the secret files at the cache root (O(secrets), e.g. the Hugging Face C(token)) with their owner
    and mode.
  - Never changes anything.
author:
  - dspark.cluster contributors (@dspark)
options:
  path:
    description:
      - The exported directory (the Hugging Face cache, C(HF_HOME)).
    type: path
    required: true
  audit_subdirs:
    description:
      - Subdirectories of O(path) whose whole tree must be world-readable.
    type: list
    elements: str
    default: [hub]
  secrets:
    description:
      - Names of secret files at the root of O(path) to report.
    type: list
    elements: str
    default: [token, stored_tokens]
  limit:
    description:
      - At most this many unreadable paths are returned; RV(unreadable_count) has the full count.
    type: int
    default: 50
  exports_file:
    description:
      - An exports file (the role's C(/etc/exports.d/*.exports)) to compare with the kernel's export table
        (C(exportfs -s)); RV(exports_stale) says why they differ. Without it nothing is compared.
    type: path
extends_documentation_fragment:
  - dspark.cluster.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux with the nfsd filesystem at C(/proc/fs/nfsd) for the server part.
"""

EXAMPLES = r"""
- name: Read the NFS server state and audit the cache
  dspark.cluster.nfs_server_info:
    path: /var/lib/dspark/hf-cache
  register: nfs_state

- name: Say when nfsd still serves NFSv3
  ansible.builtin.debug:
    msg: "nfsd serves {{ nfs_state.legacy | join(', ') }}"
  when: nfs_state.legacy | length > 0
"""

RETURN = r"""
installed:
  description: Whether C(rpc.nfsd) exists (nfs-kernel-server is installed).
  type: bool
  returned: always
running:
  description: Whether nfsd threads run.
  type: bool
  returned: always
threads:
  description: Number of nfsd threads.
  type: int
  returned: always
versions_raw:
  description: Content of C(/proc/fs/nfsd/versions), empty when nfsd is not loaded.
  type: str
  returned: always
  sample: -3 +4 +4.1 +4.2
versions:
  description: Version -> served, parsed from RV(versions_raw).
  type: dict
  returned: always
  sample: {"3": false, "4": true, "4.1": true, "4.2": true}
legacy:
  description: NFSv2/v3 versions still served.
  type: list
  elements: str
  returned: always
  sample: ["3"]
clients:
  description: NFSv4 clients the server knows, or null when the kernel does not list them.
  type: int
  returned: always
path_exists:
  description: Whether O(path) is a directory.
  type: bool
  returned: always
unreadable:
  description: Paths the anonymous user cannot read (at most O(limit)).
  type: list
  elements: str
  returned: always
unreadable_count:
  description: Number of such paths.
  type: int
  returned: always
listen:
  description: Addresses with a TCP socket listening on the NFS port 2049 (C(/proc/net/tcp), C(/proc/net/tcp6)),
    sorted; C(0.0.0.0) or C(::) means every interface.
  type: list
  elements: str
  returned: always
  sample: ["192.168.100.2"]
exports_stale:
  description: Why the export table does not apply O(exports_file) (a client missing or extra, an option not applied),
    or null when it does, when the file is absent or O(exports_file) is not given. C(exportfs -ra) applies the file.
  type: str
  returned: always
  sample: "not exported: /var/lib/dspark/hf-cache 192.168.100.1"
secrets:
  description: Secret files present at the cache root; C(private) means root-owned with no group or other bits.
  type: list
  elements: dict
  returned: always
  sample: [{"path": "/var/lib/dspark/hf-cache/token", "mode": "0600", "uid": 0, "gid": 0, "private": true}]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dspark.cluster.plugins.module_utils.nfs_server import (
    exports_differ, listen_addresses, parse_exports, secrets, server_state, unreadable)

RPC_NFSD = ('/usr/sbin/rpc.nfsd', '/sbin/rpc.nfsd')


def stale_exports(module, exports_file):
    """Why the kernel's export table does not apply ``exports_file`` (None: it does, or nothing to compare)."""
    if not exports_file or not os.path.isfile(exports_file):
        return None
    with open(exports_file) as handle:
        wanted = parse_exports(handle.read())
    if not wanted:
        return None
    exportfs = module.get_bin_path('exportfs')
    if exportfs is None:
        return 'exportfs is not installed'
    rc, out, err = module.run_command([exportfs, '-s'])
    if rc != 0:
        return 'exportfs -s failed (%s)' % (err or out).strip()
    return exports_differ(wanted, parse_exports(out))


def run(params, module=None):
    """The result dict for ``params`` (module arguments)."""
    result = dict(server_state(), changed=False)
    result['installed'] = any(os.path.exists(p) for p in RPC_NFSD)
    path = params['path']
    result['path_exists'] = os.path.isdir(path)
    paths, count = unreadable(path, params['audit_subdirs'], params['limit']) if result['path_exists'] else ([], 0)
    result['unreadable'] = paths
    result['unreadable_count'] = count
    result['secrets'] = secrets(path, params['secrets'])
    result['listen'] = listen_addresses()
    result['exports_stale'] = stale_exports(module, params.get('exports_file')) if module is not None else None
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            audit_subdirs=dict(type='list', elements='str', default=['hub']),
            secrets=dict(type='list', elements='str', default=['token', 'stored_tokens'], no_log=False),
            limit=dict(type='int', default=50),
            exports_file=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module.params, module))


if __name__ == '__main__':
    main()
