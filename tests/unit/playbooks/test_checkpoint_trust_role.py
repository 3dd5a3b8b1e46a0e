"""checkpoint trust (#26): the controller keeps each group's manifest digest (checkpoint_trust_dir) and stops every node
of the group when the source builds another manifest for the same revision; a new revision is a new record, and
checkpoint_trust_rotate accepts an intended change. Runs roles/checkpoint/tasks/manifest.yml with the venv's
ansible-playbook on two local "nodes" (checkpoint_trust/play.yml). About 10 s per run."""

import importlib.util
import json
import os
import pathlib
import stat
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
INVENTORY = ROOT / "tests" / "templates" / "inventory.yml"
PLAY = ROOT / "tests" / "unit" / "playbooks" / "checkpoint_trust" / "play.yml"
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
MODEL, REV = "deepseek-ai/DeepSeek-V4-Flash-0731", "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
_spec = importlib.util.spec_from_file_location("fake_checkpoint", str(ROOT / "lab" / "fake_checkpoint.py"))
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)


def run(out, extra=None, *args):
    command = [ANSIBLE_PLAYBOOK, "-i", str(INVENTORY), "-e", "out=%s" % out, "-e", json.dumps(extra or {}), *args, str(PLAY)]
    environ = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    for passed in out.glob("*.passed"):
        passed.unlink()
    done = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, " ".join((done.stdout + done.stderr).split())


def test_first_use_recorded_then_another_manifest_stops_the_group(tmp_path):
    info = fake.generate(str(tmp_path / "tpl-worker" / "hf"), model=MODEL, revision=REV, shards=2, shard_size=1024,
                         sparse_size=4096)
    record = tmp_path / "controller" / "trust" / "tpl_pair.json"
    rc, text = run(tmp_path, {}, "--check")
    assert rc == 0 and not record.exists(), text[-3000:]
    rc, text = run(tmp_path)
    assert rc == 0, text[-3000:]
    assert sorted(p.name for p in tmp_path.glob("*.passed")) == ["tpl-head.passed", "tpl-worker.passed"]
    assert stat.S_IMODE(record.stat().st_mode) == 0o600 and stat.S_IMODE(record.parent.stat().st_mode) == 0o700
    doc = json.loads(record.read_text())
    assert doc["group"] == "tpl_pair" and list(doc["records"]) == ["%s@%s" % (MODEL, REV)]
    trusted = doc["records"]["%s@%s" % (MODEL, REV)]["manifest_sha256"]
    rc, text = run(tmp_path)
    assert rc == 0 and "changed=0" in text.rsplit("PLAY RECAP", maxsplit=1)[-1], text[-3000:]

    # The source's snapshot changes under the same revision: every node of the group stops, nothing is recorded.
    with open(os.path.join(info["snapshot"], "config.json"), "a") as f:
        f.write(" ")
    rc, text = run(tmp_path)
    assert rc != 0 and not list(tmp_path.glob("*.passed")), text[-3000:]
    for host in ("tpl-head", "tpl-worker"):
        assert "%s: group tpl_pair: the source built a manifest of %s@%s with digest" % (host, MODEL, REV[:12]) in text, text[-3000:]
    assert "but the controller trusts %s for it" % trusted[:12] in text and "checkpoint_trust_rotate=true" in text
    assert json.loads(record.read_text())["records"]["%s@%s" % (MODEL, REV)]["manifest_sha256"] == trusted

    # An intended change, accepted once; then trusted again.
    rc, text = run(tmp_path, {"checkpoint_trust_rotate": True})
    assert rc == 0, text[-3000:]
    assert json.loads(record.read_text())["records"]["%s@%s" % (MODEL, REV)]["manifest_sha256"] != trusted
    rc, text = run(tmp_path)
    assert rc == 0 and "changed=0" in text.rsplit("PLAY RECAP", maxsplit=1)[-1], text[-3000:]
