#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: serve_node_info
short_description: Read, in one call, everything the serve role decides on about a node
version_added: 0.2.0
description:
  - Reads what the C(dspark.cluster.serve) role needs before it changes anything, so that a converged node costs one
    module run instead of a task per read.
  - The container's probes. It reads whether the RDMA devices (O(infiniband_path)) and the docker CLI (O(docker_path))
    are there, the ID of O(image) (C(docker image inspect)), how O(cache_dir) is mounted (C(findmnt --target)), and
    the state and fingerprint label (C(dspark.cluster/config)) of the container O(container). Nothing else of the
    container is returned, since its environment holds the API key.
  - The checkpoint guard's reads. It reads whether O(snapshot_dir) is a directory, what is mounted at
    O(nfs_mountpoint) (C(findmnt --json --mountpoint)) and the verified stamp at O(stamp_path). With O(recheck), it
    compares the snapshot's files with the record of their verification (size, mtime, ctime and inode, as
    M(dspark.cluster.checkpoint_manifest) does with C(state=rechecked)).
  - Whether the hotfix tree O(hotfix_dir) holds every file of O(hotfix_sums) with its digest.
  - The firewall. It reads whether nft is there, the live table O(firewall_table) (C(nft list table inet)) and what
    the last apply recorded (O(firewall_state)).
  - Whether each of O(files) has the wanted content digest and mode, and whether each of O(units) is enabled.
  - Never changes anything. Every docker, findmnt, nft and systemctl call is bounded by O(timeout).
  - Which of O(packages) are installed, and whether systemd must reload a unit's files first (O(reload_units)).
  - The C(dspark.cluster.monitoring) role reads node_exporter's node with it too (O(firewall_table),
    O(firewall_state), O(files), O(packages), O(units) and O(active_units) only).
author:
  - dspark.cluster contributors (@dspark)
options:
  infiniband_path:
    description:
      - The RDMA devices' directory.
    type: path
    default: /dev/infiniband
  docker_path:
    description:
      - The docker CLI. Without it the image and the container are not read.
    type: path
    default: /usr/bin/docker
  image:
    description:
      - Image reference to resolve to its local ID.
    type: str
  container:
    description:
      - Name of the container whose state and fingerprint label to read.
    type: str
  lmcache_container:
    description:
      - Name of the LMCache server's container beside it (serve_lmcache), read like O(container).
    type: str
  engines:
    description:
      - List every container labelled C(dspark.cluster/engine) (a sidecar engine's, wanted or left over) with its state
        and fingerprint label.
    type: bool
    default: false
  cache_dir:
    description:
      - The model cache, whose mount options say whether it is read-only.
    type: path
  snapshot_dirs:
    description:
      - More snapshot directories (the sidecar engines' checkpoints), each read like O(snapshot_dir).
    type: list
    elements: path
    default: []
  snapshot_dir:
    description:
      - The model's snapshot directory in the cache.
    type: path
  nfs_mountpoint:
    description:
      - Path at which the NFS export should be mounted (the NFS mode's clients).
    type: path
  stamp_path:
    description:
      - The checkpoint role's verified stamp (a JSON object).
    type: path
  recheck:
    description:
      - The checkpoint's files against their verification record, when O(snapshot_dir) is a directory.
    type: dict
    suboptions:
      model:
        description: The Hugging Face model id.
        type: str
        required: true
      revision:
        description: The 40-hex commit (or a ref in the cache).
        type: str
        required: true
      cache_dir:
        description: The Hugging Face cache.
        type: path
        required: true
      files_path:
        description: The verification record (outside the model directory).
        type: path
        required: true
  hotfix_dir:
    description:
      - The node's copy of the recipe's hotfix tree.
    type: path
  hotfix_sums:
    description:
      - sha256sum(1) check text of the tree, relative to O(hotfix_dir).
    type: str
  firewall_table:
    description:
      - Name of the nftables table (family inet) to list. Without it the firewall is not read.
    type: str
  firewall_stateless:
    description:
      - List the table without its counters (C(nft -s)), for a table whose counters change between runs; the role
        must record it the same way.
    type: bool
    default: false
  nft_path:
    description:
      - The nft binary.
    type: path
    default: /usr/sbin/nft
  firewall_state:
    description:
      - The JSON record of the last apply.
    type: path
  files:
    description:
      - Files (or directories) whose content digest and mode to compare with what the role writes.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      sha256:
        description: The wanted sha256 of its content (not compared when omitted).
        type: str
      mode:
        description: The wanted octal mode, e.g. C("0600") (not compared when omitted).
        type: str
      kind:
        description: A regular file, a directory or a socket; V(absent) is current when nothing is at O(files[].path).
        type: str
        choices: [file, directory, socket, absent]
        default: file
      uid:
        description: The wanted owner's uid (not compared when omitted).
        type: int
      gid:
        description: The wanted group's gid (not compared when omitted).
        type: int
  secret_files:
    description:
      - Files that hold a secret, compared as O(files) (their paths in RV(files)); each O(secret_files[].sha256) is
        hidden from logs and results (no_log), so the digest of a secret never shows.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      sha256:
        description: The wanted sha256 of its content.
        type: str
        required: true
      mode:
        description: The wanted octal mode.
        type: str
      uid:
        description: The wanted owner's uid.
        type: int
      gid:
        description: The wanted group's gid.
        type: int
  reload_units:
    description:
      - systemd units whose C(NeedDaemonReload) RV(need_daemon_reload) returns (a unit file changed since systemd
        loaded it).
    type: list
    elements: str
    default: []
  packages:
    description:
      - Distribution packages whose installed state (C(dpkg-query), status C(ii)) RV(packages) returns.
    type: list
    elements: str
    default: []
  digests:
    description:
      - Files that hold no secret (the compose file) whose content sha256 and octal mode RV(digests) returns, so that
        the role writes them only when they differ from what it would write.
    type: list
    elements: path
    default: []
  units:
    description:
      - systemd units whose C(systemctl is-enabled) answer must be C(enabled).
    type: list
    elements: str
    default: []
  active_units:
    description:
      - systemd units whose C(systemctl is-active) answer is read (C(active) or not).
    type: list
    elements: str
    default: []
  timeout:
    description:
      - Seconds each command may take; one that runs out reads as failed.
    type: int
    default: 60
extends_documentation_fragment:
  - dspark.cluster.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux with findmnt (util-linux); docker, nft, systemctl and dpkg-query where those parts are asked for.
"""

EXAMPLES = r"""
- name: Read this node's state for the serve role
  dspark.cluster.serve_node_info:
    image: example/vllm:1
    container: dspark-vllm
    cache_dir: /var/lib/dspark/hf-cache
    snapshot_dir: /var/lib/dspark/hf-cache/hub/models--org--model/snapshots/0123456789abcdef0123456789abcdef01234567
    firewall_table: dspark_serve
    firewall_state: /etc/dspark/serve/firewall.state
    files:
      - {path: /etc/dspark/serve/firewall.nft, sha256: "{{ ruleset | hash('sha256') }}", mode: "0600"}
    units: [dspark-serve-firewall.service]
  register: node

- name: Say whether the container runs
  ansible.builtin.debug:
    msg: "{{ node.container.status or 'absent' }}"
"""

RETURN = r"""
infiniband:
  description: Whether O(infiniband_path) exists.
  type: bool
  returned: always
docker:
  description: Whether the docker CLI exists.
  type: bool
  returned: always
image:
  description: C(id), the image's ID (null when it is not on the node or docker is absent), and C(reason), docker's
    answer when it failed for another reason than a missing image (empty otherwise).
  type: dict
  returned: always
  sample: {"id": "sha256:0123abcd", "reason": ""}
container:
  description: C(exists), C(status) (C(running), C(exited), ...) and C(config), the fingerprint label.
  type: dict
  returned: always
  sample: {"exists": true, "status": "running", "config": "4f0c"}
lmcache:
  description: The LMCache server's container (O(lmcache_container)), as RV(container).
  type: dict
  returned: always
  sample: {"exists": true, "status": "running", "config": "4f0c"}
cache_read_only:
  description: Whether O(cache_dir) is mounted read-only.
  type: bool
  returned: always
engines:
  description: Every sidecar engine's container on the node (O(engines)) by name, with C(engine), C(status) and C(config).
  type: dict
  returned: always
  sample: {"dspark-vllm-vl": {"engine": "vl", "status": "running", "config": "4f0c"}}
snapshots:
  description: Whether each of O(snapshot_dirs) is a directory (not a link to one).
  type: dict
  returned: always
  sample: {"/var/lib/dspark/hf-cache/hub/models--org--vl/snapshots/0123456789abcdef0123456789abcdef01234567": true}
snapshot_isdir:
  description: Whether O(snapshot_dir) is a directory (not a link to one).
  type: bool
  returned: always
cache_mount:
  description: The filesystem mounted at O(nfs_mountpoint) (C(source), C(fstype), C(options)), empty when none;
    null without O(nfs_mountpoint).
  type: dict
  returned: always
stamp:
  description: The verified stamp, empty when absent or not a JSON object.
  type: dict
  returned: always
recheck:
  description: With O(recheck) and a snapshot directory, C(ok), C(msg) (what changed, or why it could not be checked),
    C(manifest_sha256) (the record's) and C(files_path); null otherwise.
  type: dict
  returned: always
hotfix_held:
  description: Whether O(hotfix_dir) holds every file of O(hotfix_sums) with its digest.
  type: bool
  returned: always
firewall:
  description: With O(firewall_table), C(nft) (nft exists), C(live_rc) and C(live) (C(nft list table)'s exit status
    and output), C(state) (the record, null when absent or unreadable); null otherwise.
  type: dict
  returned: always
files:
  description: Path -> whether it has the wanted kind, digest, mode and owner.
  type: dict
  returned: always
packages:
  description: Package of O(packages) -> whether it is installed.
  type: dict
  returned: always
  sample: {"prometheus-node-exporter": true}
digests:
  description: O(digests) path -> its content's sha256 and octal mode, null when absent or not a regular file.
  type: dict
  returned: always
  sample: {"/etc/dspark/serve/compose.yaml": {"sha256": "5d41402abc4b...", "mode": "0644"}}
units:
  description: Unit -> whether C(systemctl is-enabled) says C(enabled).
  type: dict
  returned: always
active:
  description: Unit of O(active_units) -> whether C(systemctl is-active) says C(active).
  type: dict
  returned: always
need_daemon_reload:
  description: Unit of O(reload_units) -> whether systemd must reload its unit files first (true also when unknown).
  type: dict
  returned: always
"""

import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dspark.cluster.plugins.module_utils.serve_node import read_node


def runner(module, timeout):
    """run(argv) -> (rc, stdout, stderr), bounded by ``timeout`` seconds; a missing command or a timeout is rc 127/124."""
    def run(argv):
        command = module.get_bin_path(argv[0]) if '/' not in argv[0] else argv[0]
        if not command:
            return 127, '', '%s: command not found' % argv[0]
        try:
            done = subprocess.run([command] + list(argv[1:]), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return 124, '', '%s did not answer within %s s' % (' '.join(argv[:3]), timeout)
        except OSError as e:
            return 127, '', str(e)
        return (done.returncode, done.stdout.decode('utf-8', 'replace'), done.stderr.decode('utf-8', 'replace'))
    return run


def main():
    module = AnsibleModule(
        argument_spec=dict(
            infiniband_path=dict(type='path', default='/dev/infiniband'),
            docker_path=dict(type='path', default='/usr/bin/docker'),
            image=dict(type='str'),
            container=dict(type='str'),
            lmcache_container=dict(type='str'),
            engines=dict(type='bool', default=False),
            cache_dir=dict(type='path'),
            snapshot_dir=dict(type='path'),
            snapshot_dirs=dict(type='list', elements='path', default=[]),
            nfs_mountpoint=dict(type='path'),
            stamp_path=dict(type='path'),
            recheck=dict(type='dict', options=dict(
                model=dict(type='str', required=True),
                revision=dict(type='str', required=True),
                cache_dir=dict(type='path', required=True),
                files_path=dict(type='path', required=True),
            )),
            hotfix_dir=dict(type='path'),
            hotfix_sums=dict(type='str'),
            firewall_table=dict(type='str'),
            firewall_stateless=dict(type='bool', default=False),
            nft_path=dict(type='path', default='/usr/sbin/nft'),
            firewall_state=dict(type='path'),
            files=dict(type='list', elements='dict', default=[], options=dict(
                path=dict(type='path', required=True),
                sha256=dict(type='str'),
                mode=dict(type='str'),
                kind=dict(type='str', choices=['file', 'directory', 'socket', 'absent'], default='file'),
                uid=dict(type='int'),
                gid=dict(type='int'),
            )),
            secret_files=dict(type='list', elements='dict', default=[], no_log=False, options=dict(
                path=dict(type='path', required=True),
                sha256=dict(type='str', required=True, no_log=True),
                mode=dict(type='str'),
                uid=dict(type='int'),
                gid=dict(type='int'),
            )),
            reload_units=dict(type='list', elements='str', default=[]),
            packages=dict(type='list', elements='str', default=[]),
            units=dict(type='list', elements='str', default=[]),
            active_units=dict(type='list', elements='str', default=[]),
            digests=dict(type='list', elements='path', default=[]),
            timeout=dict(type='int', default=60),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**read_node(module.params, runner(module, module.params['timeout'])))


if __name__ == '__main__':
    main()
