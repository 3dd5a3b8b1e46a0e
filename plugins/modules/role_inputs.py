# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Documentation only: the work is done by the action plugin of the same name on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: role_inputs
short_description: Check one role's inputs with the rules preflight runs, at the role's start
version_added: 0.1.0
description:
  - Runs the input rules of one role of the collection (C(plugins/plugin_utils/_role_rules.py)) on this host, the same
    rules P(dspark.cluster.preflight_validate#module) runs for every host of the run before any change, so that a role
    run alone (C(--tags), or the role in another playbook) still stops on bad input before it changes anything.
  - This host's values are the task's (inventory, play, role defaults, extra vars); the other members of its serving
    group are read from C(hostvars). Only problems about this host are reported, one line each, naming the host, the
    variable, the value (never a secret's) and the fix.
  - Internal to the collection's roles (their C(tasks/validate.yml)).
  - Runs on the controller and never connects to a node.
author:
  - dspark.cluster contributors (@dspark)
options:
  role:
    description: The role whose rules run.
    type: str
    required: true
    choices: [checkpoint, docker_runtime, fabric, nfs_export, router, serve]
attributes:
  check_mode:
    description: Checks the same way in check mode; it never changes anything.
    support: full
  diff_mode:
    description: Nothing to diff.
    support: none
  platform:
    description: Runs on the controller.
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Check the checkpoint inputs (the rules preflight runs)
  dspark.cluster.role_inputs:
    role: checkpoint
"""

RETURN = r"""
errors:
  description: "One line per problem, C(host: variable=value problem. Fix: fix); empty when the inputs are valid."
  returned: always
  type: list
  elements: str
"""
