"""The lookup dspark.cluster.role_vars as Ansible loads it (by its FQCN, its options from its DOCUMENTATION): one
templated mapping per role, by the spec's names, no secret unless asked, only a plan's declared reads when named, and a
clear error for a role without a spec. Run in a fresh interpreter with Ansible's collection finder over this checkout,
as ansible-playbook runs it (the unit tests import the collection as a plain package, which the finder cannot load
plugins from)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

PROBE = r"""
import json, os, sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[os.path.join(sys.argv[1], "collections")])._install()
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import lookup_loader
from ansible.template import Templar, trust_as_template
# Templates as the inventory and the role defaults give them: trusted (ansible-core 2.19 renders only those).
variables = {"router_port": trust_as_template("{{ 8000 + 80 }}"), "router_api_key": "sk-never", "router_unknown": 1,
             "other": 2, "serve_block_size": 256, "serve_image": trust_as_template("{{ undefined_on_purpose }}")}
loader = DataLoader()
lookup = lookup_loader.get("dspark.cluster.role_vars", loader=loader, templar=Templar(loader=loader, variables=variables))
out = {}
for case, terms, kwargs in json.loads(sys.argv[2]):
    try:
        out[case] = lookup.run(terms, variables=variables, **kwargs)
    except AnsibleError as error:
        out[case] = "error: " + str(error)
print(json.dumps(out))
"""

CASES = [
    ("plain", ["router"], {}),
    ("secrets", ["router"], {"secrets": True}),
    ("reads", ["serve"], {"reads": "serve_command"}),
    ("no_spec", ["routr"], {}),
]


@pytest.fixture(scope="module")
def results():
    done = subprocess.run([sys.executable, "-c", PROBE, ROOT, json.dumps(CASES)], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_templated_by_the_specs_names_without_secrets(results):
    assert results["plain"] == [{"router_port": 8080}]


def test_secrets_on_request(results):
    assert results["secrets"] == [{"router_port": 8080, "router_api_key": "sk-never"}]


def test_a_plans_reads_leave_other_variables_untemplated(results):
    """serve_image would fail to template: serve_command does not read it, so it is never templated."""
    assert results["reads"] == [{"serve_block_size": 256}]


def test_a_role_without_a_spec_is_an_error_naming_it(results):
    assert results["no_spec"].startswith("error: role 'routr' has no meta/argument_specs.yml"), results["no_spec"]
