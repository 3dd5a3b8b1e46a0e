"""Finding one of the collection's filters loads no logic of the others (controller cost, docs/design-fleet.md).

Ansible finds a collection's filter by loading every filter file of the collection that sorts before it, in each
forked worker; a filter file that imported its plugin_utils logic at load time made every worker import the
logic of filters it never ran (about 20 % of a no-op site.yml's controller CPU). Run in a process of its own: the
collection loader and the filter loader's caches are process-wide.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

PROBE = r"""
import json, os, sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[os.path.join(sys.argv[1], "collections")])._install()
from ansible.plugins.loader import filter_loader
names = sorted(f[:-3] for f in os.listdir(os.path.join(sys.argv[1], "plugins", "filter")) if f.endswith(".py"))
filter_loader.get("ansible.builtin.default")              # what a worker inherits: the builtin filters loaded
before = set(sys.modules)
last = filter_loader.get("dspark.cluster." + names[-1])     # loads every filter file before it
loaded = sorted(m for m in set(sys.modules) - before
                if m.startswith("ansible_collections.dspark.") and (".plugin_utils" in m or ".module_utils" in m))
print(json.dumps({"names": names, "found": last is not None, "loaded": loaded}))
"""


def test_finding_the_last_filter_imports_no_plugin_utils():
    proc = subprocess.run([sys.executable, "-c", PROBE, ROOT], capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out["names"]) > 10 and out["found"]
    assert out["loaded"] == []


def test_a_filter_imports_its_logic_when_it_runs():
    from ansible_collections.dspark.cluster.plugins.filter.checkpoint_paths import checkpoint_paths

    paths = checkpoint_paths("org/model", "0" * 40)
    assert paths["repo_folder"] == "models--org--model"


WARM = r"""
import json, os, sys
import yaml
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[os.path.join(sys.argv[1], "collections")])._install()
from ansible._internal._templating._engine import TemplateEngine
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import filter_loader, test_loader
from ansible.template import trust_as_template
with open(os.path.join(sys.argv[1], "playbooks", "preflight.yml"), encoding="utf-8") as handle:
    pattern = yaml.safe_load(handle)[0]["hosts"]
before = set(sys.modules)
rendered = TemplateEngine(loader=DataLoader(), variables={}).template(trust_as_template(pattern))
filters = sorted(m for m in set(sys.modules) - before if m.startswith("ansible_collections.dspark.cluster.plugins.filter."))
from ansible_collections.dspark.cluster.plugins.plugin_utils import _plan_vars
lookups = sorted(m.rsplit(".", 1)[1] for m in set(sys.modules) - before if ".plugins.lookup." in m)
print(json.dumps({"rendered": rendered, "builtin_filters": bool(filter_loader._cached_non_collection_wrappers),
                  "builtin_tests": bool(test_loader._cached_non_collection_wrappers), "filters": filters,
                  "lookups": lookups, "specs_cached": _plan_vars.collection_specs.cache_info().currsize}))
"""


def test_the_first_play_loads_the_filter_plugins_in_the_main_process():
    """The first play's host pattern (templated by ansible-playbook's main process before any worker forks) loads
    the builtin filters and tests and every filter file of the collection: the forked workers inherit them."""
    proc = subprocess.run([sys.executable, "-c", WARM, ROOT], capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rendered"] == "all:localhost"
    assert out["builtin_filters"] and out["builtin_tests"]
    names = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "plugins", "filter")) if f.endswith(".py"))
    assert out["filters"] == ["ansible_collections.dspark.cluster.plugins.filter." + n for n in names]
    # The lookups the roles and the lab inventory call, and the argument specs the roles' input checks read.
    assert out["lookups"] == ["env", "file", "role_vars", "template"]
    assert out["specs_cached"] == 1
