"""The fleet-lab suites need the SIMULATED fleet lab up (`make lab-fleet`); skipped without it unless
DSPARK_LAB_REQUIRED=1, then failed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# ansible_collections.dspark.cluster from this checkout (the committed symlink), as in tests/unit/conftest.py.
sys.path.insert(0, str(HERE.parents[1] / "collections"))

from fleetlab import INVENTORY, ROOT  # noqa: E402  pylint: disable=wrong-import-position


def pytest_collection_modifyitems(config, items):
    status = subprocess.run(["bash", str(ROOT / "lab" / "lab.sh"), "status", "-i", str(INVENTORY)],
                            capture_output=True, text=True, timeout=300, check=False)
    if status.returncode == 0:
        return
    reason = "the fleet lab is not up (make lab-fleet): %s" % (status.stdout + status.stderr).strip()[-500:]
    if os.environ.get("DSPARK_LAB_REQUIRED") == "1":
        raise pytest.UsageError(reason)
    for item in items:
        item.add_marker(pytest.mark.skip(reason=reason))
