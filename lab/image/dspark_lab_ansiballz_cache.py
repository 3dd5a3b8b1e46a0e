"""Lab nodes only (the container images and the VM image; never a role, never a real node): keep the code objects
that zipimport compiles from an Ansible module payload, so the next task's module does not compile them again.

Why: zipimport cannot write bytecode, so every task compiles ansible.module_utils from source inside its payload
zip. Under the VM lab's software emulation that is 2.6 s of a 2.9 s stat task; on a container node a quarter of a
module's CPU (docs/design-lab.md, "Lab nodes cache module bytecode"). What runs is the same code: an entry is keyed
by the interpreter, the path inside the payload and the source's SHA-256, and carries the payload's real path.

A `.pth` line imports this at interpreter start (site.py); it only wraps zipimport's compile step, and any error
falls back to compiling, as without it.
"""
import os
import sys
import zipimport

PAYLOAD = "_payload.zip" + os.sep
_compile_source = zipimport._compile_source  # pylint: disable=protected-access


_CACHE_DIR = []  # cache_dir()'s answer, found once per process (a module run compiles dozens of files)


def cache_dir():
    """This user's cache directory, once per process (see find_cache_dir)."""
    if not _CACHE_DIR:
        _CACHE_DIR.append(find_cache_dir())
    return _CACHE_DIR[0]


def find_cache_dir():
    """This user's cache directory (DSPARK_LAB_ANSIBALLZ_CACHE for the tests), made 0700; None when it cannot be
    trusted (another owner, open to others) or made."""
    path = os.environ.get("DSPARK_LAB_ANSIBALLZ_CACHE")
    if not path:
        # Imported only once a payload compiles: most interpreter starts never do.
        import pwd  # pylint: disable=import-outside-toplevel
        # The account's home, not $HOME: become may keep the login user's HOME.
        path = os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".cache", "dspark-lab-ansiballz")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError:
        return None
    return path if info.st_uid == os.getuid() and not info.st_mode & 0o077 else None


def entry_key(pathname, source):
    """The entry's name: interpreter, path inside the payload zip, source digest."""
    import hashlib  # pylint: disable=import-outside-toplevel
    inner = pathname.rpartition(PAYLOAD)[2]
    return hashlib.sha256(b"\0".join((sys.version.encode(), inner.encode(), source))).hexdigest()


def renamed(code, filename):
    """code with co_filename set to filename in it and every nested code object (tracebacks name this payload)."""
    if code.co_filename == filename:
        return code
    consts = tuple(renamed(c, filename) if isinstance(c, type(code)) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def compile_source(pathname, source):
    """zipimport's compile step, through the cache for a module payload's files."""
    if PAYLOAD not in pathname:
        return _compile_source(pathname, source)
    import marshal  # pylint: disable=import-outside-toplevel
    cache = cache_dir()
    if cache is None:
        return _compile_source(pathname, source)
    path = os.path.join(cache, entry_key(pathname, source))
    try:
        with open(path, "rb") as handle:
            return renamed(marshal.load(handle), pathname)
    except (OSError, EOFError, ValueError, TypeError, AttributeError):
        pass
    code = _compile_source(pathname, source)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        with open(tmp, "wb") as handle:
            marshal.dump(code, handle)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return code


def install():
    """Wrap zipimport's compile step (once)."""
    if zipimport._compile_source is _compile_source:  # pylint: disable=protected-access
        zipimport._compile_source = compile_source  # pylint: disable=protected-access


install()
