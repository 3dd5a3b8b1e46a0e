"""The lab controllers' payload cache (lab/controller/dspark_lab_payload_cache.py): real ansible-playbook runs of a
module from a throw-away collection, whose module_utils file changes between runs. A kept payload is reused only while
its sources are unchanged, and a changed source is what the next run executes."""

import base64
import io
import json
import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "lab", "controller"))
import dspark_lab_payload_cache as cache  # noqa: E402  pylint: disable=wrong-import-position,import-error

ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
MODULE = """\
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.labtest.cache.plugins.module_utils.answer import ANSWER


def main():
    AnsibleModule(argument_spec={}).exit_json(changed=False, answer=ANSWER)


if __name__ == "__main__":
    main()
"""
PLAY = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - labtest.cache.answer: {}
      register: got
    - ansible.builtin.copy:
        content: "{{ got.answer }}"
        dest: "%s"
"""


@pytest.fixture(name="lab")
def fixture_lab(tmp_path):
    base = tmp_path / "collections" / "ansible_collections" / "labtest" / "cache"
    (base / "plugins" / "modules").mkdir(parents=True)
    (base / "plugins" / "module_utils").mkdir(parents=True)
    (base / "galaxy.yml").write_text("namespace: labtest\nname: cache\nversion: 1.0.0\n")
    (base / "plugins" / "modules" / "answer.py").write_text(MODULE)
    (tmp_path / "play.yml").write_text(PLAY % (tmp_path / "answer.txt"))
    return tmp_path


def set_answer(lab, value):
    path = lab / "collections" / "ansible_collections" / "labtest" / "cache" / "plugins" / "module_utils" / "answer.py"
    path.write_text("ANSWER = %r\n" % value)


def play(lab, store):
    """One run with the cache on (store) or off (None): what the module answered, and ansible-core's debug lines."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(lab / "collections"), ANSIBLE_DEBUG="1",
               ANSIBLE_LOCAL_TEMP=str(lab / "tmp"))
    env.pop("ANSIBLE_CONFIG", None)
    env.pop(cache.ENV, None)
    if store:
        env[cache.ENV] = str(store)
    run = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", "-e",
                          "ansible_python_interpreter=" + sys.executable, str(lab / "play.yml")],
                         cwd=lab, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return (lab / "answer.txt").read_text(), run.stdout + run.stderr


def built(output):
    """Whether the run built the test module's payload itself (ansible-core's debug line), not given a kept one."""
    return any("Lock acquired" in line and "labtest.cache" in line for line in output.splitlines())


def reused(output):
    return any("using cached module" in line and "labtest.cache" in line for line in output.splitlines())


def test_a_kept_payload_is_reused_until_a_source_changes(lab, tmp_path):
    store = tmp_path / "store"
    set_answer(lab, "one")
    answer, out = play(lab, store)
    assert answer == "one" and built(out)
    kept = [name for name in os.listdir(cache.store_dir(store, version())) if name.endswith(".json")]
    assert any("labtest.cache" in name for name in kept) and any("ansible.modules.copy" in name for name in kept), kept

    answer, out = play(lab, store)
    assert answer == "one" and not built(out) and reused(out)

    # Same size, another value: the modification time alone tells the change; the run builds and runs the new code.
    set_answer(lab, "two")
    answer, out = play(lab, store)
    assert answer == "two" and built(out)
    answer, out = play(lab, store)
    assert answer == "two" and not built(out) and reused(out)
    # One payload per module is kept: the one built from the old source is gone.
    payloads = [name for name in os.listdir(cache.store_dir(store, version()))
                if "labtest.cache" in name and not name.endswith(".json")]
    assert len(payloads) == 1, payloads


def test_off_without_the_variable(lab, tmp_path):
    set_answer(lab, "one")
    answer, out = play(lab, None)
    assert answer == "one" and built(out)
    assert not (tmp_path / "store").exists()


def version():
    from ansible.release import __version__  # pylint: disable=import-outside-toplevel
    return __version__


def test_a_manifest_is_valid_only_while_each_file_keeps_its_size_and_time(tmp_path):
    source = tmp_path / "util.py"
    source.write_text("A = 1\n")
    manifest = {"payload": "x", "files": [[str(source), cache.stamp(source)]]}
    assert cache.valid(json.loads(json.dumps(manifest)))
    source.write_text("A = 22\n")
    assert not cache.valid(manifest)
    source.unlink()
    assert not cache.valid(manifest)


def test_a_member_found_nowhere_on_disk_keeps_the_payload_out(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "real.py").write_text("B = 2\n")
    for members, kept in (({"pkg/real.py": "B = 2\n", "pkg/__init__.py": ""}, True),
                          ({"pkg/real.py": "B = 3\n"}, False),
                          ({"pkg/other.py": "C = 1\n"}, False)):
        data = io.BytesIO()
        with zipfile.ZipFile(data, "w") as payload:
            for name, text in members.items():
                payload.writestr(name, text)
        files = cache.manifest_files(base64.b64encode(data.getvalue()), [str(tmp_path)])
        assert (files is not None) == kept, members
        if kept:
            assert files == [[str(tmp_path / "pkg" / "real.py"), cache.stamp(tmp_path / "pkg" / "real.py")]]


def test_the_pth_line_imports_nothing_of_ansible():
    run = subprocess.run([sys.executable, "-c", "import sys; import dspark_lab_payload_cache; "
                          "print(any(m == 'ansible' or m.startswith('ansible.') for m in sys.modules))"],
                         env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "lab", "controller"), **{cache.ENV: "/x"}),
                         capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"
