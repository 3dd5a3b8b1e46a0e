"""Copy some collections out of the PyPI `ansible` wheel into a collections path, without installing the wheel.

Used by execution-environment.yml's galaxy stage: `pip install --target` of the whole package writes and byte-compiles
its 36,000 files (minutes on a loaded 2-core machine) to keep five collections; reading the wheel as a zip file
extracts only those (seconds).

Usage: python3 unpack_collections.py WHEEL DEST NAMESPACE.NAME [NAMESPACE.NAME ...]
"""

import os
import sys
import zipfile
from pathlib import Path, PurePosixPath


def unpack(wheel, dest, names):
    """Extract ansible_collections/<namespace>/<name>/ of every name into DEST; a missing one is an error."""
    wanted = {tuple(n.split(".", 1)): 0 for n in names}
    dest = Path(dest)
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            parts = PurePosixPath(info.filename).parts
            if len(parts) < 4 or parts[0] != "ansible_collections" or parts[1:3] not in wanted or info.is_dir():
                continue
            if ".." in parts:
                raise SystemExit("unsafe member %r in %s" % (info.filename, wheel))
            wanted[parts[1:3]] += 1
            target = dest.joinpath("ansible_collections", *parts[1:])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(info))
            # The wheel keeps each file's mode (a few collection files are scripts).
            os.chmod(target, (info.external_attr >> 16) & 0o755 or 0o644)
    missing = [".".join(k) for k, count in wanted.items() if not count]
    if missing:
        raise SystemExit("%s holds no collection %s" % (wheel, ", ".join(missing)))
    return {".".join(k): count for k, count in wanted.items()}


def main(argv):
    if len(argv) < 4:
        raise SystemExit(__doc__)
    counts = unpack(argv[1], argv[2], argv[3:])
    print("unpacked " + ", ".join("%s (%d files)" % item for item in sorted(counts.items())))


if __name__ == "__main__":
    main(sys.argv)
