"""Tests of what users install and read: the release artifacts of scripts/dist.sh (test_dist_*),
and the READMEs' commands and examples run as printed (test_readme*).

The `dist` fixture builds dist/ once per run (scripts/dist.sh into a temporary directory), unless
CKPTD_DIST_DIR names one already built from this checkout (./scripts/test.sh does that). Tools a
test needs (qemu-aarch64, twine, ...) are required in CI (CI=true): missing there is a failure;
elsewhere the test is skipped, naming what to install.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
VERSION = (ROOT / "VERSION").read_text().strip()
TARGETS = ["linux-amd64", "linux-arm64", "darwin-amd64", "darwin-arm64", "windows-amd64"]
NPM_PLATFORMS = {"linux-amd64": "linux-x64", "linux-arm64": "linux-arm64", "darwin-amd64": "darwin-x64",
                 "darwin-arm64": "darwin-arm64", "windows-amd64": "win32-x64"}
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(what: str, ok: bool, install: str) -> None:
    """Fails in CI, skips elsewhere, when a tool the test needs is missing."""
    if ok:
        return
    msg = "%s is missing (install: %s)" % (what, install)
    if IN_CI:
        pytest.fail(msg + "; CI=true: required", pytrace=False)
    pytest.skip(msg)


def run(cmd: List[str], **kw) -> subprocess.CompletedProcess:
    """subprocess.run with text output captured; fails the test, with the output, on a non-zero exit."""
    check = kw.pop("check", True)
    kw.setdefault("timeout", 600)
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        pytest.fail("%s exited %d\n--- stdout\n%s\n--- stderr\n%s" % (" ".join(map(str, cmd)), p.returncode, p.stdout[-8000:], p.stderr[-8000:]),
                    pytrace=False)
    return p


def git_commit() -> str:
    sha = run(["git", "rev-parse", "HEAD"], cwd=ROOT).stdout.strip()
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT).stdout.strip()
    return sha + ("-dirty" if dirty else "")


def build_dist(out: Path) -> Path:
    p = subprocess.run(["bash", str(ROOT / "scripts" / "dist.sh"), "-o", str(out)], capture_output=True, text=True, timeout=3000)
    if p.returncode != 0:
        pytest.fail("scripts/dist.sh failed (%d)\n%s\n%s" % (p.returncode, p.stdout[-5000:], p.stderr[-5000:]), pytrace=False)
    return out


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("CKPTD_DIST_DIR")
    if given:
        d = Path(given).resolve()
        assert (d / "SHA256SUMS").is_file(), "CKPTD_DIST_DIR=%s holds no SHA256SUMS: run scripts/dist.sh -o %s" % (d, d)
        return d
    return build_dist(tmp_path_factory.mktemp("dist") / "dist")


def no_go_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment with Go removed from PATH (every directory holding a `go`), and no CKPTD_PATH:
    what a user without a Go toolchain has."""
    env = {k: v for k, v in os.environ.items() if k not in ("CKPTD_PATH", "GOROOT", "GOPATH", "GOFLAGS", "VIRTUAL_ENV")}
    dirs = [d for d in env.get("PATH", "").split(os.pathsep) if d and not os.path.exists(os.path.join(d, "go"))]
    env["PATH"] = os.pathsep.join(dirs)
    assert shutil.which("go", path=env["PATH"]) is None
    env.update(extra or {})
    return env


def readme_block(readme: Path, heading: str, lang: str) -> str:
    """The first ```lang fenced block after the heading line `heading` (exactly as printed)."""
    text = readme.read_text(encoding="utf-8")
    m = re.search(r"^%s\s*$" % re.escape(heading), text, re.M)
    assert m, "%s has no heading %r" % (readme, heading)
    b = re.compile(r"^```%s\n(.*?)^```" % re.escape(lang), re.M | re.S).search(text, m.end())
    assert b, "%s: no ```%s block after %r" % (readme, lang, heading)
    return b.group(1)


def venv(path: Path) -> Path:
    """A fresh venv (pip only); returns its python."""
    run([sys.executable, "-m", "venv", path])
    return path / ("Scripts" if os.name == "nt" else "bin") / "python"


def dist_files(dist: Path) -> Dict[str, Path]:
    return {p.relative_to(dist).as_posix(): p for p in dist.rglob("*") if p.is_file()}


def wheel_for(dist: Path, target: str) -> Path:
    plat = {"linux-amd64": "manylinux_2_17_x86_64", "linux-arm64": "manylinux_2_17_aarch64", "darwin-amd64": "macosx_12_0_x86_64",
            "darwin-arm64": "macosx_12_0_arm64", "windows-amd64": "win_amd64"}[target]
    found = [w for w in (dist / "python").glob("*.whl") if plat in w.name]
    assert len(found) == 1, (target, found)
    return found[0]


def npm_ok() -> bool:
    return shutil.which("npm") is not None and shutil.which("node") is not None


def ts_node_modules() -> Path:
    return ROOT / "clients" / "ts" / "node_modules"


def package_json(path: Path) -> dict:
    return json.loads(path.read_text())
