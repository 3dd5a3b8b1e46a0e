# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one-line problem format: where (host or group), variable, value, problem, fix (private)."""

from __future__ import annotations


def message(where, var, value, problem, fix):
    """One line: ``where: var=value problem. Fix: fix`` (``where: var is not set (problem). Fix: fix`` for None)."""
    if value is None:
        return "%s: %s is not set (%s). Fix: %s" % (where, var, problem, fix)
    return "%s: %s=%r %s. Fix: %s" % (where, var, value, problem, fix)
