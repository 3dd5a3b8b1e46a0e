"""playbooks/qualify.yml on the serving pair (issue #27): the API and rendezvous ports held by this collection's own
container pass, and a foreign container listening on the port named as the API port fails the run, named with
its Fix. Changes nothing (a real Docker container on the lab node's host network is the fault)."""

import time

from labhosts import LAB_INVENTORY, container, lab_node, playbook

SQUATTER = "qualify-squatter"
PORT = 18890     # free: 18888 is serve_engine_port (vLLM behind the API edge)


def test_the_serving_pair_qualifies_with_its_own_container_on_the_ports():
    rc, out = playbook("qualify.yml")
    assert rc == 0, out[-4000:]
    assert "spark-head: " in out and " 0 failed" in out


def test_a_foreign_container_on_the_api_port_is_named():
    head = lab_node("spark-head")
    image = container("spark-head")["Image"]
    started = head.run("docker run -d --rm --name %s --network host --entrypoint python3 %s -m http.server %d"
                       % (SQUATTER, image, PORT))
    assert started.rc == 0, started.stderr
    try:
        for _attempt in range(30):
            if head.run("ss -Hltn 'sport = :%d'" % PORT).stdout.strip():
                break
            time.sleep(0.5)
        rc, out = playbook("qualify.yml", LAB_INVENTORY, "-e", "dspark_api_port=%d" % PORT)
        assert rc != 0, out[-4000:]
        assert "dspark_api_port=%d" % PORT in out and "'%s'" % SQUATTER in out, out[-4000:]
        assert "Fix: Stop what holds port %d" % PORT in out
    finally:
        head.run("docker rm -f %s" % SQUATTER)
