"""The package installs offline into a fresh venv (scripts/check_install.sh, offline half; the
online half needs a package index and is run by CI through the script itself)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import CLIENT_ROOT


def test_offline_install_in_fresh_venvs() -> None:
    env = dict(os.environ, CKPTD_SKIP_ONLINE="1", PYTHON=sys.executable)
    p = subprocess.run(["bash", str(CLIENT_ROOT / "scripts" / "check_install.sh")], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("import ckptd OK") == 2 and "install checks passed" in p.stdout
