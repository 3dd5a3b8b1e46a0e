# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' input rules: the one entry point (private; issues #25, #44).

A role's inputs are checked in three layers (docs/design-role-inputs.md): its argument spec's types and choices
(plugin_utils._plan_vars.check_host), the numeric ranges that extend the spec (plugin_utils._spec_ranges), and the
role's own rules, one module per role (plugin_utils._rules_<role>, registered in ``RULES`` with ``@rule`` of
plugin_utils._rules_base). Importing this module imports every role's module, so ``RULES`` is complete here, in
the order below (the order of the findings).

Preflight runs them all for every member of every serving group of the run (plugins/action/preflight_validate.py,
``check_group``; the router's through ``check_router``) before any node changes; a role run on its own (``--tags``,
or the role alone) runs its own ones through the action ``dspark.cluster.role_inputs`` at its start. The monitoring
role's inputs are one mapping of settings on a host outside the serving groups: ``check_settings`` runs them (the
filter ``dspark.cluster.monitoring_plan`` does, through plugin_utils._monitoring_plan), never preflight's group run.
Pure Python, no Ansible imports.
"""

from __future__ import annotations

from ansible_collections.dspark.cluster.plugins.plugin_utils import (
    _rules_checkpoint, _rules_docker_runtime, _rules_fabric, _rules_monitoring, _rules_nfs_export, _rules_router, _rules_serve)
from ansible_collections.dspark.cluster.plugins.plugin_utils._rules_base import (  # the public names callers use
    COLLECTION_ROOT, HIDDEN, NODE_FACTS, ROUTER_ROLES, RULES, SAFE_LOADER, _SECRET_NAME_RE, Group, Hidden, Member, RouterHost,
    Rule, TemplateFailure, check_group, check_member, check_router, is_secret, rule)

__all__ = ["COLLECTION_ROOT", "HIDDEN", "NODE_FACTS", "ROUTER_ROLES", "RULES", "SAFE_LOADER", "Group", "Hidden", "Member",
           "RouterHost", "Rule", "TemplateFailure", "check_group", "check_member", "check_router", "check_settings",
           "is_secret", "rule", "CHECKPOINT_MODES", "RSYNC_FORBIDDEN_RE", "URL_RE",
           "_SECRET_NAME_RE"]  # dspark-fleet's bundle reads the secret-name pattern (tools/dspark-fleet/dspark_fleet/bundle.py)

# The modules whose rules RULES holds, in the order they run (the order of the findings), whatever order Python
# imported them in; each module's rules keep the order they are written in (a stable sort).
ROLE_MODULES = (_rules_checkpoint, _rules_nfs_export, _rules_serve, _rules_docker_runtime, _rules_fabric, _rules_router)
_MODULE_NAMES = [module.__name__ for module in ROLE_MODULES]
RULES.sort(key=lambda item: _MODULE_NAMES.index(item.check.__module__))
# Roles whose inputs are one mapping of settings, not a serving group's member: role -> its check.
SETTINGS_RULES = {"monitoring": _rules_monitoring.check_settings}

# Names of the checkpoint role's module that the inventory rules and the tests read from here.
CHECKPOINT_MODES = _rules_checkpoint.CHECKPOINT_MODES
RSYNC_FORBIDDEN_RE = _rules_checkpoint.RSYNC_FORBIDDEN_RE
URL_RE = _rules_checkpoint.URL_RE


def check_settings(role, settings):
    """The problems (one line each: variable, value, fix) of a settings role's inputs (SETTINGS_RULES)."""
    return SETTINGS_RULES[role](settings)
