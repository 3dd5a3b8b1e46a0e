"""Module tests run many modules in one process, the way no real module runs: two process-globals of ansible-core
must be what a one-shot module process has.

- A module's warnings (module_utils' lists, never cleared in a real module process) must not reach the next test.
- `is_controller` is set True by importing ansible's controller code (an action plugin's test does). A module
  then hands warn() to the controller's Display instead of returning it in its result, so a test of a module's
  warnings passed alone and failed after the plugin tests (CI, stop 31).
"""

import pytest

from ansible.module_utils import _internal
from ansible.module_utils.common import warnings


@pytest.fixture(autouse=True)
def module_process_globals(monkeypatch):
    for name in ("_global_warnings", "_global_deprecations"):
        getattr(warnings, name).clear()
    monkeypatch.setattr(_internal, "is_controller", False)
    yield
