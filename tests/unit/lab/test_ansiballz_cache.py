"""The lab nodes' module bytecode cache (lab/image/dspark_lab_ansiballz_cache.py): every import in a fresh interpreter
that loads the cache as a lab node's .pth does (a sitecustomize here), from payload zips built like AnsiballZ's."""
import json
import marshal
import os
import subprocess
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LAB_IMAGE = os.path.join(REPO, "lab", "image")
ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")

MODULE = '''
VALUE = %r


def fail():
    raise RuntimeError("from the payload")
'''

PROBE = '''
import json, sys, traceback
sys.path.insert(0, sys.argv[1])
import pkg.mod
try:
    pkg.mod.fail()
except RuntimeError:
    where = traceback.extract_tb(sys.exc_info()[2])[-1].filename
print(json.dumps({"value": pkg.mod.VALUE, "where": where,
                  "cached": "dspark_lab_ansiballz_cache" in sys.modules}))
'''


@pytest.fixture(name="site")
def fixture_site(tmp_path):
    """A directory whose sitecustomize loads the cache at interpreter start, as the lab node's .pth does."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import dspark_lab_ansiballz_cache\n")
    return str(site)


def payload(tmp_path, name, value, zip_name="ansible_probe_payload.zip"):
    """A payload zip at tmp_path/name/zip_name holding pkg/mod.py (sources only, as AnsiballZ sends them)."""
    folder = tmp_path / name
    folder.mkdir()
    path = folder / zip_name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
        archive.writestr("pkg/mod.py", MODULE % value)
    return str(path)


def probe(site, zip_path, cache):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((site, LAB_IMAGE)), DSPARK_LAB_ANSIBALLZ_CACHE=cache)
    out = subprocess.run([sys.executable, "-c", PROBE, zip_path], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def entries(cache):
    return sorted(name for name in os.listdir(cache)) if os.path.isdir(cache) else []


def test_a_second_payload_loads_what_the_first_compiled_and_names_its_own_path(tmp_path, site):
    cache = str(tmp_path / "cache")
    first = probe(site, payload(tmp_path, "run1", "one"), cache)
    stored = entries(cache)
    assert first["cached"] and first["value"] == "one" and len(stored) == 2, stored  # pkg/__init__.py, pkg/mod.py
    assert oct(os.stat(cache).st_mode & 0o777) == "0o700"
    second_zip = payload(tmp_path, "run2", "one")
    second = probe(site, second_zip, cache)
    assert second["value"] == "one" and entries(cache) == stored
    # The traceback names the payload that ran, not the one that filled the cache.
    assert second["where"] == os.path.join(second_zip, "pkg", "mod.py"), second


def test_an_edited_source_is_compiled_again(tmp_path, site):
    cache = str(tmp_path / "cache")
    probe(site, payload(tmp_path, "run1", "old"), cache)
    assert probe(site, payload(tmp_path, "run2", "new"), cache)["value"] == "new"
    assert len(entries(cache)) == 3  # one __init__, two versions of mod.py


def test_a_zip_that_is_not_a_module_payload_is_left_alone(tmp_path, site):
    cache = str(tmp_path / "cache")
    assert probe(site, payload(tmp_path, "run1", "v", zip_name="other.zip"), cache)["value"] == "v"
    assert not entries(cache)


@pytest.mark.parametrize("garbage", [b"", b"\xe3\x00", marshal.dumps(42)], ids=["empty", "truncated", "not-code"])
def test_a_broken_entry_is_compiled_again(tmp_path, site, garbage):
    cache = str(tmp_path / "cache")
    probe(site, payload(tmp_path, "run1", "v"), cache)
    for name in entries(cache):
        with open(os.path.join(cache, name), "wb") as handle:
            handle.write(garbage)
    result = probe(site, payload(tmp_path, "run2", "v"), cache)
    where = os.path.join("run2", "ansible_probe_payload.zip", "pkg", "mod.py")
    assert result["value"] == "v" and result["where"].endswith(where), result


def test_a_directory_open_to_others_is_not_used(tmp_path, site):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    assert probe(site, payload(tmp_path, "run1", "v"), str(cache))["value"] == "v"
    assert not entries(str(cache))


def test_a_cache_that_cannot_be_made_still_runs_the_module(tmp_path, site):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert probe(site, payload(tmp_path, "run1", "v"), str(blocker / "cache"))["value"] == "v"


def test_real_ansible_modules_fill_the_cache_once_and_answer_the_same(tmp_path, site):
    """ansible-core's own AnsiballZ payloads, run by an interpreter that loads the cache as a lab node's does."""
    cache = str(tmp_path / "cache")
    wrapper = tmp_path / "python"
    wrapper.write_text("#!/bin/sh\nPYTHONPATH=%s DSPARK_LAB_ANSIBALLZ_CACHE=%s exec %s \"$@\"\n" % (
        os.pathsep.join((site, LAB_IMAGE)), cache, sys.executable))
    wrapper.chmod(0o755)
    target = tmp_path / "target"
    target.write_text("x")

    def stat():
        out = subprocess.run([ANSIBLE, "localhost", "-c", "local", "-i", "localhost,", "-m", "ansible.builtin.stat",
                              "-a", "path=%s" % target, "-e", "ansible_python_interpreter=%s" % wrapper, "-o"],
                             check=True, capture_output=True, text=True, env=dict(os.environ, ANSIBLE_PIPELINING="1"))
        result = json.loads(out.stdout.split("=>", 1)[1])["stat"]
        result.pop("atime")  # the checksum reads the file
        return result

    first = stat()
    stored = entries(cache)
    assert first["exists"] and first["size"] == 1 and len(stored) > 20, stored  # module_utils and the module
    assert stat() == first and entries(cache) == stored
