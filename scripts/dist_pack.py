#!/usr/bin/env python3
"""Reproducible archives and checksums for scripts/dist.sh (standard library only).

  dist_pack.py tar OUT.tar.gz PREFIX SRC[:MODE] ...   a gzip'd ustar archive, entries PREFIX/<basename>
  dist_pack.py zip OUT.zip PREFIX SRC[:MODE] ...      the same as a zip
  dist_pack.py sums DIR                               writes DIR/SHA256SUMS for every other file in DIR

Entries are sorted by name, owned by 0:0 with no user or group names, stamped with
SOURCE_DATE_EPOCH (required), and their modes are the given octal MODE (default 0644); gzip
headers carry no name and no time. The same inputs give byte-identical archives.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import sys
import tarfile
import time
import zipfile
from typing import List, Tuple


def _epoch() -> int:
    v = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not v.isdigit():
        sys.exit("dist_pack.py: SOURCE_DATE_EPOCH must be set (seconds since 1970)")
    return int(v)


def _entries(prefix: str, specs: List[str]) -> List[Tuple[str, str, int]]:
    out = []
    for spec in specs:
        path, _, mode = spec.rpartition(":") if ":" in spec else (spec, "", "")
        out.append((prefix + "/" + os.path.basename(path), path, int(mode, 8) if mode else 0o644))
    return sorted(out)


def make_tar(target: str, prefix: str, specs: List[str]) -> None:
    epoch = _epoch()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        d = tarfile.TarInfo(prefix)
        d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, epoch
        tf.addfile(d)
        for name, path, mode in _entries(prefix, specs):
            with open(path, "rb") as f:
                data = f.read()
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), mode, epoch
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            tf.addfile(ti, io.BytesIO(data))
    with open(target, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
            gz.write(buf.getvalue())


def make_zip(target: str, prefix: str, specs: List[str]) -> None:
    stamp = time.gmtime(max(_epoch(), 315532800))[:6]  # zip times start in 1980
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, path, mode in _entries(prefix, specs):
            with open(path, "rb") as f:
                data = f.read()
            zi = zipfile.ZipInfo(name, date_time=stamp)
            zi.create_system = 3  # unix, so that the mode below means what it says
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data, compresslevel=9)


def write_sums(directory: str) -> None:
    lines = []
    for d, dirs, names in os.walk(directory):
        dirs.sort()
        for n in names:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, directory).replace(os.sep, "/")
            if rel == "SHA256SUMS":
                continue
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            lines.append("%s  %s\n" % (h.hexdigest(), rel))
    with open(os.path.join(directory, "SHA256SUMS"), "w", encoding="utf-8", newline="\n") as f:
        f.writelines(sorted(lines, key=lambda l: l.split("  ", 1)[1]))


def main(argv: List[str]) -> None:
    if len(argv) >= 4 and argv[0] in ("tar", "zip"):
        (make_tar if argv[0] == "tar" else make_zip)(argv[1], argv[2], argv[3:])
    elif len(argv) == 2 and argv[0] == "sums":
        write_sums(argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
