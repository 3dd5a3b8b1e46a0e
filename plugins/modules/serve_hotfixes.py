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
  - The tree under C(patches/) is read once, never through a link (every directory and file is opened with
    C(O_NOFOLLOW)). A symlink anywhere under it (one that stays inside the tree too), C(patches/) itself as a
    link, a fifo, a socket or a device is refused, naming the entry, its link target and the fix. Hard links are
    plain files.
  - With O(version), the files under C(patches/) must be exactly the commit's blobs, compared by content (each
    file's git blob id against the commit's tree, every tree object on the way hashed again from the commit id).
    A modified, untracked, ignored or deleted file is refused, for a controller directory and for the cached
    clone of a git URL alike (a clone changed after it was cloned is never used).
  - The checked bytes are staged in O(cache_dir)C(/trees/<tree digest>) (0700) and RV(patches_dir) names that
    copy, so the role's copy to the nodes never reads the recipe directory again.
  - Without O(version) a directory is used as it is, and RV(tree_digest) records what was applied.
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
    description:
      - 40-hex commit; required with a git URL. For a directory, its HEAD must be this commit and the content of
        its C(patches/) must equal the commit's. Empty uses a directory as it is.
    type: str
    default: ""
  cache_dir:
    description: Controller directory for clones of git URLs, the staged copies of checked trees (C(trees/)) and their archives (C(archives/)).
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
    description: Plans the same way in check mode (a git URL is still cloned and the tree staged in the controller's cache).
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
  description:
    - Controller path of the staged copy of the checked C(patches/) files (in O(cache_dir)), which the role copies to the nodes.
  returned: success
  type: str
archive:
  description:
    - Controller path of a tar of the same checked files (O(cache_dir)C(/archives/<tree digest>.tar), entries
      C(patches/...), files 0644, directories 0755, owner root), which the role unpacks on the nodes in one transfer.
    - null without O(cache_dir).
  returned: success
  type: str
tree_digest:
  description: sha256 of RV(sums), the content of the C(patches/) tree that was checked and staged.
  returned: success
  type: str
recipe:
  description: Where the tree came from and whether it was checked against a commit.
  returned: success
  type: dict
  contains:
    source:
      description: O(recipe) as given.
      type: str
    path:
      description: The controller directory that was read (a cached clone for a git URL).
      type: str
    version:
      description: The commit the tree was checked against; empty for a directory used as it is.
      type: str
    verified:
      description: Whether the content of C(patches/) was checked to equal the commit's.
      type: bool
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
