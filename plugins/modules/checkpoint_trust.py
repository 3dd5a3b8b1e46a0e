#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checkpoint_trust
short_description: Keep a group's checkpoint manifest digest on the controller and refuse another one
version_added: 0.1.0
description:
  - Runs on the controller. Its action plugin does the work in the controller's process, without a module run.
  - It keeps, per serving group, one record per model and revision of the digest of the manifest that the group's
    source node built. The digest is C(manifest_sha256), the one the checkpoint role's verified stamp records.
  - The first manifest of a model and revision is recorded (trust on first use). Later runs must present the same
    digest. A revision is a commit, so its files never change, and another digest means the source's snapshot
    changed after it was first trusted. The module then fails before anything is copied, naming the group, both
    digests and the fix.
  - A new revision is a new record. Earlier records stay until the operator removes them.
  - The file is written atomically with mode C(0600), in a directory that is created with mode C(0700).
author:
  - dspark.cluster contributors (@dspark)
options:
  path:
    description:
      - The group's trust file, for example C(<checkpoint_trust_dir>/<group>.json).
    type: path
    required: true
  group:
    description:
      - The serving group (C(dspark_group)). The file records it and must name the same group.
    type: str
    required: true
  manifest:
    description:
      - The manifest the source built, as M(dspark.cluster.checkpoint_manifest) returns it (C(state=built)). Its
        model and revision name the record.
    type: dict
    required: true
  rotate:
    description:
      - Accept a manifest that differs from the recorded one for the same model and revision, and replace the record.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: The decision is made and reported. Nothing is written.
  diff_mode:
    support: none
    description: No diff is shown.
  platform:
    support: full
    platforms: posix
    description: Runs on the controller.
notes:
  - Error results carry a RV(code). V(manifest_mismatch) means another digest than the recorded one.
    V(malformed_trust) means the file is not a trust file of this group. V(malformed_manifest) means the given
    manifest is not valid.
"""

EXAMPLES = r"""
- name: Compare the source's manifest with the one the controller trusts for this group
  dspark.cluster.checkpoint_trust:
    path: "{{ inventory_dir }}/.dspark/trust/{{ dspark_group }}.json"
    group: "{{ dspark_group }}"
    manifest: "{{ built.manifest }}"
  delegate_to: localhost
  become: false
"""

RETURN = r"""
decision:
  description:
    - V(trusted) (the recorded digest), V(new) (first record of this model and revision), V(rotated) (replaced on
      request) or V(mismatch) (failed).
  returned: always
  type: str
  sample: trusted
manifest_sha256:
  description: The digest of the given manifest.
  returned: always
  type: str
trusted_sha256:
  description: The digest recorded before this run, or null if there was none.
  returned: always
  type: str
path:
  description: The trust file.
  returned: always
  type: str
code:
  description: Machine-readable failure reason.
  returned: failure
  type: str
  sample: manifest_mismatch
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dspark.cluster.plugins.module_utils.checkpoint import CheckpointError
from ansible_collections.dspark.cluster.plugins.module_utils.checkpoint_trust_file import check


def run(module):
    p = module.params
    result, message = check(p['path'], p['group'], p['manifest'], p['rotate'], module.check_mode)
    if message:
        module.fail_json(msg=message, code='manifest_mismatch', **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            group=dict(type='str', required=True),
            manifest=dict(type='dict', required=True),
            rotate=dict(type='bool', default=False),
        ),
        supports_check_mode=True,
    )
    try:
        run(module)
    except CheckpointError as e:
        module.fail_json(msg=e.message, code=e.code, details=e.details)
    except (IOError, OSError) as e:
        module.fail_json(msg='%s: %s' % (type(e).__name__, e), code='io_error')


if __name__ == '__main__':
    main()
