"""A sidecar engine on the real pair (issue #46): the lab's tiny model a second time, as `tiny-twin`, tensor-parallel
over both nodes beside the main engine (REAL vLLM, the CPU build), the recipe's vision sidecar in miniature.

In file order, each step on the pair the one before left: shares that do not fit every node are refused before any
change; the sidecar starts after the main engine, which keeps running untouched, and both are proven rank by rank;
each answers its own model behind the head's API edge on its own port, with a key only; a second run changes nothing;
the sidecar taken out of the inventory is removed from both nodes, its compose file too, and the main engine still
untouched. Part of `make realtest` (before test_real_engine.py, whose last test stops the group).
"""

import json
import urllib.error
import urllib.request

import openai
import pytest

from reallab import CONTAINER, GROUP, GROUP_VARS, HEAD, KEYS, MODEL_NAME, ROOT, WORKER, node, playbook, rank_state

NAME, SERVED, API_PORT = "twin", "tiny-twin", 8889
SIDECAR_CONTAINER = "%s-%s" % (CONTAINER, NAME)
SIDECAR_API = "http://10.233.0.11:%d/v1" % API_PORT
REPO_ID = (ROOT / ".lab" / "model" / "repo_id").read_text().strip()
REVISION = (ROOT / ".lab" / "model" / "revision").read_text().strip()
# The lab engine's settings (inventories/lab-real/group_vars/dspark.yml), as a sidecar's own.
SIDECAR = {"name": NAME, "model": REPO_ID, "revision": REVISION, "served_model_name": SERVED, "api_port": API_PORT,
           "master_port": 25100, "gpu_memory_utilization": 0.1, "max_model_len": 256, "max_num_seqs": 4,
           "extra_args": ["--dtype", "float32", "--enforce-eager", "--max-num-batched-tokens", "512"]}
MAIN_SHARE = 0.835   # serve_gpu_memory_utilization's default, which lab-real keeps


@pytest.fixture(scope="module")
def overlay(tmp_path_factory):
    """with_sidecars(*sidecars): ansible-playbook's arguments for an inventory source beside lab-real that gives
    real_pair's vars dspark_sidecars, as an operator writes them in the group's own vars."""
    folder = tmp_path_factory.mktemp("sidecars")

    def with_sidecars(*sidecars):
        path = folder / ("sidecars-%d.yml" % len(list(folder.iterdir())))
        path.write_text(json.dumps({"all": {"children": {"dspark": {"children": {GROUP: {"vars": {
            "dspark_sidecars": list(sidecars)}}}}}}}))
        return ["-i", str(path)]
    return with_sidecars


def container_id(host, name):
    rc, out = node(host, "docker inspect --format '{{.Id}}' %s" % name)
    return out.strip() if rc == 0 else None


def main_ids():
    return {host: container_id(host, CONTAINER) for host in (HEAD, WORKER)}


def recap_changed(out):
    """{host: changed} from a PLAY RECAP."""
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[1] == ":" and parts[3].startswith("changed="):
            found[parts[0]] = int(parts[3].split("=")[1])
    return found


@pytest.fixture(scope="module")
def main_before():
    for host in (HEAD, WORKER):
        assert rank_state(host) == "running", "converge lab-real first (make site-real)"
    return main_ids()


def test_shares_that_do_not_fit_are_refused_before_any_change(main_before, overlay):
    rc, out = playbook("playbooks/serve.yml", *overlay(dict(SIDECAR, gpu_memory_utilization=0.2)))
    assert rc != 0, out[-3000:]
    assert "main %g + %s 0.2 = %g" % (MAIN_SHARE, NAME, MAIN_SHARE + 0.2) in out, out[-3000:]
    assert main_ids() == main_before
    assert all(container_id(host, SIDECAR_CONTAINER) is None for host in (HEAD, WORKER))


def test_the_sidecar_starts_after_the_main_engine_and_both_are_proven(main_before, overlay):
    rc, out = playbook("playbooks/serve.yml", *overlay(SIDECAR))
    assert rc == 0, out[-5000:]
    # The report as one line (the YAML callback folds a long message).
    assert "sidecar engine %s (%s on port %d): rank 0 on %s, rank 1 on %s registered (world size 2)" % (
        NAME, SERVED, API_PORT, HEAD, WORKER) in " ".join(out.split()), out[-5000:]
    # The main engine was not restarted for it: the engines share no communicator.
    assert main_ids() == main_before
    for host in (HEAD, WORKER):
        assert container_id(host, SIDECAR_CONTAINER) is not None


def test_each_engine_answers_its_own_model_on_its_own_port_with_a_key_only(main_before):
    client = openai.OpenAI(base_url=SIDECAR_API, api_key=KEYS[1], timeout=300, max_retries=0)
    assert [model.id for model in client.models.list().data] == [SERVED]
    reply = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "Say hi"}], max_tokens=4)
    assert reply.choices and reply.model == SERVED
    main = openai.OpenAI(base_url="http://10.233.0.11:%d/v1" % GROUP_VARS["dspark_api_port"], api_key=KEYS[0], timeout=300,
                         max_retries=0)
    assert [model.id for model in main.models.list().data] == [MODEL_NAME]
    # The edge guards the sidecar's port as the main one's: no key, a wrong key, a path that is not the API.
    for url, key, status in ((SIDECAR_API + "/models", None, 401), (SIDECAR_API + "/models", "wrong", 401),
                             ("http://10.233.0.11:%d/metrics" % API_PORT, KEYS[0], 404)):
        request = urllib.request.Request(url, headers={"Authorization": "Bearer %s" % key} if key else {})
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(request, timeout=30)
        assert answer.value.code == status, url


def test_a_second_run_changes_nothing(main_before, overlay):
    rc, out = playbook("playbooks/serve.yml", *overlay(SIDECAR))
    assert rc == 0, out[-5000:]
    assert recap_changed(out) == {HEAD: 0, WORKER: 0}, out[-3000:]
    assert main_ids() == main_before


def test_a_sidecar_taken_out_of_the_inventory_is_removed_and_the_main_engine_stays(main_before):
    rc, out = playbook("playbooks/serve.yml")
    assert rc == 0, out[-5000:]
    for host in (HEAD, WORKER):
        assert container_id(host, SIDECAR_CONTAINER) is None, host
        rc, dummy = node(host, "test -e /etc/dspark/serve/compose-%s.yaml" % NAME)
        assert rc != 0, host
    assert main_ids() == main_before
