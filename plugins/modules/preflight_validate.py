# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Documentation only: the work is done by the action plugin of the same name on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_validate
short_description: Validate the serving groups of a dspark.cluster inventory before anything changes
version_added: 0.1.0
description:
  - Reads the C(dspark_*) variables of every host in the play and of every member of their serving groups,
    and checks group shape (one head with C(dspark_rank=0), contiguous ranks, at least one worker, no host in
    two groups, the whole group in the play), fabric addressing (the fabric role's own input rules, for
    interface, HCA, MTU, CIDR, addresses and the second link),
    MTU range, tensor-parallel size = nodes x GPUs per node, ports, image reference and model id.
  - Also checks every role variable set for those hosts (inventory, group_vars, host_vars, extra vars) against
    the roles' C(meta/argument_specs.yml), strictly (a string is not a list, a dict or an int; choices; absolute
    C(*_dir) and C(*_path)); fails on a name with a role prefix that no role knows ("did you mean"); reports a
    value that cannot be templated per variable; checks that the fabric address is not the management address,
    the HCA list syntax.
  - Runs every role's own input rules (C(plugins/plugin_utils/_role_rules.py), which the roles run at their start
    through P(dspark.cluster.role_inputs#module)) for every member, the checkpoint's revision (a pinned commit),
    mode, source rank, paths, SCP, NFS and download settings and URLs; the export's node, clients, path, options
    and files; the serve role's ranges, keys and closed-by-default API; docker_runtime's proxy values, insecure
    registries and image archive. Numbers out of range, secrets with control characters and relative paths each
    have their own message; a fact of a group or a member (C(dspark_group), C(dspark_rank),
    C(dspark_fabric_address)) set for the parent group C(dspark) is named as such, once for each variable.
  - Every problem names the host or group, the variable, the bad value and the fix. All problems are reported
    at once.
  - Runs on the controller and never connects to a node.
author:
  - dspark.cluster contributors (@dspark)
options:
  play_hosts:
    description: Hosts of the run. Defaults to C(ansible_play_hosts_all).
    type: list
    elements: str
  mtu_min:
    description: Lowest accepted C(dspark_fabric_mtu).
    type: int
    default: 1500
  mtu_max:
    description: Highest accepted C(dspark_fabric_mtu).
    type: int
    default: 9216
  port_min:
    description: Lowest accepted C(dspark_api_port) and C(dspark_master_port).
    type: int
    default: 1024
  port_max:
    description: Highest accepted port.
    type: int
    default: 65535
  require_image_digest:
    description: Fail, instead of warn, when C(dspark_image) is not pinned by digest.
    type: bool
    default: false
  require_pinned_revision:
    description:
      - Kept for existing inventories, without effect. A C(dspark_model_revision) that is not a 40-character commit id
        always fails, since the checkpoint role names the snapshot directory after it.
    type: bool
    default: false
attributes:
  check_mode:
    description: Validates the same way in check mode; it never changes anything.
    support: full
  diff_mode:
    description: Nothing to diff.
    support: none
  platform:
    description: Runs on the controller.
    support: full
    platforms: posix
notes:
  - Run it once per play (C(run_once=true)); it validates every group the play touches.
"""

EXAMPLES = r"""
- name: Validate the inventory before any change
  dspark.cluster.preflight_validate:
    require_image_digest: true
  run_once: true
"""

RETURN = r"""
groups:
  description: The serving groups validated, with their head, members in rank order and world size.
  returned: always
  type: dict
  sample: {"pair_a": {"head": "spark-head", "members": ["spark-head", "spark-worker"], "world_size": 2}}
errors:
  description: Every problem found; each names the host or group, the variable, the value and the fix.
  returned: always
  type: list
  elements: str
  sample: ["spark-worker: dspark_fabric_address='10.0.0.9' is outside dspark_fabric_cidr (192.168.100.0/24). Fix: ..."]
"""
