"""Offline stand-in for ansible-test's get-pip bootstrap download (its host is unreachable here).

ansible-test runs this file with the new venv's python and pip-style arguments. We bring pip in with
ensurepip, then install the requested pip version and packages from the package index pip already uses.
"""

import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)
