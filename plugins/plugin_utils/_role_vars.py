# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The variables of a role, by the names its meta/argument_specs.yml declares (issue #44: a role variable is written
in its defaults and its argument spec, nowhere else). The lookup dspark.cluster.role_vars hands a role's values to its
plan filters by these names; preflight and the role's own check read the same specs (_plan_vars.collection_specs).
Pure Python, no Ansible imports."""

from __future__ import annotations

import functools
import os

from ansible_collections.dspark.cluster.plugins.plugin_utils import (
    _fabric_plan, _plan_vars, _qualify_plan, _serve_command, _serve_edge, _serve_lmcache, _serve_sidecars)

# A plan that reads a few of a role's many variables declares them in its module; the lookup's ``reads`` names the
# plan, so that only those are templated (each templating costs controller CPU on every reference, and a variable the
# plan does not read must not fail it: serve_image reads dspark_image, which may be a file lookup).
READS = {
    "fabric_plan": tuple(_fabric_plan.VARIABLES.values()),
    "serve_command": _serve_command.VARIABLES,
    "serve_compose": _serve_command.COMPOSE_VARIABLES,
    "serve_edge": _serve_edge.VARIABLES,
    "serve_lmcache": _serve_lmcache.VARIABLES,
    "serve_sidecars": _serve_sidecars.VARIABLES,
}
# The qualify role's plan, one part per call (dspark.cluster.qualify_plan('<part>')): reads='qualify_<part>'.
READS.update(("qualify_" + part, names) for part, names in _qualify_plan.VARIABLES.items())


@functools.lru_cache(maxsize=None)
def _options(role, roles_dir):
    """((name, no_log), ...) of every option of ``role``'s argument specs (all its entry points), in name order."""
    specs = _plan_vars.load_specs(roles_dir, roles=(role,))
    return tuple(sorted((name, bool(spec.get("no_log"))) for name, spec in specs.items()))


def names(role, secrets=False, roles_dir=None):
    """The option names of ``role``; those the spec marks no_log only with ``secrets``. ValueError: no spec."""
    roles_dir = roles_dir or os.path.join(_plan_vars.COLLECTION_ROOT, "roles")
    options = _options(role, roles_dir)
    if not options:
        raise ValueError("role %r has no meta/argument_specs.yml with options in this collection" % role)
    return [name for name, no_log in options if secrets or not no_log]


def pick(role, variables, secrets=False, reads=None, roles_dir=None):
    """(name, raw value) of each of ``role``'s options that ``variables`` holds, in name order; with ``reads`` (a
    key of READS), only the options that plan reads. ValueError: no spec, or an unknown plan."""
    wanted = names(role, secrets, roles_dir)
    if reads is not None:
        if reads not in READS:
            raise ValueError("reads=%r is not a plan that declares what it reads (known: %s)" % (reads, ", ".join(sorted(READS))))
        wanted = [name for name in wanted if name in READS[reads]]
    return [(name, variables[name]) for name in wanted if name in variables]
