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


# --- live state vs the role's files (issue #13 point 5: drift applied from state, not from a handler) -----------------
NFS_PORT = 2049
PROC_NET = '/proc/net'


def _hex_address(text):
    """'0100A8C0' (/proc/net/tcp, little-endian IPv4) or a 32-digit IPv6 field -> the address as text."""
    import socket
    import struct
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, struct.pack('<I', struct.unpack('>I', raw)[0]))
    words = struct.unpack('<4I', raw)
    return socket.inet_ntop(socket.AF_INET6, struct.pack('>4I', *words))


def parse_listen(text, port=NFS_PORT):
    """Addresses with a TCP socket in LISTEN state (0A) on ``port``, from the text of /proc/net/tcp or tcp6."""
    found = []
    for line in (text or '').splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != '0A' or ':' not in fields[1]:
            continue
        address, port_hex = fields[1].rsplit(':', 1)
        try:
            if int(port_hex, 16) != port:
                continue
            found.append(_hex_address(address))
        except ValueError:
            continue
    return found


def listen_addresses(proc=PROC_NET, port=NFS_PORT):
    """Where nfsd listens (kernel sockets are listed too), sorted, without duplicates: e.g. ['192.168.100.2']."""
    found = []
    for name in ('tcp', 'tcp6'):
        found.extend(parse_listen(_read(os.path.join(proc, name)), port))
    return sorted(set(found))


def parse_exports(text):
    """exports(5) lines, or `exportfs -s` output -> {(path, client): set of options}.

    Only what the nfs_export role writes is understood: `path client(opts) client(opts) ...` on one line, no quoting,
    no continuation lines (the role's validation keeps white space and quotes out of paths and clients).
    """
    entries = {}
    for line in (text or '').splitlines():
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        path = fields[0]
        for item in fields[1:]:
            client, dummy, options = item.partition('(')
            entries[(path, client)] = set(o for o in options.rstrip(')').split(',') if o)
    return entries


def exports_differ(wanted, live):
    """Why the kernel's export table (``exportfs -s``) does not apply ``wanted`` (the role's file), or None.

    For the paths of ``wanted``: a client missing or extra, or an option of the file missing from the live options
    (exportfs lists the defaults too: the file's options must be a subset).
    """
    paths = set(path for path, dummy in wanted)
    live_ours = dict((key, opts) for key, opts in live.items() if key[0] in paths)
    missing = sorted('%s %s' % key for key in wanted if key not in live_ours)
    extra = sorted('%s %s' % key for key in live_ours if key not in wanted)
    options = sorted('%s %s (%s)' % (key[0], key[1], ','.join(sorted(opts - live_ours[key])))
                     for key, opts in wanted.items() if key in live_ours and not opts <= live_ours[key])
    reasons = []
    if missing:
        reasons.append('not exported: ' + ', '.join(missing))
    if extra:
        reasons.append('exported but not in the file: ' + ', '.join(extra))
    if options:
        reasons.append('options not applied: ' + ', '.join(options))
    return '; '.join(reasons) or None
