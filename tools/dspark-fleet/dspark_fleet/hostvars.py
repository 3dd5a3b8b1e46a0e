"""Templated (and vault-decrypted) inventory variables of one host, for the values a run must use but never show: the
API key of `acceptance`'s load test.

``ansible-inventory --list`` (inventory.py) prints the variables untemplated and leaves vaulted values encrypted. This
module asks Ansible itself in a child Python (ansible's configuration is read once per process, from the project's
ansible.cfg): the inventory is loaded with the vault password file of $ANSIBLE_VAULT_PASSWORD_FILE or ansible.cfg when
there is one, each named variable of the host templated as a play would see it, and the result goes back as JSON
through a pipe. Only variable NAMES are on the child's command line; its output is read into memory and never written
to a file or a log (ANSIBLE_LOG_PATH is removed from its environment).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = r"""
import json, sys
from ansible import constants as C
from ansible.cli import CLI
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible.vars.manager import VariableManager

inventory, host, names = sys.argv[1], sys.argv[2], sys.argv[3:]
loader = DataLoader()
files = [C.DEFAULT_VAULT_PASSWORD_FILE] if C.DEFAULT_VAULT_PASSWORD_FILE else []
if files or C.DEFAULT_VAULT_IDENTITY_LIST:
    loader.set_vault_secrets(CLI.setup_vault_secrets(loader, vault_ids=C.DEFAULT_VAULT_IDENTITY_LIST,
                                                     vault_password_files=files, ask_vault_pass=False))
inv = InventoryManager(loader=loader, sources=[inventory])
found = inv.get_host(host)
if found is None:
    print(json.dumps({"error": "no host %s in the inventory" % host}))
    sys.exit(0)
variables = VariableManager(loader=loader, inventory=inv).get_vars(host=found)
templar = Templar(loader=loader, variables=variables)
out = {}
for name in names:
    if name in variables:
        try:
            out[name] = templar.template(variables[name])
        except Exception as exc:  # a lookup that fails: named, without the value
            print(json.dumps({"error": "%s of %s: %s" % (name, host, type(exc).__name__)}))
            sys.exit(0)
print(json.dumps({"values": out}, default=str))
"""


class HostVarsError(Exception):
    """The variables could not be read (the message names the host and variable, never a value)."""


def resolve(inventory, host, names, project_dir, env_add=None, timeout=120):
    """{name: templated value} of `host` for each of `names` it has (absent ones are left out)."""
    env = dict(os.environ, **(env_add or {}))
    env.pop("ANSIBLE_LOG_PATH", None)
    env.pop("ANSIBLE_VERBOSITY", None)
    try:
        proc = subprocess.run([sys.executable, "-c", SCRIPT, inventory, host] + list(names), cwd=project_dir,
                              env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HostVarsError("cannot read the variables of %s: %s" % (host, exc)) from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise HostVarsError("cannot read the variables of %s (rc %d): %s" % (host, proc.returncode, tail[0][:300]))
    try:
        doc = json.loads(lines[-1])
    except ValueError:
        raise HostVarsError("cannot read the variables of %s: no JSON answer" % host) from None
    if doc.get("error"):
        raise HostVarsError(doc["error"])
    return doc.get("values") or {}


def api_key(values):
    """The first client key of a head's serve variables (serve_api_keys, else serve_api_key), None without any."""
    keys = values.get("serve_api_keys") or []
    if isinstance(keys, str):
        keys = [keys]
    keys = [k for k in keys if isinstance(k, str) and k]
    if keys:
        return keys[0]
    single = values.get("serve_api_key")
    return single if isinstance(single, str) and single else None
