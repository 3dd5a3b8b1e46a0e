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
