"""The serve role's nftables table in the lab (issue #13 points 2 and 6): the rendezvous port listens on every
address, yet a packet from outside the group (the controller, on the fabric bridge's gateway address and on the
management network) does not reach it nor the API, while SSH does and the group's own ranks registered (converge's
tp_ranks). Turning the firewall off removes the table, and the same probe then connects: the probe can see it. The
next successful serve.yml run applies the table again (test_serve.py's two-keys test checks it is back)."""

import json
import socket

import pytest
from labhosts import LAB_INVENTORY, lab_node, playbook

HEAD_FABRIC, HEAD_MGMT = "192.168.100.1", "10.231.0.11"
TABLE = "nft list table inet dspark_serve"


def reaches(address, port, timeout=3.0):
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("name", ("spark-head", "spark-worker"))
def test_the_table_is_loaded_on_every_rank(name):
    assert lab_node(name).run(TABLE).rc == 0


def test_rendezvous_and_api_listen_but_outsiders_get_only_ssh():
    listening = lab_node("spark-head").check_output("ss -ltnH")
    assert ":25000 " in listening and ":8888 " in listening, listening
    for address in (HEAD_FABRIC, HEAD_MGMT):
        assert reaches(address, 22), "%s:22 unreachable from the controller: the probe proves nothing" % address
        assert not reaches(address, 25000), "%s:25000 (rendezvous) reachable from outside the group" % address
        assert not reaches(address, 8888), "%s:8888 (API) reachable from outside serve_api_allowed_cidrs" % address


def test_firewall_off_removes_the_table_and_opens_the_ports():
    """Left off: the next successful serve.yml run of these tests (the inventory says true) puts the table back."""
    rc, out = playbook("serve.yml", LAB_INVENTORY, "-e", json.dumps({"serve_firewall": False}))
    assert rc == 0, out[-3000:]
    assert lab_node("spark-head").run(TABLE).rc != 0
    assert reaches(HEAD_FABRIC, 25000) and reaches(HEAD_MGMT, 8888)
