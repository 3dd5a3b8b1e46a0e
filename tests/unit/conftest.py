"""Make `ansible_collections.dspark.cluster` importable from this checkout (via the committed symlink)."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "collections"))
