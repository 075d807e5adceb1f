"""Where the client finds the binary (explicit, CKPTD_PATH, the one shipped in the package, PATH),
the ``ckptd`` command / ``python -m ckptd`` that runs it, and the warning for a daemon speaking a
newer protocol. The installed-wheel side of the same is tested by tests/dist at the repository root."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import ckptd
from ckptd import _common as C
from conftest import HERE, child_env

FAKE = str(HERE / "fake_ckptd.py")


def _exe(path: Path, body: str = "#!/bin/sh\nexit 0\n") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_packaged_binary_sits_inside_the_package() -> None:
    assert C.packaged_binary() == os.path.join(os.path.dirname(C.__file__), "bin", "ckptd.exe" if os.name == "nt" else "ckptd")


@pytest.mark.parametrize("given", ["explicit", "env", "packaged", "path"])
def test_order_explicit_env_packaged_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    paths = {k: _exe(tmp_path / k / "ckptd") for k in ("explicit", "env", "packaged", "path")}
    monkeypatch.setattr(C, "packaged_binary", lambda: paths["packaged"])
    env = {"PATH": str(tmp_path / "path"), "CKPTD_PATH": paths["env"]}
    order = ["explicit", "env", "packaged", "path"]
    # remove every place before `given`: the first one left is used
    for k in order[: order.index(given)]:
        if k == "env":
            del env["CKPTD_PATH"]
        elif k != "explicit":
            os.remove(paths[k])
    binary = paths["explicit"] if given == "explicit" else None
    assert C.find_binary(binary, env) == paths[given]


def test_not_found_lists_each_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "packaged_binary", lambda: str(tmp_path / "pkg" / "bin" / "ckptd"))
    with pytest.raises(ckptd.BinaryNotFound) as ei:
        C.find_binary(None, {"PATH": str(tmp_path)})
    s = ei.value.searched
    assert [x.split(":")[0].split(" (")[0] for x in s] == [
        "binary= argument", "$CKPTD_PATH", "binary shipped with the package", "$PATH"], s
    assert "absent" in s[2] and str(tmp_path / "pkg") in s[2]
    assert "pip install ckptd" in str(ei.value)


def test_broken_ckptd_path_lists_but_does_not_use_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = _exe(tmp_path / "pkg" / "ckptd")
    on_path = _exe(tmp_path / "path" / "ckptd")
    monkeypatch.setattr(C, "packaged_binary", lambda: pkg)
    with pytest.raises(ckptd.BinaryNotFound) as ei:
        C.find_binary(None, {"PATH": str(tmp_path / "path"), "CKPTD_PATH": str(tmp_path / "gone")})
    msg = str(ei.value)
    assert "found %s, not used because $CKPTD_PATH is set" % pkg in msg
    assert "found %s, not used because $CKPTD_PATH is set" % on_path in msg


def test_pip_launcher_on_path_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "packaged_binary", lambda: str(tmp_path / "absent"))
    launcher = _exe(tmp_path / "venv" / "ckptd",
                    "#!/usr/bin/python3\nimport sys\nfrom ckptd.__main__ import main\nsys.exit(main())\n")
    real = _exe(tmp_path / "real" / "ckptd")
    env = {"PATH": os.pathsep.join([str(tmp_path / "venv"), str(tmp_path / "real")])}
    assert C.find_binary(None, env) == real
    with pytest.raises(ckptd.BinaryNotFound, match="skipped %s" % launcher):
        C.find_binary(None, {"PATH": str(tmp_path / "venv")})


def test_python_m_ckptd_runs_the_binary(ckptd_bin: str, tmp_path: Path) -> None:
    env = dict(child_env(), CKPTD_PATH=ckptd_bin)
    p = subprocess.run([sys.executable, "-m", "ckptd", "version"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("ckptd ") and "(commit " in p.stdout
    p = subprocess.run([sys.executable, "-m", "ckptd", "ls", "--db", str(tmp_path / "none.db")], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "no database at" in p.stderr  # the binary's own exit status and stderr
    p = subprocess.run([sys.executable, "-m", "ckptd", "no-such-command"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unknown command" in p.stderr


def test_python_m_ckptd_without_a_binary_says_where_it_looked(tmp_path: Path) -> None:
    env = dict(child_env(), PATH=str(tmp_path))
    env.pop("CKPTD_PATH", None)
    p = subprocess.run([sys.executable, "-m", "ckptd", "version"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 127
    assert "ckptd executable not found" in p.stderr and "binary shipped with the package" in p.stderr


def test_warns_once_for_a_newer_protocol() -> None:
    newer = C.PROTOCOL_VERSION + 1
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("default")
        for protocol in (C.PROTOCOL_VERSION, newer, newer):
            env = dict(os.environ, FAKE_MODE="echo", FAKE_PROTOCOL=str(protocol))
            with ckptd.Client(db="x", binary=FAKE, env=env) as c:
                assert c.server_info["protocolVersion"] == protocol

        async def run() -> None:
            env = dict(os.environ, FAKE_MODE="echo", FAKE_PROTOCOL=str(newer))
            async with ckptd.AsyncClient(db="x", binary=FAKE, env=env) as c:
                assert c.server_info["protocolVersion"] == newer

        asyncio.run(run())
    mine = [w for w in got if issubclass(w.category, ckptd.ProtocolVersionWarning)]
    # the default filter shows a warning once per place; the sync and async clients are two places
    assert len(mine) == 2, [str(w.message) for w in mine]
    assert "speaks protocol version %d; this client" % newer in str(mine[0].message)
