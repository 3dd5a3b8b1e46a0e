# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Documentation only: the work is done by the action plugin of the same name, which runs ansible.builtin.apt.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: packages
short_description: Install distribution packages, refreshing the package lists only when they cannot
version_added: 0.1.0
description:
  - The one way the collection's roles install Debian/Ubuntu packages. Tries M(ansible.builtin.apt) from the node's
    current package lists; when that fails, refreshes the lists once and tries again. Installed packages cost no
    refresh at all.
  - Lists that look fresh can still lack a package (an image whose lists were emptied at build time, a trimmed image,
    a new mirror, lists naming a version the mirror no longer holds); a C(cache_valid_time) would skip the refresh
    they need.
  - In check mode the lists cannot be refreshed, so a package they cannot install is reported as changed with what a
    real run would do, not as a failure.
author:
  - dspark.cluster contributors (@dspark)
options:
  name:
    description: The packages, one name each.
    type: list
    elements: str
    required: true
  install_recommends:
    description: Passed to M(ansible.builtin.apt); unset keeps apt's own default.
    type: bool
attributes:
  check_mode:
    description: Reports what it would install, even when the lists would need a refresh first.
    support: full
  diff_mode:
    description: Nothing to diff.
    support: none
  platform:
    description: Debian and Ubuntu nodes.
    support: full
    platforms: debian
seealso:
  - module: ansible.builtin.apt
"""

EXAMPLES = r"""
- name: Install nftables
  dspark.cluster.packages:
    name: [nftables]
    install_recommends: false
"""

RETURN = r"""
refreshed:
  description: Whether the package lists were refreshed (the first attempt failed).
  returned: always
  type: bool
msg:
  description: What apt said, or what a real run would do (check mode), or both failures' reasons.
  returned: when apt says something, and on failure
  type: str
"""
