# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Attributes shared by the modules that only read or measure a node."""

from __future__ import annotations


class ModuleDocFragment:

    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: The module only reads (or measures) and changes nothing, so it runs the same way in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
"""
