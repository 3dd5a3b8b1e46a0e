"""The execution environment for AWX/AAP: execution-environment.yml (ansible-builder 3), bindep.txt,
meta/execution-environment.yml and tools/ee/ (docs/awx.md).

Static checks of the files, the apt-get shim against a fake apt-get, and `ansible-builder create` (no container
runtime) when ansible-builder is installed: in the venv, or where ANSIBLE_BUILDER points. Building and running the
image is tools/ee/build.sh and tools/ee/check.sh (`make ee`; realtest runs playbooks/status.yml inside the image).
"""

import fnmatch
import os
import pathlib
import re
import shutil
import subprocess
import sys

import zipfile

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
DEFINITION = ROOT / "execution-environment.yml"
META = ROOT / "meta" / "execution-environment.yml"
BINDEP = ROOT / "bindep.txt"
SHIM = ROOT / "tools" / "ee" / "apt-get-ee"
BASE_IMAGE = "dspark-ee-base:trixie"
UNPACK = ROOT / "tools" / "ee" / "unpack_collections.py"

# Every package bindep.txt names for Debian, and what the controller uses it for. A Debian package name that is not
# in this table fails the test: add it here after checking it exists in trixie (apt-cache show NAME).
DEBIAN_PACKAGES = {
    "openssh-client": "ssh, scp and ssh-agent: every node is reached over SSH",
    "tar": "docker_runtime reads an image archive's manifest on the controller (tar -xOf)",
}


def load(path):
    return yaml.safe_load(path.read_text())


def pins(path):
    """name -> version of the `name==version` lines of a requirements file."""
    found = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\[\]-]+)==([^\s;#]+)", line.strip())
        if m:
            found[m.group(1).split("[")[0].lower()] = m.group(2)
    return found


def bindep_entries():
    """(package, platforms) of every bindep.txt line."""
    entries = []
    for line in BINDEP.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"^(\S+)\s*(?:\[([^\]]*)\])?\s*$", line)
        assert m, f"bindep.txt: cannot read {line!r}"
        entries.append((m.group(1), (m.group(2) or "").split()))
    return entries


def build_ignore():
    return load(ROOT / "galaxy.yml")["build_ignore"]


def shipped(relpath):
    """Whether ansible-galaxy collection build puts relpath into the tarball (galaxy.yml's build_ignore)."""
    parts = pathlib.PurePosixPath(relpath).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return not any(fnmatch.fnmatch(p, pat) for pat in build_ignore() for p in prefixes)


def test_definition_is_version_3_on_the_local_base_image():
    ee = load(DEFINITION)
    assert ee["version"] == 3
    assert ee["images"]["base_image"]["name"] == BASE_IMAGE
    # Debian: the shim is in the base image (tools/ee/base.sh installs it there); Debian's python has no ensurepip.
    assert ee["options"]["package_manager_path"] == "/usr/local/sbin/apt-get-ee"
    assert "/usr/local/sbin/apt-get-ee" in (ROOT / "tools" / "ee" / "base.sh").read_text()
    assert ee["options"]["skip_pip_install"] is True
    assert ee["dependencies"]["python_interpreter"]["python_path"] == "/usr/bin/python3"
    for key in ("galaxy", "python", "system"):
        assert (ROOT / ee["dependencies"][key]).is_file(), f"dependencies.{key}: {ee['dependencies'][key]} is missing"
    # Galaxy is unreachable from the build: the collection comes from the tarball build.sh makes.
    assert ee["build_arg_defaults"]["ANSIBLE_GALAXY_CLI_COLLECTION_OPTS"] == "--offline"
    galaxy = load(ROOT / ee["dependencies"]["galaxy"])
    [tarball] = [f for f in ee["additional_build_files"] if f["src"].endswith("dspark-cluster.tar.gz")]
    assert galaxy["collections"] == [{"name": f"/build/{tarball['dest']}/dspark-cluster.tar.gz", "type": "file"}]
    assert "dspark-cluster.tar.gz" in (ROOT / "tools" / "ee" / "build.sh").read_text()


def test_pins_match_requirements_txt():
    ee = load(DEFINITION)
    want = pins(ROOT / "requirements.txt")
    assert ee["dependencies"]["ansible_core"]["package_pip"] == f"ansible-core=={want['ansible-core']}"
    assert ee["dependencies"]["ansible_runner"]["package_pip"] == f"ansible-runner=={want['ansible-runner']}"
    extra = pins(ROOT / ee["dependencies"]["python"])
    assert extra, "tools/ee/requirements.txt pins nothing"
    for name, version in extra.items():
        assert want.get(name) == version, f"{name}=={version} in the EE, {want.get(name)} in requirements.txt"
    # The collections of galaxy.yml's dependencies come from the PyPI `ansible` package requirements.txt pins.
    steps = " ".join(ee["additional_build_steps"]["prepend_galaxy"])
    wheel = f"ansible-{want['ansible']}-py3-none-any.whl"
    assert f"/tmp/ansible-wheel/{wheel} " in steps
    assert [f["src"] for f in ee["additional_build_files"] if f["src"].endswith(".whl")] == [f".lab/ee/ansible-wheel/{wheel}"]
    for collection in load(ROOT / "galaxy.yml")["dependencies"]:
        assert f" {collection} " in steps + " ", f"{collection} (galaxy.yml) is not copied into the image"


def test_bindep_names_are_known_debian_packages():
    debian = [name for name, platforms in bindep_entries()
              if not platforms or any(p in ("platform:dpkg", "platform:debian") for p in platforms)]
    assert "openssh-client" in debian
    for name in debian:
        assert name in DEBIAN_PACKAGES, f"bindep.txt: {name} is not in the table of checked Debian packages"
    # Where this runs on Debian or Ubuntu with package lists, apt knows them too.
    if shutil.which("apt-cache") and any(pathlib.Path("/var/lib/apt/lists").glob("*Packages*")):
        for name in debian:
            r = subprocess.run(["apt-cache", "show", "--no-all-versions", name], capture_output=True, text=True, check=False)
            if r.returncode != 0 and "No packages found" in r.stderr + r.stdout:
                pytest.fail(f"bindep.txt: apt-cache does not know {name}")


def test_meta_execution_environment_points_at_shipped_files():
    meta = load(META)
    assert meta["version"] == 1
    deps = meta["dependencies"]
    assert set(deps) == {"python", "system"}
    for path in deps.values():
        assert (ROOT / path).is_file(), f"meta/execution-environment.yml names {path}, which does not exist"
        assert shipped(path), f"{path} is left out of the collection tarball by galaxy.yml's build_ignore"
    assert shipped("meta/execution-environment.yml")
    assert deps["system"] == "bindep.txt"
    # Requirements of a collection are ranges, not the CI pins; netaddr (ansible.utils' ipaddr filters) is one.
    names = [re.split(r"[<>=!~ ]", line, maxsplit=1)[0] for line in (ROOT / deps["python"]).read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert "netaddr" in names


def test_no_prompts_for_awx():
    """AWX runs without a terminal: no vars_prompt anywhere, no pause that waits for input."""
    files = [ROOT / "site.yml", *(ROOT / "playbooks").rglob("*.yml"), *(ROOT / "roles").rglob("*.yml")]
    for path in files:
        text = path.read_text()
        assert "vars_prompt" not in text, f"{path.relative_to(ROOT)}: vars_prompt"
        for m in re.finditer(r"^(\s*)(?:ansible\.builtin\.)?pause:\s*\n((?:\1\s+.*\n)*)", text, re.M):
            assert re.search(r"^\s+(seconds|minutes):", m.group(2), re.M), f"{path.relative_to(ROOT)}: a pause that prompts"


def fake_apt(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    apt = bin_dir / "apt-get"
    apt.write_text(f'#!/bin/sh\necho "$*" >>{log}\n[ "$1" != install ] || [ "$3" != missing-package ] || exit 100\n')
    apt.chmod(0o755)
    root = tmp_path / "root"
    lists = root / "var" / "lib" / "apt" / "lists"
    lists.mkdir(parents=True)
    (lists / "deb.debian.org_debian_dists_trixie_main_binary-amd64_Packages").write_text("x")
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "APT_GET_EE_ROOT": str(root)}
    return env, log, lists


@pytest.mark.parametrize("package, rc", [("openssh-client", 0), ("missing-package", 100)])
def test_shim_updates_before_install_and_drops_the_lists(tmp_path, package, rc):
    env, log, lists = fake_apt(tmp_path)
    r = subprocess.run([str(SHIM), "install", "-y", package], env=env, capture_output=True, text=True, check=False)
    assert r.returncode == rc, r.stderr
    assert log.read_text().splitlines() == ["update -q", f"install -y {package}"]
    assert not list(lists.iterdir()), "the package lists stay in the layer"


def test_shim_clean_all(tmp_path):
    env, log, lists = fake_apt(tmp_path)
    r = subprocess.run([str(SHIM), "clean", "all"], env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert log.read_text().splitlines() == ["clean"]
    assert not list(lists.iterdir())


def ansible_builder():
    for candidate in (os.environ.get("ANSIBLE_BUILDER"), str(pathlib.Path(sys.executable).parent / "ansible-builder")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.mark.skipif(ansible_builder() is None,
                    reason="ansible-builder is not installed in the venv (not in requirements.txt); ANSIBLE_BUILDER=PATH runs it")
def test_ansible_builder_create_makes_the_expected_context(tmp_path):
    context = tmp_path / "context"
    r = subprocess.run([ansible_builder(), "create", "-f", str(DEFINITION), "-c", str(context),
                        "--output-filename", "Dockerfile"], capture_output=True, text=True, cwd=ROOT, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    dockerfile = (context / "Dockerfile").read_text()
    assert f'ARG EE_BASE_IMAGE="{BASE_IMAGE}"' in dockerfile
    assert "FROM $EE_BASE_IMAGE AS base" in dockerfile
    assert 'ARG PKGMGR="/usr/local/sbin/apt-get-ee"' in dockerfile
    assert 'ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--offline"' in dockerfile
    want = pins(ROOT / "requirements.txt")
    assert f'ansible-core=={want["ansible-core"]} ansible-runner=={want["ansible-runner"]}' in dockerfile
    # No pull of anything: the base image is local.
    assert "--pull" not in dockerfile
    assert "RUN /output/scripts/pip_install" not in dockerfile
    build = context / "_build"
    assert (build / "bindep.txt").read_text() == BINDEP.read_text()
    assert (build / "requirements.yml").is_file() and (build / "requirements.txt").is_file()
    assert "--user-bindep=bindep.txt" in dockerfile and "--user-pip=requirements.txt" in dockerfile


def fake_wheel(path, members):
    with zipfile.ZipFile(path, "w") as wheel:
        for name, (data, mode) in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            wheel.writestr(info, data)
    return path


def unpack(*args):
    return subprocess.run([sys.executable, str(UNPACK), *map(str, args)], capture_output=True, text=True, check=False)


def test_unpack_takes_only_the_named_collections_with_their_modes(tmp_path):
    wheel = fake_wheel(tmp_path / "ansible-1.0.0-py3-none-any.whl", {
        "ansible_collections/community/docker/plugins/modules/docker_image.py": (b"# module", 0o644),
        "ansible_collections/community/docker/tests/run.sh": (b"#!/bin/sh", 0o755),
        "ansible_collections/community/dockerx/README.md": (b"not this one", 0o644),
        "ansible_collections/ansible/posix/MANIFEST.json": (b"{}", 0o644),
        "ansible_collections/amazon/aws/MANIFEST.json": (b"{}", 0o644),
        "ansible-1.0.0.dist-info/METADATA": (b"", 0o644),
    })
    dest = tmp_path / "collections"
    r = unpack(wheel, dest, "community.docker", "ansible.posix")
    assert r.returncode == 0, r.stderr
    assert "ansible.posix (1 files), community.docker (2 files)" in r.stdout
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert files == ["ansible_collections/ansible/posix/MANIFEST.json",
                     "ansible_collections/community/docker/plugins/modules/docker_image.py",
                     "ansible_collections/community/docker/tests/run.sh"]
    assert (dest / "ansible_collections/community/docker/tests/run.sh").stat().st_mode & 0o777 == 0o755
    assert (dest / "ansible_collections/ansible/posix/MANIFEST.json").stat().st_mode & 0o777 == 0o644


def test_unpack_fails_on_a_missing_collection_and_an_unsafe_member(tmp_path):
    wheel = fake_wheel(tmp_path / "a.whl", {"ansible_collections/ansible/posix/x.py": (b"", 0o644)})
    r = unpack(wheel, tmp_path / "out", "ansible.posix", "ansible.utils")
    assert r.returncode != 0 and "holds no collection ansible.utils" in r.stderr
    wheel = fake_wheel(tmp_path / "b.whl", {"ansible_collections/ansible/posix/../../../../evil": (b"", 0o644)})
    r = unpack(wheel, tmp_path / "out2", "ansible.posix")
    assert r.returncode != 0 and "unsafe member" in r.stderr
    assert not (tmp_path / "evil").exists()
