# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin shell: resolves the recipe checkout on the controller and hands it to hotfix_recipe, which reads the
tree once (never through a link), checks it against serve_hotfix_recipe_version, and stages the checked bytes
in the cache directory for the role's copy."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.dspark.cluster.plugins.plugin_utils import hotfix_recipe

ARGUMENT_SPEC = {
    "recipe": {"type": "str", "required": True},
    "version": {"type": "str", "default": ""},
    "cache_dir": {"type": "str", "default": "~/.cache/dspark/recipes"},
    "switches": {"type": "dict", "default": {}},
    "hotfix_env": {"type": "dict", "default": {}},
    "extra_env": {"type": "dict", "default": {}},
    "keys_set": {"type": "bool", "default": False},
    "model": {"type": "str", "required": True},
    "revision": {"type": "str", "default": ""},
}


class ActionModule(ActionBase):
    """Runs on the controller only; never contacts a node. The same answer in check mode."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars or {})
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        switches = {name: bool(args["switches"].get(name, False)) for name in hotfix_recipe.SWITCHES}
        unknown = sorted(set(args["switches"]) - set(hotfix_recipe.SWITCHES))
        problems = ["unknown hotfix switch %s (known: %s)" % (name, ", ".join(sorted(hotfix_recipe.SWITCHES)))
                    for name in unknown]
        problems += hotfix_recipe.switch_conflicts(
            switches, [("serve_hotfix_env", args["hotfix_env"]), ("serve_extra_env", args["extra_env"])])
        plan = None
        try:
            path = hotfix_recipe.resolve(args["recipe"], args["version"], args["cache_dir"])
            plan = hotfix_recipe.plan(path, args["recipe"], switches, args["keys_set"], args["model"], args["revision"],
                                      version=args["version"], cache_dir=args["cache_dir"])
        except hotfix_recipe.RecipeError as exc:
            problems.extend(str(exc).split("\n"))
        except OSError as exc:
            problems.append("serve_hotfix_recipe=%s could not be read on the controller: %s" % (args["recipe"], exc))
        result["changed"] = False
        if problems:
            result["failed"] = True
            result["errors"] = problems
            result["msg"] = "The recipe's hotfixes are not ready (%d problem%s), nothing was started:\n- %s" % (
                len(problems), "" if len(problems) == 1 else "s", "\n- ".join(problems))
            return result
        result.update(plan)
        if plan["recipe"]["verified"]:
            state = "patches/ equal to commit %s" % plan["recipe"]["version"]
        else:
            state = "unversioned, used as it is: patches/ tree sha256 %s" % plan["tree_digest"]
        result["msg"] = "%d hotfix step(s) in upstream order from %s (%s; digest %s)" % (
            len(plan["steps"]), args["recipe"], state, plan["digest"][:12])
        return result
