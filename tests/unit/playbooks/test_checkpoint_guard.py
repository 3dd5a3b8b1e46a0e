"""Serve refuses to start on a checkpoint that did not verify or an absent mount (issue #13 point 5).

tests/templates/checkpoint_guard.yml runs the checkpoint role's stamp tasks and the serve role's guard with the venv's
ansible-playbook on two local "nodes" (connection local, paths under a temporary directory). About 10 s per run.
"""

import json
import os
import stat
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TEMPLATES = os.path.join(ROOT, "tests", "templates")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
STAMP = "models--deepseek-ai--DeepSeek-V4-Flash-0731-9e165c30e2704aec5d9d593cce3eebd58bbef1cb.verified.json"


def run(out, extra, *args):
    command = [ANSIBLE_PLAYBOOK, "-i", os.path.join(TEMPLATES, "inventory.yml"), "-e", "out=%s" % out,
               "-e", json.dumps(extra), *args, os.path.join(TEMPLATES, "checkpoint_guard.yml")]
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    done = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=180, check=False)
    return done.returncode, done.stdout + done.stderr


def stamp(out, host):
    return out / host / "checkpoint" / STAMP


@pytest.fixture(scope="module")
def converged(tmp_path_factory):
    out = tmp_path_factory.mktemp("guard")
    rc, text = run(out, {})
    assert rc == 0, text[-4000:]
    return out


def test_verified_group_passes_with_one_stamp_per_node(converged):
    for host in ("tpl-head", "tpl-worker"):
        path = stamp(converged, host)
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        assert (converged / ("%s.passed" % host)).exists()
    head, worker = (json.loads(stamp(converged, h).read_text()) for h in ("tpl-head", "tpl-worker"))
    assert head == worker
    assert head["revision"] == "9e165c30e2704aec5d9d593cce3eebd58bbef1cb" and len(head["manifest_sha256"]) == 64
    assert "created" not in json.dumps(head)


def test_second_run_changes_nothing(converged):
    rc, text = run(converged, {})
    assert rc == 0, text[-4000:]
    assert "changed=0" in text.split("PLAY RECAP", 1)[1]


def test_failed_verification_removes_the_stamp_and_stops_every_rank(converged):
    for host in ("tpl-head", "tpl-worker"):
        (converged / ("%s.passed" % host)).unlink(missing_ok=True)
    rc, text = run(converged, {"fake_target_ok": False})
    assert rc != 0
    assert not stamp(converged, "tpl-head").exists()  # the target (rank 0 here: the source is rank 1)
    assert stamp(converged, "tpl-worker").exists()
    assert not list(converged.glob("*.passed"))  # no rank got past the guard
    assert "serve refuses to start any rank" in text
    assert "tpl-head: no verified stamp at %s" % stamp(converged, "tpl-head") in text
    assert "Fix: run playbooks/checkpoint.yml" in text
    assert text.count("serve refuses to start any rank") >= 2  # both ranks fail


def test_hostile_entries_remove_the_target_stamp(tmp_path):
    rc, text = run(tmp_path, {})
    assert rc == 0 and stamp(tmp_path, "tpl-head").exists(), text[-4000:]
    rc, text = run(tmp_path, {"fake_hostile": ["-rwsr-sr-x dspark-ckpt /cache/hub/models--x/suid"]})
    assert rc != 0 and "tpl-head: no verified stamp at %s" % stamp(tmp_path, "tpl-head") in text, text[-4000:]
    assert not stamp(tmp_path, "tpl-head").exists() and stamp(tmp_path, "tpl-worker").exists()


def test_other_manifest_and_absent_snapshot(tmp_path):
    rc, text = run(tmp_path, {})
    assert rc == 0, text[-4000:]
    # The source's manifest changed and its stamp with it, while the target's stamp names the old one (its checkpoint
    # run died before it verified); and the source's snapshot went away.
    source = stamp(tmp_path, "tpl-worker")
    data = json.loads(source.read_text())
    data["manifest_sha256"] = "b" * 64
    source.write_text(json.dumps(data))
    snapshot = tmp_path / "tpl-worker" / "hf" / "hub" / "models--deepseek-ai--DeepSeek-V4-Flash-0731" / "snapshots"
    (snapshot / "9e165c30e2704aec5d9d593cce3eebd58bbef1cb").rmdir()
    for passed in tmp_path.glob("*.passed"):
        passed.unlink()
    rc, text = run(tmp_path, {"fake_skip_stamp": True})
    assert rc != 0
    assert "tpl-head: the stamp %s records manifest" % stamp(tmp_path, "tpl-head") in text
    assert "the stamp of the source tpl-worker bbbbbbbbbbbb: this node was verified against another manifest" in text
    assert "tpl-worker: the model directory %s/9e165c30e2704aec5d9d593cce3eebd58bbef1cb" % snapshot in text
    assert not list(tmp_path.glob("*.passed"))


def test_nfs_mode_needs_the_mount_on_the_peers(tmp_path):
    rc, text = run(tmp_path, {"fake_mode": "nfs"})
    assert rc != 0
    assert "tpl-head: %s (dspark_hf_cache) is not mounted from the NFS export of tpl-worker" % (tmp_path / "tpl-head" / "hf") in text
    assert "tpl-worker: " not in text.split("serve refuses to start any rank", 1)[1].split("\n")[0]


def test_check_mode_warns_instead_of_failing(tmp_path):
    rc, text = run(tmp_path, {"fake_mode": "nfs"}, "--check")
    assert rc == 0, text[-4000:]
    assert "WARNING group tpl_pair: a real run would refuse to start" in text


def snapshot_of(out, host):
    return (out / host / "hf" / "hub" / "models--deepseek-ai--DeepSeek-V4-Flash-0731" / "snapshots"
            / "9e165c30e2704aec5d9d593cce3eebd58bbef1cb")


def test_files_changed_since_the_verification_stop_every_rank(tmp_path):
    """#26: the fast re-check at every start. The record beside the stamp (the fake checks saw an empty snapshot); a
    file planted on one rank after it keeps every rank from starting, naming the host, the file and the fix."""
    rc, text = run(tmp_path, {})
    assert rc == 0, text[-4000:]
    record = json.loads((stamp(tmp_path, "tpl-head").parent / STAMP.replace(".verified.json", ".verified-files.json")).read_text())
    assert record["format"] == "dspark.cluster/checkpoint-verified-files" and record["files"] == {}
    assert record["manifest_sha256"] == json.loads(stamp(tmp_path, "tpl-head").read_text())["manifest_sha256"]
    for passed in tmp_path.glob("*.passed"):
        passed.unlink()
    (snapshot_of(tmp_path, "tpl-head") / "modeling_planted.py").write_text("import os\n")
    rc, text = run(tmp_path, {"fake_skip_stamp": True})
    assert rc != 0 and not list(tmp_path.glob("*.passed")), text[-4000:]
    flat = " ".join(text.split())
    assert "serve refuses to start any rank" in flat
    assert "tpl-head: deepseek-ai/DeepSeek-V4-Flash-0731@9e165c30e270: CHANGED SINCE ITS VERIFICATION: " \
           "not in the verified checkpoint: modeling_planted.py" in flat, flat[-3000:]
    assert "Fix: run playbooks/checkpoint.yml (or site.yml) for group tpl_pair" in flat
    assert "tpl-worker: deepseek" not in flat
    # --check says the same as a warning, read-only.
    rc, text = run(tmp_path, {"fake_skip_stamp": True}, "--check")
    assert rc == 0 and "modeling_planted.py" in text, text[-4000:]


def test_a_stamp_without_its_record_is_refused(tmp_path):
    rc, text = run(tmp_path, {})
    assert rc == 0, text[-4000:]
    record = stamp(tmp_path, "tpl-worker").parent / STAMP.replace(".verified.json", ".verified-files.json")
    record.unlink()
    for passed in tmp_path.glob("*.passed"):
        passed.unlink()
    rc, text = run(tmp_path, {"fake_skip_stamp": True})
    flat = " ".join(text.split())
    assert rc != 0 and "tpl-worker: deepseek-ai/DeepSeek-V4-Flash-0731@9e165c30e270: no verification record at %s" % record in flat, \
        flat[-3000:]
    # The checkpoint run writes it again; then the group starts.
    rc, text = run(tmp_path, {})
    assert rc == 0 and record.exists(), text[-4000:]


def test_a_record_of_another_verification_is_refused(tmp_path):
    rc, text = run(tmp_path, {})
    assert rc == 0, text[-4000:]
    record = stamp(tmp_path, "tpl-head").parent / STAMP.replace(".verified.json", ".verified-files.json")
    data = json.loads(record.read_text())
    data["manifest_sha256"] = "c" * 64
    record.write_text(json.dumps(data))
    for passed in tmp_path.glob("*.passed"):
        passed.unlink()
    rc, text = run(tmp_path, {"fake_skip_stamp": True})
    flat = " ".join(text.split())
    assert rc != 0 and "tpl-head: the record of the verified files (%s) names manifest cccccccccccc, not the one in the stamp" % record \
        in flat, flat[-3000:]
