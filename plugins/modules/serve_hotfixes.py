# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Documentation only: the work is done by the action plugin of the same name on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: serve_hotfixes
short_description: Plan the DSpark recipe's hotfixes for a serving rank, on the controller
version_added: 0.1.0
description:
  - Resolves the recipe checkout (a controller directory, or a git URL cloned once at a pinned commit into
    O(cache_dir)), checks that every hotfix the rank needs is in its C(patches/) directory, and returns the
    checksummed file list and the script that runs the hotfixes in the container in the upstream
    entrypoint's order, fail-closed.
  - A hotfix is needed when its switch does not turn it off (C(serve_hotfix_skip*)), when its opt-in switch
    turns it on (C(serve_hotfix_enable_*)), always for the ones upstream always runs, and, for the API-key
    redaction hotfix, when API keys are set. Each missing one is reported with the file, the variable and the fix.
  - Runs on the controller and never connects to a node.
author:
  - dspark.cluster contributors (@dspark)
options:
  recipe:
    description: Controller directory of a recipe checkout, or its git URL.
    type: str
    required: true
  version:
    description: 40-hex commit; required with a git URL, checked against the directory's HEAD otherwise.
    type: str
    default: ""
  cache_dir:
    description: Controller directory for clones of git URLs.
    type: str
    default: ~/.cache/dspark/recipes
  switches:
    description: The C(serve_hotfix_skip*) and C(serve_hotfix_enable_*) role variables (bools).
    type: dict
    default: {}
  hotfix_env:
    description: C(serve_hotfix_env); a switch set there against its role variable is an error.
    type: dict
    default: {}
  extra_env:
    description: C(serve_extra_env); a switch set there against its role variable is an error.
    type: dict
    default: {}
  keys_set:
    description: Whether API keys are configured (the redaction hotfix is then required).
    type: bool
    default: false
  model:
    description: Hugging Face id of the model (where the entrypoint looks for C(encoding_dsv4.py)).
    type: str
    required: true
  revision:
    description: Pinned model revision (the snapshot searched first).
    type: str
    default: ""
attributes:
  check_mode:
    description: Plans the same way in check mode (a git URL is still cloned into the controller's cache).
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
- name: Plan the recipe's hotfixes
  dspark.cluster.serve_hotfixes:
    recipe: /srv/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark
    switches: {serve_hotfix_skip_spin_wait: false}
    keys_set: true
    model: deepseek-ai/DeepSeek-V4-Flash-0731
  register: plan
"""

RETURN = r"""
patches_dir:
  description: Controller path of the recipe's patches directory.
  returned: success
  type: str
files:
  description: Files under patches/ (relative paths), all copied to every rank.
  returned: success
  type: list
  elements: str
sums:
  description: sha256sum check file of the tree, paths relative to the node's copy.
  returned: success
  type: str
script:
  description: The entrypoint script that runs the hotfixes in upstream order.
  returned: success
  type: str
digest:
  description: sha256 of the tree and the script; names the node's copy and restarts the group when it changes.
  returned: success
  type: str
env:
  description: The upstream switch variables rendered from the role variables ("1" or "0").
  returned: success
  type: dict
steps:
  description: The hotfix steps that run with these switches, in order.
  returned: success
  type: list
  elements: str
errors:
  description: Every problem found.
  returned: failure
  type: list
  elements: str
"""
