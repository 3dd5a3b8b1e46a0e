"""Fixtures shared by the scenario verifiers (extensions/molecule/*/tests)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from labhosts import NODES, lab_node  # noqa: E402  (needs the path above)


@pytest.fixture(params=NODES)
def lab_host(request):
    """Each lab node in turn."""
    node = lab_node(request.param)
    node.name = request.param
    return node
