"""The collection's own pure-Python modules (plugin_utils), imported by the fleet driver so that it reads the
inventory and vLLM's metrics exactly as the playbooks do: one group model (members in rank order, the head), one
integer reading, one set of metric names.

They are found where Ansible finds the collection: already importable, the project's ``collections/`` link, the
``ansible_collections`` tree an installed collection sits in, or this tool's own checkout.
"""

from __future__ import annotations

import importlib
import os
import sys

PLUGIN_UTILS = "ansible_collections.dspark.cluster.plugins.plugin_utils."


def collections_paths(project_dir):
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(project_dir, "collections")] if project_dir else []
    parts = os.path.abspath(project_dir or "").split(os.sep)
    if parts[-3:-2] == ["ansible_collections"]:            # an installed collection: <path>/ansible_collections/ns/name
        paths.append(os.sep.join(parts[:-3]) or os.sep)
    paths.append(os.path.join(here, "..", "..", "..", "collections"))  # this tool's own checkout
    return [os.path.abspath(p) for p in paths if os.path.isdir(os.path.join(p, "ansible_collections"))]


def plugin_utils(name, project_dir=None):
    """The collection's module plugin_utils.<name>; ImportError naming where it was looked for."""
    qualified = PLUGIN_UTILS + name
    try:
        return importlib.import_module(qualified)
    except ImportError:
        pass
    for path in collections_paths(project_dir):
        if path not in sys.path:
            sys.path.insert(0, path)
            importlib.invalidate_caches()
        try:
            return importlib.import_module(qualified)
        except ImportError:
            continue
    raise ImportError("cannot import %s from %s (is --project-dir the collection checkout?)" % (qualified, project_dir))
