"""Table-driven tests of the nfs_export role's network rules (plugins/plugin_utils/_nfs_plan.py) and their preflight use."""

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _findings
from ansible_collections.dspark.cluster.plugins.plugin_utils import _nfs_plan as nfs
from ansible_collections.dspark.cluster.plugins.filter.nfs_export_problems import FilterModule

CIDR = "192.168.100.0/24"


@pytest.mark.parametrize("client", [
    "192.168.100.1", "192.168.100.1/32", "192.168.100.0/24", "192.168.100.0/25", "192.168.100.4/30",
    "192.168.100.7/24",  # host bits: the network is the fabric's own
])
def test_clients_inside_the_fabric_network_pass(client):
    assert nfs.client_findings("w1", [client], CIDR) == []


@pytest.mark.parametrize("client, words", [
    ("0.0.0.0/0", "every address"),
    ("::/0", "every address"),
    ("*", "wildcard"),
    ("*.example.com", "wildcard"),
    ("@trusted", "netgroup"),
    ("node?", "wildcard"),
    ("spark-head", "host name"),
    ("spark-head.lan", "host name"),
    ("192.168.0.0/16", "wider than the fabric network 192.168.100.0/24"),
    ("192.168.100.0/23", "wider than"),
    ("10.0.0.5", "outside the fabric network 192.168.100.0/24"),
    ("192.168.101.0/24", "outside"),
    ("fd00::1", "IPv6"),
    ("", "empty entry"),
])
def test_clients_beyond_the_fabric_network_are_refused(client, words):
    found = nfs.client_findings("w1", ["192.168.100.1", client], CIDR, ["192.168.100.1"])
    assert len(found) == 1
    where, var, value, problem, fix = found[0]
    assert (where, var, value) == ("w1", "nfs_export_clients", ["192.168.100.1", client])
    assert words in problem
    assert "192.168.100.1" in fix and CIDR in fix


def test_one_line_per_bad_entry_in_the_standard_format():
    lines = FilterModule().filters()["nfs_export_problems"]("w1", ["0.0.0.0/0", "h"], CIDR, "192.168.100.2")
    assert len(lines) == 2
    assert lines[0].startswith("w1: nfs_export_clients=['0.0.0.0/0', 'h'] holds '0.0.0.0/0', which opens")
    assert all(". Fix: " in line for line in lines)


def test_empty_list_and_bad_cidr():
    assert nfs.client_findings("w1", [], CIDR)[0][3] == "lets no client mount the export (an empty list is never opened to *)"
    assert nfs.client_findings("w1", ["0.0.0.0/0"], "not-a-cidr") == []  # the fabric rules report the CIDR
    assert nfs.client_findings("w1", None, CIDR) == []


@pytest.mark.parametrize("address, cidr, bad", [
    ("192.168.100.2", CIDR, False),
    ("192.168.101.2", CIDR, True),
    ("", CIDR, True),
    (None, CIDR, True),
    ("spark-worker", CIDR, True),
    ("192.168.100.2", "garbage", False),
])
def test_bind_address(address, cidr, bad):
    found = nfs.bind_findings("w1", address, cidr)
    assert bool(found) is bad
    if bad:
        assert found[0][1] == "dspark_fabric_address" and "nfsd" in found[0][3]
        assert _findings.message(*found[0]).startswith("w1: dspark_fabric_address")


def node(rank, address, **extra):
    values = {"dspark_rank": rank, "dspark_fabric_address": address, "dspark_fabric_cidr": CIDR, "dspark_checkpoint_mode": "nfs"}
    values.update(extra)
    return values
