"""``python -m ckptd`` and the ``ckptd`` command that pip installs: run the ckptd binary (the one
shipped inside this package, unless ``$CKPTD_PATH`` names another) with the same arguments, e.g.
``ckptd ls``, ``ckptd version``, ``python -m ckptd threads``."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional, Sequence

from ._common import find_binary
from .errors import BinaryNotFound


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        binary = find_binary()
    except BinaryNotFound as e:
        print(str(e), file=sys.stderr)
        return 127
    if os.name == "nt":  # no exec on Windows: wait for the child and pass its exit code on
        try:
            return subprocess.call([binary] + args)
        except KeyboardInterrupt:
            return 130
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(binary, [binary] + args)  # the binary takes over this process: signals, exit code, stdio
    return 0  # pragma: no cover - execv does not return


if __name__ == "__main__":
    sys.exit(main())
