"""PEP 517 backend for the ckptd client: ``setuptools.build_meta``, with a standard-library
fallback for wheels.

setuptools only builds wheels on its own from version 70.1; older ones need the separate ``wheel``
package, which a fresh ``python -m venv`` (or an offline machine) may not have. In that case this
module writes the wheel itself: the package is pure Python, so a wheel is a zip of ``src/ckptd``
plus ``METADATA``/``WHEEL``/``RECORD``. Everything else (sdists, and wheels whenever setuptools can
build them) is setuptools'.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import zipfile
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "ckptd"

try:
    from setuptools import build_meta as _st
except ImportError:  # pragma: no cover - no setuptools at all
    _st = None  # type: ignore[assignment]


def _setuptools_version() -> Tuple[int, ...]:
    try:
        import setuptools

        return tuple(int(x) for x in re.findall(r"\d+", setuptools.__version__)[:2])
    except Exception:  # pragma: no cover
        return (0,)


def _setuptools_builds_wheels() -> bool:
    # setuptools < 61 cannot read [project] metadata from pyproject.toml
    if _st is None or _setuptools_version() < (61,):
        return False
    try:
        import setuptools.command.bdist_wheel  # noqa: F401  (setuptools >= 70.1)

        return True
    except ImportError:
        pass
    try:
        import wheel.bdist_wheel  # noqa: F401

        return True
    except ImportError:
        return False


# --- PEP 517 hooks ----------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    if _setuptools_builds_wheels():
        return _st.get_requires_for_build_wheel(config_settings)
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return _st.get_requires_for_build_sdist(config_settings) if _st is not None else []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    if _setuptools_builds_wheels() and hasattr(_st, "get_requires_for_build_editable"):
        return _st.get_requires_for_build_editable(config_settings)
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    if _setuptools_builds_wheels():
        return _st.prepare_metadata_for_build_wheel(metadata_directory, config_settings)
    return _write_dist_info(metadata_directory)


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None
) -> str:
    if _setuptools_builds_wheels() and hasattr(_st, "prepare_metadata_for_build_editable"):
        return _st.prepare_metadata_for_build_editable(metadata_directory, config_settings)
    return _write_dist_info(metadata_directory)


def build_wheel(
    wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None, metadata_directory: Optional[str] = None
) -> str:
    if _setuptools_builds_wheels():
        return _st.build_wheel(wheel_directory, config_settings, metadata_directory)
    return _build_wheel(wheel_directory, editable=False)


def build_editable(
    wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None, metadata_directory: Optional[str] = None
) -> str:
    if _setuptools_builds_wheels() and hasattr(_st, "build_editable"):
        return _st.build_editable(wheel_directory, config_settings, metadata_directory)
    return _build_wheel(wheel_directory, editable=True)


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    if _st is None:
        raise RuntimeError("building an sdist needs setuptools")
    return _st.build_sdist(sdist_directory, config_settings)


# --- the standard-library wheel writer ----------------------------------------------------------


def _project() -> Dict[str, str]:
    with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("[project]", 1)[1].split("\n[", 1)[0]
    meta: Dict[str, str] = {}
    for key in ("name", "version", "description", "requires-python"):
        m = re.search(r'^%s\s*=\s*"([^"]*)"' % re.escape(key), section, re.M)
        if m:
            meta[key] = m.group(1)
    return meta


def _metadata_files() -> Tuple[str, List[Tuple[str, bytes]]]:
    meta = _project()
    name, version = meta["name"], meta["version"]
    lines = ["Metadata-Version: 2.1", "Name: " + name, "Version: " + version]
    if meta.get("description"):
        lines.append("Summary: " + meta["description"])
    if meta.get("requires-python"):
        lines.append("Requires-Python: " + meta["requires-python"])
    lines.append("Classifier: Typing :: Typed")
    readme = os.path.join(HERE, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    metadata = "\n".join(lines) + "\n\n" + body
    wheel = "Wheel-Version: 1.0\nGenerator: ckptd_build (stdlib fallback)\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    dist_info = "%s-%s.dist-info" % (name.replace("-", "_"), version)
    return dist_info, [
        ("METADATA", metadata.encode("utf-8")),
        ("WHEEL", wheel.encode("utf-8")),
        ("top_level.txt", (PACKAGE + "\n").encode("utf-8")),
    ]


def _write_dist_info(directory: str) -> str:
    dist_info, files = _metadata_files()
    target = os.path.join(directory, dist_info)
    os.makedirs(target, exist_ok=True)
    for name, data in files:
        with open(os.path.join(target, name), "wb") as f:
            f.write(data)
    return dist_info


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def _build_wheel(wheel_directory: str, editable: bool) -> str:
    meta = _project()
    dist_info, meta_files = _metadata_files()
    wheel_name = "%s-%s-py3-none-any.whl" % (meta["name"].replace("-", "_"), meta["version"])
    src_root = os.path.join(HERE, "src")
    entries: List[Tuple[str, bytes]] = []
    if editable:
        entries.append(("__editable__.%s.pth" % PACKAGE, (src_root + "\n").encode("utf-8")))
    else:
        pkg_dir = os.path.join(src_root, PACKAGE)
        for root, dirs, names in os.walk(pkg_dir):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for n in sorted(names):
                if n.endswith((".pyc", ".pyo")):
                    continue
                full = os.path.join(root, n)
                rel = os.path.relpath(full, src_root).replace(os.sep, "/")
                with open(full, "rb") as f:
                    entries.append((rel, f.read()))
    entries.extend(("%s/%s" % (dist_info, n), d) for n, d in meta_files)
    record_path = "%s/RECORD" % dist_info
    record = "\n".join([_record_line(p, d) for p, d in entries] + [record_path + ",,"]) + "\n"
    os.makedirs(wheel_directory, exist_ok=True)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for p, d in entries + [(record_path, record.encode("utf-8"))]:
            info = zipfile.ZipInfo(p, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, d)
    with open(os.path.join(wheel_directory, wheel_name), "wb") as f:
        f.write(buf.getvalue())
    return wheel_name
