"""The lookup dspark.cluster.role_vars: one templated mapping per role, by the spec's names, no secret unless asked,
only a plan's declared reads when named, and a clear error for a role without a spec."""

import os

import pytest
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import lookup_loader
from ansible.template import Templar, trust_as_template
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

# Templates as the inventory and the role defaults give them: trusted (ansible-core 2.19 renders only those).
VARIABLES = {"router_port": trust_as_template("{{ 8000 + 80 }}"), "router_api_key": "sk-never", "router_unknown": 1,
             "other": 2, "serve_block_size": 256, "serve_image": trust_as_template("{{ undefined_on_purpose }}")}


@pytest.fixture(scope="module", autouse=True)
def collection_finder():
    """Ansible's collection finder over this checkout, as ansible-playbook installs it (the loader finds the lookup by
    its FQCN and reads its DOCUMENTATION for the options)."""
    _AnsibleCollectionFinder(paths=[os.path.join(ROOT, "collections")])._install()


def run(*terms, **kwargs):
    loader = DataLoader()
    templar = Templar(loader=loader, variables=VARIABLES)
    lookup = lookup_loader.get("dspark.cluster.role_vars", loader=loader, templar=templar)
    return lookup.run(list(terms), variables=VARIABLES, **kwargs)


def test_templated_by_the_specs_names_without_secrets():
    (router,) = run("router")
    assert router == {"router_port": 8080}


def test_secrets_on_request():
    (router,) = run("router", secrets=True)
    assert router == {"router_port": 8080, "router_api_key": "sk-never"}


def test_a_plans_reads_leave_other_variables_untemplated():
    """serve_image would fail to template: serve_command does not read it, so it is never templated."""
    assert run("serve", reads="serve_command") == [{"serve_block_size": 256}]


def test_a_role_without_a_spec_is_an_error_naming_it():
    with pytest.raises(AnsibleError, match="'routr' has no meta/argument_specs.yml"):
        run("routr")
