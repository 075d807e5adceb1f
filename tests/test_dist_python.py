"""The Python wheels and sdist: tags that pip selects only on their platform, contents (the binary
inside the package, the ckptd command), twine check / check-wheel-contents, and, with Go removed
from PATH, a fresh venv that installs the linux-amd64 wheel offline and runs the README quick start
as printed. The sdist builds from source with Go and says what to do without it."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Set

import pytest

from conftest import ROOT, TARGETS, VERSION, git_commit, need, no_go_env, readme_block, run, venv, wheel_for

PY_README = ROOT / "clients" / "python" / "README.md"

try:
    from packaging import tags as ptags
    from packaging.utils import parse_wheel_filename
except ImportError:  # pragma: no cover
    ptags = None  # type: ignore[assignment]


# --- which platforms pip installs each wheel on ------------------------------------------------


def manylinux(arch: str, glibc_minor: int) -> List[str]:
    plats = ["manylinux_2_%d_%s" % (m, arch) for m in range(glibc_minor, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    plats += ["%s_%s" % (legacy[m], arch) for m in legacy if m <= glibc_minor]
    return plats + ["linux_" + arch]


def musllinux(arch: str, musl_minor: int) -> List[str]:
    return ["musllinux_1_%d_%s" % (m, arch) for m in range(musl_minor, -1, -1)] + ["linux_" + arch]


# name -> (platform tags that system accepts, the target whose wheel it must get, or None)
SYSTEMS = {
    "debian12-x86_64 (glibc 2.36)": (lambda: manylinux("x86_64", 36), "linux-amd64"),
    "centos7-x86_64 (glibc 2.17)": (lambda: manylinux("x86_64", 17), "linux-amd64"),
    "alpine-x86_64 (musl 1.2)": (lambda: musllinux("x86_64", 2), "linux-amd64"),
    "ubuntu-aarch64 (glibc 2.35)": (lambda: manylinux("aarch64", 35), "linux-arm64"),
    "alpine-aarch64 (musl 1.2)": (lambda: musllinux("aarch64", 2), "linux-arm64"),
    "centos6-x86_64 (glibc 2.12)": (lambda: manylinux("x86_64", 12), None),
    "raspbian-armv7l": (lambda: manylinux("armv7l", 31), None),
    "linux-i686": (lambda: manylinux("i686", 31), None),
    "linux-ppc64le": (lambda: manylinux("ppc64le", 31), None),
    "macos14-arm64": (lambda: list(ptags.mac_platforms((14, 0), "arm64")), "darwin-arm64"),
    "macos12-arm64": (lambda: list(ptags.mac_platforms((12, 0), "arm64")), "darwin-arm64"),
    "macos13-x86_64": (lambda: list(ptags.mac_platforms((13, 0), "x86_64")), "darwin-amd64"),
    "macos11-arm64 (older than Go supports)": (lambda: list(ptags.mac_platforms((11, 0), "arm64")), None),
    "macos10.15-x86_64": (lambda: list(ptags.mac_platforms((10, 15), "x86_64")), None),
    "windows-amd64": (lambda: ["win_amd64"], "windows-amd64"),
    "windows-x86": (lambda: ["win32"], None),
    "windows-arm64": (lambda: ["win_arm64"], None),
}


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_pip_selects_each_wheel_only_on_its_platform(dist: Path, system: str) -> None:
    need("packaging", ptags is not None, "pip install packaging")
    platforms, want = SYSTEMS[system][0](), SYSTEMS[system][1]
    for py in ((3, 9), (3, 11), (3, 13)):
        interp = "cp%d%d" % py
        supported = set(ptags.cpython_tags(py, platforms=platforms)) | set(
            ptags.compatible_tags(py, interp, platforms=platforms))
        chosen = sorted(t for t in TARGETS if set(parse_wheel_filename(wheel_for(dist, t).name)[3]) & supported)
        assert chosen == ([want] if want else []), (py, chosen)


def test_wheel_tags_and_names(dist: Path) -> None:
    need("packaging", ptags is not None, "pip install packaging")
    for t in TARGETS:
        name, ver, build, tags = parse_wheel_filename(wheel_for(dist, t).name)
        assert (name, str(ver), build) == ("ckptd", VERSION, ())
        assert {x.interpreter for x in tags} == {"py3"} and {x.abi for x in tags} == {"none"}
    linux = {str(x.platform) for x in parse_wheel_filename(wheel_for(dist, "linux-amd64").name)[3]}
    assert linux == {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "musllinux_1_1_x86_64"}


# --- contents ----------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_wheel_contents(dist: Path, target: str) -> None:
    exe = "ckptd.exe" if target.startswith("windows") else "ckptd"
    with zipfile.ZipFile(wheel_for(dist, target)) as z:
        names = z.namelist()
        info = z.getinfo("ckptd/bin/" + exe)
        assert info.external_attr >> 16 & 0o777 == 0o755
        assert z.read(info) == (dist / "bin" / target / exe).read_bytes()
        assert "ckptd/py.typed" in names and "ckptd/__main__.py" in names
        di = "ckptd-%s.dist-info/" % VERSION
        assert "[console_scripts]\nckptd = ckptd.__main__:main" in z.read(di + "entry_points.txt").decode()
        assert "Root-Is-Purelib: false" in z.read(di + "WHEEL").decode()
        meta = z.read(di + "METADATA").decode()
        assert "Version: %s\n" % VERSION in meta and "Provides-Extra: langgraph" in meta
        assert "Requires-Dist: langgraph<2,>=1.0; extra == 'langgraph'" in meta
        assert not [n for n in names if n.startswith("go/") or "__pycache__" in n or n.endswith(".pyc")]
        # RECORD lists every other file with its hash
        rows = list(csv.reader(io.StringIO(z.read(di + "RECORD").decode())))
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, digest, size in rows:
            if path == di + "RECORD":
                continue
            data = z.read(path)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)


def test_sdist_carries_the_go_sources(dist: Path) -> None:
    with tarfile.open(dist / "python" / ("ckptd-%s.tar.gz" % VERSION)) as tf:
        names = set(tf.getnames())
        top = "ckptd-%s/" % VERSION
        commit = tf.extractfile(top + "go/COMMIT").read().decode().strip()
    assert commit == git_commit()
    for f in ("pyproject.toml", "hatch_build.py", "README.md", "src/ckptd/__init__.py", "src/ckptd/py.typed",
              "go/go.mod", "go/go.sum", "go/cmd/ckptd/main.go", "go/cmd/ckptd/version.go", "PKG-INFO"):
        assert top + f in names, f
    assert not [n for n in names if n.endswith("_test.go") or "/testdata/" in n or "/clients/" in n]
    # every non-test Go file of the module is there
    tracked = run(["git", "ls-files", "*.go"], cwd=ROOT).stdout.split()
    want = {top + "go/" + f for f in tracked if not f.endswith("_test.go") and not f.startswith(("clients/", "tests/", "scripts/"))
            and "/testdata/" not in f}
    assert want <= names, sorted(want - names)


def test_twine_check_and_check_wheel_contents(dist: Path) -> None:
    have_twine = subprocess.run([sys.executable, "-m", "twine", "--version"], capture_output=True).returncode == 0
    need("twine", have_twine, "pip install twine")
    cwc = shutil.which("check-wheel-contents")
    need("check-wheel-contents", cwc is not None, "pip install check-wheel-contents")
    files = sorted((dist / "python").iterdir())
    out = run([sys.executable, "-m", "twine", "check", "--strict"] + files).stdout
    assert out.count("PASSED") == len(files) == 6, out
    out = run([cwc] + [f for f in files if f.suffix == ".whl"]).stdout
    assert out.count(": OK") == 5, out


# --- installing without Go ----------------------------------------------------------------------


def test_fresh_venv_installs_the_wheel_offline_and_runs_the_readme_quick_start(dist: Path, tmp_path: Path) -> None:
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64":
        pytest.skip("installs the linux-amd64 wheel")
    env = no_go_env({"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    py = venv(tmp_path / "venv")
    run([py, "-m", "pip", "install", "--no-index", wheel_for(dist, "linux-amd64")], env=env)
    bindir = py.parent
    work = tmp_path / "work"
    work.mkdir()

    quick = readme_block(PY_README, "## Quick start", "python")
    (work / "quickstart.py").write_text(quick)
    p = run([py, "quickstart.py"], cwd=work, env=env)
    assert p.stdout.startswith("1 {'messages': ['hi']} "), p.stdout
    assert re.fullmatch(r"1 \{'messages': \['hi'\]\} [0-9a-f]{64}\n", p.stdout), p.stdout
    assert (work / "agent.db").exists()

    # the client ran the binary inside the installed package, not anything on PATH
    where = run([py, "-c", "import ckptd; c = ckptd.Client(db='x.db'); print(c.binary); print(c.server_info['serverVersion']); c.close()"],
                cwd=work, env=env).stdout.split("\n")
    assert where[0].endswith(os.path.join("site-packages", "ckptd", "bin", "ckptd")) and where[0].startswith(str(tmp_path)), where
    assert where[1] == VERSION

    version = "ckptd %s (commit %s, " % (VERSION, git_commit())
    for cmd in ([bindir / "ckptd", "version"], [bindir / "ckptd", "--version"], [py, "-m", "ckptd", "version"]):
        out = run(cmd, cwd=work, env=env).stdout
        assert out.startswith(version) and out.endswith(", linux/amd64)\n"), (cmd, out)
    ls = run([bindir / "ckptd", "ls", "--db", "agent.db"], cwd=work, env=env).stdout
    assert re.search(r"^wf-1\s+1\s+step 0 \(completed\)", ls, re.M), ls


def test_sdist_without_go_says_what_to_do(dist: Path, tmp_path: Path) -> None:
    env = no_go_env({"PIP_NO_INDEX": "1"})
    p = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path,
             dist / "python" / ("ckptd-%s.tar.gz" % VERSION)], env=env, check=False)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and not list(tmp_path.glob("*.whl"))
    assert "`go` is not on PATH" in out
    assert "install Go (https://go.dev/dl/" in out and "CKPTD_NO_BINARY=1 pip install ckptd" in out

    # ... and CKPTD_NO_BINARY=1 gives the client-only wheel, which runs the ckptd on CKPTD_PATH
    env["CKPTD_NO_BINARY"] = "1"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path,
         dist / "python" / ("ckptd-%s.tar.gz" % VERSION)], env=env)
    (whl,) = tmp_path.glob("*.whl")
    assert whl.name == "ckptd-%s-py3-none-any.whl" % VERSION
    with zipfile.ZipFile(whl) as z:
        assert not [n for n in z.namelist() if n.startswith("ckptd/bin/")]
    py = venv(tmp_path / "venv")
    run([py, "-m", "pip", "install", "--no-index", whl], env=env)
    env["CKPTD_PATH"] = str(dist / "bin" / "linux-amd64" / "ckptd")
    out = run([py.parent / "ckptd", "version"], env=env).stdout
    assert out.startswith("ckptd %s " % VERSION)


def test_sdist_builds_the_binary_with_go(dist: Path, tmp_path: Path) -> None:
    need("go", shutil.which("go") is not None, "Go")
    env = dict(os.environ, PIP_NO_INDEX="1")
    env.pop("CKPTD_NO_BINARY", None)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path,
         dist / "python" / ("ckptd-%s.tar.gz" % VERSION)], env=env)
    (whl,) = tmp_path.glob("*.whl")
    assert "-py3-none-" in whl.name and not whl.name.endswith("-any.whl"), whl.name
    with zipfile.ZipFile(whl) as z:
        binary = tmp_path / "ckptd"
        binary.write_bytes(z.read("ckptd/bin/ckptd"))
    binary.chmod(0o755)
    out = run([binary, "version"]).stdout
    assert out.startswith("ckptd %s (commit %s, " % (VERSION, git_commit())), out
