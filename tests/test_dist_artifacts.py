"""scripts/dist.sh's output: every file listed in SHA256SUMS, binaries of the right format and
architecture with the version and commit stamped in, archives laid out with fixed modes and owners,
the linux-arm64 binary working under qemu, and two builds from one commit byte for byte the same."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import struct
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, Tuple

import pytest

from conftest import ROOT, TARGETS, VERSION, build_dist, dist_files, git_commit, need, no_go_env, run

sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))
import ckptd  # noqa: E402


def exe(target: str) -> str:
    return "ckptd.exe" if target.startswith("windows") else "ckptd"


def test_sha256sums_list_every_artifact(dist: Path) -> None:
    files = dist_files(dist)
    sums: Dict[str, str] = {}
    for line in (dist / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ", 1)
        sums[name] = digest
    assert set(sums) == set(files) - {"SHA256SUMS"}
    assert list(sums) == sorted(sums)
    for name, digest in sums.items():
        assert hashlib.sha256(files[name].read_bytes()).hexdigest() == digest, name

    expected = set()
    for t in TARGETS:
        expected.add("bin/%s/%s" % (t, exe(t)))
        expected.add("ckptd-%s-%s.%s" % (VERSION, t, "zip" if t.startswith("windows") else "tar.gz"))
    for plat in ("linux-x64", "linux-arm64", "darwin-x64", "darwin-arm64", "win32-x64"):
        expected.add("npm/ckptd-%s-%s.tgz" % (plat, VERSION))
    expected |= {"npm/ckptd-%s.tgz" % VERSION, "python/ckptd-%s.tar.gz" % VERSION}
    assert expected <= set(sums), expected - set(sums)
    wheels = [n for n in sums if n.endswith(".whl")]
    assert len(wheels) == 5 and len(sums) == len(expected) + 5, sorted(sums)


# --- binary formats ------------------------------------------------------------------------------

ELF_MACHINE = {"amd64": 0x3E, "arm64": 0xB7}
MACHO_CPU = {"amd64": 0x01000007, "arm64": 0x0100000C}


def elf_facts(data: bytes) -> Tuple[int, bool, bool]:
    """(e_machine, has PT_INTERP (dynamically linked), has .symtab (not stripped)) of a 64-bit LE ELF."""
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not a 64-bit little-endian ELF"
    (e_machine,) = struct.unpack_from("<H", data, 18)
    e_phoff, e_shoff = struct.unpack_from("<QQ", data, 32)
    e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHHHH", data, 54)
    interp = any(struct.unpack_from("<I", data, e_phoff + i * e_phentsize)[0] == 3 for i in range(e_phnum))
    symtab = any(struct.unpack_from("<I", data, e_shoff + i * e_shentsize + 4)[0] == 2 for i in range(e_shnum))
    return e_machine, interp, symtab


def macho_facts(data: bytes) -> Tuple[int, Tuple[int, int]]:
    """(cputype, minimum macOS (major, minor) from LC_BUILD_VERSION) of a 64-bit Mach-O."""
    magic, cputype, _sub, _ftype, ncmds = struct.unpack_from("<IiiII", data, 0)
    assert magic == 0xFEEDFACF, "not a 64-bit Mach-O"
    off, minos = 32, None
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, off)
        if cmd == 0x32:  # LC_BUILD_VERSION: platform, minos (xxxx.yy.zz)
            _platform, v = struct.unpack_from("<II", data, off + 8)
            minos = (v >> 16, (v >> 8) & 0xFF)
        off += size
    assert minos is not None, "no LC_BUILD_VERSION"
    return cputype & 0xFFFFFFFF, minos


def pe_machine(data: bytes) -> int:
    assert data[:2] == b"MZ"
    (lfanew,) = struct.unpack_from("<I", data, 0x3C)
    assert data[lfanew:lfanew + 4] == b"PE\0\0", "not a PE file"
    return struct.unpack_from("<H", data, lfanew + 4)[0]


@pytest.mark.parametrize("target", TARGETS)
def test_binary_format_architecture_and_stamp(dist: Path, target: str) -> None:
    goos, goarch = target.split("-")
    path = dist / "bin" / target / exe(target)
    data = path.read_bytes()
    assert path.stat().st_mode & stat.S_IXUSR
    if goos == "linux":
        machine, dynamic, symtab = elf_facts(data)
        assert machine == ELF_MACHINE[goarch]
        assert not dynamic, "dynamically linked: want a static (CGO_ENABLED=0) binary"
        assert not symtab, "not stripped"
    elif goos == "darwin":
        cpu, minos = macho_facts(data)
        assert cpu == MACHO_CPU[goarch]
        # the wheel's macosx_12_0 tag promises what the binary needs (hatch_build.py)
        assert minos <= (12, 0), minos
    else:
        assert pe_machine(data) == 0x8664
    # -trimpath: no build directory in the binary; version and commit stamped in
    assert str(ROOT).encode() not in data
    assert git_commit().encode() in data, "commit not stamped"
    assert VERSION.encode() in data, "version not stamped"
    if shutil.which("file"):
        desc = run(["file", "-b", path]).stdout
        want = {"linux-amd64": r"ELF 64-bit.*x86-64.*statically linked", "linux-arm64": r"ELF 64-bit.*ARM aarch64.*statically linked",
                "darwin-amd64": r"Mach-O 64-bit.*x86_64", "darwin-arm64": r"Mach-O 64-bit.*arm64",
                "windows-amd64": r"PE32\+ executable.*x86-64"}[target]
        assert re.search(want, desc), desc
    else:
        need("file(1)", False, "apt-get install file")


@pytest.mark.parametrize("target", TARGETS)
def test_archive_layout(dist: Path, target: str) -> None:
    name = "ckptd-%s-%s" % (VERSION, target)
    binary = (dist / "bin" / target / exe(target)).read_bytes()
    readme = (ROOT / "README.md").read_bytes()
    epoch = int(run(["git", "log", "-1", "--format=%ct", "HEAD"], cwd=ROOT).stdout)
    if target.startswith("windows"):
        with zipfile.ZipFile(dist / (name + ".zip")) as z:
            infos = z.infolist()
            assert [i.filename for i in infos] == [name + "/README.md", name + "/ckptd.exe"]
            assert [i.external_attr >> 16 for i in infos] == [0o100644, 0o100755]
            assert z.read(name + "/ckptd.exe") == binary and z.read(name + "/README.md") == readme
    else:
        with tarfile.open(dist / (name + ".tar.gz")) as tf:
            members = tf.getmembers()
            assert [m.name for m in members] == [name, name + "/README.md", name + "/ckptd"]
            assert [(m.mode, m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members[1:]] == [
                (0o644, 0, 0, "", "", epoch), (0o755, 0, 0, "", "", epoch)]
            assert tf.extractfile(name + "/ckptd").read() == binary
            assert tf.extractfile(name + "/README.md").read() == readme


def test_linux_amd64_binary_runs_without_go(dist: Path) -> None:
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64":
        pytest.skip("runs the linux-amd64 binary natively")
    out = run([dist / "bin" / "linux-amd64" / "ckptd", "version"], env=no_go_env()).stdout
    go = run(["go", "env", "GOVERSION"]).stdout.strip()
    assert out == "ckptd %s (commit %s, %s, linux/amd64)\n" % (VERSION, git_commit(), go)


def qemu() -> str:
    q = shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64")
    need("qemu-aarch64 (Debian's qemu-user-static)", q is not None, "apt-get install qemu-user-static")
    return q or ""


def test_linux_arm64_binary_under_qemu(dist: Path, tmp_path: Path) -> None:
    q = qemu()
    binary = dist / "bin" / "linux-arm64" / "ckptd"
    out = run([q, binary, "version"], env=no_go_env()).stdout
    assert out.startswith("ckptd %s (commit %s, go" % (VERSION, git_commit())) and out.endswith(", linux/arm64)\n"), out

    # a save/load round trip through the Python client, the arm64 daemon running under qemu
    wrapper = tmp_path / "ckptd-arm64"
    wrapper.write_text('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (q, binary))
    wrapper.chmod(0o755)
    db = str(tmp_path / "arm64.db")
    state = {"messages": ["hi", "from", "aarch64"], "n": 3}
    with ckptd.Client(db=db, binary=str(wrapper), env=no_go_env(), timeout=60, request_timeout=120) as c:
        assert c.server_info["serverVersion"] == VERSION
        saved = c.save("wf-arm64", state, step=0, phase="completed")
        cp = c.load(workflow_id="wf-arm64")
        assert cp.state == state and cp["sha256"] == saved["sha256"] == hashlib.sha256(cp.state_bytes).hexdigest()
    ls = run([q, binary, "ls", "--db", db], env=no_go_env()).stdout
    assert re.search(r"^wf-arm64\s+1\s+step 0 \(completed\)", ls, re.M), ls
    verify = run([q, binary, "verify", "--db", db], env=no_go_env()).stdout
    assert verify.startswith("ok: 1 checkpoint"), verify


def test_two_dist_runs_give_the_same_sha256sums(dist: Path, tmp_path: Path) -> None:
    """Reproducible: a second scripts/dist.sh from the same commit writes byte-identical archives,
    wheels, sdist and npm tarballs (SOURCE_DATE_EPOCH from the commit, sorted entries, fixed modes)."""
    again = build_dist(tmp_path / "again")
    first, second = (dist / "SHA256SUMS").read_text(), (again / "SHA256SUMS").read_text()
    if first != second:
        a = dict(l.split("  ")[::-1] for l in first.splitlines())
        b = dict(l.split("  ")[::-1] for l in second.splitlines())
        pytest.fail("not reproducible: %s differ" % sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)))
