"""Hatchling build hook for the ckptd wheel and sdist.

Wheel: puts the ckptd binary inside the package (``ckptd/bin/ckptd``, ``ckptd.exe`` on Windows) and
tags the wheel for the binary's platform, so pip picks the right one. The binary is

- the prebuilt one named by ``CKPTD_BINARY`` (with ``CKPTD_TARGET=GOOS-GOARCH``), which is how
  ``scripts/dist.sh`` makes the five release wheels;
- else built here with ``go build`` from the Go sources: ``go/`` inside an sdist, or the repository
  around ``clients/python`` in a checkout. Without Go the build stops and says what to do;
- none with ``CKPTD_NO_BINARY=1``: a client-only ``py3-none-any`` wheel that runs the ckptd named
  by ``CKPTD_PATH`` or found on ``PATH``. Editable installs are client-only too.

Sdist: adds the Go sources (``go.mod``, ``go.sum``, every non-test ``.go`` file) under ``go/``, with
the commit they came from in ``go/COMMIT``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import Any, Dict, List, Optional, Tuple

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

GO_MODULE = "github.com/ckptd/ckptd"

# GOOS-GOARCH -> the wheel's platform tags. The binaries are static (CGO_ENABLED=0), so one Linux
# wheel serves glibc (manylinux) and musl (musllinux) systems alike. macOS 12 is the oldest
# release Go 1.26 supports (tests/dist checks it against the binary's LC_BUILD_VERSION).
PLATFORM_TAGS = {
    "linux-amd64": "manylinux_2_17_x86_64.manylinux2014_x86_64.musllinux_1_1_x86_64",
    "linux-arm64": "manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64",
    "darwin-amd64": "macosx_12_0_x86_64",
    "darwin-arm64": "macosx_12_0_arm64",
    "windows-amd64": "win_amd64",
}

# Directories of the repository that hold no sources of the binary.
SKIP_DIRS = {".git", ".ci", "bin", "build", "clients", "dist", "docs", "node_modules", "scripts", "testdata", "tests"}

NO_GO = """\
ckptd: cannot build the ckptd binary: {why}.

pip is building ckptd from source because no prebuilt wheel matches this platform (wheels exist
for Linux, macOS and Windows on x86-64, and Linux and macOS on arm64). Building the binary needs
the Go toolchain, {gover} or newer. Do one of:
  - install Go (https://go.dev/dl/ or your package manager), make sure `go` is on PATH, then run
    pip again;
  - install the client without the binary:  CKPTD_NO_BINARY=1 pip install ckptd
    and point CKPTD_PATH at a ckptd binary (or put one on PATH): the client runs that one.
"""


class CustomBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: Dict[str, Any]) -> None:
        self._tmp: Optional[str] = None
        if self.target_name == "sdist":
            self._add_go_sources(build_data)
            return
        if self.target_name != "wheel" or version == "editable":
            return
        if os.environ.get("CKPTD_NO_BINARY", "") not in ("", "0"):
            return  # client only: hatchling's pure py3-none-any wheel
        binary, target = self._binary()
        name = "ckptd.exe" if target.startswith("windows-") else "ckptd"
        build_data["force_include"][binary] = "ckptd/bin/" + name
        build_data["pure_python"] = False
        build_data["tag"] = "py3-none-" + self._platform_tag(target)

    def finalize(self, version: str, build_data: Dict[str, Any], artifact_path: str) -> None:
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    # --- wheel --------------------------------------------------------------------------------

    def _binary(self) -> Tuple[str, str]:
        prebuilt = os.environ.get("CKPTD_BINARY", "")
        if prebuilt:
            target = os.environ.get("CKPTD_TARGET", "")
            if target not in PLATFORM_TAGS:
                raise RuntimeError("CKPTD_BINARY=%s needs CKPTD_TARGET, one of %s (got %r)"
                                   % (prebuilt, ", ".join(sorted(PLATFORM_TAGS)), target))
            if not os.path.isfile(prebuilt):
                raise RuntimeError("CKPTD_BINARY=%s: no such file" % prebuilt)
            return os.path.abspath(prebuilt), target
        return self._go_build()

    def _platform_tag(self, target: str) -> str:
        if target in PLATFORM_TAGS:
            return PLATFORM_TAGS[target]
        # A platform without release wheels, built here for here: the interpreter's own tag.
        return re.sub(r"[^A-Za-z0-9_]", "_", sysconfig.get_platform())

    def _go_source(self) -> Optional[str]:
        for cand in (os.path.join(self.root, "go"), os.path.normpath(os.path.join(self.root, "..", ".."))):
            try:
                with open(os.path.join(cand, "go.mod"), encoding="utf-8") as f:
                    if re.search(r"^module\s+%s\s*$" % re.escape(GO_MODULE), f.read(), re.M):
                        return cand
            except OSError:
                continue
        return None

    def _go_build(self) -> Tuple[str, str]:
        src = self._go_source()
        if src is None:
            raise RuntimeError(NO_GO.format(gover="1.26", why="the Go sources are not here (neither go/ of an sdist nor a ckptd checkout around clients/python)"))
        gover = self._go_version(src)
        go = shutil.which(os.environ.get("GO", "go"))
        if go is None:
            raise RuntimeError(NO_GO.format(gover=gover, why="`go` is not on PATH"))
        env = dict(os.environ, CGO_ENABLED="0")
        goos, goarch = subprocess.run([go, "env", "GOOS", "GOARCH"], cwd=src, env=env, check=True,
                                      capture_output=True, text=True).stdout.split()
        self._tmp = tempfile.mkdtemp(prefix="ckptd-wheel-")
        out = os.path.join(self._tmp, "ckptd.exe" if goos == "windows" else "ckptd")
        ldflags = "-s -w -X main.version=%s -X main.commit=%s" % (self.metadata.version, self._commit(src))
        sys.stderr.write("ckptd: building the ckptd binary with %s for %s/%s from %s "
                         "(the first build takes a minute or two)\n" % (go, goos, goarch, src))
        sys.stderr.flush()
        p = subprocess.run([go, "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, "./cmd/ckptd"],
                           cwd=src, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(NO_GO.format(gover=gover, why="`go build` failed:\n" + (p.stdout + p.stderr).strip()))
        return out, "%s-%s" % (goos, goarch)

    @staticmethod
    def _go_version(src: str) -> str:
        with open(os.path.join(src, "go.mod"), encoding="utf-8") as f:
            m = re.search(r"^go\s+(\S+)", f.read(), re.M)
        return m.group(1) if m else "1.26"

    @staticmethod
    def _commit(src: str) -> str:
        try:
            with open(os.path.join(src, "COMMIT"), encoding="utf-8") as f:
                return f.read().strip() or "unknown"
        except OSError:
            pass
        try:
            p = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True)
            return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else "unknown"
        except OSError:
            return "unknown"

    # --- sdist --------------------------------------------------------------------------------

    def _add_go_sources(self, build_data: Dict[str, Any]) -> None:
        src = self._go_source()
        if src is None:
            raise RuntimeError("the sdist carries the Go sources: build it from a ckptd checkout (or an sdist)")
        files: List[str] = []
        for d, dirs, names in os.walk(src):
            rel = os.path.relpath(d, src)
            dirs[:] = sorted(x for x in dirs if not (rel == "." and x in SKIP_DIRS) and x != "testdata" and not x.startswith("."))
            for n in sorted(names):
                if (rel == "." and n in ("go.mod", "go.sum", "LICENSE", "COMMIT")) or (
                        n.endswith(".go") and not n.endswith("_test.go")):
                    files.append(os.path.normpath(os.path.join(rel, n)))
        for f in files:
            build_data["force_include"][os.path.join(src, f)] = "go/" + f.replace(os.sep, "/")
        if "COMMIT" not in files:
            self._tmp = tempfile.mkdtemp(prefix="ckptd-sdist-")
            path = os.path.join(self._tmp, "COMMIT")
            with open(path, "w", encoding="utf-8") as f:
                f.write(os.environ.get("CKPTD_COMMIT") or self._commit(src))
                f.write("\n")
            build_data["force_include"][path] = "go/COMMIT"
