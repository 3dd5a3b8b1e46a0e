"""Lab and CI controllers only (the test venvs, when DSPARK_LAB_PAYLOAD_CACHE names a directory; never a role, never
a node): keep the module payloads (AnsiballZ) that ansible-core builds on the controller from one playbook run to the
next.

Why: ansible-core builds each module's payload again in every ansible-playbook run (its cache lives in the run's own
temporary directory): an AST walk of the module and of every module_utils file it imports, 0.15-0.25 s of controller
CPU per module, a few seconds per run, and `make test` runs playbooks hundreds of times (docs/design-lab.md, CI time).

What runs is the same: a payload is kept only when every file in it was, byte for byte, the file on disk at the end
of the run that built it (generated package `__init__.py` stubs aside), and it is reused only while each of those
files keeps the size and modification time it had then, as Python's own bytecode cache judges its sources.

How: a `.pth` line imports this at interpreter start; it only acts once `ansible.constants` is imported (which makes
the run's temporary directory): it links the valid payloads of the store into the run's cache directory, and at the
run's exit it adds the payloads the run built. Any error leaves ansible-core to build payloads as without it.
"""
import atexit
import base64
import hashlib
import importlib.abc
import importlib.machinery
import io
import json
import os
import pickle
import sys
import zipfile

ENV = "DSPARK_LAB_PAYLOAD_CACHE"
RUN_SUBDIR = "ansiballz_cache"  # ansible-core's per-run payload cache, under C.DEFAULT_LOCAL_TMP


def store_dir(root, ansible_version):
    """One store per ansible-core and Python version: payloads and their module_utils differ between them."""
    return os.path.join(root, "ansible-%s-py%d.%d" % (ansible_version, sys.version_info[0], sys.version_info[1]))


def stamp(path):
    info = os.stat(path)
    return [info.st_size, info.st_mtime_ns]


def valid(manifest):
    """Whether every source file of a payload still has the size and modification time it had when it was kept."""
    try:
        return all(stamp(path) == list(recorded) for path, recorded in manifest["files"])
    except (OSError, KeyError, TypeError, ValueError):
        return False


def read_manifest(path):
    """A kept payload's manifest ({payload: file name in the store, files: [[path, [size, mtime_ns]], ...]}), or None."""
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
        name = manifest["payload"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return manifest if isinstance(name, str) and os.sep not in name else None


def populate(store, run_cache):
    """Link each valid payload of the store into the run's cache directory, under the name ansible-core looks for."""
    try:
        names = [name for name in os.listdir(store) if name.endswith(".json")]
    except OSError:
        return
    for name in names:
        manifest = read_manifest(os.path.join(store, name))
        if manifest is None or not valid(manifest) or not os.path.isfile(os.path.join(store, manifest["payload"])):
            continue
        try:
            os.makedirs(run_cache, exist_ok=True)
            os.symlink(os.path.join(store, manifest["payload"]), os.path.join(run_cache, name[:-len(".json")]))
        except OSError:
            continue


def source_of(member, data, roots):
    """The file on disk this payload member was built from (same bytes), or None (a generated stub, or not found)."""
    for root in roots:
        path = os.path.join(root, member)
        try:
            with open(path, "rb") as handle:
                if handle.read() == data:
                    return path
        except OSError:
            continue
    return None


def manifest_files(zip_data, roots):
    """[[path, [size, mtime_ns]], ...] for every member of the payload, or None when one cannot be accounted for."""
    files = []
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_data))) as payload:
        for info in payload.infolist():
            path = source_of(info.filename, payload.read(info), roots)
            if path is not None:
                files.append([os.path.realpath(path), stamp(path)])
            elif os.path.basename(info.filename) != "__init__.py":
                return None
    return files


def source_roots():
    """Where payload members come from: the directory above the `ansible` package, and each collections path."""
    import ansible  # pylint: disable=import-outside-toplevel
    from ansible import constants as C  # pylint: disable=import-outside-toplevel
    roots = [os.path.dirname(os.path.dirname(ansible.__file__))]
    for path in list(getattr(C, "COLLECTIONS_PATHS", []) or []) + sys.path:
        if path and os.path.isdir(os.path.join(path, "ansible_collections")) and path not in roots:
            roots.append(path)
    return roots


def keep(store, run_cache, pid):
    """At the run's exit: add to the store every payload this run built (not those it was given)."""
    if os.getpid() != pid or not os.path.isdir(run_cache):
        return
    roots = None
    for name in os.listdir(run_cache):
        path = os.path.join(run_cache, name)
        if name.endswith((".lock", "-part")) or os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as handle:
                data = handle.read()
            roots = roots or source_roots()
            # ansible-core's own cache entry: a pickled object whose zip_data is the base64 payload zip.
            files = manifest_files(pickle.loads(data).zip_data, roots)
            if files is None:
                continue
            os.makedirs(store, mode=0o700, exist_ok=True)
            payload = "%s.%s" % (name, hashlib.sha256(data).hexdigest()[:16])
            write_atomically(os.path.join(store, payload), data)
            before = read_manifest(os.path.join(store, name + ".json"))
            # The manifest is written last: it is what a later run reads first.
            write_atomically(os.path.join(store, name + ".json"),
                             json.dumps({"payload": payload, "files": files}).encode())
            if before and before["payload"] != payload:
                # A run that linked it finds the link dangling and builds the payload itself, as without the store.
                os.unlink(os.path.join(store, before["payload"]))
        except Exception:  # pylint: disable=broad-exception-caught
            continue


def write_atomically(path, data):
    temp = "%s.tmp-%d" % (path, os.getpid())
    with open(temp, "wb") as handle:
        handle.write(data)
    os.replace(temp, path)


def attach(constants):
    """Once ansible.constants is loaded: the run's cache directory exists; give it the store's payloads."""
    try:
        from ansible.release import __version__  # pylint: disable=import-outside-toplevel
        store = store_dir(os.environ[ENV], __version__)
        run_cache = os.path.join(constants.DEFAULT_LOCAL_TMP, RUN_SUBDIR)
        populate(store, run_cache)
        # Registered after ansible-core's own exit handler that removes the run's directory: atexit runs it first.
        atexit.register(keep, store, run_cache, os.getpid())
    except Exception:  # pylint: disable=broad-exception-caught
        pass


class _Loader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        attach(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # pylint: disable=unused-argument
        if fullname != "ansible.constants":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install():
    if os.environ.get(ENV) and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
