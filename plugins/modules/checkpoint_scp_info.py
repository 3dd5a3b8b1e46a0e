#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checkpoint_scp_info
short_description: Read, in one run, the node state the checkpoint role's SCP mode decides on
version_added: 0.1.0
description:
  - Reads what the C(dspark.cluster.checkpoint) role's SCP mode decides on, in one module run instead of a task each.
  - Which of O(tools) (rsync, ssh-keygen, rrsync) are missing.
  - On the source (O(key_path)) the copy key as the role leaves it (directory root's 0700, private key root's 0600)
    and its public half.
  - On a target (O(host_key)) its SSH host key; (O(user)) whether the receiving account exists and whether its
    password field is locked (the field itself is never returned); (O(mount_path)) the mount holding the model
    directory, with a warning when it is its own mount without nosuid,nodev.
  - On a target, with O(receiver), whether the receiver is as the role's receiver tasks leave it (so that a
    converged node skips them as one), and the keys authorized for the receiving account and for root, as digests
    of their blobs (the keys themselves are never returned).
  - Never changes anything.
author:
  - dspark.cluster contributors (@dspark)
options:
  tools:
    description:
      - Paths of programs that must exist; RV(tools_missing) lists the absent ones.
    type: list
    elements: path
    default: []
  key_path:
    description:
      - The private copy key on the source (C(checkpoint_ssh_key_path)); its public half is O(key_path)C(.pub).
    type: path
  known_hosts:
    description:
      - The source's known_hosts file of the targets' host keys, whose content sha256, mode and owner RV(known_hosts)
        returns (the role rewrites it only when it differs).
    type: path
  host_key:
    description:
      - The target's SSH host public key; the module fails when it cannot be read.
    type: path
  user:
    description:
      - The receiving account on the target (C(checkpoint_scp_user)).
    type: str
  mount_path:
    description:
      - The directory whose mount is read (the cache's C(hub/)); its nearest existing ancestor while it is absent.
    type: path
  receiver:
    description:
      - What the role makes of the receiver on a target (needs O(user)).
    type: dict
    suboptions:
      home:
        description: The receiving account's home directory.
        type: path
        required: true
      comment:
        description: The receiving account's comment (GECOS) field.
        type: str
        required: true
      shell:
        description: The receiving account's shell.
        type: str
        default: /bin/sh
      hub:
        description: The cache's C(hub/) directory (a directory, mode 0755).
        type: path
        required: true
      model_dir:
        description: The model's directory, owned with everything in it by the receiving account and its group.
        type: path
        required: true
  node:
    description:
      - The node's name, for the mount warning.
    type: str
    default: this node
extends_documentation_fragment:
  - dspark.cluster.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux with getent and findmnt (util-linux).
"""

EXAMPLES = r"""
- name: Read the target's SCP state
  dspark.cluster.checkpoint_scp_info:
    tools: [/usr/bin/rsync, /usr/bin/ssh-keygen, /usr/bin/rrsync]
    host_key: /etc/ssh/ssh_host_ed25519_key.pub
    user: dspark-ckpt
    mount_path: /var/lib/dspark/hf-cache/hub
  register: scp_state

- name: Say which tools are missing
  ansible.builtin.debug:
    msg: "missing: {{ scp_state.tools_missing | join(', ') }}"
  when: scp_state.tools_missing | length > 0
"""

RETURN = r"""
tools_missing:
  description: The paths of O(tools) that do not exist.
  type: list
  elements: str
  returned: always
key:
  description: The copy key's state, when O(key_path) is given.
  type: dict
  returned: when O(key_path) is given
  contains:
    dir_ok:
      description: Its directory is a directory owned by root:root, mode 0700.
      type: bool
    private_ok:
      description: The private key is a regular file owned by root:root, mode 0600.
      type: bool
    public:
      description: The public key's text, null when absent.
      type: str
    ready:
      description: All three hold (the role's key tasks have nothing to do).
      type: bool
known_hosts:
  description: O(known_hosts)'s content sha256, octal mode, uid and gid; null when it is absent.
  type: dict
  returned: when O(known_hosts) is given
  sample: {"sha256": "2c26b46b68ff...", "mode": "0644", "uid": 0, "gid": 0}
host_key:
  description: The host key's type and key (no comment), when O(host_key) is given.
  type: str
  returned: when O(host_key) is given
  sample: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA...
account:
  description: The receiving account, when O(user) is given.
  type: dict
  returned: when O(user) is given
  contains:
    exists:
      description: C(getent passwd) knows it.
      type: bool
    locked:
      description: Its password field starts with C(!) (sshd without PAM refuses a locked account even with a key).
      type: bool
receiver:
  description: The receiver's state, when O(receiver) is given.
  type: dict
  returned: when O(receiver) is given
  contains:
    ready:
      description: Nothing for the role's receiver tasks to do (RV(receiver.problems) is empty).
      type: bool
    problems:
      description: What differs from what the role makes (the account, its home, the hub, up to five entries of the
        model directory owned by another).
      type: list
      elements: str
    copy_key_digests:
      description: The sha256 of each key blob in the receiving account's C(~/.ssh/authorized_keys).
      type: list
      elements: str
    root_key_digests:
      description: The sha256 of each key blob in root's C(~/.ssh/authorized_keys).
      type: list
      elements: str
mount:
  description: The mount holding O(mount_path) (target, options, lacking), null when findmnt says nothing.
  type: dict
  returned: when O(mount_path) is given
"""

import grp
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dspark.cluster.plugins.module_utils.file_state import file_record
from ansible_collections.dspark.cluster.plugins.module_utils.checkpoint_scp_info import (
    account_state,
    existing_ancestor,
    key_state,
    missing_tools,
    mount_state,
    mount_warning,
    not_owned,
    passwd_fields,
    read_authorized_key_digests,
    read_host_key,
    receiver_problems,
)


def _stdout(module, argv):
    """The stdout of ``argv``, '' when it fails or is absent."""
    if not module.get_bin_path(argv[0]):
        return ''
    rc, out, dummy = module.run_command(argv)
    return out if rc == 0 else ''


def _dir_mode(path):
    """The mode of ``path`` when it is a directory (links not followed), else None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return stat.S_IMODE(st.st_mode) if stat.S_ISDIR(st.st_mode) else None


def receiver_state(user, account_locked, passwd_line, want):
    """The receiver as the role's receiver tasks would find it (ready, problems) and the authorized keys' digests."""
    account = passwd_fields(passwd_line)
    try:
        group_gid = grp.getgrnam(user).gr_gid
    except KeyError:
        group_gid = None
    owned = (not_owned(want['model_dir'], account['uid'], group_gid)
             if account and account['uid'] is not None and group_gid is not None else [])
    problems = receiver_problems(account, account_locked, want, group_gid,
                                 bool(account) and _dir_mode(account['home']) is not None,
                                 _dir_mode(want['hub']), owned)
    try:
        root_home = pwd.getpwnam('root').pw_dir
    except KeyError:
        root_home = '/root'
    return {'ready': not problems, 'problems': problems,
            'copy_key_digests': read_authorized_key_digests(account['home']) if account else [],
            'root_key_digests': read_authorized_key_digests(root_home)}


def run(params, module):
    """The result dict for ``params`` (module arguments); None and a message when the host key is unreadable."""
    result = dict(changed=False, tools_missing=missing_tools(params['tools']))
    if params.get('key_path'):
        result['key'] = key_state(params['key_path'])
    if params.get('known_hosts'):
        result['known_hosts'] = file_record(params['known_hosts'])
    if params.get('host_key'):
        result['host_key'] = read_host_key(params['host_key'])
        if result['host_key'] is None:
            return None, 'cannot read the SSH host key %s (type and key expected)' % params['host_key']
    if params.get('user'):
        passwd_line = _stdout(module, ['getent', 'passwd', params['user']])
        result['account'] = account_state(passwd_line, _stdout(module, ['getent', 'shadow', params['user']]))
        if params.get('receiver'):
            result['receiver'] = receiver_state(params['user'], result['account']['locked'], passwd_line,
                                                params['receiver'])
    if params.get('mount_path'):
        out = _stdout(module, ['findmnt', '--noheadings', '--output', 'TARGET,OPTIONS', '--target',
                               existing_ancestor(params['mount_path'])])
        result['mount'] = mount_state(out)
        warning = mount_warning(params['node'], result['mount'], params['mount_path'])
        if warning:
            module.warn(warning)
    return result, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            tools=dict(type='list', elements='path', default=[]),
            key_path=dict(type='path', no_log=False),
            host_key=dict(type='path', no_log=False),
            known_hosts=dict(type='path'),
            user=dict(type='str'),
            mount_path=dict(type='path'),
            receiver=dict(type='dict', options=dict(
                home=dict(type='path', required=True),
                comment=dict(type='str', required=True),
                shell=dict(type='str', default='/bin/sh'),
                hub=dict(type='path', required=True),
                model_dir=dict(type='path', required=True),
            )),
            node=dict(type='str', default='this node'),
        ),
        required_by=dict(receiver=('user',)),
        supports_check_mode=True,
    )
    result, error = run(module.params, module)
    if error:
        module.fail_json(msg=error)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
