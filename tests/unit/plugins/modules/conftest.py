"""Module tests run many modules in one process: a module's warnings (a process-global of ansible-core's
module_utils, never cleared in a real one-shot module process) must not reach the next test's result."""

import pytest

from ansible.module_utils.common import warnings


@pytest.fixture(autouse=True)
def fresh_module_warnings():
    for name in ("_global_warnings", "_global_deprecations"):
        getattr(warnings, name).clear()
    yield
