# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""State of a kernel NFS server that exports a Hugging Face cache read-only under root_squash.

Pure logic, no Ansible imports, Python 3.8 compatible. Read only: nothing here changes the node.

- ``/proc/fs/nfsd/versions`` ("-2 -3 +4 +4.1 +4.2"): which protocol versions nfsd serves.
- ``/proc/fs/nfsd/threads``: nfsd threads running (0 or absent: nfsd is stopped).
- ``/proc/fs/nfsd/clients/<id>/``: one directory per NFSv4 client the server knows (kernel 5.3+).
- Under root_squash a client's root is the anonymous user, so every directory on the way to the
  checkpoint needs o+rx and every file o+r; ``unreadable`` lists what does not have it.
"""

import os
import stat

PROC_NFSD = '/proc/fs/nfsd'


def parse_versions(text):
    """'-2 -3 +4 +4.1 +4.2' -> {'2': False, '3': False, '4': True, '4.1': True, '4.2': True}.

    Tokens that are not '+' or '-' followed by a version are ignored.
    """
    versions = {}
    for token in (text or '').split():
        if len(token) > 1 and token[0] in '+-' and token[1:].replace('.', '').isdigit():
            versions[token[1:]] = token[0] == '+'
    return versions


def legacy_enabled(versions):
    """The NFSv2/v3 versions a parsed versions table still serves, e.g. ['3']."""
    return sorted(v for v, on in versions.items() if on and v.split('.')[0] in ('2', '3'))


def v4_enabled(versions):
    """True when nfsd serves some NFSv4 minor version."""
    return any(on for v, on in versions.items() if v.split('.')[0] == '4')


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def server_state(proc=PROC_NFSD):
    """{'running', 'threads', 'versions_raw', 'versions', 'legacy', 'clients'} from /proc/fs/nfsd.

    ``clients`` is None when the kernel does not list them (no nfsd filesystem, or an old kernel).
    """
    threads_text = _read(os.path.join(proc, 'threads'))
    try:
        threads = int(threads_text.strip()) if threads_text is not None else 0
    except ValueError:
        threads = 0
    raw = _read(os.path.join(proc, 'versions'))
    versions = parse_versions(raw)
    clients_dir = os.path.join(proc, 'clients')
    try:
        clients = len([name for name in os.listdir(clients_dir) if os.path.isdir(os.path.join(clients_dir, name))])
    except (IOError, OSError):
        clients = None
    return {
        'running': threads > 0,
        'threads': threads,
        'versions_raw': (raw or '').strip(),
        'versions': versions,
        'legacy': legacy_enabled(versions),
        'clients': clients,
    }


def _world(mode, directory):
    need = (stat.S_IROTH | stat.S_IXOTH) if directory else stat.S_IROTH
    return mode & need == need


def unreadable(root, subdirs=('hub',), limit=50):
    """What the anonymous user cannot read: ``root`` itself, then everything under ``root/<subdir>``.

    Directories need o+rx, regular files o+r; symlinks are skipped (their targets are checked where they
    live). Returns (paths, count): at most ``limit`` paths (sorted walk order), and the full count.
    """
    found = []
    counter = [0]

    def note(path):
        counter[0] += 1
        if len(found) < limit:
            found.append(path)

    try:
        st = os.lstat(root)
    except (IOError, OSError):
        return [], 0
    if not _world(st.st_mode, True):
        note(root)
    for sub in subdirs:
        top = os.path.join(root, sub)
        if not os.path.isdir(top) or os.path.islink(top):
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in [dirpath] + [os.path.join(dirpath, f) for f in sorted(filenames)]:
                try:
                    st = os.lstat(name)
                except (IOError, OSError):
                    continue
                if not stat.S_ISLNK(st.st_mode) and not _world(st.st_mode, stat.S_ISDIR(st.st_mode)):
                    note(name)
    return found, counter[0]


def secrets(root, names):
    """The secret files present at the cache root: [{'path', 'mode' ('0600'), 'uid', 'gid', 'private'}].

    ``private`` means root-owned with no group or other permission bits (what the export needs).
    """
    result = []
    for name in names:
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except (IOError, OSError):
            continue
        mode = stat.S_IMODE(st.st_mode)
        result.append({'path': path, 'mode': '%04o' % mode, 'uid': st.st_uid, 'gid': st.st_gid,
                       'private': st.st_uid == 0 and st.st_gid == 0 and mode & 0o077 == 0
                       and stat.S_ISREG(st.st_mode)})
    return result
